//! Lookup tables behind one interface, with Postfix's kinds and lookup
//! semantics: every user of a table (mailboxes, aliases, relay
//! recipients, AUTH users, routes, and the access and rewriting maps to
//! come) asks through [`Table`].
//!
//! A lookup answers found (an [`Answer`]: Postfix's string and its list),
//! not found, or [`LookupError::Unavailable`]. The last must never be
//! mistaken for "not found": the SMTP layer turns it into `451 4.3.0`,
//! never `550`.
//!
//! The kinds: files read into memory and swapped whole on change (`text`
//! and Postfix's indexed names for it, `regexp`, `pcre`, `cidr`: see
//! `file.rs`); LDAP (a pool of multiplexed connections with fail-over,
//! `ldap.rs`); `static`, `union` and `pipe` made of other tables
//! (`compose.rs`). Server-backed tables sit behind `cache.rs` (hit/miss
//! TTLs, single flight, a bound on queries in flight), so a busy server
//! asks the directory once per key per TTL, not once per message (the 451
//! storms of published Postfix + LDAP runs came from a directory
//! overloaded with per-lookup connections).
//!
//! Keys: text, LDAP and the server kinds fold keys to lower case, as
//! Postfix's fixed tables do; pattern tables see keys as given. Which
//! keys an address or a domain is looked up under is `search.rs`'s, and
//! `find.rs` walks them.
//!
//! Trust: keys are the client's; tables are the operator's.

pub mod answer;
mod build;
pub mod cache;
pub mod cf;
pub mod cidr;
mod compose;
pub mod config;
pub mod file;
mod find;
mod ldap;
mod ldap_cf;
pub mod pattern;
mod remote;
pub mod search;
pub mod socketmap;
pub mod spec;
pub mod sql;
pub mod tcp;
pub mod text;

use std::sync::Arc;

pub use answer::{Answer, Values};
pub use file::{EntryCheck, FileTable, Format};
pub use find::{find_address, Found};
pub use ldap::{expand_filter, LdapTable};

#[derive(Debug, Clone, thiserror::Error)]
pub enum LookupError {
    #[error("{0}")]
    Unavailable(String),
}

/// Why a table could not be built or (re)loaded.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("tables.{table}: a {kind} table needs `{needs}`")]
    Needs {
        table: String,
        kind: String,
        needs: &'static str,
    },
    #[error("tables.{table}: unknown kind {kind:?} (want one of {})", build::KINDS.join(", "))]
    UnknownKind { table: String, kind: String },
    #[error("tables.{table}: member {member:?}: {why}")]
    Member {
        table: String,
        member: String,
        why: String,
    },
    #[error("{}: {err}", path.display())]
    Read {
        path: std::path::PathBuf,
        err: std::io::Error,
    },
    /// A strict (`static`) file with a line Postfix would skip.
    #[error("{origin}: line {line}: {problem}")]
    Refused {
        origin: String,
        line: usize,
        problem: String,
    },
    #[error("{key:?}: bad {what} {value:?}")]
    Entry {
        key: String,
        what: &'static str,
        value: String,
    },
    #[error(transparent)]
    Cf(#[from] cf::CfError),
    #[error("tables.{table}: {err}")]
    Remote { table: String, err: String },
    #[error("tables.{table}: tls_ca_file {err}")]
    Tls {
        table: String,
        err: crate::pki::TlsError,
    },
}

/// A key as fixed-key tables store and look it up: lower case, as
/// Postfix folds it (UTF-8 case folding with `smtputf8_enable`, its
/// default: `ÜSER` finds `üser`). ASCII keys, nearly all, are folded
/// without allocating a new kind of string.
pub fn fold(key: &str) -> String {
    match key.is_ascii() {
        true => key.to_ascii_lowercase(),
        false => key.to_lowercase(),
    }
}

/// A lookup table of any kind.
pub enum Table {
    File(FileTable),
    Ldap(Box<LdapTable>),
    /// socketmap, tcp (and SQL): a server per key, behind the cache.
    Remote(Box<remote::Remote>),
    /// Postfix's `static:`: every key finds the one value.
    Static(Values),
    /// Postfix's `unionmap:`: every member is asked; the answers of those
    /// that found the key, joined with commas.
    Union(Vec<Arc<Table>>),
    /// Postfix's `pipemap:`: each member's answer is the next one's key.
    Pipe(Vec<Arc<Table>>),
}

