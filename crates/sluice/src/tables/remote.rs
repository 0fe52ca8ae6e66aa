//! Tables that ask a server per key — socketmap, tcp (and SQL) — behind
//! the tables' cache (`cache.rs`): one type for the build and lookup code,
//! whatever the protocol.
//!
//! Keys: SQL tables fold keys to lower case, as Postfix's fixed tables
//! do; socketmap and tcp servers get the key as given (Postfix flags them
//! as pattern tables: no folding, full keys only), since their answers may
//! depend on case (an SRS address's hash).
//!
//! Trust: keys are the client's; answers are the server's data. A server
//! that fails, hangs or answers nonsense is "try again" (the backends'
//! errors), never "not found".

use std::sync::Arc;

use super::answer::Answer;
use super::cache::Cached;
use super::socketmap::SocketmapTable;
use super::sql::SqlTable;
use super::tcp::TcpTable;
use super::{LookupError, Values};

/// The protocol behind a server-backed table.
pub enum Backend {
    Sql(Box<SqlTable>),
    Socketmap(SocketmapTable),
    Tcp(TcpTable),
}

/// A server-backed table and its cache.
pub struct Remote {
    pub(super) backend: Backend,
    pub(super) cached: Cached,
}

impl Remote {
    pub fn new(backend: Backend, cached: Cached) -> Remote {
        Remote { backend, cached }
    }

    /// Whether partial keys are asked (see the head: not of socketmap or
    /// tcp).
    pub fn fixed(&self) -> bool {
        match self.backend {
            Backend::Sql(_) => true,
            Backend::Socketmap(_) | Backend::Tcp(_) => false,
        }
    }

    /// The answer for `key`, through the cache (SQL keys folded first).
    pub async fn lookup(&self, key: &str) -> Result<Option<Values>, LookupError> {
        let text = |found: Option<String>| found.map(|v| Arc::new(Answer::text(v)));
        let rows = |found: Option<Vec<String>>| found.map(|v| Arc::new(Answer::values(v)));
        let key = match self.backend {
            Backend::Sql(_) => super::fold(key),
            _ => key.to_string(),
        };
        self.cached
            .get(&key, async |key: &str| match &self.backend {
                Backend::Sql(t) => t.query(key).await.map(rows).map_err(|e| e.to_string()),
                Backend::Socketmap(t) => t.query(key).await.map(text).map_err(|e| e.to_string()),
                Backend::Tcp(t) => t.query(key).await.map(text).map_err(|e| e.to_string()),
            })
            .await
    }
}
