//! Lookup tables behind one small interface: a static text file or an LDAP
//! directory. Used for recipient validation (virtual mailboxes), aliases
//! and mailbox paths.
//!
//! A lookup answers found (one or more values), not found, or
//! [`LookupError::Unavailable`]. The last must never be mistaken for "not
//! found": the SMTP layer turns it into `451 4.3.0`, never `550`.
//!
//! LDAP tables keep a small pool of multiplexed connections (ldap3 runs
//! many searches over one connection), fail over across their URIs, time
//! out connects and queries, and cache hits and misses with separate TTLs
//! so a busy server asks the directory once per address per TTL, not once
//! per message (the 451 storms of published Postfix + LDAP runs came from
//! a directory overloaded with per-lookup connections).

pub mod cidr;
mod ldap;
pub mod pattern;
pub mod search;
pub mod sql;
mod static_file;
pub mod text;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use ldap::{expand_filter, LdapStats, LdapTable};
pub use static_file::{parse_static, EntryCheck, LineProblem, StaticTable};

use crate::config::tables::TableConfig;
use crate::log::Logger;

/// Values found for a key.
pub type Values = Arc<Vec<String>>;

#[derive(Debug, Clone, thiserror::Error)]
pub enum LookupError {
    #[error("{0}")]
    Unavailable(String),
}

/// Why a table could not be built or (re)loaded.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("tables.{0}: a static table needs `path`")]
    NoPath(String),
    #[error("tables.{0}: an ldap table needs `uris`")]
    NoUris(String),
    #[error("tables.{table}: unknown kind {kind:?} (want \"static\" or \"ldap\")")]
    UnknownKind { table: String, kind: String },
    #[error("{}: {err}", path.display())]
    Read {
        path: std::path::PathBuf,
        err: std::io::Error,
    },
    #[error("{origin}: line {line}: key {key:?} {problem}")]
    Line {
        origin: String,
        line: usize,
        key: String,
        problem: LineProblem,
    },
    #[error("{key:?}: bad {what} {value:?}")]
    Entry {
        key: String,
        what: &'static str,
        value: String,
    },
    #[error("tables.{table}: tls_ca_file {err}")]
    Tls {
        table: String,
        err: crate::pki::TlsError,
    },
}

/// A lookup table of either kind.
pub enum Table {
    Static(StaticTable),
    Ldap(Box<LdapTable>),
}

impl Table {
    pub fn build(name: &str, config: &TableConfig, logger: &Logger) -> Result<Table, TableError> {
        match config.kind.as_str() {
            "static" => {
                let path = config
                    .path
                    .clone()
                    .ok_or_else(|| TableError::NoPath(name.to_string()))?;
                Ok(Table::Static(StaticTable::load(
                    name,
                    &path,
                    logger.clone(),
                )?))
            }
            "ldap" => {
                if config.uris.is_empty() {
                    return Err(TableError::NoUris(name.to_string()));
                }
                let table = LdapTable::new(name, config.clone(), logger.clone())?;
                Ok(Table::Ldap(Box::new(table)))
            }
            other => Err(TableError::UnknownKind {
                table: name.to_string(),
                kind: other.to_string(),
            }),
        }
    }

    pub async fn lookup(&self, key: &str) -> Result<Option<Values>, LookupError> {
        match self {
            Table::Static(t) => Ok(t.lookup(key)),
            Table::Ldap(t) => t.lookup(key).await,
        }
    }

    /// SMTP AUTH by binding as the user's entry (LDAP tables only).
    pub async fn bind_check(&self, key: &str, password: &str) -> Result<bool, LookupError> {
        match self {
            Table::Ldap(t) => t
                .bind_check(key, password)
                .await
                .map_err(|e| LookupError::Unavailable(e.to_string())),
            Table::Static(_) => Err(LookupError::Unavailable(
                "bind authentication needs an ldap table".into(),
            )),
        }
    }

    /// A lookup that needs no I/O: static tables only (None for LDAP).
    pub fn lookup_now(&self, key: &str) -> Option<Option<Values>> {
        match self {
            Table::Static(t) => Some(t.lookup(key)),
            Table::Ldap(_) => None,
        }
    }

    /// A static table's whole contents in force (None for LDAP): the
    /// same `Arc` until a reload swaps them, so a user may keep a view
    /// derived from them and rebuild it only when the pointer changes.
    pub fn contents(&self) -> Option<Arc<std::collections::HashMap<String, Values>>> {
        match self {
            Table::Static(t) => Some(t.contents()),
            Table::Ldap(_) => None,
        }
    }

    /// Requires every entry of a static table to pass `check`, now and at
    /// every reload (nothing for LDAP tables).
    pub fn set_check(&self, check: EntryCheck) -> Result<(), TableError> {
        match self {
            Table::Static(t) => t.set_check(check),
            Table::Ldap(_) => Ok(()),
        }
    }

    pub fn is_static(&self) -> bool {
        matches!(self, Table::Static(_))
    }

    /// An LDAP table's name and counters (queries, cache hits, found, not
    /// found, failures, lookups that shared another's query), for /metrics.
    pub fn counters(&self) -> Option<(String, [(&'static str, u64); 6])> {
        let Table::Ldap(t) = self else { return None };
        let s = &t.stats;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Some((
            t.name.clone(),
            [
                ("queries", n(&s.queries)),
                ("cache_hits", n(&s.cache_hits)),
                ("found", n(&s.found)),
                ("not_found", n(&s.not_found)),
                ("failures", n(&s.failures)),
                ("shared", n(&s.shared)),
            ],
        ))
    }

    /// A log line with an LDAP table's counters.
    pub fn stats_line(&self) -> Option<String> {
        let Table::Ldap(t) = self else { return None };
        let s = &t.stats;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Some(format!(
            "table {}: queries={} cache_hits={} shared={} found={} not_found={} failures={}",
            t.name,
            n(&s.queries),
            n(&s.cache_hits),
            n(&s.shared),
            n(&s.found),
            n(&s.not_found),
            n(&s.failures)
        ))
    }

    /// Reloads a static table whose file changed (blocking; the daemon's
    /// watcher calls it); nothing for LDAP.
    pub fn reload_if_changed(&self) {
        if let Table::Static(t) = self {
            t.reload_if_changed();
        }
    }

    /// Re-reads a static table's file (SIGHUP); LDAP tables drop their cache.
    pub fn reload(&self) {
        match self {
            Table::Static(t) => t.reload(),
            Table::Ldap(t) => t.clear_cache(),
        }
    }
}
