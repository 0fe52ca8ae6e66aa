//! What every accept loop (SMTP listeners, the admin socket, the
//! metrics/dashboard server) does when `accept` fails: out of descriptors
//! (EMFILE, ENFILE), buffers or memory, or a connection aborted before it
//! was taken.
//!
//! A loop that returned on the first error left the admin socket and
//! `/metrics` dead for good after a descriptor flood (security review
//! M3). Here an error never ends a loop: a connection-level error
//! (ECONNABORTED and the like) is skipped at once; a resource error backs
//! off, 10 ms doubling to 1 s, so a starved loop does not spin. A burst of
//! errors is logged once when it starts and once when it ends (with how
//! many there were), not once per error.
//!
//! Trust: the errors come from the kernel, caused by whoever opens
//! connections. Invariant: [`AcceptErrors::failed`] returns (the loop goes
//! on accepting) for every error.

use std::io;
use std::time::Duration;

use crate::log::Event;
use crate::log::Logger;

const FIRST_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// One accept loop's error state.
pub struct AcceptErrors {
    logger: Logger,
    /// The component in the log (`smtpd`, `admin`, `http`).
    component: &'static str,
    /// Where it listens, for the log.
    what: String,
    /// Errors in the current burst.
    burst: u64,
    backoff: Duration,
}

impl AcceptErrors {
    pub fn new(logger: Logger, component: &'static str, what: impl Into<String>) -> Self {
        AcceptErrors {
            logger,
            component,
            what: what.into(),
            burst: 0,
            backoff: FIRST_BACKOFF,
        }
    }

    /// A connection was accepted: a burst of errors, if any, is over.
    pub fn accepted(&mut self) {
        if self.burst > 0 {
            self.logger.emit(&Event::AcceptRecovered {
                listener: self.component.into(),
                what: self.what.as_str().into(),
                failures: self.burst,
            });
            self.burst = 0;
            self.backoff = FIRST_BACKOFF;
        }
    }

    /// `accept` failed with `err`: logs the start of a burst and waits as
    /// long as the error calls for.
    pub async fn failed(&mut self, err: io::Error) {
        self.burst += 1;
        if self.burst == 1 {
            self.logger.emit(&Event::AcceptFailed {
                listener: self.component.into(),
                what: self.what.as_str().into(),
                error: err.to_string().into(),
            });
        }
        if is_per_connection(&err) {
            return;
        }
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }
}

/// Errors about the one connection being accepted (the next may work at
/// once), as against the process or system running out of something.
fn is_per_connection(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    ) || matches!(
        err.raw_os_error(),
        Some(libc::EPROTO | libc::ENETDOWN | libc::ENONET | libc::EHOSTUNREACH)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn resource_errors_back_off_and_a_burst_is_logged_twice() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let logger = Logger::start_as(Some(&path), true).unwrap();
        let mut errors = AcceptErrors::new(logger.clone(), "smtpd", "127.0.0.1:25");
        let began = tokio::time::Instant::now();
        for _ in 0..10 {
            errors
                .failed(io::Error::from_raw_os_error(libc::EMFILE))
                .await;
        }
        // 10+20+40+...: the paused clock advanced by the backoff alone.
        let waited = began.elapsed();
        assert!(waited >= Duration::from_millis(10 + 20 + 40 + 80 + 160 + 320 + 640));
        assert!(waited <= Duration::from_millis(10 + 20 + 40 + 80 + 160 + 320 + 640 + 4000));
        let before = tokio::time::Instant::now();
        errors
            .failed(io::Error::from(io::ErrorKind::ConnectionAborted))
            .await;
        assert_eq!(
            before.elapsed(),
            Duration::ZERO,
            "no wait for one bad connection"
        );
        errors.accepted();
        logger.flush();
        let log = std::fs::read_to_string(&path).unwrap();
        let events: Vec<serde_json::Value> = log
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let named = |name: &str| events.iter().filter(|e| e["event"] == name).count();
        assert_eq!(named("accept_failed"), 1, "{log}");
        assert!(
            events
                .iter()
                .any(|e| e["event"] == "accept_recovered" && e["failures"] == 11),
            "{log}"
        );
    }
}
