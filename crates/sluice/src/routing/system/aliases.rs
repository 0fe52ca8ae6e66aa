//! aliases(5) files, Postfix's format read as text (there is no `.db`):
//! `name: target, target`, a line starting with white space continues
//! the one before, `#` at the start of a line is a comment; a name may be
//! quoted; names are folded to lower case. Targets are split at commas
//! outside double quotes: an address, `/file`, `:include:/path`,
//! `|command` (quoted when it has commas), `\user` (no further aliasing).
//!
//! What Postfix's postalias warns about is returned as [`Warning`]s (a
//! line that is not `name: value`, a duplicate name, the first one kept),
//! for `sluice newaliases` and the log at load. Trust: the file is the
//! administrator's (root-owned; see `load`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One alias target, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// An address or a bare user name; `literal`: `\name`, never aliased.
    Address {
        address: String,
        literal: bool,
    },
    File(PathBuf),
    Include(PathBuf),
    Command(String),
}

/// A problem in a file, as postalias reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub file: PathBuf,
    pub line: usize,
    pub text: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let file = self.file.display();
        match self.line {
            // postalias names no line for a duplicate (it says `FILE.db`).
            0 => write!(f, "warning: {file}: {}", self.text),
            n => write!(f, "warning: {file}, line {n}: {}", self.text),
        }
    }
}

/// The entries of one or more aliases files: name → its value, as text,
/// and the uid owning the file it came from (whose rights its `/file`
/// and `|command` targets get, as Postfix's alias database owner).
#[derive(Debug, Default, Clone)]
pub struct Aliases {
    entries: HashMap<String, (String, u32)>,
}

impl Aliases {
    /// Parses `text` (from `file`, for the warnings), a root-owned file.
    pub fn parse(&mut self, file: &Path, text: &str) -> Vec<Warning> {
        self.parse_owned(file, text, 0)
    }

    /// Parses `text` of `file`, owned by `owner`.
    pub fn parse_owned(&mut self, file: &Path, text: &str, owner: u32) -> Vec<Warning> {
        let mut warnings = Vec::new();
        for (line, logical) in logical_lines(text) {
            let warn = |text: String| Warning {
                file: file.to_path_buf(),
                line,
                text,
            };
            let Some((name, value)) = split_entry(&logical) else {
                warnings.push(warn("need name:value pair".into()));
                continue;
            };
            if value.is_empty() {
                warnings.push(warn(format!("empty right-hand side for \"{name}\"")));
                continue;
            }
            if self.entries.contains_key(&name) {
                let mut w = warn(format!("duplicate entry: \"{name}\""));
                w.line = 0;
                warnings.push(w);
                continue;
            }
            self.entries.insert(name, (value, owner));
        }
        warnings
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value of `name` (lower case), as text.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries
            .get(&name.to_ascii_lowercase())
            .map(|(value, _)| value.as_str())
    }

    /// The uid owning the file `name` (lower case) came from.
    pub fn owner(&self, name: &str) -> Option<u32> {
        self.entries
            .get(&name.to_ascii_lowercase())
            .map(|&(_, owner)| owner)
    }

    /// The targets of `name`, if it is an alias.
    pub fn targets(&self, name: &str) -> Option<Vec<Target>> {
        self.get(name).map(targets)
    }
}

/// (line number of its start, text) of each entry: comments and blank
/// lines dropped, continuation lines joined.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        match out.last_mut() {
            Some((_, last)) if raw.starts_with([' ', '\t']) => {
                last.push(' ');
                last.push_str(trimmed);
            }
            _ => out.push((i + 1, trimmed.to_string())),
        }
    }
    out
}

/// `name: value` → (name folded, value trimmed).
fn split_entry(line: &str) -> Option<(String, String)> {
    let (name, value) = if let Some(rest) = line.strip_prefix('"') {
        let end = rest.find('"')?;
        let after = rest[end + 1..].trim_start().strip_prefix(':')?;
        (rest[..end].to_string(), after)
    } else {
        let (name, value) = line.split_once(':')?;
        (name.trim().to_string(), value)
    };
    if name.is_empty() || name.contains(char::is_whitespace) && !line.starts_with('"') {
        return None;
    }
    Some((name.to_ascii_lowercase(), value.trim().to_string()))
}

/// The targets of a value (or of an `:include:` file's text, one or more
/// a line, `#` comments allowed there too).
pub fn targets(value: &str) -> Vec<Target> {
    let mut out = Vec::new();
    let (mut cur, mut quoted) = (String::new(), false);
    for c in value.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            ',' | '\n' if !quoted => {
                push_target(&mut out, &cur);
                cur.clear();
            }
            _ => cur.push(c),
        }
    }
    push_target(&mut out, &cur);
    out
}

fn push_target(out: &mut Vec<Target>, raw: &str) {
    let raw = raw.trim();
    if raw.is_empty() || raw.starts_with('#') {
        return;
    }
    let unquoted = match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(inner) => inner.trim(),
        None => raw,
    };
    let target = if let Some(cmd) = unquoted.strip_prefix('|') {
        Target::Command(cmd.trim().to_string())
    } else if let Some(path) = unquoted.strip_prefix(":include:") {
        Target::Include(PathBuf::from(path.trim()))
    } else if unquoted.starts_with('/') {
        Target::File(PathBuf::from(unquoted))
    } else if let Some(user) = unquoted.strip_prefix('\\') {
        Target::Address {
            address: user.to_string(),
            literal: true,
        }
    } else {
        Target::Address {
            address: unquoted.trim_matches(['<', '>']).to_string(),
            literal: false,
        }
    };
    out.push(target);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postfix_aliases_format() {
        let mut a = Aliases::default();
        let text = "# comment\nPostmaster: root\nteam: alice,\n  bob@example.org\n\
                    log: /var/log/x, \"|/usr/bin/prog a, b\", :include:/etc/list, \\carol\n\
                    broken line\nteam: again\n";
        let w = a.parse(Path::new("/etc/aliases"), text);
        assert_eq!(w.len(), 2, "{w:?}");
        assert_eq!(
            w[0].to_string(),
            "warning: /etc/aliases, line 6: need name:value pair"
        );
        assert_eq!(
            w[1].to_string(),
            "warning: /etc/aliases: duplicate entry: \"team\""
        );
        assert_eq!(a.get("postmaster"), Some("root"));
        let t = a.targets("TEAM").unwrap();
        assert_eq!(t.len(), 2);
        let log = a.targets("log").unwrap();
        assert_eq!(log[0], Target::File("/var/log/x".into()));
        assert_eq!(log[1], Target::Command("/usr/bin/prog a, b".into()));
        assert_eq!(log[2], Target::Include("/etc/list".into()));
        assert_eq!(
            log[3],
            Target::Address {
                address: "carol".into(),
                literal: true
            }
        );
    }
}
