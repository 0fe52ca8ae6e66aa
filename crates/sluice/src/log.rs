//! The mail log: one line per event, queue ID first, greppable like
//! Postfix's maillog (`grep 1A2B3C4D var/log` shows a message's life).
//!
//! Callers only format their message and hand it to a bounded channel; a
//! dedicated thread adds the timestamp and writes through a large buffer,
//! flushing when the channel runs dry, then pausing briefly so that the
//! next round finds many lines (one wake-up per round, not per line). Nothing is ever synced: a log line
//! is not worth a disk flush in the hot path.
//!
//! Invariant: logging never blocks a caller and never grows without bound.
//! If the writer falls behind by more than `CAPACITY` lines, new lines are
//! counted and dropped, and the next line written says how many were lost.
//! A reopen request (SIGUSR1) is never dropped: it is a flag the writer
//! reads after every round, and the message sent with it only wakes a
//! writer waiting on an empty channel (a full one needs no waking).

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
    /// Write out everything before this, then say so.
    Flush(mpsc::SyncSender<()>),
    /// Look at the reopen flag now (the writer was perhaps waiting on an
    /// empty channel); the flag, not this message, is the request.
    Wake,
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
                let mut out = std::io::BufWriter::with_capacity(256 << 10, out);
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
                            Item::Flush(done) => flushed.push(done),
                            Item::Wake => {}
                        }
                    }
                    if reopen_wanted.swap(false, Ordering::AcqRel) {
                        reopen(&mut out, path.as_deref());
                    }
                    let n = lost.swap(0, Ordering::Relaxed);
                    if n > 0 {
                        let text = format!("sluice/log: {n} lines dropped (log writer behind)");
                        write_line(&mut out, timefmt::now_millis(), &text);
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
        })
    }

    /// A logger that drops everything (tools and some tests).
    pub fn disabled() -> Logger {
        Logger {
            tx: None,
            dropped: Arc::new(AtomicU64::new(0)),
            reopen: Arc::new(AtomicBool::new(false)),
            program: "sluice",
        }
    }

    /// Logs `component: text`, e.g. `smtpd: 1A2B: client=...`.
    pub fn log(&self, component: &str, text: std::fmt::Arguments<'_>) {
        if let Some(tx) = &self.tx {
            let line = Item::Line(
                timefmt::now_millis(),
                format!("{}/{component}: {text}", self.program),
            );
            if let Err(mpsc::TrySendError::Full(_)) = tx.try_send(line) {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
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

/// The log file (appended, created with its directory) or stderr.
fn open(path: Option<&Path>) -> std::io::Result<Box<dyn Write + Send>> {
    Ok(match path {
        Some(p) => {
            if let Some(dir) = p.parent() {
                std::fs::create_dir_all(dir)?;
            }
            Box::new(open_append(p)?)
        }
        None => Box::new(std::io::stderr()),
    })
}

/// Opens the log for appending; a new file is made mode 0640 whatever the
/// umask (the daemon's is 077): readable by the `adm` group, as logs are.
fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(path)
    {
        Ok(file) => {
            file.set_permissions(std::fs::Permissions::from_mode(0o640))?;
            Ok(file)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::OpenOptions::new().append(true).open(path)
        }
        Err(e) => Err(e),
    }
}

fn reopen(out: &mut std::io::BufWriter<Box<dyn Write + Send>>, path: Option<&Path>) {
    let _ = out.flush();
    let now = timefmt::now_millis();
    match open(path) {
        Ok(file) if path.is_some() => {
            *out = std::io::BufWriter::with_capacity(256 << 10, file);
            write_line(out, now, "sluice/master: log file reopened");
        }
        Ok(_) => {}
        Err(e) => write_line(
            out,
            now,
            &format!("sluice/master: cannot reopen the log: {e}"),
        ),
    }
}

/// One line as a JSON object: `sluice/smtpd: 1A2B: text` gives program
/// `sluice`, component `smtpd`, queue_id `1A2B`, text.
fn write_json(out: &mut impl Write, millis: u64, line: &str) {
    let (head, text) = line.split_once(": ").unwrap_or(("", line));
    let (program, component) = head.split_once('/').unwrap_or((head, ""));
    let queue_id = text.split_once(": ").map(|(id, _)| id).filter(|id| {
        id.len() >= 8
            && id
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_lowercase())
    });
    let value = serde_json::json!({
        "ts": timefmt::iso8601(millis),
        "program": program,
        "component": component,
        "queue_id": queue_id,
        "text": text,
    });
    let _ = writeln!(out, "{value}");
}

fn write_line(out: &mut impl Write, millis: u64, line: &str) {
    let _ = writeln!(out, "{} {line}", timefmt::iso8601(millis));
}

/// `log!(logger, "smtpd", "{id}: client={peer}")`
#[macro_export]
macro_rules! log {
    ($logger:expr, $component:expr, $($arg:tt)*) => {
        $logger.log($component, format_args!($($arg)*))
    };
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
                self.0
                    .log(module, format_args!("{}: {}", r.level(), r.args()));
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
        };
        for i in 0..10 {
            crate::log!(logger, "test", "line {i}");
        }
        assert_eq!(logger.dropped.load(Ordering::Relaxed), 6);
        let kept: Vec<String> = rx
            .try_iter()
            .map(|i| match i {
                Item::Line(_, l) => l,
                Item::Flush(_) | Item::Wake => String::new(),
            })
            .collect();
        assert_eq!(kept.len(), 4);
        assert_eq!(kept[0], "sluice/test: line 0");
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
            crate::log!(logger, "test", "line {i}");
            i += 1;
        }
        std::fs::rename(&path, dir.path().join("maillog.1")).unwrap();
        logger.reopen();
        // Let the writer go: read the pipe until the writer closes it.
        // SAFETY: clearing O_NONBLOCK on a descriptor this test owns.
        assert_eq!(
            unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_SETFL, 0) },
            0
        );
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

    #[test]
    fn flush_returns_once_every_earlier_line_is_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("maillog");
        let logger = Logger::start(Some(&path)).unwrap();
        for i in 0..1000 {
            crate::log!(logger, "test", "line {i}");
        }
        logger.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 1000);
        assert!(text.ends_with("sluice/test: line 999\n"), "{text}");
    }
}
