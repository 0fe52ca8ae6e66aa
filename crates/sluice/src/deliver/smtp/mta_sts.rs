//! MTA-STS (RFC 8461): a domain that publishes `_mta-sts.<domain>` TXT
//! and a policy at `https://mta-sts.<domain>/.well-known/mta-sts.txt`
//! asks senders to deliver only to MX hosts matching its `mx:` patterns,
//! over TLS with a certificate valid for the MX host's name (`enforce`),
//! or to report without refusing (`testing`).
//!
//! Policies are cached for their `max_age`, in memory and on disk
//! (`store.rs`, `<data_dir>/mta-sts/`, read back at start-up, so a restart
//! or reload keeps them in force), and refetched when the TXT record's
//! `id` changes. A fetch that fails leaves the cached policy in force
//! (RFC 8461 §5.1); without one, the domain is treated as having no
//! policy. The fetch is one GET with hyper's HTTP/1 client (already in the
//! tree for ACME) over our own rustls connection to an address our
//! resolver found, no redirects; a body over 64 KiB is a failed fetch,
//! never cut and used. Each failed fetch is logged.
//!
//! Trust: TXT answers and policy bodies are the domain's, fetched over
//! verified TLS; parsing is strict. Invariant: the cache holds at most
//! `MAX_POLICIES` domains (a full one drops expired policies, else the
//! one expiring first, from memory and disk).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::log::Logger;
use crate::routing::dns::{ascii_name, Dns, DnsError};

mod store;
use crate::log::Event;
use store::{Store, Stored};

/// Longest policy body accepted (RFC 8461 §3.3); a longer one is a failed
/// fetch.
const MAX_BODY: usize = 64 << 10;
/// Longest HTTP response head read (hyper's smallest buffer).
const MAX_HEAD: usize = 8 << 10;
/// Longest max_age honoured (RFC 8461 §3.2: one year).
const MAX_AGE: u64 = 31_557_600;
/// Domains whose policies are cached at most.
const MAX_POLICIES: usize = 50_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Enforce,
    Testing,
    None,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub mode: Mode,
    /// `mx:` patterns: a host name, or `*.` and a domain (one label).
    pub mx: Vec<String>,
    pub max_age: u64,
}

impl Policy {
    /// Whether MX host `host` matches one of the patterns (RFC 8461 §4.1).
    pub fn allows(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.mx.iter().any(|p| match p.strip_prefix("*.") {
            Some(suffix) => host
                .split_once('.')
                .is_some_and(|(label, rest)| !label.is_empty() && rest == suffix),
            None => *p == host,
        })
    }
}

/// Parses a policy body (RFC 8461 §3.2).
pub fn parse_policy(body: &str) -> Result<Policy, PolicyError> {
    let (mut version, mut mode, mut max_age, mut mx) = (None, None, None, Vec::new());
    for line in body.lines() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let (key, value) = line
            .split_once(':')
            .ok_or_else(|| PolicyError::Line(line.to_string()))?;
        let value = value.trim();
        match key.trim() {
            "version" => version = Some(value.to_string()),
            "mode" => {
                mode = Some(match value {
                    "enforce" => Mode::Enforce,
                    "testing" => Mode::Testing,
                    "none" => Mode::None,
                    other => return Err(PolicyError::Mode(other.to_string())),
                })
            }
            "max_age" => {
                let secs: u64 = value
                    .parse()
                    .map_err(|_| PolicyError::MaxAge(value.to_string()))?;
                max_age = Some(secs.min(MAX_AGE));
            }
            "mx" => mx.push(value.trim_end_matches('.').to_ascii_lowercase()),
            _ => {} // extensions are ignored
        }
    }
    if version.as_deref() != Some("STSv1") {
        return Err(PolicyError::Version);
    }
    let mode = mode.ok_or(PolicyError::Missing("mode"))?;
    let max_age = max_age.ok_or(PolicyError::Missing("max_age"))?;
    if mode != Mode::None && mx.is_empty() {
        return Err(PolicyError::Missing("mx pattern"));
    }
    Ok(Policy { mode, mx, max_age })
}

