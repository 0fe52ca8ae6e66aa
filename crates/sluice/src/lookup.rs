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

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use ldap3::{Ldap, LdapConnAsync, LdapConnSettings, Scope, SearchEntry};
use serde::Deserialize;

use crate::log;
use crate::log::Logger;

/// Values found for a key.
pub type Values = Arc<Vec<String>>;

#[derive(Debug, Clone, thiserror::Error)]
pub enum LookupError {
    #[error("{0}")]
    Unavailable(String),
}

/// One table's settings (`[tables.NAME]` in the config).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableConfig {
    /// `static` or `ldap`.
    pub kind: String,
    /// static: the file (`key value[, value…]` per line, `#` comments).
    pub path: Option<PathBuf>,
    /// ldap: server URIs, tried in order (failover).
    #[serde(default)]
    pub uris: Vec<String>,
    #[serde(default)]
    pub bind_dn: String,
    #[serde(default)]
    pub bind_password: String,
    #[serde(default)]
    pub base: String,
    /// `%s` = whole address, `%u` = local part, `%d` = domain (all escaped).
    #[serde(default = "default_filter")]
    pub filter: String,
    /// Attributes whose values are the result; empty = the key itself.
    #[serde(default)]
    pub attributes: Vec<String>,
    #[serde(default = "default_pool")]
    pub pool_size: usize,
    #[serde(default = "default_timeout_ms")]
    pub connect_timeout_ms: u64,
    #[serde(default = "default_timeout_ms")]
    pub query_timeout_ms: u64,
    #[serde(default = "default_hit_ttl")]
    pub cache_hit_ttl_secs: u64,
    #[serde(default = "default_miss_ttl")]
    pub cache_miss_ttl_secs: u64,
    #[serde(default = "default_cache_entries")]
    pub cache_max_entries: usize,
}

fn default_filter() -> String {
    "(mail=%s)".into()
}
fn default_pool() -> usize {
    4
}
fn default_timeout_ms() -> u64 {
    3000
}
fn default_hit_ttl() -> u64 {
    300
}
fn default_miss_ttl() -> u64 {
    60
}
fn default_cache_entries() -> usize {
    200_000
}

/// A lookup table of either kind.
pub enum Table {
    Static(StaticTable),
    Ldap(Box<LdapTable>),
}

impl Table {
    pub fn build(name: &str, config: &TableConfig, logger: &Logger) -> Result<Table, String> {
        match config.kind.as_str() {
            "static" => {
                let path = config
                    .path
                    .clone()
                    .ok_or_else(|| format!("tables.{name}: a static table needs `path`"))?;
                Ok(Table::Static(StaticTable::load(
                    name,
                    &path,
                    logger.clone(),
                )?))
            }
            "ldap" => {
                if config.uris.is_empty() {
                    return Err(format!("tables.{name}: an ldap table needs `uris`"));
                }
                let table = LdapTable::new(name, config.clone(), logger.clone());
                Ok(Table::Ldap(Box::new(table)))
            }
            other => Err(format!(
                "tables.{name}: unknown kind {other:?} (want \"static\" or \"ldap\")"
            )),
        }
    }

    pub async fn lookup(&self, key: &str) -> Result<Option<Values>, LookupError> {
        match self {
            Table::Static(t) => Ok(t.lookup(key)),
            Table::Ldap(t) => t.lookup(key).await,
        }
    }

    /// A lookup that needs no I/O: static tables only (None for LDAP).
    pub fn lookup_now(&self, key: &str) -> Option<Option<Values>> {
        match self {
            Table::Static(t) => Some(t.lookup(key)),
            Table::Ldap(_) => None,
        }
    }

    pub fn is_static(&self) -> bool {
        matches!(self, Table::Static(_))
    }

    /// A log line with an LDAP table's counters.
    pub fn stats_line(&self) -> Option<String> {
        let Table::Ldap(t) = self else { return None };
        let s = &t.stats;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Some(format!(
            "table {}: queries={} cache_hits={} found={} not_found={} failures={}",
            t.name,
            n(&s.queries),
            n(&s.cache_hits),
            n(&s.found),
            n(&s.not_found),
            n(&s.failures)
        ))
    }

