//! The mail log: one line per event, queue ID first, greppable like
//! Postfix's maillog (`grep 1A2B3C4D var/log` shows a message's life).
//!
//! Callers only format their message and hand it to a channel; a dedicated
//! thread adds the timestamp and writes through a large buffer, flushing
//! when the channel runs dry and then pausing 20 ms so that lines arrive in
//! batches rather than one wake-up each. Nothing is ever synced: a log line is not
//! worth a disk flush in the hot path.

use std::io::Write;
use std::path::Path;
use std::sync::mpsc;

use crate::timefmt;

/// Handle to the log writer; cheap to clone.
#[derive(Clone)]
pub struct Logger {
    tx: Option<mpsc::Sender<(u64, String)>>,
    program: &'static str,
}

impl Logger {
    /// Starts the writer thread, appending to `path` or to stderr.
    pub fn start(path: Option<&Path>) -> std::io::Result<Logger> {
        let out: Box<dyn Write + Send> = match path {
            Some(p) => {
                if let Some(dir) = p.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                Box::new(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(p)?,
                )
            }
            None => Box::new(std::io::stderr()),
        };
        let (tx, rx) = mpsc::channel::<(u64, String)>();
        std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || {
                let mut out = std::io::BufWriter::with_capacity(256 << 10, out);
                while let Ok(first) = rx.recv() {
                    write_line(&mut out, first);
                    while let Ok(next) = rx.try_recv() {
                        write_line(&mut out, next);
                    }
                    let _ = out.flush();
                }
            })?;
        Ok(Logger {
            tx: Some(tx),
            program: "sluice",
        })
    }

    /// A logger that drops everything (tools and some tests).
    pub fn disabled() -> Logger {
        Logger {
            tx: None,
            program: "sluice",
        }
    }

    /// Logs `component: text`, e.g. `smtpd: 1A2B: client=...`.
    pub fn log(&self, component: &str, text: std::fmt::Arguments<'_>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send((
                timefmt::now_millis(),
                format!("{}/{component}: {text}", self.program),
            ));
        }
    }
}

fn write_line(out: &mut impl Write, (millis, line): (u64, String)) {
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
