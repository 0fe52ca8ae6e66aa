//! LDAP lookup tables: a pool of multiplexed connections with failover,
//! timeouts, TLS (`ldaps://` or StartTLS, rustls, certificate checked
//! against the system roots or `tls_ca_file`), behind the tables' cache
//! (`cache.rs`: hit/miss TTLs, single flight, a bound on queries in
//! flight).
//!
//! A connection whose query failed or timed out is dropped from its pool
//! slot, so a hung connection is replaced on next use instead of costing
//! a timeout to every lookup that lands on it (SMTP audit §J1).
//!
//! Trust: the directory's answers are data, never code; the key is the
//! client's address and is escaped before it goes into a filter.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ldap3::{Ldap, LdapConnAsync, LdapConnSettings, Scope, SearchEntry};

use super::answer::Answer;
use super::cache::{Cached, Limits};
use super::{LookupError, TableError, Values};
use crate::log::Logger;
use crate::pki::TlsError;
use crate::tables::config::TableConfig;

/// Why the directory could not answer (the lookup is then `451`, never a
/// "no such user").
#[derive(Debug, Clone, thiserror::Error)]
pub enum LdapError {
    /// No URI took a connection (each one's reason).
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("bind: {0}")]
    Bind(String),
    #[error("{0} timed out")]
    Timeout(&'static str),
    #[error("query: {0}")]
    Query(String),
}

pub struct LdapTable {
    config: TableConfig,
    pool: Vec<tokio::sync::Mutex<Option<Ldap>>>,
    tls: Arc<rustls::ClientConfig>,
    next: AtomicUsize,
    pub(super) cached: Cached,
}

impl LdapTable {
    pub fn new(name: &str, config: TableConfig, logger: Logger) -> Result<LdapTable, TableError> {
        let pool = (0..config.pool_size.max(1))
            .map(|_| tokio::sync::Mutex::new(None))
            .collect();
        let tls = tls_config(&config).map_err(|err| TableError::Tls {
            table: name.to_string(),
            err,
        })?;
        let cached = Cached::new(name, Limits::of(&config), logger);
        Ok(LdapTable {
            config,
            pool,
            tls,
            next: AtomicUsize::new(0),
            cached,
        })
    }

    pub fn clear_cache(&self) {
        self.cached.clear();
    }

    /// Looks `key` up through the cache (see `cache.rs`); a query that
    /// fails is tried once more on a fresh connection, which may fail
    /// over to another URI.
    ///
    /// As Postfix's, a filter with `%d` is not sent for a key without a
    /// domain (Postfix: "the query is suppressed"): not found.
    pub async fn lookup(&self, key: &str) -> Result<Option<Values>, LookupError> {
        let key = super::fold(key);
        let domain = key.rsplit_once('@').map_or("", |(_, d)| d);
        if domain.is_empty() && self.config.filter.replace("%%", "").contains("%d") {
            return Ok(None);
        }
        self.cached
            .get(&key, async |key: &str| {
                let mut last_err = LdapError::Timeout("lookup");
                for attempt in 0..2 {
                    match self.query(key, attempt > 0).await {
                        Ok(value) => return Ok(value),
                        Err(err) => last_err = err,
                    }
                }
                Err(last_err.to_string())
            })
            .await
    }

    /// A connection handle from the pool and its slot, connecting (with
    /// failover) if needed.
    async fn handle(&self, fresh: bool) -> Result<(usize, Ldap), LdapError> {
        let index = self.next.fetch_add(1, Ordering::Relaxed) % self.pool.len();
        let mut guard = self.pool[index].lock().await;
        if let Some(ldap) = guard.as_mut() {
            if !fresh && !ldap.is_closed() {
                return Ok((index, ldap.clone()));
            }
        }
        *guard = None;
        let ldap = self.connect().await?;
        *guard = Some(ldap.clone());
        Ok((index, ldap))
    }

    /// Forgets the connection in `index` (it failed or hung): the next
    /// use of the slot connects afresh.
    async fn discard(&self, index: usize) {
        *self.pool[index].lock().await = None;
    }

    /// SMTP AUTH by LDAP bind: finds `key`'s entry with the table's filter,
    /// then binds as that entry with `password` on a connection of its own
    /// (never a pooled one, whose identity must not change). Ok(false) for
    /// no such entry, an empty password or invalid credentials (rc 49).
    pub async fn bind_check(&self, key: &str, password: &str) -> Result<bool, LdapError> {
        if password.is_empty() {
            // An empty password would be an unauthenticated bind (RFC 4513 §5.1.2).
            return Ok(false);
        }
        let timeout = Duration::from_millis(self.config.query_timeout_ms.max(1));
        let (index, mut ldap) = self.handle(false).await?;
        let filter = expand_filter(&self.config.filter, &super::fold(key));
        let search = ldap.with_timeout(timeout).search(
            &self.config.base,
            Scope::Subtree,
            &filter,
            vec!["1.1"],
        );
        let found = match tokio::time::timeout(timeout, search).await {
            Ok(Ok(r)) => r.success().map_err(|e| LdapError::Query(e.to_string())),
            Ok(Err(e)) => Err(LdapError::Query(e.to_string())),
            Err(_) => Err(LdapError::Timeout("query")),
        };
        let entries = match found {
            Ok((entries, _)) => entries,
            Err(e) => {
                self.discard(index).await;
                return Err(e);
            }
        };
        let [entry] = &entries[..] else {
            return Ok(false);
        };
        let dn = SearchEntry::construct(entry.clone()).dn;
        let mut own = self.connect_as(None).await?;
        let bound = tokio::time::timeout(
            timeout,
            own.with_timeout(timeout).simple_bind(&dn, password),
        )
        .await;
        let _ = own.unbind().await;
        match bound {
            Ok(Ok(r)) if r.rc == 0 => Ok(true),
            Ok(Ok(r)) if r.rc == 49 => Ok(false),
            Ok(Ok(r)) => Err(LdapError::Bind(format!("rc={} {}", r.rc, r.text))),
            Ok(Err(e)) => Err(LdapError::Bind(e.to_string())),
            Err(_) => Err(LdapError::Timeout("bind")),
        }
    }