    /// Re-reads a static table's file (SIGHUP); LDAP tables drop their cache.
    pub fn reload(&self) {
        match self {
            Table::Static(t) => t.reload(),
            Table::Ldap(t) => t.clear_cache(),
        }
    }
}

/// A text file loaded into memory; reloaded when its modification time
/// changes (checked at most once a second) or on SIGHUP. A file with a bad
/// line is refused with the line number and the old contents stay in force.
pub struct StaticTable {
    name: String,
    path: PathBuf,
    map: RwLock<Arc<HashMap<String, Values>>>,
    mtime: Mutex<(Option<SystemTime>, Instant)>,
    logger: Logger,
}

impl StaticTable {
    pub fn load(name: &str, path: &Path, logger: Logger) -> Result<StaticTable, String> {
        let (map, mtime) = read_static(path)?;
        Ok(StaticTable {
            name: name.to_string(),
            path: path.to_path_buf(),
            map: RwLock::new(Arc::new(map)),
            mtime: Mutex::new((mtime, Instant::now())),
            logger,
        })
    }

    pub fn lookup(&self, key: &str) -> Option<Values> {
        self.reload_if_changed();
        let map = self.map.read().unwrap_or_else(|p| p.into_inner()).clone();
        map.get(&key.to_ascii_lowercase()).cloned()
    }

    fn reload_if_changed(&self) {
        let mut state = self.mtime.lock().unwrap_or_else(|p| p.into_inner());
        if state.1.elapsed() < Duration::from_secs(1) {
            return;
        }
        state.1 = Instant::now();
        let now = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok();
        if now != state.0 {
            state.0 = now;
            drop(state);
            self.reload();
        }
    }

    pub fn reload(&self) {
        match read_static(&self.path) {
            Ok((map, _)) => {
                let n = map.len();
                *self.map.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(map);
                log!(
                    self.logger,
                    "lookup",
                    "table {}: reloaded {} ({n} keys)",
                    self.name,
                    self.path.display()
                );
            }
            Err(err) => {
                log!(
                    self.logger,
                    "lookup",
                    "table {}: reload refused, old contents kept: {err}",
                    self.name
                );
            }
        }
    }
}

/// Parses a static table: `key value[, value…]`, `#` comments, blank lines.
pub fn parse_static(text: &str, origin: &str) -> Result<HashMap<String, Values>, String> {
    let mut map = HashMap::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut parts = line.splitn(2, char::is_whitespace);
        let key = parts.next().unwrap_or("").to_ascii_lowercase();
        let values: Vec<String> = parts
            .next()
            .unwrap_or("")
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .collect();
        if values.is_empty() {
            return Err(format!(
                "{origin}: line {}: key {key:?} has no value",
                n + 1
            ));
        }
        map.insert(key, Arc::new(values));
    }
    Ok(map)
}

fn read_static(path: &Path) -> Result<(HashMap<String, Values>, Option<SystemTime>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    Ok((parse_static(&text, &path.display().to_string())?, mtime))
}

/// Counters for the log and for tests.
#[derive(Debug, Default)]
pub struct LdapStats {
    pub queries: AtomicU64,
    pub cache_hits: AtomicU64,
    pub found: AtomicU64,
    pub not_found: AtomicU64,
    pub failures: AtomicU64,
}

struct CacheEntry {
    expires: Instant,
    value: Option<Values>,
}

pub struct LdapTable {
    name: String,
    config: TableConfig,
    pool: Vec<tokio::sync::Mutex<Option<Ldap>>>,
    next: AtomicUsize,
    cache: Mutex<HashMap<String, CacheEntry>>,
    pub stats: LdapStats,
    logger: Logger,
}

impl LdapTable {
    pub fn new(name: &str, config: TableConfig, logger: Logger) -> LdapTable {
        let pool = (0..config.pool_size.max(1))
            .map(|_| tokio::sync::Mutex::new(None))
            .collect();
        LdapTable {
            name: name.to_string(),
            config,
            pool,
            next: AtomicUsize::new(0),
            cache: Mutex::new(HashMap::new()),
            stats: LdapStats::default(),
            logger,
        }
    }