impl Table {
    /// The answer for `key` as given (`postmap -q`): no search order.
    pub async fn lookup(&self, key: &str) -> Result<Option<Values>, LookupError> {
        match self {
            Table::File(t) => t.lookup(key),
            Table::Ldap(t) => t.lookup(key).await,
            Table::Remote(t) => t.lookup(key).await,
            Table::Static(v) => Ok(Some(v.clone())),
            Table::Union(members) => compose::union(members, key).await,
            Table::Pipe(members) => compose::pipe(members, key).await,
        }
    }

    /// Whether partial keys (`user`, `@domain`) are asked of this table:
    /// not for pattern and cidr tables, nor for a union or pipe with one
    /// among its members (Postfix asks tables without a fixed key only
    /// for full addresses).
    pub fn fixed(&self) -> bool {
        match self {
            Table::File(t) => t.fixed(),
            Table::Remote(t) => t.fixed(),
            Table::Ldap(_) | Table::Static(_) => true,
            Table::Union(m) | Table::Pipe(m) => m.iter().all(|t| t.fixed()),
        }
    }

    /// Whether a lookup can fail only because a pattern reached its
    /// backtracking limit (a `regexp:` or `pcre:` file): the key, not the
    /// table, is at fault.
    pub fn is_pattern(&self) -> bool {
        matches!(self, Table::File(t) if t.is_pattern())
    }

    /// SMTP AUTH by binding as the user's entry (LDAP tables only).
    pub async fn bind_check(&self, key: &str, password: &str) -> Result<bool, LookupError> {
        match self {
            Table::Ldap(t) => t
                .bind_check(key, password)
                .await
                .map_err(|e| LookupError::Unavailable(e.to_string())),
            _ => Err(LookupError::Unavailable(
                "bind authentication needs an ldap table".into(),
            )),
        }
    }

    /// A lookup that needs no I/O: files and `static` (None for the
    /// others, and for a pattern that could not decide).
    pub fn lookup_now(&self, key: &str) -> Option<Option<Values>> {
        match self {
            Table::File(t) => t.lookup(key).ok(),
            Table::Static(v) => Some(Some(v.clone())),
            _ => None,
        }
    }

    /// A text file's whole contents in force (None for the others): the
    /// same `Arc` until a reload swaps them, so a user may keep a view
    /// derived from them and rebuild it only when the pointer changes.
    pub fn contents(&self) -> Option<Arc<std::collections::HashMap<String, Values>>> {
        match self {
            Table::File(t) => t.contents(),
            _ => None,
        }
    }

    /// Requires every entry of a text file to pass `check`, now and at
    /// every reload (nothing for the other kinds).
    pub fn set_check(&self, check: EntryCheck) -> Result<(), TableError> {
        match self {
            Table::File(t) => t.set_check(check),
            _ => Ok(()),
        }
    }

    /// Whether the table answers without I/O ([`Table::lookup_now`]): a
    /// file, or `static`.
    pub fn is_static(&self) -> bool {
        matches!(self, Table::File(_) | Table::Static(_))
    }

    /// A server-backed table's name and counters (queries, cache hits,
    /// found, not found, failures, lookups that shared another's query),
    /// for /metrics.
    pub fn counters(&self) -> Option<(String, [(&'static str, u64); 6])> {
        let cached = self.cached()?;
        Some((cached.name().to_string(), cached.counters()))
    }

    /// A log line with a server-backed table's counters.
    pub fn stats_line(&self) -> Option<String> {
        Some(self.cached()?.stats_line())
    }

    fn cached(&self) -> Option<&cache::Cached> {
        match self {
            Table::Ldap(t) => Some(&t.cached),
            Table::Remote(t) => Some(&t.cached),
            _ => None,
        }
    }

    /// Reloads a file whose modification time changed (blocking; the
    /// daemon's watcher calls it), members included.
    pub fn reload_if_changed(&self) {
        match self {
            Table::File(t) => t.reload_if_changed(),
            Table::Union(m) | Table::Pipe(m) => m.iter().for_each(|t| t.reload_if_changed()),
            _ => {}
        }
    }

    /// Re-reads files (SIGHUP); server-backed tables drop their cache.
    pub fn reload(&self) {
        match self {
            Table::File(t) => t.reload(),
            Table::Ldap(t) => t.clear_cache(),
            Table::Remote(t) => t.cached.clear(),
            Table::Static(_) => {}
            Table::Union(m) | Table::Pipe(m) => m.iter().for_each(|t| t.reload()),
        }
    }
}
