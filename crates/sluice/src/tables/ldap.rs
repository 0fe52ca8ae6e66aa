//! LDAP lookup tables: a pool of multiplexed connections with failover,
//! timeouts, TLS (`ldaps://` or StartTLS, rustls, certificate checked
//! against the system roots or `tls_ca_file`), and a hit/miss cache (moka:
//! bounded by `cache_max_entries`, each answer kept for its own TTL, and
//! TinyLFU admission, so a flood of new addresses cannot flush the users
//! looked up often, audit §J4).
//!
//! A connection whose query failed or timed out is dropped from its pool
//! slot, so a hung connection is replaced on next use instead of costing
//! a timeout to every lookup that lands on it (SMTP audit §J1).
//!
//! Trust: the directory's answers are data, never code; the key is the
//! client's address and is escaped before it goes into a filter.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use moka::sync::Cache;

use ldap3::{Ldap, LdapConnAsync, LdapConnSettings, Scope, SearchEntry};

use super::{LookupError, TableError, Values};
use crate::config::tables::TableConfig;
use crate::log::Event;
use crate::log::Logger;
use crate::pki::TlsError;

/// Counters for the log and for tests.
#[derive(Debug, Default)]
pub struct LdapStats {
    pub queries: AtomicU64,
    pub cache_hits: AtomicU64,
    pub found: AtomicU64,
    pub not_found: AtomicU64,
    pub failures: AtomicU64,
    /// Lookups answered by another lookup's query (single flight).
    pub shared: AtomicU64,
}

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
    /// Failed twice (a fresh connection the second time).
    #[error("table {table}: {error}")]
    Table {
        table: String,
        error: Box<LdapError>,
    },
}

/// One query in flight for a key, and its answer once there.
type Flight = Arc<tokio::sync::OnceCell<Result<Option<Values>, LdapError>>>;

#[derive(Clone)]
struct CacheEntry {
    ttl: Duration,
    value: Option<Values>,
}

/// Each answer lives for its own TTL (hits and misses have their own).
struct ByTtl;

impl moka::Expiry<String, CacheEntry> for ByTtl {
    fn expire_after_create(&self, _: &String, entry: &CacheEntry, _: Instant) -> Option<Duration> {
        Some(entry.ttl)
    }
}

pub struct LdapTable {
    pub(super) name: String,
    config: TableConfig,
    pool: Vec<tokio::sync::Mutex<Option<Ldap>>>,
    tls: Arc<rustls::ClientConfig>,
    next: AtomicUsize,
    cache: Cache<String, CacheEntry>,
    inflight: Mutex<HashMap<String, Flight>>,
    pub stats: LdapStats,
    logger: Logger,
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
        let cache = Cache::builder()
            .max_capacity(config.cache_max_entries as u64)
            .expire_after(ByTtl)
            .build();
        Ok(LdapTable {
            name: name.to_string(),
            config,
            pool,
            tls,
            next: AtomicUsize::new(0),
            cache,
            inflight: Mutex::new(HashMap::new()),
            stats: LdapStats::default(),
            logger,
        })
    }

    pub fn clear_cache(&self) {
        self.cache.invalidate_all();
    }

    /// Looks `key` up: from the cache, or by a query that concurrent
    /// lookups of the same key share (single flight: a burst of mail for
    /// one new address costs one query, not one per session).
    pub async fn lookup(&self, key: &str) -> Result<Option<Values>, LookupError> {
        let key = key.to_ascii_lowercase();
        if let Some(hit) = self.cached(&key) {
            self.stats.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(hit);
        }
        let flight = self
            .inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.clone())
            .or_default()
            .clone();
        let mut asked = false;
        let answer = flight
            .get_or_init(|| {
                asked = true;
                self.query_and_cache(&key)
            })
            .await
            .clone();
        if !asked {
            self.stats.shared.fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            if inflight.get(&key).is_some_and(|f| Arc::ptr_eq(f, &flight)) {
                inflight.remove(&key);
            }
        }
        answer.map_err(|e| LookupError::Unavailable(e.to_string()))
    }

    /// The query behind a lookup (the cache is asked again first: a flight
    /// that just ended may have filled it), its answer cached.
    async fn query_and_cache(&self, key: &str) -> Result<Option<Values>, LdapError> {
        if let Some(hit) = self.cached(key) {
            self.stats.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(hit);
        }
        let key = key.to_string();
        // One retry on a fresh connection (which may fail over to another URI).
        let mut last_err = LdapError::Timeout("lookup");
        for attempt in 0..2 {
            match self.query(&key, attempt > 0).await {
                Ok(value) => {
                    let ttl = if value.is_some() {
                        self.stats.found.fetch_add(1, Ordering::Relaxed);
                        self.config.cache_hit_ttl_secs
                    } else {
                        self.stats.not_found.fetch_add(1, Ordering::Relaxed);
                        self.config.cache_miss_ttl_secs
                    };
                    self.store(&key, value.clone(), ttl);
                    return Ok(value);
                }
                Err(err) => last_err = err,
            }
        }
        self.stats.failures.fetch_add(1, Ordering::Relaxed);
        self.logger.emit(&Event::LookupFailed {
            table: self.name.as_str().into(),
            key: key.into(),
            error: last_err.to_string().into(),
        });
        Err(LdapError::Table {
            table: self.name.clone(),
            error: Box::new(last_err),
        })
    }

    fn cached(&self, key: &str) -> Option<Option<Values>> {
        self.cache.get(key).map(|e| e.value)
    }

    fn store(&self, key: &str, value: Option<Values>, ttl: u64) {
        if ttl == 0 {
            return;
        }
        let ttl = Duration::from_secs(ttl);
        self.cache
            .insert(key.to_string(), CacheEntry { ttl, value });
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
        self.stats.queries.fetch_add(1, Ordering::Relaxed);
        let filter = expand_filter(&self.config.filter, &key.to_ascii_lowercase());
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
        self.stats.queries.fetch_add(1, Ordering::Relaxed);
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
            return Ok(Some(Arc::new(vec![key.to_string()])));
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
        Ok(Some(Arc::new(values)))
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
