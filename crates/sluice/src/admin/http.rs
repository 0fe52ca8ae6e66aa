//! The observability listener (`[metrics] listen`, off by default):
//! Prometheus text at `/metrics` (the `metrics` crates' recorder), the
//! queue at a glance as JSON at `/api/queue`, and a live dashboard at `/`
//! (dashboard.html: rates per minute, queue by destination, top deferral
//! reasons, a chart; it polls the two endpoints, no page reloads).
//!
//! The HTTP server is hand-written and tiny: GET only, one request per
//! connection, 8 KiB of request head, 10 s to send it — a full HTTP stack
//! would be the biggest dependency in the tree for three fixed pages.
//! Trust: anyone who can reach the address sees queue statistics; bind it
//! to loopback (the examples do). Nothing here changes state.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use sluice_spool::Spool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::queue::admin::{AdminReply, AdminRequest, QueueStats};
use crate::queue::QueueHandle;
use crate::routing::mailboxes::VirtualMailboxes;

const DASHBOARD: &str = include_str!("dashboard.html");

/// The process's Prometheus recorder (one per process: the `metrics`
/// macros write to a global recorder).
pub fn recorder() -> Result<PrometheusHandle, String> {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    if let Some(h) = HANDLE.get() {
        return Ok(h.clone());
    }
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| format!("metrics: {e}"))?;
    Ok(HANDLE.get_or_init(|| handle).clone())
}

struct Http {
    handle: PrometheusHandle,
    queue: QueueHandle,
    spool: Spool,
    mailboxes: Arc<ArcSwap<VirtualMailboxes>>,
}

/// Serves the listener until the task is aborted.
pub async fn spawn(
    addr: SocketAddr,
    queue: QueueHandle,
    spool: Spool,
    mailboxes: Arc<ArcSwap<VirtualMailboxes>>,
) -> Result<(SocketAddr, JoinHandle<()>), String> {
    let handle = recorder()?;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("metrics.listen {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let http = Arc::new(Http {
        handle,
        queue,
        spool,
        mailboxes,
    });
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let http = http.clone();
            tokio::spawn(async move { http.serve(stream).await });
        }
    });
    Ok((bound, task))
}

impl Http {
    async fn serve(&self, mut stream: TcpStream) {
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
        if !matches!(
            tokio::time::timeout(Duration::from_secs(10), read).await,
            Ok(true)
        ) {
            return;
        }
        let line = String::from_utf8_lossy(&head);
        let mut words = line.split_whitespace();
        let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let (status, kind, body) = match (method, path) {
            ("GET", "/metrics") => ("200 OK", "text/plain; version=0.0.4", self.metrics().await),
            ("GET", "/api/queue") => ("200 OK", "application/json", self.queue_json().await),
            ("GET", "/") => ("200 OK", "text/html; charset=utf-8", DASHBOARD.to_string()),
            ("GET", _) => ("404 Not Found", "text/plain", "not found\n".to_string()),
            _ => (
                "405 Method Not Allowed",
                "text/plain",
                "GET only\n".to_string(),
            ),
        };
        let response = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(response.as_bytes()).await;
        let _ = stream.shutdown().await;
    }

    async fn stats(&self) -> QueueStats {
        match self.queue.admin(AdminRequest::Stats).await {
            Some(AdminReply::Stats(s)) => s,
            _ => QueueStats::default(),
        }
    }

    /// Gauges read at scrape time (queue, destinations, spool), then the
    /// recorder's text.
    async fn metrics(&self) -> String {
        let s = self.stats().await;
        for (state, n) in [
            ("active", s.active),
            ("deferred", s.deferred),
            ("hold", s.hold),
        ] {
            metrics::gauge!("sluice_queue_messages", "state" => state).set(n as f64);
        }
        for d in &s.destinations {
            let name = d.name.clone();
            metrics::gauge!("sluice_destination_in_flight", "destination" => name.clone())
                .set(d.in_flight as f64);
            metrics::gauge!("sluice_destination_window", "destination" => name.clone())
                .set(d.window as f64);
            metrics::gauge!("sluice_destination_queued", "destination" => name)
                .set(d.queued as f64);
        }
        let st = self.spool.stats();
        let load =
            |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed) as f64;
        metrics::gauge!("sluice_spool_messages_stored").set(load(&st.messages));
        metrics::gauge!("sluice_spool_syncs").set(load(&st.syncs));
        metrics::gauge!("sluice_spool_bytes_written").set(load(&st.bytes));
        for (table, counters) in self.mailboxes.load().lookup_counters() {
            for (what, n) in counters {
                let name = format!("sluice_lookup_{what}_total");
                metrics::counter!(name, "table" => table.clone()).absolute(n);
            }
        }
        self.handle.render()
    }

    async fn queue_json(&self) -> String {
        serde_json::to_string(&self.stats().await).unwrap_or_else(|_| "{}".into())
    }
}
