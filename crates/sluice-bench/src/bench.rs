//! `sluice-bench bench`: an SMTP load generator in the spirit of smtp-source and
//! postal. `sessions` tasks run in parallel; each claims up to
//! `messages_per_session` messages from the shared total, sends them over
//! one connection (pipelined when the server offers PIPELINING), and quits.
//! Every `interval` a postal-style CSV line is printed
//! (`time,messages,data(K),errors,connections,SSL connections`), and a
//! progress bar is drawn on stderr when it is a terminal.
//!
//! A connection that fails (refused, reset, closed, a greeting other than
//! 2xx) counts its unconfirmed messages as errors; the session then pauses
//! `retry_pause` before it connects again, so a server that dies and comes
//! back (the crash benchmark) does not make the generator burn through
//! `count` in a few milliseconds. With `ack_log`, the Message-ID of every
//! message the server acknowledged (2xx to the final dot) is appended to a
//! file, one per line, written at least once a second and at the end.
// libc calls the standard library does not wrap; each block says why
// it is sound.
#![allow(unsafe_code)]

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use sluice::smtp::io::MaybeTls;
use sluice::timefmt;

mod wire;
use wire::{expect, start_tls, Replies, Stream};

#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub target: SocketAddr,
    pub sessions: usize,
    pub messages_per_session: u64,
    pub count: u64,
    /// Approximate message size in octets (headers included).
    pub size: usize,
    pub recipients: usize,
    pub domains: usize,
    /// Messages per second across all sessions; None = as fast as possible.
    pub rate: Option<f64>,
    pub interval: Duration,
    pub max_seconds: Option<u64>,
    pub from: String,
    /// Messages per session drawn uniformly from
    /// `messages_per_session..=messages_per_session_max`.
    pub messages_per_session_max: u64,
    /// Recipients `template` with `{n}` drawn from 1..=`recipient_count`
    /// (or `{i}`: 1..=`recipient_count` in turn, message after message)
    /// (instead of `recipN@domainK.example`).
    pub recipient_template: Option<String>,
    pub recipient_count: u64,
    /// Share of recipients (percent) made unknown on purpose.
    pub unknown_percent: f64,
    /// Write an SVG chart of the per-interval rates here at the end.
    pub chart: Option<PathBuf>,
    /// Append the Message-ID of every acknowledged message to this file.
    pub ack_log: Option<PathBuf>,
    /// Pause of a session after a failed connection, before the next one.
    pub retry_pause: Duration,
    /// Once notified, stop as at `max_seconds`: no new messages, those in
    /// flight finish (at most 30 s), the ack log is flushed (`sluice bench`
    /// notifies it on SIGTERM and SIGINT).
    pub stop: Option<Arc<tokio::sync::Notify>>,
    /// STARTTLS on every connection, after the first EHLO.
    pub starttls: bool,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            target: "127.0.0.1:2525".parse().expect("literal address"),
            sessions: 10,
            messages_per_session: 1,
            count: 1000,
            size: 400,
            recipients: 1,
            domains: 5,
            rate: None,
            interval: Duration::from_secs(1),
            max_seconds: None,
            from: "bench@sender.example".into(),
            messages_per_session_max: 1,
            recipient_template: None,
            recipient_count: 1000,
            unknown_percent: 0.0,
            starttls: false,
            ack_log: None,
            chart: None,
            retry_pause: Duration::from_millis(100),
            stop: None,
        }
    }
}

#[derive(Default)]
struct Counters {
    claimed: AtomicU64,
    messages: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    connections: AtomicU64,
    reported: AtomicU64,
    rejected_5xx: AtomicU64,
    temp_4xx: AtomicU64,
    /// Set by `BenchOptions::stop`: sessions start no new message.
    stopping: std::sync::atomic::AtomicBool,
}

impl Counters {
    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }
}

/// The run's totals.
#[derive(Debug, Clone, Copy)]
pub struct BenchReport {
    pub messages: u64,
    pub errors: u64,
    pub seconds: f64,
    /// Replies (not messages) of class 5 and 4 to any command, e.g. a 550
    /// to RCPT and the 554 to the pipelined DATA after it count 2.
    pub rejected_5xx: u64,
    pub temp_4xx: u64,
}

