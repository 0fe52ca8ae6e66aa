//! The mail log: one line per event, queue ID first, greppable like
//! Postfix's maillog (`grep 1A2B3C4D var/log` shows a message's life).
//!
//! Callers only format their message and hand it to a bounded channel; a
//! dedicated thread adds the timestamp and writes through a large buffer,
//! flushing when the channel runs dry, then pausing briefly so that the
//! next round finds many lines (one wake-up per round, not per line). Nothing is ever synced: a log line
//! is not worth a disk flush in the hot path.
//!
//! Two formats, one stream of events: every line is an [`Event`]
//! (`log/event.rs`), logged by [`Logger::emit`]. `text` (the default) is
//! the Postfix-like line people read (the event's `Display`); `json`
//! (`log_format = "json"`) writes each line as one object with the
//! event's name and fields (queue ID, recipient, status, DSN code, relay,
//! delay …) beside the same text, serialised straight from the event, for
//! log pipelines and for the tests, which read the same type back and
//! assert on variants, never on the wording. There is no other way to
//! write a line: an untyped line cannot be logged.
//!
//! Invariant: logging never blocks a caller and never grows without bound.
//! If the writer falls behind by more than `CAPACITY` lines, new lines are
//! counted and dropped, and the next line written says how many were lost.
//! A reopen request (SIGUSR1) is never dropped: it is a flag the writer
//! reads after every round, and the message sent with it only wakes a
//! writer waiting on an empty channel (a full one needs no waking).
//!
//! Tests that run a daemon in their own process subscribe to the lines
//! as they are written ([`Logger::subscribe`]), not re-reading the file.
// libc calls the standard library does not wrap; each block says why
// it is sound.
#![allow(unsafe_code)]

mod event;
mod tap;
mod write;

pub use event::{ConnectFailed, Event, Qid, Reject, Reload, Shown, Text};
use write::{json_body, note, open, reopen, write_body, write_json, write_line};

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

/// Lines waiting for the writer at most.
const CAPACITY: usize = 65_536;

/// The writer's pause between rounds (lines reach the file this much later
/// at most; at 100,000 lines a second the channel holds a few thousand).
const GATHER: std::time::Duration = std::time::Duration::from_millis(20);

/// What the writer thread receives.
enum Item {
    /// A line: milliseconds since the epoch, and the text.
    Line(u64, String),
    /// A typed event as JSON (`Logger::emit`): milliseconds since the
    /// epoch, and the object without its `ts` (written by the writer).
    Json(u64, Vec<u8>),
    /// Write out everything before this, then say so.
    Flush(mpsc::SyncSender<()>),
    /// Look at the reopen flag now (the writer was perhaps waiting on an
    /// empty channel); the flag, not this message, is the request.
    Wake,
    /// Send every line written from now on here too.
    Subscribe(mpsc::Sender<String>),
}

use crate::timefmt;

/// Handle to the log writer; cheap to clone.
#[derive(Clone)]
pub struct Logger {
    tx: Option<mpsc::SyncSender<Item>>,
    dropped: Arc<AtomicU64>,
    /// Set by [`Logger::reopen`], cleared by the writer when it reopens
    /// the file (logrotate renamed it: SIGUSR1).
    reopen: Arc<AtomicBool>,
    program: &'static str,
    /// Lines are JSON objects (`log_format = "json"`).
    json: bool,
}

impl Logger {
    /// Starts the writer thread, appending to `path` or to stderr.
    pub fn start(path: Option<&Path>) -> std::io::Result<Logger> {
        Logger::start_as(path, false)
    }

