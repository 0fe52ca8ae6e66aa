//! The observability listener (`[metrics] listen`, off by default):
//! Prometheus text at `/metrics` (the `metrics` crates' recorder: every
//! histogram a Prometheus histogram, with the buckets below), the queue
//! at a glance as JSON at `/api/queue`, the last ten minutes' counts at
//! `/api/rates` (`rates.rs`), and a live dashboard at `/` (dashboard.html:
//! rates per minute, queue by destination, why mail waits, a chart; it
//! polls the three endpoints, no page reloads).
//!
//! The HTTP server is hand-written and tiny: GET only, one request per
//! connection, 8 KiB of request head, 10 s to send it — a full HTTP stack
//! would be the biggest dependency in the tree for three fixed pages.
//!
//! Trust: anyone who can reach the address sees queue statistics; bind it
//! to loopback (the examples do). Nothing here changes state. A web page
//! can reach a loopback address too, through the visitor's browser: one
//! whose DNS name its owner re-points at 127.0.0.1 (DNS rebinding) is, to
//! the browser, the same origin as our pages, and could read them. Its
//! requests carry its own name in `Host`, so only requests whose `Host`
//! names this server are answered: the connection's local address, as a
//! literal, `localhost` or the configured hostname, with the listener's
//! port (or none on port 80); others get 421, a missing or repeated
//! `Host` 400 (RFC 9112 §3.2). The check comes before anything else.
//!
//! Invariants: at most `max_connections` connections are served at once
//! (each holds a task and a descriptor for up to 10 s); past that, a
//! connection is answered 503 from the accept loop without a task and
//! closed, and the log says so once until a connection is served again.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use sluice_spool::Spool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::accept::AcceptErrors;
use crate::event;
use crate::log::Logger;
use crate::queue::admin::{AdminReply, AdminRequest, QueueStats};
use crate::queue::QueueHandle;
use crate::routing::mailboxes::VirtualMailboxes;

const DASHBOARD: &str = include_str!("dashboard.html");

/// The answer past the connection limit, written whole from the accept
/// loop (a fresh socket's send buffer always has room for it).
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 35\r\nRetry-After: 1\r\nConnection: close\r\n\r\ntoo many connections to the server\n";

/// Who may be served, and how many at once (`[metrics]` and `hostname`,
/// fixed at start like the listener).
pub struct Access {
    /// The configured hostname, a name this server answers to.
    pub hostname: String,
    pub max_connections: usize,
}

/// A request refused for its `Host` header.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
enum BadHost {
    #[error("no Host header")]
    Missing,
    #[error("more than one Host header")]
    Repeated,
    /// Its value (the first 100 characters).
    #[error("Host {0:?} is not this server")]
    Foreign(String),
}

impl BadHost {
    /// Status and body (not echoing the attacker's name back).
    fn reply(&self) -> (&'static str, String) {
        match self {
            BadHost::Missing | BadHost::Repeated => ("400 Bad Request", format!("{self}\n")),
            BadHost::Foreign(_) => (
                "421 Misdirected Request",
                "this server answers to its own address, localhost or its hostname in Host\n"
                    .into(),
            ),
        }
    }
}

/// The process's Prometheus recorder (one per process: the `metrics`
/// macros write to a global recorder). Installed under the lock, so that
/// of daemons starting at once none finds it installed by another.
pub fn recorder() -> Result<PrometheusHandle, MetricsError> {
    static HANDLE: OnceLock<Result<PrometheusHandle, MetricsError>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let installed = buckets(PrometheusBuilder::new()).and_then(|b| b.install_recorder());
            let handle = installed.map_err(|e| MetricsError::Recorder(Arc::new(e)))?;
            describe();
            Ok(handle)
        })
        .clone()
}

/// Spool commit latency (write and sync), in seconds: a sync on an SSD
/// takes 0.1–2 ms, on a disk or a busy array 5–50 ms; past a second the
/// spool is in trouble. Roughly ×2.5 per bucket from 0.25 ms to 10 s.
pub const COMMIT_SECONDS: [f64; 15] = [
    0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Messages stored per spool commit (group commit): one when idle, up to
/// hundreds under load (a batch is up to 32 MiB); powers of two.
pub const BATCH_MESSAGES: [f64; 12] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0,
];