/// The acknowledged Message-IDs: sessions append to a buffer in memory;
/// only the flusher (once a second) and the end of the run write the file,
/// so no session ever waits for the disk.
struct AckLog {
    buf: Mutex<Vec<u8>>,
    file: Mutex<std::fs::File>,
}

impl AckLog {
    fn open(path: &std::path::Path) -> std::io::Result<AckLog> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(AckLog {
            buf: Mutex::new(Vec::with_capacity(64 << 10)),
            file: Mutex::new(file),
        })
    }

    fn record(&self, id: &str) {
        let mut buf = self.buf.lock().unwrap_or_else(|p| p.into_inner());
        buf.extend_from_slice(id.as_bytes());
        buf.push(b'\n');
    }

    fn flush(&self) {
        // The file lock first: two flushes never reorder their batches.
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let batch = std::mem::take(&mut *self.buf.lock().unwrap_or_else(|p| p.into_inner()));
        if !batch.is_empty() {
            if let Err(e) = file.write_all(&batch) {
                eprintln!("bench: cannot write the ack log: {e}");
            }
        }
    }
}

/// Runs the generator. Fails only when the ack log cannot be opened.
pub async fn run(opts: BenchOptions, mut csv: impl std::io::Write) -> std::io::Result<BenchReport> {
    let counters = Arc::new(Counters::default());
    let started = Instant::now();
    let run_id = timefmt::now_millis();
    let filler = Arc::new(filler(opts.size));
    let acks = match &opts.ack_log {
        Some(path) => Some(Arc::new(AckLog::open(path)?)),
        None => None,
    };
    let flusher = acks.clone().map(|acks| {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                acks.flush();
            }
        })
    });
    let opts = Arc::new(opts);
    let mut tasks = Vec::new();
    for _ in 0..opts.sessions.max(1) {
        let (opts, counters, filler, acks) =
            (opts.clone(), counters.clone(), filler.clone(), acks.clone());
        tasks.push(tokio::spawn(async move {
            session_loop(&opts, &counters, &filler, acks.as_deref(), run_id, started).await;
        }));
    }
    let all = async {
        for t in tasks {
            let _ = t.await;
        }
    };
    tokio::pin!(all);
    let deadline = opts
        .max_seconds
        .map(|s| tokio::time::Instant::now() + Duration::from_secs(s));
    let _ = writeln!(
        csv,
        "time,messages,data(K),errors,connections,SSL connections"
    );
    // SAFETY: isatty only inspects descriptor 2.
    let tty = unsafe { libc::isatty(2) } == 1;
    let mut per_interval: Vec<u64> = Vec::new();
    let mut last = (0u64, 0u64, 0u64, 0u64);
    let mut ticker = tokio::time::interval(opts.interval);
    ticker.tick().await;
    let mut draining = false;
    let stop = opts.stop.clone();
    let stop_requested = async move {
        match stop {
            Some(n) => n.notified().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(stop_requested);
    loop {
        let finished = if draining {
            // Past the deadline sessions stop starting messages; let the ones
            // in flight finish so every 250 the server gave is counted.
            let _ = tokio::time::timeout(Duration::from_secs(30), &mut all).await;
            true
        } else {
            tokio::select! {
                _ = &mut all => true,
                _ = ticker.tick() => false,
                _ = &mut stop_requested, if !counters.stopping() => {
                    counters.stopping.store(true, Ordering::Relaxed);
                    false
                }
            }
        };
        let now = (
            counters.messages.load(Ordering::Relaxed),
            counters.bytes.load(Ordering::Relaxed),
            counters.errors.load(Ordering::Relaxed),
            counters.connections.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            csv,
            "{},{},{},{},{},0",
            &timefmt::iso8601(timefmt::now_millis())[11..19],
            now.0 - last.0,
            (now.1 - last.1) / 1024,
            now.2 - last.2,
            now.3 - last.3
        );
        let _ = csv.flush();
        per_interval.push(now.0 - last.0);
        if tty {
            let done = now.0 + now.2;
            let width = 30usize;
            let filled = (done as usize * width / opts.count.max(1) as usize).min(width);
            eprint!(
                "\r[{}{}] {done}/{} {:.0} msg/s, {} errors ",
                "#".repeat(filled),
                ".".repeat(width - filled),
                opts.count,
                now.0 as f64 / started.elapsed().as_secs_f64().max(1e-3),
                now.2
            );
        }
        last = now;
        if finished {
            break;
        }
        draining =
            counters.stopping() || deadline.is_some_and(|d| tokio::time::Instant::now() >= d);
    }
    if tty {
        eprintln!();
    }
    if let Some(f) = flusher {
        f.abort();
    }
    if let Some(path) = &opts.chart {
        let title = format!(
            "sluice bench: {} sessions, {} B, messages per second",
            opts.sessions, opts.size
        );
        let svg = crate::chart::svg(&title, &per_interval, opts.interval.as_secs_f64());
        std::fs::write(path, svg)?;
    }
    if let Some(acks) = &acks {
        acks.flush();
    }
    Ok(BenchReport {
        messages: counters.messages.load(Ordering::Relaxed),
        errors: counters.errors.load(Ordering::Relaxed),
        seconds: started.elapsed().as_secs_f64(),
        rejected_5xx: counters.rejected_5xx.load(Ordering::Relaxed),
        temp_4xx: counters.temp_4xx.load(Ordering::Relaxed),
    })
}

/// Body text after the headers: 76-character lines up to about `size`.
fn filler(size: usize) -> Vec<u8> {
    let header_estimate = 200;
    let mut body = Vec::with_capacity(size);
    let line =
        b"Sluice benchmark filler text. The quick brown fox jumps over the lazy dog 0123\r\n";
    while body.len() + line.len() + header_estimate <= size {
        body.extend_from_slice(line);
    }
    let rest = size.saturating_sub(header_estimate + body.len() + 2);
    body.extend(std::iter::repeat_n(b'x', rest));
    body.extend_from_slice(b"\r\n");
    body
}

/// A small xorshift generator: enough randomness for load, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

static SESSION_SEED: AtomicU64 = AtomicU64::new(1);

async fn session_loop(
    opts: &BenchOptions,
    c: &Counters,
    filler: &[u8],
    acks: Option<&AckLog>,
    run_id: u64,
    started: Instant,
) {
    let seed = SESSION_SEED
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut rng = Rng((run_id ^ seed) | 1);
    let max_per = opts.messages_per_session_max.max(opts.messages_per_session);
    loop {
        let batch = opts.messages_per_session + rng.below(max_per - opts.messages_per_session + 1);
        let first = c.claimed.fetch_add(batch, Ordering::Relaxed);
        if first >= opts.count {
            return;
        }
        let last = (first + batch).min(opts.count);
        if c.stopping() {
            return;
        }
        if let Some(max) = opts.max_seconds {
            if started.elapsed().as_secs() >= max {
                return;
            }
        }
        if let Err(unsent) = one_connection(
            opts, c, filler, acks, run_id, started, first, last, &mut rng,
        )
        .await
        {
            c.errors.fetch_add(unsent, Ordering::Relaxed);
            // The server may be down (restarting): do not hammer it, and do
            // not use up the remaining messages in a few milliseconds.
            tokio::time::sleep(opts.retry_pause).await;
        }
    }
}

/// Sends messages `first..last` over one connection; on failure returns
/// how many were not confirmed.
#[allow(clippy::too_many_arguments)]
async fn one_connection(
    opts: &BenchOptions,
    c: &Counters,
    filler: &[u8],
    acks: Option<&AckLog>,
    run_id: u64,
    started: Instant,
    first: u64,
    last: u64,
    rng: &mut Rng,
) -> Result<(), u64> {
    let mut next = first;
    let result: std::io::Result<()> = async {
        let tcp = TcpStream::connect(opts.target).await?;
        tcp.set_nodelay(true)?;
        c.connections.fetch_add(1, Ordering::Relaxed);
        let mut stream: Stream = MaybeTls::Plain(tcp);
        let mut rd = Replies::default();
        expect(rd.read(&mut stream).await?.0, 2)?;
        stream.write_all(b"EHLO bench.sluice\r\n").await?;
        let mut ehlo = rd.read(&mut stream).await?;
        expect(ehlo.0, 2)?;
        if opts.starttls {
            ehlo = start_tls(&mut stream, &mut rd).await?;
        }
        let pipelining = ehlo.1.contains("PIPELINING");
        let mut msg = Vec::with_capacity(filler.len() + 1024);
        while next < last {
            if let Some(rate) = opts.rate {
                let due = started + Duration::from_secs_f64(next as f64 / rate);
                tokio::time::sleep_until(due.into()).await;
            }
            if c.stopping() {
                break;
            }
            if let Some(max) = opts.max_seconds {
                if started.elapsed().as_secs() >= max {
                    break;
                }
            }
            let mut envelope = format!("MAIL FROM:<{}>\r\n", opts.from);
            for r in 0..opts.recipients.max(1) {
                let rcpt = match &opts.recipient_template {
                    Some(template) if template.contains("{i}") => {
                        // In turn, not at random: each of the count gets
                        // exactly its share (benchmark M counts per domain).
                        let k = next * opts.recipients.max(1) as u64 + r as u64;
                        let i = k % opts.recipient_count.max(1) + 1;
                        template.replace("{i}", &i.to_string())
                    }
                    Some(template) => {
                        let n = rng.below(opts.recipient_count) + 1;
                        if (rng.below(10_000) as f64) < opts.unknown_percent * 100.0 {
                            template.replace("{n}", &format!("-unknown{n}"))
                        } else {
                            template.replace("{n}", &n.to_string())
                        }
                    }
                    None => {
                        let k = next as usize * opts.recipients.max(1) + r;
                        let domain = k % opts.domains.max(1) + 1;
                        format!("recip{}@domain{domain}.example", k % 1000 + 1)
                    }
                };
                envelope.push_str(&format!("RCPT TO:<{rcpt}>\r\n"));
            }
            let n_cmds = 2 + opts.recipients.max(1);
            if pipelining {
                envelope.push_str("DATA\r\n");
                stream.write_all(envelope.as_bytes()).await?;
            }
            let mut ok = true;
            let mut lines = envelope.split_inclusive("\r\n");
            for i in 0..n_cmds {
                if !pipelining {
                    let cmd = lines.next().unwrap_or("DATA\r\n");
                    stream.write_all(cmd.as_bytes()).await?;
                }
                let (code, _) = rd.read(&mut stream).await?;
                count_reply(c, code);
                let want = if i + 1 == n_cmds { 3 } else { 2 };
                if code / 100 != want {
                    ok = false;
                    if !pipelining {
                        break;
                    }
                }
            }
            if ok {
                msg.clear();
                msg.extend_from_slice(
                    format!(
                        "From: <{}>\r\nTo: <recip@domain.example>\r\nSubject: sluice bench {next}\r\nMessage-ID: <{next}.{run_id}@sluice.bench>\r\nDate: {}\r\n\r\n",
                        opts.from,
                        timefmt::rfc5322(timefmt::now_millis())
                    )
                    .as_bytes(),
                );
                msg.extend_from_slice(filler);
                msg.extend_from_slice(b".\r\n");
                stream.write_all(&msg).await?;
                let (code, _) = rd.read(&mut stream).await?;
                count_reply(c, code);
                if code / 100 == 2 {
                    if let Some(acks) = acks {
                        acks.record(&format!("<{next}.{run_id}@sluice.bench>"));
                    }
                    c.messages.fetch_add(1, Ordering::Relaxed);
                    c.bytes.fetch_add(msg.len() as u64, Ordering::Relaxed);
                } else {
                    c.errors.fetch_add(1, Ordering::Relaxed);
                }
            } else {
                c.errors.fetch_add(1, Ordering::Relaxed);
                stream.write_all(b"RSET\r\n").await?;
                rd.read(&mut stream).await?;
            }
            next += 1;
        }
        stream.write_all(b"QUIT\r\n").await?;
        let _ = rd.read(&mut stream).await;
        Ok(())
    }
    .await;
    match result {
        Ok(()) => Ok(()),
        Err(err) => {
            // Say why the first few connections failed; counting alone hides causes.
            if c.reported.fetch_add(1, Ordering::Relaxed) < 5 {
                eprintln!(
                    "bench: connection error after {} of {} messages: {err}",
                    next - first,
                    last - first
                );
            }
            Err(last - next)
        }
    }
}

fn count_reply(c: &Counters, code: u16) {
    match code / 100 {
        5 => c.rejected_5xx.fetch_add(1, Ordering::Relaxed),
        4 => c.temp_4xx.fetch_add(1, Ordering::Relaxed),
        _ => 0,
    };
}

#[cfg(test)]
mod tests;
