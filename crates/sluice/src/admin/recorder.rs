//! The process's Prometheus recorder: the `metrics` crate's macros
//! write to one global recorder, installed once, with every histogram a
//! Prometheus histogram (buckets below) and a `# HELP` for each metric.
//!
//! Trust: nothing here reads input. Invariant: installed at most once per
//! process, whoever asks first (daemons started at once in one process,
//! as the tests do, share it).

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