/// Any other histogram: Prometheus's own default buckets (seconds).
const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Every histogram is exported as a Prometheus histogram (`_bucket{le}`
/// counts, which add up across nodes), never as a summary (quantiles,
/// which do not): the exporter makes summaries of histograms it has no
/// buckets for.
fn buckets(builder: PrometheusBuilder) -> Result<PrometheusBuilder, BuildError> {
    builder
        .set_buckets(&DEFAULT_BUCKETS)?
        .set_buckets_for_metric(
            Matcher::Full("sluice_spool_commit_seconds".into()),
            &COMMIT_SECONDS,
        )?
        .set_buckets_for_metric(
            Matcher::Full("sluice_spool_batch_messages".into()),
            &BATCH_MESSAGES,
        )
}

/// `# HELP` for the recorder's metrics (`# TYPE` it writes for all).
fn describe() {
    use metrics::{describe_counter, describe_histogram, Unit};
    describe_histogram!(
        "sluice_spool_commit_seconds",
        Unit::Seconds,
        "Spool commit latency: one batch written and synced."
    );
    describe_histogram!(
        "sluice_spool_batch_messages",
        Unit::Count,
        "Messages stored per spool commit."
    );
    for (name, help) in [
        (
            "sluice_messages_received_total",
            "Messages accepted (250 after DATA/BDAT).",
        ),
        (
            "sluice_messages_rejected_total",
            "Recipients or messages refused, by reason.",
        ),
        (
            "sluice_deliveries_total",
            "Delivery attempts per recipient, by transport and status.",
        ),
        (
            "sluice_sessions_total",
            "SMTP sessions, by whether TLS was used.",
        ),
        ("sluice_maildir_files_total", "Files written into Maildirs."),
        ("sluice_maildir_syncs_total", "Maildir directory syncs."),
        (
            "sluice_in_flow_delays_total",
            "Transactions paced while local delivery was behind.",
        ),
    ] {
        describe_counter!(name, help);
    }
}

/// Why the metrics listener could not start.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MetricsError {
    #[error("metrics: {0}")]
    Recorder(Arc<metrics_exporter_prometheus::BuildError>),
    #[error("metrics.listen {addr}: {err}")]
    Listen {
        addr: SocketAddr,
        err: Arc<std::io::Error>,
    },
}

struct Http {
    handle: PrometheusHandle,
    queue: QueueHandle,
    spool: Spool,
    mailboxes: Arc<ArcSwap<VirtualMailboxes>>,
    hostname: String,
    logger: Logger,
}

/// Serves the listener until the task is aborted.
pub async fn spawn(
    addr: SocketAddr,
    access: Access,
    queue: QueueHandle,
    spool: Spool,
    mailboxes: Arc<ArcSwap<VirtualMailboxes>>,
    logger: Logger,
) -> Result<(SocketAddr, JoinHandle<()>), MetricsError> {
    let handle = recorder()?;
    let failed = |err| MetricsError::Listen {
        addr,
        err: Arc::new(err),
    };
    let listener = TcpListener::bind(addr).await.map_err(failed)?;
    let bound = listener.local_addr().map_err(failed)?;
    let http = Arc::new(Http {
        handle,
        queue,
        spool,
        mailboxes,
        hostname: access.hostname,
        logger,
    });
    // (Past MAX_PERMITS, about 2^61, `new` would panic.)
    let slots = Semaphore::new(access.max_connections.min(Semaphore::MAX_PERMITS));
    let slots = Arc::new(slots);
    let task = tokio::spawn(async move {
        let mut refusing = false;
        let mut errors =
            AcceptErrors::new(http.logger.clone(), "metrics", format!("http://{bound}/"));
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => {
                    errors.accepted();
                    accepted
                }
                // Out of descriptors: back off, never stop answering.
                Err(err) => {
                    errors.failed(err).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                if !refusing {
                    let n = access.max_connections;
                    let text = "connections open (metrics.max_connections): answering 503";
                    event!(
                        http.logger,
                        "metrics",
                        "warning",
                        { kind: "metrics_connections", open: n },
                        "warning: {n} {text}"
                    );
                }
                refusing = true;
                // Straight from the accept loop: no task, no waiting.
                if let Ok(mut s) = stream.into_std() {
                    let _ = s.write(BUSY);
                }
                continue;
            };
            refusing = false;
            let http = http.clone();
            tokio::spawn(async move {
                http.serve(stream, peer).await;
                drop(slot);
            });
        }
    });
    Ok((bound, task))
}

