//! Static lookup tables: a `key value[, value…]` text file in memory.
//!
//! Lookups never do I/O and take no lock: the contents are swapped in
//! whole ([`arc_swap::ArcSwap`]) when the file is reloaded. Reloading is
//! someone else's job — the daemon's watcher calls
//! [`StaticTable::reload_if_changed`] once a second on the blocking pool,
//! and SIGHUP calls [`StaticTable::reload`] — so a lookup on the scheduler
//! or in an SMTP session never stats or reads a file.
//!
//! Trust: the file is the operator's; a bad line refuses the whole file
//! (with its line number) and the old contents stay in force.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use arc_swap::ArcSwap;

use super::{TableError, Values};
use crate::log::Event;
use crate::log::Logger;

/// Checks one entry (key, values) of a table; an error refuses the file.
pub type EntryCheck = fn(&str, &[String]) -> Result<(), TableError>;

/// What is wrong with a line of a table file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LineProblem {
    #[error("has no value")]
    NoValue,
    #[error("appears twice")]
    Twice,
}

/// A text file loaded into memory.
pub struct StaticTable {
    name: String,
    path: PathBuf,
    map: ArcSwap<HashMap<String, Values>>,
    /// What the table's user requires of each entry (e.g. a valid route).
    check: OnceLock<EntryCheck>,
    /// Modification time of the contents in force (for the watcher).
    /// (modification time loaded, a newer one seen once and waiting).
    mtime: Mutex<(Option<SystemTime>, Option<Option<SystemTime>>)>,
    logger: Logger,
}

impl StaticTable {
    pub fn load(name: &str, path: &Path, logger: Logger) -> Result<StaticTable, TableError> {
        let (map, mtime) = read_static(path)?;
        Ok(StaticTable {
            name: name.to_string(),
            path: path.to_path_buf(),
            map: ArcSwap::from_pointee(map),
            check: OnceLock::new(),
            mtime: Mutex::new((mtime, None)),
            logger,
        })
    }

    /// The values for `key` (case-insensitive); no I/O, no lock.
    pub fn lookup(&self, key: &str) -> Option<Values> {
        self.map.load().get(&key.to_ascii_lowercase()).cloned()
    }

    /// The contents in force (swapped whole at each reload).
    pub fn contents(&self) -> Arc<HashMap<String, Values>> {
        self.map.load_full()
    }

