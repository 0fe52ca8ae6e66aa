//! Tables read from a file into memory: Postfix's text maps (`text`, and
//! the names whose source file it is: `hash`, `lmdb`, `btree`,
//! `texthash`, …), `regexp`, `pcre` and `cidr` files, and Sluice's older
//! `static` files (the text format, read strictly).
//!
//! Lookups never do I/O and take no lock: the contents are swapped in
//! whole ([`arc_swap::ArcSwap`]) when the file is reloaded. Reloading is
//! someone else's job — the daemon's watcher calls
//! [`FileTable::reload_if_changed`] once a second on the blocking pool,
//! and SIGHUP calls [`FileTable::reload`] — so a lookup on the scheduler
//! or in an SMTP session never stats or reads a file.
//!
//! Warnings (a line `postmap` would skip) are logged once per load with
//! the file and line ([`Event::TableWarning`]) and the line skipped, as
//! Postfix does; a `static` file is refused whole instead, as Sluice has
//! always refused it. A file that cannot be read, or fails its user's
//! entry check, is refused and the old contents stay in force.
//!
//! Trust: the file is the operator's; nothing in it is executed (a pcre
//! pattern runs under a backtracking limit, see `pattern/`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use arc_swap::ArcSwap;

use super::answer::Answer;
use super::cidr::CidrTable;
use super::pattern::{self, Flavour, PatternTable};
use super::{text, LookupError, TableError, Values};
use crate::log::{Event, Logger};

/// Checks one entry (key, values) of a text table; an error refuses the
/// file.
pub type EntryCheck = fn(&str, &[String]) -> Result<(), TableError>;

/// How the file is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Postfix's map source; `strict` refuses a file with any warning.
    Text {
        strict: bool,
    },
    Pattern(Flavour),
    Cidr,
}

/// What a file holds once read.
enum Contents {
    Map(Arc<HashMap<String, Values>>),
    Pattern(PatternTable),
    Cidr(CidrTable),
}

/// One line-level warning, whatever the format.
struct Warned {
    line: usize,
    problem: String,
}

/// A file loaded into memory.
pub struct FileTable {
    name: String,
    path: PathBuf,
    format: Format,
    contents: ArcSwap<Contents>,
    /// What the table's user requires of each entry (e.g. a valid route).
    check: OnceLock<EntryCheck>,
    /// (modification time loaded, a newer one seen once and waiting).
    mtime: Mutex<(Option<SystemTime>, Option<Option<SystemTime>>)>,
    logger: Logger,
}

impl FileTable {
    pub fn load(
        name: &str,
        path: &Path,
        format: Format,
        logger: Logger,
    ) -> Result<FileTable, TableError> {
        let table = FileTable {
            name: name.to_string(),
            path: path.to_path_buf(),
            format,
            contents: ArcSwap::from_pointee(Contents::Map(Arc::default())),
            check: OnceLock::new(),
            mtime: Mutex::new((None, None)),
            logger,
        };
        let (contents, mtime) = table.read()?;
        table.contents.store(Arc::new(contents));
        table.mtime.lock().unwrap_or_else(|p| p.into_inner()).0 = mtime;
        Ok(table)
    }

    /// Whether the table answers partial keys (`user`, `@domain`): text
    /// tables do; pattern and cidr tables see full keys only, as Postfix's.
    pub fn fixed(&self) -> bool {
        matches!(self.format, Format::Text { .. })
    }

    /// Whether it is a `regexp:` or `pcre:` table: one whose lookups do
    /// no I/O and fail only for a pattern past its backtracking limit.
    pub fn is_pattern(&self) -> bool {
        matches!(self.format, Format::Pattern(_))
    }

    /// The answer for `key`: text tables fold it to lower case, pattern
    /// tables match it as given (their `i` flag decides), cidr tables
    /// parse it as an address. No I/O, no lock. A pcre pattern past its
    /// backtracking limit is "try again", logged with the table's name.
    pub fn lookup(&self, key: &str) -> Result<Option<Values>, LookupError> {
        match &**self.contents.load() {
            Contents::Map(map) => Ok(map.get(&super::fold(key)).cloned()),
            Contents::Pattern(t) => match t.lookup(key) {
                Ok(found) => Ok(found.map(|v| Arc::new(Answer::text(v)))),
                Err(err) => {
                    self.logger.emit(&Event::LookupFailed {
                        table: self.name.as_str().into(),
                        key: key.into(),
                        error: err.to_string().into(),
                    });
                    Err(LookupError::Unavailable(format!(
                        "table {}: {err}",
                        self.name
                    )))
                }
            },
            Contents::Cidr(t) => Ok(t.lookup(key).map(|v| Arc::new(Answer::text(v)))),
        }
    }

