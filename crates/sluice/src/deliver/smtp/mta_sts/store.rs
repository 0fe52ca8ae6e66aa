//! MTA-STS policies on disk, so that a restart does not forget them: RFC
//! 8461 §5 protects a domain against downgrade only while its policy is
//! remembered, for its whole `max_age`, even when the policy host (or its
//! DNS) has since been blocked by an attacker.
//!
//! One file per domain in `<data_dir>/mta-sts/`, named after the domain
//! in A-labels (`example.com.policy`); the text is a line
//! `sluice-mta-sts 1 <id> <expires>` (the TXT record's id, the expiry in
//! seconds since the Unix epoch), then the policy itself in the STSv1
//! format, read back with the same strict parser as a fetched one.
//!
//! Trust: the directory is ours (mode 0700); a file that does not parse
//! is ignored and removed, never half-used. Domain names come from
//! recipients: only names made of `a-z`, `0-9`, `-` and dots (no empty
//! label) become file names, any other is kept in memory only.
//!
//! Invariant: a file is written whole or not at all (a temporary file,
//! fsynced, renamed over the old one, then the directory fsynced); an
//! expired policy found at start-up is removed.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::{parse_policy, Mode, Policy};

/// First word of every policy file.
const MAGIC: &str = "sluice-mta-sts";

/// Why the store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
}

/// A policy as remembered: the TXT record id it was fetched for, and
/// when it expires (seconds since the Unix epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub id: String,
    pub expires: u64,
    pub policy: Policy,
}

/// The policy directory.
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// Opens (creating) the directory and reads back every policy not yet
    /// expired at `now`; expired and unreadable files are removed.
    pub fn open(dir: &Path, now: u64) -> Result<(Store, Vec<(String, Stored)>), StoreError> {
        let io = |e| StoreError::Io(dir.to_path_buf(), e);
        if !dir.is_dir() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io)?;
        }
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let Some(domain) = name.strip_suffix(".policy").filter(|d| file_stem(d)) else {
                if name.ends_with(".tmp") {
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            };
            let read = std::fs::read_to_string(&path).ok();
            match read.as_deref().and_then(decode) {
                Some(stored) if stored.expires > now => found.push((domain.to_string(), stored)),
                _ => {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        let store = Store {
            dir: dir.to_path_buf(),
        };
        Ok((store, found))
    }

    /// Writes `domain`'s policy durably, replacing the one before. A
    /// domain that cannot be a file name is not written (Ok).
    pub fn save(&self, domain: &str, stored: &Stored) -> Result<(), StoreError> {
        if !file_stem(domain) {
            return Ok(());
        }
        let path = self.dir.join(format!("{domain}.policy"));
        let tmp = self.dir.join(format!("{domain}.policy.tmp"));
        let io = |e| StoreError::Io(path.clone(), e);
        let write = || -> std::io::Result<()> {
            let mut file = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            file.write_all(encode(stored).as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            File::open(&self.dir)?.sync_all()
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(e)
        })
    }

    /// Forgets `domain`'s policy (evicted from the cache).
    pub fn remove(&self, domain: &str) {
        if file_stem(domain) {
            let _ = std::fs::remove_file(self.dir.join(format!("{domain}.policy")));
        }
    }
}

/// Whether `domain` may name a file: lower-case letters, digits, hyphens,
/// dots between non-empty labels, at most 253 bytes.
fn file_stem(domain: &str) -> bool {
    domain.len() <= 253
        && domain.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

fn encode(stored: &Stored) -> String {
    let p = &stored.policy;
    let mode = match p.mode {
        Mode::Enforce => "enforce",
        Mode::Testing => "testing",
        Mode::None => "none",
    };
    let mut text = format!(
        "{MAGIC} 1 {} {}\nversion: STSv1\nmode: {mode}\n",
        stored.id, stored.expires
    );
    for mx in &p.mx {
        text.push_str(&format!("mx: {mx}\n"));
    }
    text.push_str(&format!("max_age: {}\n", p.max_age));
    text
}

fn decode(text: &str) -> Option<Stored> {
    let (first, policy) = text.split_once('\n')?;
    let mut words = first.split(' ');
    if (words.next(), words.next()) != (Some(MAGIC), Some("1")) {
        return None;
    }
    let id = words.next().filter(|id| !id.is_empty())?.to_string();
    let expires = words.next()?.parse().ok()?;
    if words.next().is_some() {
        return None;
    }
    let policy = parse_policy(policy).ok()?;
    Some(Stored {
        id,
        expires,
        policy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(expires: u64) -> Stored {
        Stored {
            id: "20261124".into(),
            expires,
            policy: Policy {
                mode: Mode::Enforce,
                mx: vec!["mx.example.com".into(), "*.example.net".into()],
                max_age: 86400,
            },
        }
    }

    #[test]
    fn policies_come_back_until_they_expire() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mta-sts");
        let (store, found) = Store::open(&path, 100).unwrap();
        assert!(found.is_empty());
        store.save("example.com", &stored(200)).unwrap();
        store.save("old.example", &stored(150)).unwrap();
        // Not file names: kept out of the directory.
        store.save("../evil", &stored(200)).unwrap();
        store.save("a..b", &stored(200)).unwrap();
        std::fs::write(path.join("bad.example.policy"), "sluice-mta-sts 1 x\n").unwrap();
        std::fs::write(path.join("torn.example.policy.tmp"), "sluice").unwrap();
        let (_, mut found) = Store::open(&path, 160).unwrap();
        found.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(found, vec![("example.com".to_string(), stored(200))]);
        let mut left: Vec<_> = std::fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, vec!["example.com.policy"], "the rest removed");
        assert!(!dir.path().join("evil.policy").exists());
    }
}
