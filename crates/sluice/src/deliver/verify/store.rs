//! The verification cache on disk (Postfix's `address_verify_map`,
//! `btree:$data_directory/verify_cache`): one SQLite file,
//! `data_dir/verify_cache.sqlite`, so answers outlive a restart.
//!
//! Only definite answers are stored: deliverable, and (with
//! `negative_cache`) undeliverable with the next hop's reply. A temporary
//! failure is never stored and never replaces an entry.
//!
//! Trust: the file is ours, but may be damaged or from another version: a
//! row that does not read is ignored (as if absent), never an error to
//! the client; a file that cannot be opened leaves the cache in memory
//! (logged by the caller). Invariants: the file holds at most
//! `cache_max_entries` rows (the oldest answers go first), and expired
//! rows are removed every `cache_cleanup_interval`. Every call blocks on
//! SQLite: callers run it on a blocking thread.

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

use super::status::HopReply;
use crate::config::verify::VerifySettings;
use crate::deliver::smtp::Command;
use crate::message::reply::{Enhanced, Reply};

/// One cached answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Deliverable; otherwise undeliverable with `reply`.
    pub reply: Option<HopReply>,
    /// When the answer was had (Unix seconds).
    pub updated: u64,
}

/// How an entry stands at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Age {
    /// Give it.
    Fresh,
    /// Give it, and probe again (past its refresh time).
    Stale,
    /// As if absent (past its expiry).
    Expired,
}

/// How `entry` stands at `now` under `s`'s times.
pub fn age(entry: &Entry, now: u64, s: &VerifySettings) -> Age {
    let (refresh, expire) = match entry.reply {
        None => (s.positive_refresh_secs, s.positive_expire_secs),
        Some(_) => (s.negative_refresh_secs, s.negative_expire_secs),
    };
    let old = now.saturating_sub(entry.updated);
    if old >= expire {
        Age::Expired
    } else if old >= refresh {
        Age::Stale
    } else {
        Age::Fresh
    }
}

