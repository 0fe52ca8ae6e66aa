//! Which domains are ours (virtual mailbox domains) and the static
//! per-domain routes: what routing needs to know without any I/O.
//!
//! Invariant: both tables here are static (in memory), so
//! [`LocalDomains::is_local_domain`] and [`LocalDomains::transport_for`]
//! never wait; the scheduler calls them on its own task. The transport
//! table's values are parsed into next hops once per contents (at load
//! and after each reload), never per lookup.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::config::hop::NextHop;
use crate::config::names::Domain;
use crate::tables::{Table, TableError, Values};

/// Why the routing tables could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RoutingError {
    #[error("local.{0}: must be a file table (it is consulted without I/O)")]
    NotStatic(&'static str),
    #[error(
        "local.transport_table: must be a text file table (its routes are checked when loaded)"
    )]
    TransportNotText,
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
    /// `[system] mydestination`: ours too, delivered by local(8).
    system: HashSet<String>,
    domain_table: Option<Arc<Table>>,
    transport_table: Option<Arc<Table>>,
    /// The transport table's routes, parsed from the contents in force.
    routes: arc_swap::ArcSwapOption<Routes>,
}

/// A transport table's entries as next hops, and the contents they were
/// parsed from (to notice a reload by pointer).
struct Routes {
    source: Arc<HashMap<String, Values>>,
    hops: HashMap<String, Arc<NextHop>>,
}

impl Routes {
    fn parse(source: Arc<HashMap<String, Values>>) -> Routes {
        // Every entry passed `check_route` before these contents were
        // put in force, so none is dropped here.
        let hops = source
            .iter()
            .filter_map(|(domain, values)| {
                let hop = NextHop::parse(values.first()?)?;
                Some((domain.clone(), Arc::new(hop)))
            })
            .collect();
        Routes { source, hops }
    }
}

impl LocalDomains {
    pub fn new(
        domains: &[Domain],
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
            if t.contents().is_none() {
                return Err(RoutingError::TransportNotText);
            }
            t.set_check(check_route)
                .map_err(|err| RoutingError::Table {
                    setting: "local.transport_table".into(),
                    err: Box::new(err),
                })?;
        }
        Ok(LocalDomains {
            domains: domains.iter().map(|d| d.to_string()).collect(),
            system: HashSet::new(),
            domain_table,
            transport_table,
            routes: Default::default(),
        })
    }

    /// No local domains and no routes (relay-only configurations, tests).
    pub fn none() -> Arc<LocalDomains> {
        Arc::new(LocalDomains {
            domains: HashSet::new(),
            system: HashSet::new(),
            domain_table: None,
            transport_table: None,
            routes: Default::default(),
        })
    }

    /// Adds the `mydestination` domains (system users).
    pub fn with_system(&mut self, domains: impl Iterator<Item = String>) {
        self.system.extend(domains.map(|d| d.to_ascii_lowercase()));
    }

    /// Whether `domain` is one of `mydestination` (system users).
    pub fn is_system_domain(&self, domain: &str) -> bool {
        !self.system.is_empty() && self.system.contains(&domain.to_ascii_lowercase())
    }

    pub fn is_local_domain(&self, domain: &str) -> bool {
        if self.is_system_domain(domain) {
            return true;
        }
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

    /// The route for `domain` (lowercase) in the static transport table,
    /// if any. The table's contents are parsed the first time they are
    /// seen; later lookups are one pointer comparison and a map lookup.
    pub fn transport_for(&self, domain: &str) -> Option<Arc<NextHop>> {
        let now = self.transport_table.as_ref()?.contents()?;
        let cached = self.routes.load();
        if let Some(routes) = cached.as_ref().filter(|r| Arc::ptr_eq(&r.source, &now)) {
            return routes.hops.get(domain).cloned();
        }
        let fresh = Arc::new(Routes::parse(now));
        self.routes.store(Some(fresh.clone()));
        fresh.hops.get(domain).cloned()
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
        let (_d, t) = routes("a.test smtp:[10.0.0.1]:25\nb.test Carrier-Pigeon:x\n");
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

    /// Routes are parsed once per contents of the file: two lookups give
    /// the same parsed hop, and a reload is seen at the next lookup.
    #[test]
    fn routes_are_parsed_once_and_follow_a_reload() {
        let (dir, t) = routes("a.test smtp:[10.0.0.1]:25\n");
        let local = LocalDomains::new(&[], None, Some(t.clone())).unwrap();
        let first = local.transport_for("a.test").unwrap();
        let again = local.transport_for("a.test").unwrap();
        assert!(Arc::ptr_eq(&first, &again), "parsed again for a lookup");
        std::fs::write(dir.path().join("routes"), "a.test discard\n").unwrap();
        t.reload();
        assert_eq!(*local.transport_for("a.test").unwrap(), NextHop::Discard);
        assert!(local.transport_for("b.test").is_none());
    }
}
