//! Which domains are ours (virtual mailbox domains) and the static
//! per-domain routes: what routing needs to know without any I/O.
//!
//! Invariant: both tables here are static (in memory), so
//! [`LocalDomains::is_local_domain`] and [`LocalDomains::transport_for`]
//! never wait; the scheduler calls them on its own task.

use std::collections::HashSet;
use std::sync::Arc;

use crate::config::hop::NextHop;
use crate::tables::{Table, TableError};

/// Why the routing tables could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RoutingError {
    #[error("local.{0}: must be a static table (it is consulted without I/O)")]
    NotStatic(&'static str),
    #[error("{setting}: {err}")]
    Table {
        setting: String,
        err: Box<TableError>,
    },
    #[error("local.{what}: no table named {name:?} in [tables]")]
    NoSuchTable { what: String, name: String },
}

pub struct LocalDomains {
    domains: HashSet<String>,
    domain_table: Option<Arc<Table>>,
    transport_table: Option<Arc<Table>>,
}

impl LocalDomains {
    pub fn new(
        domains: &[String],
        domain_table: Option<Arc<Table>>,
        transport_table: Option<Arc<Table>>,
    ) -> Result<LocalDomains, RoutingError> {
        for (t, what) in [
            (&domain_table, "domain_table"),
            (&transport_table, "transport_table"),
        ] {
            if t.as_ref().is_some_and(|t| !t.is_static()) {
                return Err(RoutingError::NotStatic(what));
            }
        }
        // A typo in a route must not send mail to the default route
        // instead: checked now, and at every reload of the file.
        if let Some(t) = &transport_table {
            t.set_check(check_route)
                .map_err(|err| RoutingError::Table {
                    setting: "local.transport_table".into(),
                    err: Box::new(err),
                })?;
        }
        Ok(LocalDomains {
            domains: domains.iter().map(|d| d.to_ascii_lowercase()).collect(),
            domain_table,
            transport_table,
        })
    }

    /// No local domains and no routes (relay-only configurations, tests).
    pub fn none() -> Arc<LocalDomains> {
        Arc::new(LocalDomains {
            domains: HashSet::new(),
            domain_table: None,
            transport_table: None,
        })
    }

    pub fn is_local_domain(&self, domain: &str) -> bool {
        if self.domains.is_empty() && self.domain_table.is_none() {
            return false;
        }
        let domain = domain.to_ascii_lowercase();
        self.domains.contains(&domain)
            || self
                .domain_table
                .as_ref()
                .and_then(|t| t.lookup_now(&domain))
                .is_some_and(|hit| hit.is_some())
    }

    /// The route for `domain` in the static transport table, if any.
    pub fn transport_for(&self, domain: &str) -> Option<Arc<NextHop>> {
        let values = self.transport_table.as_ref()?.lookup_now(domain)??;
        values.first().and_then(|h| NextHop::parse(h)).map(Arc::new)
    }

    pub(crate) fn tables(&self) -> impl Iterator<Item = &Arc<Table>> {
        [&self.domain_table, &self.transport_table]
            .into_iter()
            .flatten()
    }
}

/// A transport table entry must name a next hop Sluice understands.
fn check_route(domain: &str, hops: &[String]) -> Result<(), TableError> {
    let hop = hops.first().map(String::as_str).unwrap_or("");
    match NextHop::parse(hop) {
        Some(_) => Ok(()),
        None => Err(TableError::Entry {
            key: domain.to_string(),
            what: "next hop",
            value: hop.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tables::TableConfig;
    use crate::log::Logger;

    fn routes(text: &str) -> (tempfile::TempDir, Arc<Table>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("routes"), text).unwrap();
        let mut cfg: TableConfig = toml::from_str("kind = \"static\"").unwrap();
        cfg.path = Some(dir.path().join("routes"));
        let table = Table::build("routes", &cfg, &Logger::disabled()).unwrap();
        (dir, Arc::new(table))
    }

    #[test]
    fn a_bad_route_is_refused_not_ignored() {
        let (_d, t) = routes("a.test smtp:[10.0.0.1]:25\nb.test carrier-pigeon:x\n");
        let err = LocalDomains::new(&[], None, Some(t)).err().unwrap();
        assert!(
            matches!(&err, RoutingError::Table { err, .. }
                if matches!(&**err, TableError::Entry { key, .. } if key == "b.test")),
            "{err}"
        );
        assert!(
            err.to_string().contains("\"b.test\": bad next hop"),
            "{err}"
        );
        let (_d, t) = routes("a.test smtp:[10.0.0.1]:25\n");
        let ok = LocalDomains::new(&[], None, Some(t)).unwrap();
        assert_eq!(
            ok.transport_for("a.test").unwrap().key(),
            "smtp:[10.0.0.1]:25"
        );
    }
}