/// The request head (up to the blank line, at most 8 KiB), if it came
/// within 10 s.
async fn read_head(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::with_capacity(1024);
    let read = async {
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        true
    };
    let whole = matches!(
        tokio::time::timeout(Duration::from_secs(10), read).await,
        Ok(true)
    );
    whole.then_some(head)
}

/// Whether the request's `Host` names this server: `local` (the address
/// the client reached) as a literal, `localhost` or `hostname`, with
/// `local`'s port (no port: 80).
fn check_host(head: &str, local: SocketAddr, hostname: &str) -> Result<(), BadHost> {
    let mut hosts = head
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .filter(|(name, _)| name.eq_ignore_ascii_case("host"))
        .map(|(_, value)| value.trim_matches([' ', '\t']));
    let value = hosts.next().ok_or(BadHost::Missing)?;
    if hosts.next().is_some() {
        return Err(BadHost::Repeated);
    }
    let foreign = || BadHost::Foreign(value.chars().take(100).collect());
    let (host, port) = split_host(value).ok_or_else(foreign)?;
    let name = host.strip_suffix('.').unwrap_or(host);
    let ours = match host.parse::<IpAddr>() {
        Ok(ip) => ip.to_canonical() == local.ip().to_canonical(),
        Err(_) => {
            name.eq_ignore_ascii_case("localhost")
                || name.eq_ignore_ascii_case(hostname.trim_end_matches('.'))
        }
    };
    if ours && port.unwrap_or(80) == local.port() {
        Ok(())
    } else {
        Err(foreign())
    }
}

/// `name`, `name:port`, `[v6]` or `[v6]:port`; `None` if malformed.
fn split_host(value: &str) -> Option<(&str, Option<u16>)> {
    let (host, rest) = match value.strip_prefix('[') {
        Some(v6) => v6.split_once(']')?,
        None => value.split_at(value.find(':').unwrap_or(value.len())),
    };
    let port = match rest {
        "" => None,
        _ => Some(rest.strip_prefix(':')?.parse().ok()?),
    };
    Some((host, port))
}

impl Http {
    async fn serve(&self, mut stream: TcpStream, peer: SocketAddr) {
        let Some(head) = read_head(&mut stream).await else {
            return;
        };
        let head = String::from_utf8_lossy(&head);
        let checked = match stream.local_addr() {
            Ok(local) => check_host(&head, local, &self.hostname),
            Err(_) => return,
        };
        let (status, kind, body) = match checked {
            Ok(()) => self.route(&head).await,
            Err(why) => {
                let cause = match why {
                    BadHost::Missing => "no_host",
                    BadHost::Repeated => "repeated_host",
                    BadHost::Foreign(_) => "foreign_host",
                };
                event!(
                    self.logger,
                    "metrics",
                    "http_refused",
                    { peer: peer.to_string(), cause: cause },
                    "refused a request from {peer}: {why}"
                );
                let (status, body) = why.reply();
                (status, "text/plain", body)
            }
        };
        let response = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(response.as_bytes()).await;
        let _ = stream.shutdown().await;
    }

    /// Status, content type and body for a request from a good `Host`.
    async fn route(&self, head: &str) -> (&'static str, &'static str, String) {
        let mut words = head.split_whitespace();
        let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        match (method, path) {
            ("GET", "/metrics") => ("200 OK", "text/plain; version=0.0.4", self.metrics().await),
            ("GET", "/api/queue") => ("200 OK", "application/json", self.queue_json().await),
            ("GET", "/api/rates") => ("200 OK", "application/json", rates_json()),
            ("GET", "/") => ("200 OK", "text/html; charset=utf-8", DASHBOARD.to_string()),
            ("GET", _) => ("404 Not Found", "text/plain", "not found\n".to_string()),
            _ => (
                "405 Method Not Allowed",
                "text/plain",
                "GET only\n".to_string(),
            ),
        }
    }