    /// Checks the contents in force with `check`, and every reload from
    /// now on (a file that fails is refused and the old contents kept).
    pub fn set_check(&self, check: EntryCheck) -> Result<(), TableError> {
        validate(&self.map.load(), check)?;
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
        let read = read_static(&self.path).and_then(|(map, mtime)| match self.check.get() {
            Some(check) => validate(&map, *check).map(|_| (map, mtime)),
            None => Ok((map, mtime)),
        });
        match read {
            Ok((map, _)) => {
                let n = map.len();
                self.map.store(Arc::new(map));
                self.logger.emit(&Event::TableReloaded {
                    table: self.name.as_str().into(),
                    path: self.path.display().to_string().into(),
                    keys: n as u64,
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
}

/// Parses a static table: `key value[, value…]`, blank lines, and
/// comment lines whose first non-blank character is `#` (as in Postfix: a
/// `#` inside a key or value is data, since local parts may contain it).
/// A key given twice is an error, not a silent overwrite.
pub fn parse_static(text: &str, origin: &str) -> Result<HashMap<String, Values>, TableError> {
    let mut map = HashMap::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.splitn(2, char::is_whitespace);
        let key = parts.next().unwrap_or("").to_ascii_lowercase();
        let values: Vec<String> = parts
            .next()
            .unwrap_or("")
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .collect();
        let bad = |key: String, problem| TableError::Line {
            origin: origin.to_string(),
            line: n + 1,
            key,
            problem,
        };
        if values.is_empty() {
            return Err(bad(key, LineProblem::NoValue));
        }
        if map.insert(key.clone(), Arc::new(values)).is_some() {
            return Err(bad(key, LineProblem::Twice));
        }
    }
    Ok(map)
}

fn validate(map: &HashMap<String, Values>, check: EntryCheck) -> Result<(), TableError> {
    map.iter().try_for_each(|(k, v)| check(k, v))
}

type Loaded = (HashMap<String, Values>, Option<SystemTime>);

fn read_static(path: &Path) -> Result<Loaded, TableError> {
    let text = std::fs::read_to_string(path).map_err(|err| TableError::Read {
        path: path.to_path_buf(),
        err,
    })?;
    let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    Ok((parse_static(&text, &path.display().to_string())?, mtime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_table_parses_and_reports_bad_lines() {
        let map = parse_static(
            "# users\nA@X.test  /m/a\nlist@x.test a@x.test, b@x.test c@x.test\n\n",
            "t",
        )
        .unwrap();
        assert_eq!(map["a@x.test"].as_slice(), ["/m/a"]);
        assert_eq!(map["list@x.test"].len(), 3);
        let err = parse_static("ok v\nlonely\n", "file.txt").unwrap_err();
        assert!(matches!(
            &err,
            TableError::Line { line: 2, key, problem: LineProblem::NoValue, .. } if key == "lonely"
        ));
        assert_eq!(
            err.to_string(),
            "file.txt: line 2: key \"lonely\" has no value"
        );
    }

    #[test]
    fn static_table_reloads_and_keeps_old_contents_on_error() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("t");
        std::fs::write(&path, "a@x v1\n").unwrap();
        let t = StaticTable::load("t", &path, Logger::disabled()).unwrap();
        assert_eq!(t.lookup("A@x").unwrap().as_slice(), ["v1"]);
        std::fs::write(&path, "a@x v2\n").unwrap();
        t.reload();
        assert_eq!(t.lookup("a@x").unwrap().as_slice(), ["v2"]);
        std::fs::write(&path, "a@x v3\nbroken\n").unwrap();
        t.reload();
        assert_eq!(
            t.lookup("a@x").unwrap().as_slice(),
            ["v2"],
            "bad file refused"
        );
        assert!(t.lookup("b@x").is_none());
    }

    #[test]
    fn comments_start_lines_and_duplicates_are_refused() {
        let map = parse_static("  # note\nfoo#bar@x.test v#1\n", "t").unwrap();
        assert_eq!(map["foo#bar@x.test"].as_slice(), ["v#1"]);
        let err = parse_static("a@x v1\nA@x v2\n", "t").unwrap_err();
        assert!(matches!(
            err,
            TableError::Line {
                line: 2,
                problem: LineProblem::Twice,
                ..
            }
        ));
        assert_eq!(err.to_string(), "t: line 2: key \"a@x\" appears twice");
    }

    #[test]
    fn a_changed_file_is_picked_up_by_the_watcher() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("t");
        std::fs::write(&path, "a@x old\n").unwrap();
        let t = StaticTable::load("t", &path, Logger::disabled()).unwrap();
        assert_eq!(t.lookup("a@x").unwrap().as_slice(), ["old"]);
        std::fs::write(&path, "a@x new\n").unwrap();
        // A different modification time, whatever the file system's resolution.
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(later)
            .unwrap();
        assert_eq!(
            t.lookup("a@x").unwrap().as_slice(),
            ["old"],
            "no I/O in lookups"
        );
        t.reload_if_changed();
        assert_eq!(
            t.lookup("a@x").unwrap().as_slice(),
            ["old"],
            "a file seen changing is not loaded yet: it may be half-written"
        );
        t.reload_if_changed();
        assert_eq!(t.lookup("a@x").unwrap().as_slice(), ["new"]);
    }

    #[test]
    fn a_file_still_being_written_is_not_loaded() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("t");
        std::fs::write(
            &path,
            "a@x 1
b@x 1
",
        )
        .unwrap();
        let t = StaticTable::load("t", &path, Logger::disabled()).unwrap();
        let touch = |secs: u64, text: &str| {
            std::fs::write(&path, text).unwrap();
            let at = std::time::SystemTime::now() + std::time::Duration::from_secs(secs);
            let f = std::fs::File::options().write(true).open(&path).unwrap();
            f.set_modified(at).unwrap();
        };
        // Each poll sees the writer still going: the first half only.
        touch(
            10, "a@x 2
",
        );
        t.reload_if_changed();
        touch(
            20, "a@x 2
",
        );
        t.reload_if_changed();
        assert!(
            t.lookup("b@x").is_some(),
            "the half-written file was not loaded"
        );
        touch(
            30,
            "a@x 2
b@x 2
",
        );
        t.reload_if_changed();
        t.reload_if_changed();
        assert_eq!(t.lookup("b@x").unwrap().as_slice(), ["2"]);
    }
}
