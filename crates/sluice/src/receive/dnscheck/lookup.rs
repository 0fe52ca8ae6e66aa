//! The DNS facts the checks judge by, asked once and kept a little while:
//! one query (a name's PTR, A, AAAA, MX or TXT records) becomes a small
//! typed [`Fact`], kept in a bounded cache (moka) keyed by the query, and
//! queries for the same name that arrive while it is being asked wait for
//! that one answer. A flood of sessions naming one domain, or from one
//! address, costs one lookup per query for as long as the fact is kept.
//!
//! Trust: answers are the data of whoever runs the name's servers (an
//! attacker, for their own domains). Invariants: every query ends within
//! [`Limits::timeout`] (a timeout is [`Fact::Failed`], temporary); a fact
//! holds at most [`MAX_RECORDS`] records and [`TXT_LIMIT`] bytes of text
//! however large the answer; the cache holds at most [`Limits::cache_bytes`]
//! (by each fact's weight); failures are kept only [`FAILED_SECS`] seconds.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_resolver::proto::rr::{RData, RecordType};
use tokio::sync::OnceCell;

use crate::routing::dns::{Answer, Dns};

/// Records kept per fact (the checks need one that matches).
pub const MAX_RECORDS: usize = 32;
/// Bytes of TXT text kept per fact (Postfix keeps 500 of a DNS list's).
pub const TXT_LIMIT: usize = 500;
/// Seconds a failure is kept (a flood of one failing name still costs
/// one lookup per this long; a failure soon forgotten).
pub const FAILED_SECS: u64 = 5;

/// How long to wait and how much to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest one query may take (hickory's own timeout and attempts
    /// apply within it).
    pub timeout: Duration,
    /// How long an answer is kept.
    pub cache_ttl: Duration,
    /// The cache's size bound, by the facts' weights (about their bytes).
    pub cache_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(10),
            cache_ttl: Duration::from_secs(60),
            cache_bytes: 16 << 20,
        }
    }
}

/// One query: the name is ASCII, absolute, without the final dot.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Query {
    Ptr(IpAddr),
    A(String),
    Aaaa(String),
    Mx(String),
    Txt(String),
}

/// What one query found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fact {
    /// PTR: the first name (as `dn_expand` would print it, no final dot).
    Ptr(String),
    V4(Vec<Ipv4Addr>),
    V6(Vec<Ipv6Addr>),
    /// MX targets ("" for the root, a null MX).
    Mx(Vec<String>),
    /// Each TXT record's first string, as bytes.
    Txt(Vec<Vec<u8>>),
    NoData,
    NxDomain,
    Failed(String),
}

impl Fact {
    /// Neither found nor a definite "none".
    pub fn failed(&self) -> bool {
        matches!(self, Fact::Failed(_))
    }

    /// A definite "none" (NXDOMAIN or no data).
    pub fn none(&self) -> bool {
        matches!(self, Fact::NoData | Fact::NxDomain)
    }

    /// About the bytes it holds (the cache's weigher).
    fn weight(&self) -> u32 {
        let inner: usize = match self {
            Fact::Ptr(n) => n.len(),
            Fact::V4(a) => a.len() * 4,
            Fact::V6(a) => a.len() * 16,
            Fact::Mx(m) => m.iter().map(|n| n.len() + 24).sum(),
            Fact::Txt(t) => t.iter().map(|s| s.len() + 24).sum(),
            Fact::Failed(why) => why.len(),
            Fact::NoData | Fact::NxDomain => 0,
        };
        (inner + 64).min(u32::MAX as usize) as u32
    }
}

/// Failures expire sooner than answers.
struct Expiry {
    ttl: Duration,
}

impl moka::Expiry<Query, Arc<Fact>> for Expiry {
    fn expire_after_create(&self, _: &Query, fact: &Arc<Fact>, _: Instant) -> Option<Duration> {
        Some(match fact.failed() {
            true => self.ttl.min(Duration::from_secs(FAILED_SECS)),
            false => self.ttl,
        })
    }
}

type Pending = Arc<OnceCell<Arc<Fact>>>;

/// The resolver, the facts kept, and the queries being asked.
pub struct Lookups {
    dns: Arc<Dns>,
    timeout: Duration,
    cache: moka::sync::Cache<Query, Arc<Fact>>,
    pending: Mutex<HashMap<Query, Pending>>,
}