    async fn connect(&self) -> Result<Ldap, LdapError> {
        let service = (!self.config.bind_dn.is_empty()).then_some((
            self.config.bind_dn.as_str(),
            self.config.bind_password.as_str(),
        ));
        self.connect_as(service).await
    }

    /// Connects (with failover), bound as `service` or anonymous.
    async fn connect_as(&self, service: Option<(&str, &str)>) -> Result<Ldap, LdapError> {
        let timeout = Duration::from_millis(self.config.connect_timeout_ms.max(1));
        let mut errors = Vec::new();
        for uri in &self.config.uris {
            let settings = LdapConnSettings::new()
                .set_conn_timeout(timeout)
                .set_config(self.tls.clone())
                .set_starttls(self.config.starttls && uri.starts_with("ldap://"));
            let attempt = async {
                let (conn, mut ldap) = LdapConnAsync::with_settings(settings, uri)
                    .await
                    .map_err(|e| e.to_string())?;
                ldap3::drive!(conn);
                if let Some((dn, password)) = service {
                    ldap.with_timeout(timeout)
                        .simple_bind(dn, password)
                        .await
                        .and_then(|r| r.success())
                        .map_err(|e| format!("bind: {e}"))?;
                }
                Ok::<Ldap, String>(ldap)
            };
            match tokio::time::timeout(timeout, attempt).await {
                Ok(Ok(ldap)) => return Ok(ldap),
                Ok(Err(e)) => errors.push(format!("{uri}: {e}")),
                Err(_) => errors.push(format!("{uri}: connect timed out")),
            }
        }
        Err(LdapError::Connect(errors.join("; ")))
    }

    async fn query(&self, key: &str, fresh: bool) -> Result<Option<Values>, LdapError> {
        let (index, ldap) = self.handle(fresh).await?;
        let result = self.search(ldap, key).await;
        if result.is_err() {
            self.discard(index).await;
        }
        result
    }

    async fn search(&self, mut ldap: Ldap, key: &str) -> Result<Option<Values>, LdapError> {
        let filter = expand_filter(&self.config.filter, key);
        let attrs: Vec<&str> = if self.config.attributes.is_empty() {
            vec!["1.1"]
        } else {
            self.config.attributes.iter().map(String::as_str).collect()
        };
        let timeout = Duration::from_millis(self.config.query_timeout_ms.max(1));
        let result = tokio::time::timeout(
            timeout,
            ldap.with_timeout(timeout)
                .search(&self.config.base, Scope::Subtree, &filter, attrs),
        )
        .await
        .map_err(|_| LdapError::Timeout("query"))?
        .and_then(|r| r.success())
        .map_err(|e| LdapError::Query(e.to_string()))?;
        let entries = result.0;
        if entries.is_empty() {
            return Ok(None);
        }
        if self.config.attributes.is_empty() {
            return Ok(Some(Arc::new(Answer::values(vec![key.to_string()]))));
        }
        let mut values = Vec::new();
        for entry in entries {
            let entry = SearchEntry::construct(entry);
            for attr in &self.config.attributes {
                // Attribute names are case-insensitive; the server picks the case.
                if let Some((_, vals)) = entry
                    .attrs
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(attr))
                {
                    values.extend(vals.iter().cloned());
                }
            }
        }
        if values.is_empty() {
            return Ok(None);
        }
        Ok(Some(Arc::new(Answer::values(values))))
    }
}

/// The TLS settings for `ldaps://` and StartTLS (no trust anchors at all
/// when neither is used).
fn tls_config(config: &TableConfig) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let uses_tls = config.starttls || config.uris.iter().any(|u| u.starts_with("ldaps://"));
    let roots = match (&config.tls_ca_file, uses_tls) {
        (None, false) => rustls::RootCertStore::empty(),
        (ca, _) => crate::pki::roots(ca.as_deref())?,
    };
    Ok(Arc::new(crate::pki::verifying_client(roots)?))
}

/// Fills `%s`, `%u`, `%d` in an LDAP filter with the escaped key parts.
pub fn expand_filter(template: &str, key: &str) -> String {
    let (local, domain) = crate::message::address::split(key);
    let mut out = String::with_capacity(template.len() + key.len());
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('s') => out.push_str(&ldap3::ldap_escape(key)),
            Some('u') => out.push_str(&ldap3::ldap_escape(local)),
            Some('d') => out.push_str(&ldap3::ldap_escape(domain)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_escaped() {
        assert_eq!(expand_filter("(mail=%s)", "a@b.test"), "(mail=a@b.test)");
        assert_eq!(
            expand_filter("(&(uid=%u)(dc=%d))", "a@b.test"),
            "(&(uid=a)(dc=b.test))"
        );
        assert_eq!(
            expand_filter("(mail=%s)", "*)(uid=*"),
            "(mail=\\2a\\29\\28uid=\\2a)"
        );
    }
}