    /// A text table's contents in force (None for the other formats): the
    /// same `Arc` until a reload swaps them, so a user may keep a view
    /// derived from them and rebuild it only when the pointer changes.
    pub fn contents(&self) -> Option<Arc<HashMap<String, Values>>> {
        match &**self.contents.load() {
            Contents::Map(map) => Some(map.clone()),
            _ => None,
        }
    }

    /// Checks a text table's entries with `check`, now and at every reload
    /// from now on (a file that fails is refused and the old contents kept).
    pub fn set_check(&self, check: EntryCheck) -> Result<(), TableError> {
        if let Some(map) = self.contents() {
            validate(&map, check)?;
        }
        let _ = self.check.set(check);
        Ok(())
    }

    /// Reloads if the file's modification time changed (blocking).
    ///
    /// A change is loaded only once the file has stopped changing: the
    /// modification time must be the same at two calls in a row (the
    /// watcher calls once a second), so a file being rewritten in place is
    /// not loaded half-written (audit §J3). Replacing the file with a
    /// rename, as `postmap` does, is still the safe way to update it.
    pub fn reload_if_changed(&self) {
        let now = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok();
        let mut state = self.mtime.lock().unwrap_or_else(|p| p.into_inner());
        let (loaded, pending) = *state;
        if now == loaded {
            *state = (loaded, None);
            return;
        }
        if pending != Some(now) {
            *state = (loaded, Some(now));
            return;
        }
        *state = (now, None);
        drop(state);
        self.reload();
    }

    /// Re-reads the file (blocking); a bad file is refused and logged.
    pub fn reload(&self) {
        match self.read() {
            Ok((contents, _)) => {
                let keys = match &contents {
                    Contents::Map(map) => map.len(),
                    Contents::Pattern(t) => t.rules(),
                    Contents::Cidr(t) => t.rules(),
                };
                self.contents.store(Arc::new(contents));
                self.logger.emit(&Event::TableReloaded {
                    table: self.name.as_str().into(),
                    path: self.path.display().to_string().into(),
                    keys: keys as u64,
                });
            }
            Err(err) => {
                self.logger.emit(&Event::TableReloadRefused {
                    table: self.name.as_str().into(),
                    error: err.to_string().into(),
                });
            }
        }
    }

    /// Reads and parses the file, logs its warnings (or refuses it, for a
    /// strict table), and runs the entry check.
    fn read(&self) -> Result<(Contents, Option<SystemTime>), TableError> {
        let bytes = std::fs::read(&self.path).map_err(|err| TableError::Read {
            path: self.path.clone(),
            err,
        })?;
        let mtime = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok();
        let text = String::from_utf8_lossy(&bytes);
        let origin = self.path.display().to_string();
        let (contents, warned) = parse(&text, &origin, self.format);
        if let (Format::Text { strict: true }, Some(w)) = (self.format, warned.first()) {
            return Err(TableError::Refused {
                origin,
                line: w.line,
                problem: w.problem.clone(),
            });
        }
        for w in &warned {
            self.logger.emit(&Event::TableWarning {
                table: self.name.as_str().into(),
                path: origin.as_str().into(),
                line: w.line as u64,
                problem: w.problem.as_str().into(),
            });
        }
        if let (Contents::Map(map), Some(check)) = (&contents, self.check.get()) {
            validate(map, *check)?;
        }
        Ok((contents, mtime))
    }
}

/// Parses a file's text in `format`.
fn parse(text: &str, origin: &str, format: Format) -> (Contents, Vec<Warned>) {
    let from_pattern = |w: Vec<pattern::Warning>| {
        w.into_iter()
            .map(|w| Warned {
                line: w.line,
                problem: w.problem.to_string(),
            })
            .collect()
    };
    match format {
        Format::Text { .. } => {
            let (map, warnings) = text::parse(text);
            let map = map
                .into_iter()
                .map(|(k, v)| (k, Arc::new(Answer::text(v))))
                .collect();
            let warned = warnings
                .into_iter()
                .map(|w| Warned {
                    line: w.line,
                    problem: format!("key {:?}: {}", w.key, w.problem),
                })
                .collect();
            (Contents::Map(Arc::new(map)), warned)
        }
        Format::Pattern(flavour) => {
            let (t, w) = PatternTable::parse(text, origin, flavour);
            (Contents::Pattern(t), from_pattern(w))
        }
        Format::Cidr => {
            let (t, w) = CidrTable::parse(text, origin);
            (Contents::Cidr(t), from_pattern(w))
        }
    }
}

fn validate(map: &HashMap<String, Values>, check: EntryCheck) -> Result<(), TableError> {
    map.iter().try_for_each(|(k, v)| check(k, v))
}

#[cfg(test)]
mod tests;
