//! The cache and the limits in front of every table that asks a server
//! (LDAP, SQL, socketmap, tcp).
//!
//! - A hit/miss cache (moka): bounded by entries, each answer kept for its
//!   own TTL (hits and misses have their own), TinyLFU admission so a
//!   flood of new keys cannot flush the keys looked up often (audit §J4).
//!   A TTL of 0 caches nothing of that kind.
//! - Single flight: concurrent lookups of one key share one query, so a
//!   burst of mail for a new address costs one query, not one per session.
//! - A bound on queries in flight per table: a lookup that cannot get a
//!   slot within the table's wait gives "try again", so a slow server
//!   costs its own lookups a timeout and never holds a growing crowd of
//!   sessions (the others' tables are not touched).
//! - A failure is logged once per query with the table's name
//!   ([`Event::LookupFailed`]) and becomes [`LookupError::Unavailable`]:
//!   never cached, never "not found".
//!
//! Trust: keys are the client's (used only as cache keys here); answers
//! are the server's data.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use moka::sync::Cache;

use super::{LookupError, Values};
use crate::log::{Event, Logger};
use crate::tables::config::TableConfig;

/// Counters for /metrics, the log and tests.
#[derive(Debug, Default)]
pub struct TableStats {
    pub queries: AtomicU64,
    pub cache_hits: AtomicU64,
    pub found: AtomicU64,
    pub not_found: AtomicU64,
    pub failures: AtomicU64,
    /// Lookups answered by another lookup's query (single flight).
    pub shared: AtomicU64,
}

/// How a server-backed table caches and limits its queries.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub hit_ttl: Duration,
    pub miss_ttl: Duration,
    pub max_entries: u64,
    /// Queries in flight at once.
    pub max_in_flight: usize,
    /// How long a lookup waits for a slot before it gives "try again".
    pub wait: Duration,
}

impl Limits {
    /// The cache and limits a table's settings ask for.
    pub fn of(config: &TableConfig) -> Limits {
        Limits {
            hit_ttl: Duration::from_secs(config.cache_hit_ttl_secs),
            miss_ttl: Duration::from_secs(config.cache_miss_ttl_secs),
            max_entries: config.cache_max_entries as u64,
            max_in_flight: config.max_in_flight,
            wait: Duration::from_millis(config.query_timeout_ms.max(1)),
        }
    }
}

/// One query in flight for a key, and its answer once there.
type Flight = Arc<tokio::sync::OnceCell<Result<Option<Values>, LookupError>>>;

#[derive(Clone)]
struct Entry {
    ttl: Duration,
    value: Option<Values>,
}

/// Each answer lives for its own TTL.
struct ByTtl;

impl moka::Expiry<String, Entry> for ByTtl {
    fn expire_after_create(&self, _: &String, entry: &Entry, _: Instant) -> Option<Duration> {
        Some(entry.ttl)
    }
}

/// The cache, single flight and limit of one table.
pub struct Cached {
    name: String,
    limits: Limits,
    cache: Cache<String, Entry>,
    inflight: Mutex<HashMap<String, Flight>>,
    slots: tokio::sync::Semaphore,
    pub stats: TableStats,
    logger: Logger,
}