impl Lookups {
    pub fn new(dns: Arc<Dns>, limits: Limits) -> Lookups {
        let cache = moka::sync::Cache::builder()
            .max_capacity(limits.cache_bytes)
            .weigher(|q: &Query, f: &Arc<Fact>| f.weight().saturating_add(query_weight(q)))
            .expire_after(Expiry {
                ttl: limits.cache_ttl,
            })
            .build();
        Lookups {
            dns,
            timeout: limits.timeout,
            cache,
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// The fact for `query`: kept, being asked (then waited for), or
    /// asked now.
    pub async fn fact(&self, query: Query) -> Arc<Fact> {
        if let Some(fact) = self.cache.get(&query) {
            return fact;
        }
        let cell = {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            pending.entry(query.clone()).or_default().clone()
        };
        // Whoever started the query, this one forgets it when done (or
        // dropped): the pending map holds only queries being asked.
        let _forget = Forget {
            lookups: self,
            query: &query,
            cell: &cell,
        };
        let mut asked = false;
        let fact = cell
            .get_or_init(|| async {
                asked = true;
                Arc::new(self.ask(&query).await)
            })
            .await
            .clone();
        if asked {
            self.cache.insert(query.clone(), fact.clone());
        }
        fact
    }

    /// Queries being asked now (none once every asker is done).
    pub fn pending(&self) -> usize {
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// One query to the resolver, within the timeout.
    async fn ask(&self, query: &Query) -> Fact {
        let (name, rtype) = match query {
            Query::Ptr(ip) => (reverse_name(*ip), RecordType::PTR),
            Query::A(n) => (n.clone(), RecordType::A),
            Query::Aaaa(n) => (n.clone(), RecordType::AAAA),
            Query::Mx(n) => (n.clone(), RecordType::MX),
            Query::Txt(n) => (n.clone(), RecordType::TXT),
        };
        match tokio::time::timeout(self.timeout, self.dns.answer(&name, rtype)).await {
            Ok(Answer::Records(records)) => fact_of(rtype, &records),
            Ok(Answer::NoData) => Fact::NoData,
            Ok(Answer::NxDomain) => Fact::NxDomain,
            Ok(Answer::Failed(why)) => Fact::Failed(why),
            Err(_) => Fact::Failed(format!("no answer within {:?}", self.timeout)),
        }
    }
}

/// Drops a query's pending entry (if it is still this one's) when the
/// asker is done or gone.
struct Forget<'a> {
    lookups: &'a Lookups,
    query: &'a Query,
    cell: &'a Pending,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        let mut pending = self
            .lookups
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if pending
            .get(self.query)
            .is_some_and(|c| Arc::ptr_eq(c, self.cell))
        {
            pending.remove(self.query);
        }
    }
}

/// The cache's weight of a key.
fn query_weight(q: &Query) -> u32 {
    match q {
        Query::Ptr(_) => 16,
        Query::A(n) | Query::Aaaa(n) | Query::Mx(n) | Query::Txt(n) => n.len() as u32,
    }
}

/// `d.c.b.a.in-addr.arpa` / the 32 nibbles `.ip6.arpa`.
pub fn reverse_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(_) => crate::receive::dnsbl::query_name(ip, "in-addr.arpa"),
        IpAddr::V6(_) => crate::receive::dnsbl::query_name(ip, "ip6.arpa"),
    }
}

/// The records of one answer as a fact, bounded.
fn fact_of(rtype: RecordType, records: &[RData]) -> Fact {
    let records = &records[..records.len().min(MAX_RECORDS)];
    let name = |n: &hickory_resolver::proto::rr::Name| {
        let ascii = n.to_ascii();
        ascii.strip_suffix('.').unwrap_or(&ascii).to_string()
    };
    match rtype {
        RecordType::PTR => match records.iter().find_map(|r| match r {
            RData::PTR(p) => Some(name(&p.0)),
            _ => None,
        }) {
            Some(n) => Fact::Ptr(n),
            None => Fact::NoData,
        },
        RecordType::A => Fact::V4(
            records
                .iter()
                .filter_map(|r| match r {
                    RData::A(a) => Some(a.0),
                    _ => None,
                })
                .collect(),
        ),
        RecordType::AAAA => Fact::V6(
            records
                .iter()
                .filter_map(|r| match r {
                    RData::AAAA(a) => Some(a.0),
                    _ => None,
                })
                .collect(),
        ),
        RecordType::MX => Fact::Mx(
            records
                .iter()
                .filter_map(|r| match r {
                    RData::MX(mx) => Some(name(&mx.exchange)),
                    _ => None,
                })
                .collect(),
        ),
        _ => Fact::Txt(txt_strings(records)),
    }
}

/// Each TXT record's first string (as Postfix reads a TXT record), while
/// the total stays within [`TXT_LIMIT`].
fn txt_strings(records: &[RData]) -> Vec<Vec<u8>> {
    let mut kept = Vec::new();
    let mut total = 0;
    for r in records {
        let RData::TXT(txt) = r else { continue };
        let first = txt.txt_data.first().map_or(&[][..], |s| &s[..]);
        let take = first.len().min(TXT_LIMIT - total);
        kept.push(first[..take].to_vec());
        total += take;
        if total >= TXT_LIMIT {
            break;
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reverse_names() {
        let v4: IpAddr = "198.51.100.7".parse().unwrap();
        assert_eq!(reverse_name(v4), "7.100.51.198.in-addr.arpa");
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        let want = "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa";
        assert_eq!(reverse_name(v6), want);
    }
}