    pub fn clear_cache(&self) {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    pub async fn lookup(&self, key: &str) -> Result<Option<Values>, LookupError> {
        let key = key.to_ascii_lowercase();
        if let Some(hit) = self.cached(&key) {
            self.stats.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(hit);
        }
        // One retry on a fresh connection (which may fail over to another URI).
        let mut last_err = String::new();
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
        log!(
            self.logger,
            "lookup",
            "table {}: lookup of {key} failed: {last_err}",
            self.name
        );
        Err(LookupError::Unavailable(format!(
            "table {}: {last_err}",
            self.name
        )))
    }

    fn cached(&self, key: &str) -> Option<Option<Values>> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .get(key)
            .filter(|e| e.expires > Instant::now())
            .map(|e| e.value.clone())
    }

    fn store(&self, key: &str, value: Option<Values>, ttl: u64) {
        if ttl == 0 {
            return;
        }
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= self.config.cache_max_entries {
            let now = Instant::now();
            cache.retain(|_, e| e.expires > now);
            if cache.len() >= self.config.cache_max_entries {
                cache.clear();
            }
        }
        cache.insert(
            key.to_string(),
            CacheEntry {
                expires: Instant::now() + Duration::from_secs(ttl),
                value,
            },
        );
    }

    /// A connection handle from the pool, connecting (with failover) if needed.
    async fn handle(&self, fresh: bool) -> Result<Ldap, String> {
        let slot = &self.pool[self.next.fetch_add(1, Ordering::Relaxed) % self.pool.len()];
        let mut guard = slot.lock().await;
        if let Some(ldap) = guard.as_mut() {
            if !fresh && !ldap.is_closed() {
                return Ok(ldap.clone());
            }
        }
        *guard = None;
        let ldap = self.connect().await?;
        *guard = Some(ldap.clone());
        Ok(ldap)
    }

    async fn connect(&self) -> Result<Ldap, String> {
        let timeout = Duration::from_millis(self.config.connect_timeout_ms.max(1));
        let mut errors = Vec::new();
        for uri in &self.config.uris {
            let settings = LdapConnSettings::new().set_conn_timeout(timeout);
            let attempt = async {
                let (conn, mut ldap) = LdapConnAsync::with_settings(settings, uri)
                    .await
                    .map_err(|e| e.to_string())?;
                ldap3::drive!(conn);
                if !self.config.bind_dn.is_empty() {
                    ldap.with_timeout(timeout)
                        .simple_bind(&self.config.bind_dn, &self.config.bind_password)
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
        Err(errors.join("; "))
    }

    async fn query(&self, key: &str, fresh: bool) -> Result<Option<Values>, String> {
        let mut ldap = self.handle(fresh).await?;
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
        .map_err(|_| "query timed out".to_string())?
        .and_then(|r| r.success())
        .map_err(|e| e.to_string())?;
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

/// Fills `%s`, `%u`, `%d` in an LDAP filter with the escaped key parts.
pub fn expand_filter(template: &str, key: &str) -> String {
    let (local, domain) = key.rsplit_once('@').unwrap_or((key, ""));
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
    fn static_table_parses_and_reports_bad_lines() {
        let map = parse_static(
            "# users\nA@X.test  /m/a\nlist@x.test a@x.test, b@x.test c@x.test\n\n",
            "t",
        )
        .unwrap();
        assert_eq!(map["a@x.test"].as_slice(), ["/m/a"]);
        assert_eq!(map["list@x.test"].len(), 3);
        let err = parse_static("ok v\nlonely\n", "file.txt").unwrap_err();
        assert_eq!(err, "file.txt: line 2: key \"lonely\" has no value");
    }

    #[test]
    fn static_table_reloads_and_keeps_old_contents_on_error() {
        let dir = std::env::temp_dir().join(format!("sluice-static-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t");
        std::fs::write(&path, "a@x v1\n").unwrap();
        let t = StaticTable::load("t", &path, Logger::disabled()).unwrap();
        assert_eq!(t.lookup("A@x").unwrap().as_slice(), ["v1"]);
        std::fs::write(&path, "a@x v2\n").unwrap();
        t.reload();
        assert_eq!(t.lookup("a@x").unwrap().as_slice(), ["v2"]);
        std::fs::write(&path, "a@x v3\nbroken\n").unwrap();
        t.reload();
        assert_eq!(
            t.lookup("a@x").unwrap().as_slice(),
            ["v2"],
            "bad file refused"
        );
        assert!(t.lookup("b@x").is_none());
    }

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