/// Why a policy could not be fetched (RFC 8461 §3.3: a failure to fetch,
/// which leaves a cached policy in force).
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{0}")]
    Dns(#[from] DnsError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("bad host name: {0}")]
    Name(#[from] rustls::pki_types::InvalidDnsNameError),
    #[error("timed out")]
    Timeout,
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    #[error("HTTP: {0}")]
    Request(String),
    #[error("HTTP status {0:?}")]
    Status(String),
    #[error("policy body over {MAX_BODY} bytes")]
    TooLarge,
    #[error("bad policy: {0}")]
    Policy(#[from] PolicyError),
}

impl FetchError {
    /// The kind of failure, as one word (the log's `cause` field).
    pub fn cause(&self) -> &'static str {
        match self {
            FetchError::Dns(_) => "dns",
            FetchError::Io(_) => "io",
            FetchError::Name(_) => "name",
            FetchError::Timeout => "timeout",
            FetchError::Http(_) | FetchError::Request(_) => "http",
            FetchError::Status(_) => "status",
            FetchError::TooLarge => "too_large",
            FetchError::Policy(_) => "policy",
        }
    }
}

/// What is wrong with a policy body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("bad policy line {0:?}")]
    Line(String),
    #[error("bad mode {0:?}")]
    Mode(String),
    #[error("bad max_age {0:?}")]
    MaxAge(String),
    #[error("not an STSv1 policy")]
    Version,
    #[error("no {0}")]
    Missing(&'static str),
}

/// A policy in force for a domain.
struct Cached {
    /// The TXT record id it was fetched for.
    id: String,
    policy: Arc<Policy>,
    /// Seconds since the Unix epoch.
    expires: u64,
}

pub struct MtaSts {
    dns: Arc<Dns>,
    tls: TlsConnector,
    /// 443, or another port for tests.
    port: u16,
    timeout: Duration,
    cache: Mutex<HashMap<String, Cached>>,
    /// The policies on disk (None: kept in memory only).
    store: Option<Arc<Store>>,
    logger: Logger,
}

impl MtaSts {
    /// Policies are kept in `store_dir` too (and read back from it) when
    /// it is given and usable; otherwise in memory only, which is logged.
    pub fn new(
        dns: Arc<Dns>,
        tls: TlsConnector,
        port: u16,
        timeout: Duration,
        store_dir: Option<&Path>,
        logger: Logger,
    ) -> MtaSts {
        let mut cache = HashMap::new();
        let store = store_dir.and_then(|dir| match Store::open(dir, now()) {
            Ok((store, found)) => {
                for (domain, s) in found {
                    let policy = Arc::new(s.policy);
                    let (id, expires) = (s.id, s.expires);
                    cache.insert(
                        domain,
                        Cached {
                            id,
                            policy,
                            expires,
                        },
                    );
                }
                Some(Arc::new(store))
            }
            Err(e) => {
                logger.emit(&Event::MtaStsMemoryOnly {
                    error: e.to_string().into(),
                });
                None
            }
        });
        MtaSts {
            dns,
            tls,
            port,
            timeout,
            cache: Mutex::new(cache),
            store,
            logger,
        }
    }

    fn cached(&self, domain: &str, id: Option<&str>) -> Option<Arc<Policy>> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let c = cache.get(domain)?;
        let fresh = now() < c.expires;
        (fresh && id.is_none_or(|id| id == c.id)).then(|| c.policy.clone())
    }

    /// The domain's policy in force, if any.
    pub async fn policy(&self, domain: &str) -> Option<Arc<Policy>> {
        let domain = domain.trim_end_matches('.').to_ascii_lowercase();
        let domain = ascii_name(&domain).unwrap_or(domain);
        let id = match self.dns.txt(&format!("_mta-sts.{domain}")).await {
            Ok(records) => records.iter().find_map(|r| record_id(r)),
            Err(_) => None,
        };
        let Some(id) = id else {
            // No record (or no answer): a cached policy stays in force.
            return self.cached(&domain, None);
        };
        if let Some(p) = self.cached(&domain, Some(&id)) {
            return Some(p);
        }
        match self.fetch(&domain).await {
            Ok(policy) => {
                let policy = Arc::new(policy);
                let expires = now().saturating_add(policy.max_age);
                let entry = Cached {
                    id,
                    policy: policy.clone(),
                    expires,
                };
                self.keep(domain, entry).await;
                Some(policy)
            }
            Err(e) => {
                let cached = self.cached(&domain, None);
                let _left = match cached {
                    Some(_) => "the cached policy stays in force",
                    None => "no policy in force",
                };
                self.logger.emit(&Event::MtaSts {
                    domain: domain.as_str().into(),
                    result: "fetch_failed".into(),
                    cause: e.cause().into(),
                    error: e.to_string().into(),
                    policy_in_force: cached.is_some(),
                });
                cached
            }
        }
    }

    /// Caches a policy just fetched, in memory and on disk (durably, off
    /// the async threads). A full cache first drops expired policies,
    /// then the one that expires first.
    async fn keep(&self, domain: String, entry: Cached) {
        let stored = Stored {
            id: entry.id.clone(),
            expires: entry.expires,
            policy: (*entry.policy).clone(),
        };
        let evicted = {
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            let mut evicted = Vec::new();
            if cache.len() >= MAX_POLICIES && !cache.contains_key(&domain) {
                let now = now();
                let expired = cache.iter().filter(|(_, c)| c.expires <= now);
                evicted.extend(expired.map(|(d, _)| d.clone()));
                if evicted.is_empty() {
                    let soonest = cache.iter().min_by_key(|(_, c)| c.expires);
                    evicted.extend(soonest.map(|(d, _)| d.clone()));
                }
                for d in &evicted {
                    cache.remove(d);
                }
            }
            cache.insert(domain.clone(), entry);
            evicted
        };
        let Some(store) = self.store.clone() else {
            return;
        };
        let saving = tokio::task::spawn_blocking(move || {
            for d in evicted {
                store.remove(&d);
            }
            store.save(&domain, &stored).map_err(|e| (domain, e))
        });
        if let Ok(Err((domain, e))) = saving.await {
            self.logger.emit(&Event::MtaStsNotSaved {
                domain: domain.into(),
                error: e.to_string().into(),
            });
        }
    }

    /// GET https://mta-sts.<domain>/.well-known/mta-sts.txt, from each
    /// address of the policy host in turn until one answers.
    async fn fetch(&self, domain: &str) -> Result<Policy, FetchError> {
        let host = format!("mta-sts.{domain}");
        let mut why = FetchError::Dns(DnsError::Temporary(host.clone(), "no address".into()));
        for ip in self.dns.host_addresses(&host).await? {
            let get = self.get(&host, std::net::SocketAddr::new(ip, self.port));
            match tokio::time::timeout(self.timeout, get).await {
                Ok(Ok(body)) => return parse_policy(&body).map_err(FetchError::Policy),
                Ok(Err(e)) => why = e,
                Err(_) => why = FetchError::Timeout,
            }
        }
        Err(why)
    }

    /// One GET with hyper's HTTP/1 client over our own verified TLS
    /// connection (to an address our resolver found): no redirects, a head
    /// over hyper's smallest buffer (8 KiB) is an error, and a body over
    /// [`MAX_BODY`] is an error, never cut and used.
    async fn get(&self, host: &str, addr: std::net::SocketAddr) -> Result<String, FetchError> {
        use http_body_util::{BodyExt, Empty, Limited};
        let tcp = TcpStream::connect(addr).await?;
        let name = ServerName::try_from(host.to_string())?;
        let tls = self.tls.connect(name, tcp).await?;
        let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
            .max_buf_size(MAX_HEAD)
            .handshake(hyper_util::rt::TokioIo::new(tls))
            .await?;
        // The connection is driven beside the request, and dropped with it.
        let conn = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
            let _ = conn.await;
        }));
        let request = hyper::Request::get("/.well-known/mta-sts.txt")
            .header(hyper::header::HOST, host)
            .header(hyper::header::USER_AGENT, "sluice")
            .body(Empty::<bytes::Bytes>::new())
            .map_err(|e| FetchError::Request(e.to_string()))?;
        let response = sender.send_request(request).await?;
        if response.status() != hyper::StatusCode::OK {
            return Err(FetchError::Status(response.status().to_string()));
        }
        let body = Limited::new(response.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(
                |e| match e.downcast_ref::<http_body_util::LengthLimitError>() {
                    Some(_) => FetchError::TooLarge,
                    None => FetchError::Request(e.to_string()),
                },
            )?
            .to_bytes();
        drop(conn);
        Ok(String::from_utf8_lossy(&body).into_owned())
    }
}

