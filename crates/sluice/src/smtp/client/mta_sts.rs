//! MTA-STS (RFC 8461): a domain that publishes `_mta-sts.<domain>` TXT
//! and a policy at `https://mta-sts.<domain>/.well-known/mta-sts.txt`
//! asks senders to deliver only to MX hosts matching its `mx:` patterns,
//! over TLS with a certificate valid for the MX host's name (`enforce`),
//! or to report without refusing (`testing`).
//!
//! Policies are cached for their `max_age` and refetched when the TXT
//! record's `id` changes. A fetch that fails leaves the cached policy in
//! force (RFC 8461 §5.1); without one, the domain is treated as having no
//! policy. The fetch is a plain HTTP/1.0 GET over rustls (hand-written: a
//! full HTTP client would be the biggest dependency in the tree for one
//! request shape), at most 64 KiB, no redirects.
//!
//! Trust: TXT answers and policy bodies are the domain's, fetched over
//! verified TLS; parsing is strict. Invariant: the cache holds at most
//! `MAX_POLICIES` domains.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::routing::dns::Dns;

/// Longest policy body read.
const MAX_BODY: usize = 64 << 10;
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
pub fn parse_policy(body: &str) -> Result<Policy, String> {
    let (mut version, mut mode, mut max_age, mut mx) = (None, None, None, Vec::new());
    for line in body.lines() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let (key, value) = line
            .split_once(':')
            .ok_or_else(|| format!("bad policy line {line:?}"))?;
        let value = value.trim();
        match key.trim() {
            "version" => version = Some(value.to_string()),
            "mode" => {
                mode = Some(match value {
                    "enforce" => Mode::Enforce,
                    "testing" => Mode::Testing,
                    "none" => Mode::None,
                    other => return Err(format!("bad mode {other:?}")),
                })
            }
            "max_age" => {
                let secs: u64 = value
                    .parse()
                    .map_err(|_| format!("bad max_age {value:?}"))?;
                max_age = Some(secs.min(MAX_AGE));
            }
            "mx" => mx.push(value.trim_end_matches('.').to_ascii_lowercase()),
            _ => {} // extensions are ignored
        }
    }
    if version.as_deref() != Some("STSv1") {
        return Err("not an STSv1 policy".into());
    }
    let mode = mode.ok_or("no mode")?;
    let max_age = max_age.ok_or("no max_age")?;
    if mode != Mode::None && mx.is_empty() {
        return Err("no mx pattern".into());
    }
    Ok(Policy { mode, mx, max_age })
}

struct Cached {
    id: String,
    policy: Arc<Policy>,
    until: Instant,
}

pub struct MtaSts {
    dns: Arc<Dns>,
    tls: TlsConnector,
    /// 443, or another port for tests.
    port: u16,
    timeout: Duration,
    cache: Mutex<HashMap<String, Cached>>,
}

impl MtaSts {
    pub fn new(dns: Arc<Dns>, tls: TlsConnector, port: u16, timeout: Duration) -> MtaSts {
        MtaSts {
            dns,
            tls,
            port,
            timeout,
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn cached(&self, domain: &str, id: Option<&str>) -> Option<Arc<Policy>> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let c = cache.get(domain)?;
        let fresh = Instant::now() < c.until;
        (fresh && id.is_none_or(|id| id == c.id)).then(|| c.policy.clone())
    }

    /// The domain's policy in force, if any.
    pub async fn policy(&self, domain: &str) -> Option<Arc<Policy>> {
        let domain = domain.trim_end_matches('.').to_ascii_lowercase();
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
                let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
                if cache.len() >= MAX_POLICIES {
                    cache.retain(|_, c| Instant::now() < c.until);
                }
                let until = Instant::now() + Duration::from_secs(policy.max_age);
                let entry = Cached {
                    id,
                    policy: policy.clone(),
                    until,
                };
                cache.insert(domain, entry);
                Some(policy)
            }
            Err(_) => self.cached(&domain, None),
        }
    }

    /// GET https://mta-sts.<domain>/.well-known/mta-sts.txt.
    async fn fetch(&self, domain: &str) -> Result<Policy, String> {
        let host = format!("mta-sts.{domain}");
        let addrs = self
            .dns
            .host_addresses(&host)
            .await
            .map_err(|e| e.to_string())?;
        let mut why = String::from("no address");
        for ip in addrs {
            let get = self.get(&host, std::net::SocketAddr::new(ip, self.port));
            match tokio::time::timeout(self.timeout, get).await {
                Ok(Ok(body)) => return parse_policy(&body),
                Ok(Err(e)) => why = e,
                Err(_) => why = "timed out".into(),
            }
        }
        Err(format!("{host}: {why}"))
    }

    async fn get(&self, host: &str, addr: std::net::SocketAddr) -> Result<String, String> {
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let name = ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
        let mut tls = self
            .tls
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        let request = format!(
            "GET /.well-known/mta-sts.txt HTTP/1.0\r\nHost: {host}\r\nUser-Agent: sluice\r\nConnection: close\r\n\r\n"
        );
        tls.write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut response = Vec::new();
        (&mut tls)
            .take(MAX_BODY as u64 + 4096)
            .read_to_end(&mut response)
            .await
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&response);
        let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP header end")?;
        let status = head.lines().next().unwrap_or("");
        if status.split_whitespace().nth(1) != Some("200") {
            return Err(format!("HTTP status {status:?}"));
        }
        Ok(body.to_string())
    }
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
