//! The observability listener (`[metrics] listen`, off by default):
//! Prometheus text at `/metrics` (the `metrics` crates' recorder: every
//! histogram a Prometheus histogram, with the buckets below), the queue
//! at a glance as JSON at `/api/queue`, the last ten minutes' counts at
//! `/api/rates` (`crate::rates`), and a live dashboard at `/` (dashboard.html:
//! rates per minute, queue by destination, why mail waits, a chart; it
//! polls the three endpoints, no page reloads).
//!
//! Requests are parsed by hyper (already in the tree for the ACME
//! responder and the MTA-STS client): GET only, one request per
//! connection, at most 8 KiB buffered, 10 s for the whole exchange.
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

use std::convert::Infallible;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::PrometheusHandle;
use sluice_spool::Spool;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use super::recorder::recorder;
pub use super::recorder::MetricsError;
use crate::accept::AcceptErrors;
use crate::log::Event;
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
    fn reply(&self) -> (StatusCode, String) {
        match self {
            BadHost::Missing | BadHost::Repeated => (StatusCode::BAD_REQUEST, format!("{self}\n")),
            BadHost::Foreign(_) => (
                StatusCode::MISDIRECTED_REQUEST,
                "this server answers to its own address, localhost or its hostname in Host\n"
                    .into(),
            ),
        }
    }

    /// The log's `cause` field.
    fn cause(&self) -> &'static str {
        match self {
            BadHost::Missing => "no_host",
            BadHost::Repeated => "repeated_host",
            BadHost::Foreign(_) => "foreign_host",
        }
    }
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
                    http.logger.emit(&Event::Warning {
                        kind: "metrics_connections".into(),
                        open: Some(n as u64),
                        line: format!("warning: {n} {text}").into(),
                    });
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

/// Whether the request's `Host` names this server: `local` (the address
/// the client reached) as a literal, `localhost` or `hostname`, with
/// `local`'s port (no port: 80).
fn check_host<'a>(
    mut hosts: impl Iterator<Item = &'a [u8]>,
    local: SocketAddr,
    hostname: &str,
) -> Result<(), BadHost> {
    let value = hosts.next().ok_or(BadHost::Missing)?;
    let value = String::from_utf8_lossy(value);
    let value = value.trim_matches([' ', '\t']);
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
    /// One connection: one request, answered and closed, within 10 s.
    async fn serve(self: Arc<Self>, stream: TcpStream, peer: SocketAddr) {
        let Ok(local) = stream.local_addr() else {
            return;
        };
        let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            let http = self.clone();
            async move { Ok::<_, Infallible>(http.respond(req, local, peer).await) }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .max_buf_size(8192)
            .keep_alive(false)
            .serve_connection(TokioIo::new(stream), service);
        let _ = tokio::time::timeout(Duration::from_secs(10), conn).await;
    }

    /// The `Host` check first, then the route.
    async fn respond<B>(
        &self,
        req: Request<B>,
        local: SocketAddr,
        peer: SocketAddr,
    ) -> Response<Full<Bytes>> {
        let hosts = req
            .headers()
            .get_all(HOST)
            .into_iter()
            .map(HeaderValue::as_bytes);
        let (status, kind, body) = match check_host(hosts, local, &self.hostname) {
            Ok(()) => self.route(req.method(), req.uri().path()).await,
            Err(why) => {
                self.logger.emit(&Event::HttpRefused {
                    peer: peer.to_string().into(),
                    cause: why.cause().into(),
                    line: format!("refused a request from {peer}: {why}").into(),
                });
                let (status, body) = why.reply();
                (status, "text/plain", body)
            }
        };
        let mut reply = Response::new(Full::new(Bytes::from(body)));
        *reply.status_mut() = status;
        let headers = reply.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(kind));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        reply
    }

    /// Status, content type and body for a request from a good `Host`.
    async fn route(&self, method: &Method, path: &str) -> (StatusCode, &'static str, String) {
        if method != Method::GET {
            return (
                StatusCode::METHOD_NOT_ALLOWED,
                "text/plain",
                "GET only\n".into(),
            );
        }
        match path {
            "/metrics" => (
                StatusCode::OK,
                "text/plain; version=0.0.4",
                self.metrics().await,
            ),
            "/api/queue" => (StatusCode::OK, "application/json", self.queue_json().await),
            "/api/rates" => (StatusCode::OK, "application/json", rates_json()),
            "/" => (
                StatusCode::OK,
                "text/html; charset=utf-8",
                DASHBOARD.to_string(),
            ),
            _ => (StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
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

/// `/api/rates`: the last minutes' counts (`crate::rates`).
fn rates_json() -> String {
    serde_json::to_string(&crate::rates::rates()).unwrap_or_else(|_| "{}".into())
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
            // The values hyper hands over: those of the `Host` fields.
            let hosts = headers
                .split("\r\n")
                .filter_map(|l| l.split_once(':'))
                .filter(|(name, _)| name.eq_ignore_ascii_case("host"))
                .map(|(_, value)| value.as_bytes());
            assert_eq!(&check_host(hosts, *local, "mx.example"), want, "{headers}");
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