/// Seconds since the Unix epoch.
fn now() -> u64 {
    crate::timefmt::now_millis() / 1000
}

/// The `id` of a `v=STSv1` TXT record.
fn record_id(txt: &str) -> Option<String> {
    let mut fields = txt.split(';').map(str::trim);
    if fields.next()? != "v=STSv1" {
        return None;
    }
    fields
        .find_map(|f| f.strip_prefix("id="))
        .filter(|id| {
            !id.is_empty() && id.len() <= 32 && id.bytes().all(|b| b.is_ascii_alphanumeric())
        })
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_match() {
        let p = parse_policy(
            "version: STSv1\r\nmode: enforce\r\nmx: mail.example.com\r\nmx: *.example.net\r\nmax_age: 86400\r\n",
        )
        .unwrap();
        assert_eq!(p.mode, Mode::Enforce);
        assert_eq!(p.max_age, 86400);
        assert!(p.allows("mail.example.com."));
        assert!(p.allows("MX1.example.net"));
        assert!(!p.allows("a.b.example.net"), "one label only");
        assert!(!p.allows("example.net"));
        assert!(!p.allows("evil.example.com"));
        for bad in [
            "version: STSv2\nmode: enforce\nmx: a\nmax_age: 1\n",
            "version: STSv1\nmode: enforce\nmax_age: 1\n",
            "version: STSv1\nmode: strict\nmx: a\nmax_age: 1\n",
            "version: STSv1\nmode: enforce\nmx: a\n",
        ] {
            assert!(parse_policy(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            record_id("v=STSv1; id=20261122T1;").as_deref(),
            Some("20261122T1")
        );
        assert_eq!(record_id("v=spf1 -all"), None);
    }
}