pub struct Store {
    db: Connection,
    max_entries: u64,
}

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS verify (
    address TEXT PRIMARY KEY,
    deliverable INTEGER NOT NULL,
    code INTEGER NOT NULL,
    enhanced TEXT,
    text TEXT NOT NULL,
    relay TEXT,
    command TEXT,
    updated INTEGER NOT NULL,
    probed INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS verify_updated ON verify(updated);";

impl Store {
    /// Opens (creating) the cache file in `dir`.
    pub fn open(dir: &Path, max_entries: u64) -> rusqlite::Result<Store> {
        let _ = std::fs::create_dir_all(dir);
        let db = Connection::open(dir.join("verify_cache.sqlite"))?;
        // One writer (this process); a crash loses at most the last
        // answers, which a probe finds again.
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "NORMAL")?;
        db.execute_batch(SCHEMA)?;
        Ok(Store { db, max_entries })
    }

    /// A cache in memory (when the file cannot be opened).
    pub fn memory(max_entries: u64) -> Store {
        let db = Connection::open_in_memory().expect("SQLite in memory opens");
        let _ = db.execute_batch(SCHEMA);
        Store { db, max_entries }
    }

    /// The entry for `address`; a row that does not read (or a file that
    /// fails) is as if absent.
    pub fn get(&self, address: &str) -> Option<Entry> {
        let (ok, code, enhanced, text, relay, command, updated) = self
            .db
            .query_row(
                "SELECT deliverable, code, enhanced, text, relay, command, updated
                 FROM verify WHERE address = ?1",
                params![address],
                |r| {
                    Ok((
                        r.get::<_, bool>(0)?,
                        r.get::<_, u16>(1)?,
                        r.get::<_, Option<String>>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, Option<String>>(5)?,
                        r.get::<_, i64>(6)?,
                    ))
                },
            )
            .optional()
            .ok()??;
        let updated = u64::try_from(updated).unwrap_or(0);
        if ok {
            return Some(Entry {
                reply: None,
                updated,
            });
        }
        let status = enhanced.as_deref().and_then(Enhanced::parse);
        let command = match command.as_deref() {
            Some("MAIL") => Some(Command::Mail),
            Some("RCPT") => Some(Command::Rcpt),
            _ => None,
        };
        let reply = Reply::smtp(code, status, text);
        Some(Entry {
            reply: Some(HopReply::new(&reply, relay.as_deref(), command)),
            updated,
        })
    }

    /// Stores (replacing) the answer for `address`, keeping the bound.
    pub fn put(&self, address: &str, entry: &Entry) -> rusqlite::Result<()> {
        let r = entry.reply.as_ref();
        let command = r.and_then(HopReply::command).map(|c| match c {
            Command::Mail => "MAIL",
            Command::Rcpt => "RCPT",
        });
        self.db.execute(
            "INSERT OR REPLACE INTO verify
             (address, deliverable, code, enhanced, text, relay, command, updated, probed)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)",
            params![
                address,
                r.is_none(),
                r.map_or(250, HopReply::code),
                r.and_then(HopReply::enhanced).map(|e| e.to_string()),
                r.map_or("", HopReply::text),
                r.and_then(HopReply::relay),
                command,
                i64::try_from(entry.updated).unwrap_or(i64::MAX),
            ],
        )?;
        let rows = self.len()?;
        if rows > self.max_entries {
            // The oldest tenth beyond the bound, so this is not paid at
            // every answer once full.
            let drop = rows - self.max_entries + self.max_entries / 10;
            self.db.execute(
                "DELETE FROM verify WHERE address IN
                 (SELECT address FROM verify ORDER BY updated LIMIT ?1)",
                params![i64::try_from(drop).unwrap_or(i64::MAX)],
            )?;
        }
        Ok(())
    }

    /// Whether a stale entry of `address` may be probed again at `now`:
    /// its last probe was `every` seconds ago or more (Postfix's verify
    /// waits 1000 s); if so, that probe is noted as made now.
    pub fn refresh_due(&self, address: &str, now: u64, every: u64) -> bool {
        let now_i = i64::try_from(now).unwrap_or(i64::MAX);
        let due = i64::try_from(now.saturating_sub(every)).unwrap_or(0);
        self.db
            .execute(
                "UPDATE verify SET probed = ?1 WHERE address = ?2 AND probed <= ?3",
                params![now_i, address, due],
            )
            .is_ok_and(|n| n == 1)
    }

    /// Removes the entries expired at `now`.
    pub fn clean(&self, now: u64, s: &VerifySettings) -> rusqlite::Result<usize> {
        let before = |secs: u64| i64::try_from(now.saturating_sub(secs)).unwrap_or(0);
        self.db.execute(
            "DELETE FROM verify WHERE (deliverable AND updated <= ?1)
             OR (NOT deliverable AND updated <= ?2)",
            params![
                before(s.positive_expire_secs),
                before(s.negative_expire_secs)
            ],
        )
    }

    /// Rows held.
    pub fn len(&self) -> rusqlite::Result<u64> {
        let rows: i64 = self
            .db
            .query_row("SELECT COUNT(*) FROM verify", [], |r| r.get(0))?;
        Ok(u64::try_from(rows).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(updated: u64) -> Entry {
        let r = Reply::smtp(550, Enhanced::new(5, 1, 1), "unknown");
        let hop = HopReply::new(&r, Some("h[127.0.0.1]:25"), Some(Command::Rcpt));
        Entry {
            reply: Some(hop),
            updated,
        }
    }

    #[test]
    fn ages_follow_postfixs_times() {
        let s = VerifySettings::default();
        let ok = Entry {
            reply: None,
            updated: 1_000_000,
        };
        assert_eq!(age(&ok, 1_000_000, &s), Age::Fresh);
        assert_eq!(age(&ok, 1_000_000 + 7 * 86_400, &s), Age::Stale);
        assert_eq!(age(&ok, 1_000_000 + 31 * 86_400, &s), Age::Expired);
        let bad = refused(1_000_000);
        assert_eq!(age(&bad, 1_000_000 + 3 * 3600 - 1, &s), Age::Fresh);
        assert_eq!(age(&bad, 1_000_000 + 3 * 3600, &s), Age::Stale);
        assert_eq!(age(&bad, 1_000_000 + 3 * 86_400, &s), Age::Expired);
    }

    #[test]
    fn entries_survive_reopening_and_stay_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 10).unwrap();
        store.put("bad@b.test", &refused(5)).unwrap();
        let ok = Entry {
            reply: None,
            updated: 6,
        };
        store.put("ok@b.test", &ok).unwrap();
        drop(store);
        let store = Store::open(dir.path(), 10).unwrap();
        assert_eq!(store.get("bad@b.test"), Some(refused(5)));
        assert_eq!(store.get("ok@b.test"), Some(ok));
        assert_eq!(store.get("none@b.test"), None);
        // A refresh probe at most every 1000 s.
        assert!(!store.refresh_due("ok@b.test", 6 + 999, 1000));
        assert!(store.refresh_due("ok@b.test", 6 + 1000, 1000));
        assert!(!store.refresh_due("ok@b.test", 6 + 1999, 1000));
        assert!(!store.refresh_due("none@b.test", 1_000_000, 1000));
        for i in 0..30u64 {
            let e = Entry {
                reply: None,
                updated: 100 + i,
            };
            store.put(&format!("u{i}@b.test"), &e).unwrap();
            assert!(store.len().unwrap() <= 10);
        }
        // The newest stay.
        assert!(store.get("u29@b.test").is_some());
        assert!(store.get("bad@b.test").is_none());
        let s = VerifySettings::default();
        let held = store.len().unwrap() as usize;
        assert_eq!(store.clean(129 + s.positive_expire_secs, &s).unwrap(), held);
        assert_eq!(store.len().unwrap(), 0);
    }
}
