//! The events of the servers a test runs in its own process, as their
//! logger writes them (`Logger::subscribe`), so that looking for an event
//! costs a look at memory and a `stat` of the log, not a read and parse of
//! the whole maillog every 20 ms. Daemons spawned as processes are still
//! read from their files.
//!
//! Invariant: what memory holds is used only while it is exactly the file
//! (as many bytes as the file has); a line written by anyone else (a
//! spawned daemon on the same log, a rotation, a partly written line)
//! sends the reader back to the file, so an answer from memory is always
//! the one the file would give.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, LazyLock, Mutex};

use serde_json::Value;
use sluice::config::{Config, LogFormat};
use sluice::log::Logger;

/// One log file's events, as its in-process writers wrote them.
pub struct Live {
    store: Mutex<Store>,
    /// Loggers feeding it; at none, the file is whole and the memory goes
    /// (every test's events would otherwise live as long as the process).
    writers: Mutex<usize>,
    /// Woken after each batch of new lines.
    pub changed: tokio::sync::Notify,
}

struct Store {
    events: Vec<Value>,
    /// Bytes of the file these events are (lines and their line ends).
    bytes: u64,
    /// A line that is not JSON came: the file decides (and fails the test).
    not_json: bool,
}

/// The logs with in-process writers, by path (unique per test directory).
static LIVE: LazyLock<Mutex<HashMap<PathBuf, Arc<Live>>>> = LazyLock::new(Mutex::default);

/// The logger for a server the test starts in its own process: the one
/// `Server::start` would open, subscribed to, its lines kept in memory.
pub fn logger(config: &Config) -> Logger {
    let json = config.log_format == LogFormat::Json;
    let logger = Logger::start_as(config.log_file.as_deref(), json).unwrap();
    if let (Some(path), true) = (&config.log_file, json) {
        let live = register(path);
        let lines = logger.subscribe();
        let path = path.clone();
        std::thread::Builder::new()
            .name("test-log-tap".into())
            .spawn(move || {
                feed(&live, &lines);
                unregister(&path, &live);
            })
            .unwrap();
    }
    logger
}

/// The memory of `path`'s events, begun with what the file has now (an
/// earlier start's lines) the first time.
fn register(path: &Path) -> Arc<Live> {
    let mut all = LIVE.lock().unwrap();
    let live = all.entry(path.to_path_buf()).or_insert_with(|| {
        let raw = std::fs::read_to_string(path).unwrap_or_default();
        let whole = raw.rfind('\n').map_or("", |end| &raw[..=end]);
        let mut store = Store {
            events: Vec::new(),
            bytes: whole.len() as u64,
            not_json: false,
        };
        for line in whole.lines() {
            store.add(line);
        }
        Arc::new(Live {
            store: Mutex::new(store),
            writers: Mutex::new(0),
            changed: tokio::sync::Notify::new(),
        })
    });
    *live.writers.lock().unwrap() += 1;
    live.clone()
}

/// A logger of `path` is gone (its writer wrote out everything first):
/// with no other, `path` is read from the file again.
fn unregister(path: &Path, live: &Arc<Live>) {
    let mut all = LIVE.lock().unwrap();
    let mut writers = live.writers.lock().unwrap();
    *writers -= 1;
    if *writers == 0 && all.get(path).is_some_and(|l| Arc::ptr_eq(l, live)) {
        all.remove(path);
    }
}

/// Keeps the lines a subscription brings until its logger is gone (its
/// writer thread ends after writing out its file).
fn feed(live: &Live, lines: &mpsc::Receiver<String>) {
    while let Ok(first) = lines.recv() {
        let mut store = live.store.lock().unwrap();
        store.bytes += first.len() as u64 + 1;
        store.add(&first);
        for line in lines.try_iter() {
            store.bytes += line.len() as u64 + 1;
            store.add(&line);
        }
        drop(store);
        live.changed.notify_waiters();
    }
}

impl Store {
    fn add(&mut self, line: &str) {
        match serde_json::from_str(line) {
            Ok(v) => self.events.push(v),
            Err(_) => self.not_json = true,
        }
    }
}

/// The memory of `path`, if an in-process server logs there.
pub fn of(path: &Path) -> Option<Arc<Live>> {
    LIVE.lock().unwrap().get(path).cloned()
}

/// The events of `path` that satisfy `pred`, from memory; `None` when the
/// file must be read (no in-process writer, or memory is not the file).
pub fn events_where(path: &Path, pred: impl Fn(&Value) -> bool) -> Option<Vec<Value>> {
    let live = of(path)?;
    let store = live.store.lock().unwrap();
    let len = std::fs::metadata(path).ok()?.len();
    if store.not_json || len != store.bytes {
        return None;
    }
    Some(store.events.iter().filter(|e| pred(e)).cloned().collect())
}