    async fn stats(&self) -> QueueStats {
        match self.queue.admin(AdminRequest::Stats).await {
            Some(AdminReply::Stats(s)) => s,
            _ => QueueStats::default(),
        }
    }

    /// The recorder's counters and histograms, then the gauges written
    /// from their sources now (`gauges.rs`: none can go stale).
    async fn metrics(&self) -> String {
        for (table, counters) in self.mailboxes.load().lookup_counters() {
            for (what, n) in counters {
                let name = format!("sluice_lookup_{what}_total");
                metrics::describe_counter!(name.clone(), "LDAP table lookups, by table.");
                metrics::counter!(name, "table" => table.clone()).absolute(n);
            }
        }
        let queue = self.stats().await;
        let sessions = crate::receive::smtp::open_sessions();
        let mut text = self.handle.render();
        text.push_str(&super::gauges::render(&queue, self.spool.stats(), sessions));
        text
    }

    async fn queue_json(&self) -> String {
        serde_json::to_string(&self.stats().await).unwrap_or_else(|_| "{}".into())
    }
}

/// `/api/rates`: the last minutes' counts (`rates.rs`).
fn rates_json() -> String {
    serde_json::to_string(&super::rates::rates()).unwrap_or_else(|_| "{}".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_header_must_name_this_server() {
        let v4: SocketAddr = "127.0.0.1:9469".parse().unwrap();
        let v6: SocketAddr = "[::1]:9469".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:9469".parse().unwrap();
        let on_80: SocketAddr = "192.0.2.1:80".parse().unwrap();
        let foreign = |h: &str| Err(BadHost::Foreign(h.into()));
        let table: &[(&str, SocketAddr, Result<(), BadHost>)] = &[
            ("Host: 127.0.0.1:9469", v4, Ok(())),
            ("host:\t127.0.0.1:9469 ", v4, Ok(())),
            ("HOST: localhost:9469", v4, Ok(())),
            ("Host: mx.example.:9469", v4, Ok(())),
            ("Host: MX.Example:9469", v4, Ok(())),
            ("Host: [::1]:9469", v6, Ok(())),
            ("Host: 127.0.0.1:9469", mapped, Ok(())),
            ("Host: 192.0.2.1", on_80, Ok(())),
            ("Host: 127.0.0.1", v4, foreign("127.0.0.1")),
            ("Host: 127.0.0.1:9470", v4, foreign("127.0.0.1:9470")),
            ("Host: 127.0.0.2:9469", v4, foreign("127.0.0.2:9469")),
            ("Host: evil.example:9469", v4, foreign("evil.example:9469")),
            (
                "Host: localhost.evil.example:9469",
                v4,
                foreign("localhost.evil.example:9469"),
            ),
            ("Host: [::1]:9469", v4, foreign("[::1]:9469")),
            ("Host: ::1:9469", v6, foreign("::1:9469")),
            ("Host: [::1]x", v6, foreign("[::1]x")),
            ("Host: 127.0.0.1:x", v4, foreign("127.0.0.1:x")),
            ("Host: ", v4, foreign("")),
            ("X-Host: 127.0.0.1:9469", v4, Err(BadHost::Missing)),
            (
                "Host: 127.0.0.1:9469\r\nHost: 127.0.0.1:9469",
                v4,
                Err(BadHost::Repeated),
            ),
        ];
        for (headers, local, want) in table {
            let head = format!("GET / HTTP/1.1\r\n{headers}\r\n\r\nHost: after.the.head\r\n");
            assert_eq!(&check_host(&head, *local, "mx.example"), want, "{headers}");
        }
    }

    /// Daemons started at once in one process (the tests) share the one
    /// recorder; none fails to install it because another just did.
    #[test]
    fn the_recorder_is_installed_once_for_callers_racing() {
        let start = Arc::new(std::sync::Barrier::new(8));
        let racers: Vec<_> = (0..8)
            .map(|_| {
                let start = start.clone();
                std::thread::spawn(move || {
                    start.wait();
                    recorder().map(|_| ())
                })
            })
            .collect();
        for racer in racers {
            racer.join().unwrap().expect("the recorder is installed");
        }
    }

    #[test]
    fn the_busy_answer_is_well_formed() {
        let text = std::str::from_utf8(BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())));
    }
}