    /// As [`Logger::start`]; with `json`, each line is a JSON object
    /// (`ts`, `program`, `component`, `queue_id` when the text starts with
    /// one, `text`) for log shippers.
    pub fn start_as(path: Option<&Path>, json: bool) -> std::io::Result<Logger> {
        let out = open(path)?;
        let path = path.map(Path::to_path_buf);
        let (tx, rx) = mpsc::sync_channel::<Item>(CAPACITY);
        let dropped = Arc::new(AtomicU64::new(0));
        let lost = dropped.clone();
        let reopen_asked = Arc::new(AtomicBool::new(false));
        let reopen_wanted = reopen_asked.clone();
        std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || {
                let mut out = tap::Out::new(out);
                while let Ok(first) = rx.recv() {
                    let mut flushed = Vec::new();
                    // At most a channel's worth per round, so flushes and
                    // the dropped-lines notice are never put off for long.
                    let mut round = 0usize;
                    for item in std::iter::once(first).chain(rx.try_iter().take(CAPACITY)) {
                        round += 1;
                        match item {
                            Item::Line(ms, text) if json => write_json(&mut out, ms, &text),
                            Item::Line(ms, text) => write_line(&mut out, ms, &text),
                            Item::Json(ms, body) => write_body(&mut out, ms, &body),
                            Item::Flush(done) => flushed.push(done),
                            Item::Wake => {}
                            Item::Subscribe(tap) => out.subscribe(tap),
                        }
                    }
                    if reopen_wanted.swap(false, Ordering::AcqRel) {
                        reopen(&mut out, path.as_deref(), json);
                    }
                    let n = lost.swap(0, Ordering::Relaxed);
                    if n > 0 {
                        note(&mut out, json, &Event::LogDropped { lines: n });
                    }
                    let _ = out.flush();
                    let waited_on = !flushed.is_empty();
                    for done in flushed {
                        let _ = done.send(());
                    }
                    // Let lines gather before the next round: a busy
                    // server logs tens of thousands of lines a second, and
                    // a wake-up per line cost more than writing it (a
                    // sender wakes this thread only while it waits in recv).
                    // (Not when behind: a full round may have left more.)
                    if !waited_on && round <= CAPACITY {
                        std::thread::sleep(GATHER);
                    }
                }
            })?;
        Ok(Logger {
            tx: Some(tx),
            dropped,
            reopen: reopen_asked,
            program: "sluice",
            json,
        })
    }

    /// A logger that drops everything (tools and some tests).
    pub fn disabled() -> Logger {
        Logger {
            tx: None,
            dropped: Arc::new(AtomicU64::new(0)),
            reopen: Arc::new(AtomicBool::new(false)),
            program: "sluice",
            json: false,
        }
    }

    /// Logs `event`: its JSON object (`log_format = "json"`), serialised
    /// here straight from the event, or its human line. One allocation a
    /// line, as `log!` makes.
    pub fn emit(&self, event: &Event<'_>) {
        let Some(tx) = &self.tx else { return };
        let now = timefmt::now_millis();
        let item = match self.json {
            true => Item::Json(now, json_body(self.program, event)),
            false => Item::Line(
                now,
                format!("{}/{}: {event}", self.program, event.component()),
            ),
        };
        if let Err(mpsc::TrySendError::Full(_)) = tx.try_send(item) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Reopens the log file at the end of the writer's current round
    /// (SIGUSR1, for logrotate); a file that cannot be opened leaves the
    /// old one in use. Never lost, never blocks: the flag is set first, so
    /// a writer that takes the wake-up (or, with the channel full, its next
    /// round's lines) then finds it set.
    pub fn reopen(&self) {
        if let Some(tx) = &self.tx {
            self.reopen.store(true, Ordering::Release);
            let _ = tx.try_send(Item::Wake);
        }
    }

    /// Every line logged from now on, as in the file (without its line
    /// end), once the file has it (`tap.rs`): for tests running the daemon
    /// in their own process. Unbounded: read it. Disabled: ends at once.
    pub fn subscribe(&self) -> mpsc::Receiver<String> {
        let (tap, lines) = mpsc::channel();
        if let Some(tx) = &self.tx {
            let _ = tx.send(Item::Subscribe(tap));
        }
        lines
    }

    /// Waits (at most 5 s) until every line logged before is written out:
    /// the last lines of a stopping daemon must reach the file.
    pub fn flush(&self) {
        let Some(tx) = &self.tx else { return };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let (done, wait) = mpsc::sync_channel(1);
        let mut item = Item::Flush(done);
        // Never wait past the deadline, even for room in a full channel
        // (a writer stuck on a dead stderr must not hang the stop).
        loop {
            match tx.try_send(item) {
                Ok(()) => break,
                Err(mpsc::TrySendError::Full(back)) if std::time::Instant::now() < deadline => {
                    item = back;
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(_) => return,
            }
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let _ = wait.recv_timeout(left);
    }
}

/// An I/O error as people read it, without Rust's ` (os error 111)`:
/// `Connection refused`, as Postfix logs it.
pub fn io_text(err: &std::io::Error) -> String {
    let text = err.to_string();
    match err.raw_os_error() {
        Some(n) => match text.strip_suffix(&format!(" (os error {n})")) {
            Some(plain) => plain.to_string(),
            None => text,
        },
        None => text,
    }
}

/// Queue IDs are shown in upper-case hex, like Postfix's short IDs.
pub fn qid(id: u64) -> String {
    format!("{id:X}")
}

/// Routes the `log` crate's records (ldap3 and other libraries) at warn
/// level and above into the mail log as `sluice/<crate>: text`. The first
/// daemon of a process installs it (tests start several); later ones keep
/// the first logger.
pub fn route_crate_logs(logger: &Logger) {
    struct Bridge(Logger);
    impl log::Log for Bridge {
        fn enabled(&self, m: &log::Metadata<'_>) -> bool {
            m.level() <= log::Level::Warn
        }
        fn log(&self, r: &log::Record<'_>) {
            if self.enabled(r.metadata()) {
                let module = r.target().split("::").next().unwrap_or("lib");
                let message = r.args().to_string();
                self.0.emit(&Event::CrateLog {
                    library: module.into(),
                    level: r.level().as_str().into(),
                    message: message.into(),
                });
            }
        }
        fn flush(&self) {}
    }
    if log::set_boxed_logger(Box::new(Bridge(logger.clone()))).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_that_falls_behind_costs_dropped_lines_not_memory() {
        let (tx, rx) = mpsc::sync_channel(4);
        let logger = Logger {
            tx: Some(tx),
            dropped: Arc::new(AtomicU64::new(0)),
            reopen: Arc::new(AtomicBool::new(false)),
            program: "sluice",
            json: false,
        };
        for i in 0..10 {
            logger.emit(&Event::Flush { messages: i });
        }
        assert_eq!(logger.dropped.load(Ordering::Relaxed), 6);
        let kept: Vec<String> = rx
            .try_iter()
            .map(|i| match i {
                Item::Line(_, l) => l,
                Item::Json(..) | Item::Flush(_) | Item::Wake | Item::Subscribe(_) => String::new(),
            })
            .collect();
        assert_eq!(kept.len(), 4);
        assert_eq!(kept[0], "sluice/qmgr: flush: 0 messages to be retried now");
    }

    /// logrotate renames the file and sends SIGUSR1 while the writer is
    /// behind: the request must still reach it. The log is a FIFO nobody
    /// reads, so the writer stalls on a full pipe and the channel fills
    /// (lines are dropped); then the reopen is asked for, and the pipe
    /// drained.
    #[test]
    fn a_reopen_asked_for_while_the_channel_is_full_is_not_lost() {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::OpenOptionsExt;
        use std::os::unix::io::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("maillog");
        let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        // The reading end first, so that the writer's open does not wait.
        let mut pipe = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .unwrap();
        let logger = Logger::start(Some(&path)).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut i = 0u64;
        while logger.dropped.load(Ordering::Relaxed) == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the channel never filled"
            );
            logger.emit(&Event::Flush { messages: i });
            i += 1;
        }
        std::fs::rename(&path, dir.path().join("maillog.1")).unwrap();
        logger.reopen();
        // Let the writer go: read the pipe until the writer closes it.
        // SAFETY: clearing O_NONBLOCK on a descriptor this test owns.
        let flags = unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_SETFL, 0) };
        assert_eq!(flags, 0);
        let drain = std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut pipe, &mut sink);
        });
        let reopened =
            || std::fs::read_to_string(&path).is_ok_and(|t| t.contains("log file reopened"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !reopened() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(reopened(), "no new log file after the reopen request");
        drop(logger);
        drain.join().unwrap();
    }

    /// A delivery line in both formats: the human line, and one object
    /// with exactly the keys and values the log has always had (the
    /// object the old `event!` macro wrote, spelled out).
    #[test]
    fn an_event_is_one_object_with_its_fields_and_the_human_text() {
        let dir = tempfile::tempdir().unwrap();
        for json in [true, false] {
            let path = dir.path().join(format!("maillog-{json}"));
            let logger = Logger::start_as(Some(&path), json).unwrap();
            logger.emit(&Event::Delivery {
                queue_id: Qid(0x1A2B3C4D),
                to: "a@b.test".into(),
                orig_to: None,
                relay: "mx".into(),
                transport: "smtp".into(),
                delay: 0.5,
                dsn: "2.0.0".into(),
                status: "sent".into(),
                reason: "250 2.0.0 ok".into(),
            });
            logger.emit(&Event::Held {
                queue_id: Qid(0x1A2B3C4D),
            });
            logger.flush();
            let text = std::fs::read_to_string(&path).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            let human = "1A2B3C4D: to=<a@b.test>, relay=mx, delay=0.50, dsn=2.0.0, status=sent (250 2.0.0 ok)";
            if !json {
                assert!(
                    lines[0].ends_with(&format!(" sluice/smtp: {human}")),
                    "{text}"
                );
                assert!(lines[1].ends_with(" sluice/qmgr: 1A2B3C4D: placed on hold"));
                continue;
            }
            let mut event: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
            assert!(event["ts"].is_string());
            event["ts"] = serde_json::Value::Null;
            let want = serde_json::json!({
                "ts": null, "program": "sluice", "component": "smtp", "event": "delivery",
                "queue_id": "1A2B3C4D", "text": human, "to": "a@b.test", "orig_to": null,
                "relay": "mx", "transport": "smtp", "delay": 0.5, "dsn": "2.0.0",
                "status": "sent", "reason": "250 2.0.0 ok",
            });
            assert_eq!(event, want);
            let held: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
            assert_eq!(held["event"], "held");
            assert_eq!(held["queue_id"], "1A2B3C4D");
        }
    }

    /// What a peer puts in an address, a reply or a name cannot add a line
    /// of its own to the log, in either format.
    #[test]
    fn a_line_end_in_logged_text_cannot_forge_a_line() {
        let dir = tempfile::tempdir().unwrap();
        let forged = "x\n2026-01-01T00:00:00.000Z sluice/smtp: 1A2B3C4D: status=sent\r\n{\"event\":\"delivery\"}";
        for json in [true, false] {
            let path = dir.path().join(format!("maillog-{json}"));
            let logger = Logger::start_as(Some(&path), json).unwrap();
            logger.emit(&Event::Auth {
                client_ip: std::net::Ipv4Addr::LOCALHOST.into(),
                method: "PLAIN".into(),
                username: Some(forged.into()),
                result: "failed".into(),
                error: None,
            });
            logger.emit(&Event::Flush { messages: 1 });
            logger.flush();
            let text = std::fs::read_to_string(&path).unwrap();
            assert_eq!(text.lines().count(), 2, "{text}");
            if json {
                let first: serde_json::Value =
                    serde_json::from_str(text.lines().next().unwrap()).unwrap();
                assert_eq!(first["username"], forged, "kept whole, escaped");
                assert_eq!(first["event"], "auth");
            }
        }
    }

    #[test]
    fn io_errors_read_without_their_os_error_number() {
        let refused = std::io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert_eq!(io_text(&refused), "Connection refused");
        let other = std::io::Error::other("no greeting");
        assert_eq!(io_text(&other), "no greeting");
    }

    #[test]
    fn flush_returns_once_every_earlier_line_is_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("maillog");
        let logger = Logger::start(Some(&path)).unwrap();
        for i in 0..1000 {
            logger.emit(&Event::Flush { messages: i });
        }
        logger.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 1000);
        assert!(
            text.ends_with("sluice/qmgr: flush: 999 messages to be retried now\n"),
            "{text}"
        );
    }
}