impl Cached {
    pub fn new(name: &str, limits: Limits, logger: Logger) -> Cached {
        Cached {
            name: name.to_string(),
            limits,
            cache: Cache::builder()
                .max_capacity(limits.max_entries)
                .expire_after(ByTtl)
                .build(),
            inflight: Mutex::new(HashMap::new()),
            slots: tokio::sync::Semaphore::new(limits.max_in_flight.max(1)),
            stats: TableStats::default(),
            logger,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn clear(&self) {
        self.cache.invalidate_all();
    }

    /// The answer for `key`: from the cache, or from `query` (shared with
    /// concurrent lookups of the same key). `query` gives the server's
    /// answer or why it could not.
    pub async fn get<Q>(&self, key: &str, query: Q) -> Result<Option<Values>, LookupError>
    where
        Q: AsyncFnOnce(&str) -> Result<Option<Values>, String>,
    {
        if let Some(hit) = self.cached(key) {
            self.stats.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(hit);
        }
        let flight = self
            .inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.to_string())
            .or_default()
            .clone();
        let mut asked = false;
        let answer = flight
            .get_or_init(|| {
                asked = true;
                self.query_and_cache(key, query)
            })
            .await
            .clone();
        if !asked {
            self.stats.shared.fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            if inflight.get(key).is_some_and(|f| Arc::ptr_eq(f, &flight)) {
                inflight.remove(key);
            }
        }
        answer
    }

    /// The query behind a lookup (the cache is asked again first: a
    /// flight that just ended may have filled it), its answer cached.
    async fn query_and_cache<Q>(&self, key: &str, query: Q) -> Result<Option<Values>, LookupError>
    where
        Q: AsyncFnOnce(&str) -> Result<Option<Values>, String>,
    {
        if let Some(hit) = self.cached(key) {
            self.stats.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(hit);
        }
        let answer = match tokio::time::timeout(self.limits.wait, self.slots.acquire()).await {
            Ok(Ok(_slot)) => {
                self.stats.queries.fetch_add(1, Ordering::Relaxed);
                query(key).await
            }
            _ => Err(format!(
                "{} queries already in flight for {:?}",
                self.limits.max_in_flight, self.limits.wait
            )),
        };
        match answer {
            Ok(value) => {
                let ttl = if value.is_some() {
                    self.stats.found.fetch_add(1, Ordering::Relaxed);
                    self.limits.hit_ttl
                } else {
                    self.stats.not_found.fetch_add(1, Ordering::Relaxed);
                    self.limits.miss_ttl
                };
                if !ttl.is_zero() {
                    let entry = Entry {
                        ttl,
                        value: value.clone(),
                    };
                    self.cache.insert(key.to_string(), entry);
                }
                Ok(value)
            }
            Err(error) => {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                self.logger.emit(&Event::LookupFailed {
                    table: self.name.as_str().into(),
                    key: key.into(),
                    error: error.as_str().into(),
                });
                Err(LookupError::Unavailable(format!(
                    "table {}: {error}",
                    self.name
                )))
            }
        }
    }

    fn cached(&self, key: &str) -> Option<Option<Values>> {
        self.cache.get(key).map(|e| e.value)
    }

    /// The counters as (name, value) pairs, for /metrics.
    pub fn counters(&self) -> [(&'static str, u64); 6] {
        let s = &self.stats;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        [
            ("queries", n(&s.queries)),
            ("cache_hits", n(&s.cache_hits)),
            ("found", n(&s.found)),
            ("not_found", n(&s.not_found)),
            ("failures", n(&s.failures)),
            ("shared", n(&s.shared)),
        ]
    }

    /// The counters as a log line.
    pub fn stats_line(&self) -> String {
        let c = self.counters();
        format!(
            "table {}: queries={} cache_hits={} shared={} found={} not_found={} failures={}",
            self.name, c[0].1, c[1].1, c[5].1, c[2].1, c[3].1, c[4].1
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::Answer;

    fn limits(max_in_flight: usize) -> Limits {
        Limits {
            hit_ttl: Duration::from_secs(60),
            miss_ttl: Duration::from_secs(0),
            max_entries: 100,
            max_in_flight,
            wait: Duration::from_secs(3),
        }
    }

    fn found(v: &str) -> Result<Option<Values>, String> {
        Ok(Some(Arc::new(Answer::text(v))))
    }

    #[tokio::test]
    async fn hits_are_cached_misses_with_ttl_0_and_failures_never() {
        let c = Cached::new("t", limits(4), Logger::disabled());
        assert_eq!(
            c.get("k", async |_: &str| found("v"))
                .await
                .unwrap()
                .unwrap()
                .raw(),
            "v"
        );
        let again = c
            .get("k", async |_: &str| Err("not asked".to_string()))
            .await;
        assert_eq!(again.unwrap().unwrap().raw(), "v", "from the cache");
        assert!(c
            .get("gone", async |_: &str| Ok(None))
            .await
            .unwrap()
            .is_none());
        let failed = c.get("gone", async |_: &str| Err("down".to_string())).await;
        assert!(
            matches!(failed, Err(LookupError::Unavailable(ref e)) if e == "table t: down"),
            "a miss with TTL 0 is asked again: {failed:?}"
        );
        assert_eq!(
            c.get("gone", async |_: &str| found("back"))
                .await
                .unwrap()
                .unwrap()
                .raw(),
            "back",
            "a failure is not cached"
        );
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        assert_eq!(
            (
                n(&c.stats.queries),
                n(&c.stats.cache_hits),
                n(&c.stats.failures)
            ),
            (4, 1, 1)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_table_with_every_slot_busy_says_try_again_after_its_wait() {
        let c = Arc::new(Cached::new("slow", limits(1), Logger::disabled()));
        let (release, held) = tokio::sync::oneshot::channel::<()>();
        let busy = {
            let c = c.clone();
            tokio::spawn(async move {
                c.get("a", async |_: &str| {
                    let _ = held.await;
                    found("late")
                })
                .await
            })
        };
        tokio::task::yield_now().await;
        let other = c.get("b", async |_: &str| found("never")).await;
        assert!(
            matches!(other, Err(LookupError::Unavailable(ref e)) if e.contains("1 queries already in flight")),
            "{other:?}"
        );
        release.send(()).unwrap();
        assert_eq!(busy.await.unwrap().unwrap().unwrap().raw(), "late");
        assert_eq!(
            c.get("b", async |_: &str| found("now"))
                .await
                .unwrap()
                .unwrap()
                .raw(),
            "now",
            "the slot is free again"
        );
    }
}
