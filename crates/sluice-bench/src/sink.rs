//! `sluice-bench sink`: an SMTP server that accepts everything as fast as it can
//! and counts it (like Postfix's smtp-sink), for benchmarks and tests.
//!
//! It speaks just enough ESMTP (PIPELINING, 8BITMIME unless told to be a
//! 7-bit hop, SIZE, and STARTTLS when asked to), answers
//! pipelined commands in one write, and decodes DATA with the same strict
//! decoder as the server, so a message counts only when `CRLF.CRLF` ends
//! it. Optionally it keeps messages in memory (tests), saves them to a
//! directory, or records their Message-IDs (crash benchmark). With
//! `test_replies`, recipients whose local part starts with `reject` get
//! `550 5.1.1` and with `defer` get `451 4.3.0`, so tests can provoke
//! bounces and retries.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_proto::data::{BareLinePolicy, DataDecoder, DataLimits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use sluice::smtp::io::MaybeTls;
use sluice::timefmt;
use tokio_rustls::TlsAcceptor;

#[derive(Debug, Clone, Default)]
pub struct SinkOptions {
    pub listen: Option<SocketAddr>,
    /// Stop (notify) after this many messages.
    pub exit_after: Option<u64>,
    /// Keep every message in memory (tests).
    pub record: bool,
    /// Write each message to a file in this directory.
    pub save_dir: Option<PathBuf>,
    /// Append each message's Message-ID to this file.
    pub message_ids: Option<PathBuf>,
    /// Reply 550/451 to recipients named reject*/defer*.
    pub test_replies: bool,
    /// Offer STARTTLS, with a self-signed certificate made at start.
    pub starttls: bool,
    /// Offer no 8BITMIME (a 7-bit next hop, for downgrade tests).
    pub seven_bit: bool,
    /// Offer DSN (RFC 3461; parameters are recorded, not acted on).
    pub dsn: bool,
    /// A tarpit: the greeting and every reply wait this long each.
    pub reply_delay: Option<Duration>,
    /// Count into these stats (several listeners, one count).
    pub stats: Option<Arc<SinkStats>>,
}

/// Counters, shared with whoever watches the sink.
#[derive(Debug, Default)]
pub struct SinkStats {
    pub messages: AtomicU64,
    pub bytes: AtomicU64,
    pub connections: AtomicU64,
    /// Connections open now, and the most ever open at once (a cluster's
    /// connection cap is judged here, where the connections arrive).
    pub open: AtomicU64,
    pub peak_open: AtomicU64,
    /// Unix milliseconds of the first and latest message.
    pub first_ms: AtomicU64,
    pub last_ms: AtomicU64,
}

/// One message as the sink saw it.
#[derive(Debug, Clone)]
pub struct ReceivedMessage {
    pub sender: String,
    pub recipients: Vec<String>,
    pub body: Vec<u8>,
    /// The MAIL and RCPT command lines as received (parameters included).
    pub commands: Vec<String>,
    /// The session's EHLO or HELO line, and the client's address (with
    /// `record`: egress tests check where mail left from).
    pub helo: String,
    pub peer: Option<SocketAddr>,
}

pub struct Sink {
    pub addr: SocketAddr,
    pub stats: Arc<SinkStats>,
    pub received: Arc<Mutex<Vec<ReceivedMessage>>>,
    /// Notified when `exit_after` messages have arrived.
    pub done: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Sink {
    pub async fn start(opts: SinkOptions) -> std::io::Result<Sink> {
        let listen = opts
            .listen
            .unwrap_or_else(|| "127.0.0.1:0".parse().expect("literal address"));
        let socket = if listen.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        socket.bind(listen)?;
        Sink::start_on(socket, opts).await
    }

    /// Starts on a socket already bound (a port a test kept to itself
    /// while nothing listened on it); `opts.listen` is ignored.
    pub async fn start_on(
        socket: tokio::net::TcpSocket,
        opts: SinkOptions,
    ) -> std::io::Result<Sink> {
        let listener: TcpListener = socket.listen(4096)?;
        let addr = listener.local_addr()?;
        if let Some(dir) = &opts.save_dir {
            std::fs::create_dir_all(dir)?;
        }
        let ids = match &opts.message_ids {
            Some(p) => Some(Arc::new(Mutex::new(std::io::BufWriter::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)?,
            )))),
            None => None,
        };
        let tls = match opts.starttls {
            true => Some(
                sluice::receive::smtp::tls::ephemeral_acceptor("sink.local")
                    .map_err(std::io::Error::other)?,
            ),
            false => None,
        };
        let stats = opts.stats.clone().unwrap_or_default();
        let shared = Arc::new(Shared {
            opts,
            tls,
            stats,
            received: Arc::new(Mutex::new(Vec::new())),
            done: Arc::new(Notify::new()),
            ids,
        });
        let sink = Sink {
            addr,
            stats: shared.stats.clone(),
            received: shared.received.clone(),
            done: shared.done.clone(),
            task: tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    shared.stats.connections.fetch_add(1, Ordering::Relaxed);
                    let open = shared.stats.open.fetch_add(1, Ordering::Relaxed) + 1;
                    shared.stats.peak_open.fetch_max(open, Ordering::Relaxed);
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        let _ = session(stream, &shared).await;
                        shared.stats.open.fetch_sub(1, Ordering::Relaxed);
                    });
                }
            }),
        };
        Ok(sink)
    }

    /// Messages stored so far (with `record`).
    pub fn messages(&self) -> Vec<ReceivedMessage> {
        self.received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn count(&self) -> u64 {
        self.stats.messages.load(Ordering::Relaxed)
    }

    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Shared {
    opts: SinkOptions,
    tls: Option<TlsAcceptor>,
    stats: Arc<SinkStats>,
    received: Arc<Mutex<Vec<ReceivedMessage>>>,
    done: Arc<Notify>,
    ids: Option<Arc<Mutex<std::io::BufWriter<std::fs::File>>>>,
}

type SinkStream = MaybeTls<TcpStream, tokio_rustls::server::TlsStream<TcpStream>>;

async fn session(stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    let peer = stream.peer_addr().ok();
    let mut helo = String::new();
    let mut stream: SinkStream = MaybeTls::Plain(stream);
    let delay = shared.opts.reply_delay;
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    stream
        .write_all(b"220 sink.local ESMTP sluice-sink\r\n")
        .await?;
    let mut buf: Vec<u8> = Vec::with_capacity(16 << 10);
    let mut out: Vec<u8> = Vec::with_capacity(512);
    let mut body: Vec<u8> = Vec::new();
    let mut decoder: Option<DataDecoder> = None;
    let mut sender = String::new();
    let mut recipients: Vec<String> = Vec::new();
    let mut commands: Vec<String> = Vec::new();
    loop {
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(32 << 10);
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
        let mut pos = 0;
        let mut quit = false;
        let mut starttls = false;
        while pos < buf.len() {
            if let Some(dec) = decoder.as_mut() {
                match dec.feed(&buf[pos..], &mut body) {
                    Some(used) => {
                        pos += used;
                        decoder = None;
                        let client = (helo.as_str(), peer);
                        finish_message(shared, &sender, &recipients, &body, &commands, client);
                        body.clear();
                        recipients.clear();
                        out.extend_from_slice(b"250 2.0.0 Ok: queued\r\n");
                    }
                    None => pos = buf.len(),
                }
                continue;
            }
            let Some(lf) = memchr::memchr(b'\n', &buf[pos..]) else {
                break;
            };
            let line = &buf[pos..pos + lf + 1];
            pos += lf + 1;
            let verb = line
                .get(..4)
                .map(|v| v.to_ascii_uppercase())
                .unwrap_or_default();
            if shared.opts.record && (verb == b"EHLO" || verb == b"HELO") {
                helo = String::from_utf8_lossy(line).trim_end().to_string();
            }
            match verb.as_slice() {
                b"EHLO" => {
                    out.extend_from_slice(
                        b"250-sink.local\r\n250-PIPELINING\r\n250-SIZE 1073741824\r\n",
                    );
                    if shared.tls.is_some() && !stream.is_tls() {
                        out.extend_from_slice(b"250-STARTTLS\r\n");
                    }
                    if !shared.opts.seven_bit {
                        out.extend_from_slice(b"250-8BITMIME\r\n");
                    }
                    if shared.opts.dsn {
                        out.extend_from_slice(b"250-DSN\r\n");
                    }
                    out.extend_from_slice(b"250 ENHANCEDSTATUSCODES\r\n");
                }
                b"STAR" if shared.tls.is_some() && !stream.is_tls() => {
                    out.extend_from_slice(b"220 2.0.0 Ready to start TLS\r\n");
                    starttls = true;
                    break;
                }
                b"HELO" => out.extend_from_slice(b"250 sink.local\r\n"),
                b"MAIL" => {
                    sender = angle(line);
                    recipients.clear();
                    commands.clear();
                    if shared.opts.record {
                        commands.push(String::from_utf8_lossy(line).trim_end().to_string());
                    }
                    out.extend_from_slice(b"250 2.1.0 Ok\r\n");
                }
                b"RCPT" => {
                    let rcpt = angle(line);
                    if shared.opts.test_replies && rcpt.starts_with("reject") {
                        out.extend_from_slice(b"550 5.1.1 <");
                        out.extend_from_slice(rcpt.as_bytes());
                        out.extend_from_slice(b">: Recipient address rejected: User unknown\r\n");
                    } else if shared.opts.test_replies && rcpt.starts_with("defer") {
                        out.extend_from_slice(b"451 4.3.0 Temporary failure, try again later\r\n");
                    } else {
                        recipients.push(rcpt);
                        if shared.opts.record {
                            commands.push(String::from_utf8_lossy(line).trim_end().to_string());
                        }
                        out.extend_from_slice(b"250 2.1.5 Ok\r\n");
                    }
                }
                b"DATA" => {
                    if recipients.is_empty() {
                        out.extend_from_slice(b"554 5.5.1 Error: no valid recipients\r\n");
                    } else {
                        decoder = Some(DataDecoder::new(DataLimits {
                            max_size: usize::MAX,
                            max_line: usize::MAX,
                            bare_line: BareLinePolicy::Reject,
                        }));
                        out.extend_from_slice(b"354 End data with <CR><LF>.<CR><LF>\r\n");
                    }
                }
                b"RSET" => {
                    recipients.clear();
                    out.extend_from_slice(b"250 2.0.0 Ok\r\n");
                }
                b"NOOP" => out.extend_from_slice(b"250 2.0.0 Ok\r\n"),
                b"QUIT" => {
                    out.extend_from_slice(b"221 2.0.0 Bye\r\n");
                    quit = true;
                    break;
                }
                _ => out.extend_from_slice(b"502 5.5.2 Error: command not recognized\r\n"),
            }
        }
        buf.drain(..pos);
        if !out.is_empty() {
            if let Some(d) = delay {
                // A tarpit: every reply (each line starting a reply) waits.
                let replies = out
                    .split(|&b| b == b'\n')
                    .filter(|l| l.get(3) == Some(&b' '))
                    .count();
                tokio::time::sleep(d * replies as u32).await;
            }
            stream.write_all(&out).await?;
            stream.flush().await?;
            out.clear();
        }
        if quit {
            return Ok(());
        }
        if let (true, Some(acceptor)) = (starttls, &shared.tls) {
            // Nothing sent in clear after STARTTLS counts.
            buf.clear();
            let plain = stream.take_plain()?;
            stream = MaybeTls::Tls(Box::new(acceptor.accept(plain).await?));
        }
    }
}

/// The path between `<` and its closing `>` (a `>` inside a quoted local
/// part does not close it), exactly as sent.
fn angle(line: &[u8]) -> String {
    let start = memchr::memchr(b'<', line).unwrap_or(0);
    let path = &line[start..];
    let end = sluice_proto::address::closing_bracket(path).unwrap_or(path.len());
    String::from_utf8_lossy(path.get(1..end).unwrap_or_default()).into_owned()
}

fn finish_message(
    shared: &Shared,
    sender: &str,
    recipients: &[String],
    body: &[u8],
    commands: &[String],
    (helo, peer): (&str, Option<SocketAddr>),
) {
    let now = timefmt::now_millis();
    let stats = &shared.stats;
    let _ = stats
        .first_ms
        .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    stats.last_ms.fetch_max(now, Ordering::Relaxed);
    stats.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
    if let Some(ids) = &shared.ids {
        let id = header_value(body, b"message-id:").unwrap_or_else(|| "<none>".into());
        let mut w = ids.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(w, "{id}");
        let _ = w.flush();
    }
    if let Some(dir) = &shared.opts.save_dir {
        let n = stats.messages.load(Ordering::Relaxed) + 1;
        let _ = std::fs::write(dir.join(format!("{now}.{n}.eml")), body);
    }
    if shared.opts.record {
        shared
            .received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(ReceivedMessage {
                sender: sender.to_string(),
                recipients: recipients.to_vec(),
                body: body.to_vec(),
                commands: commands.to_vec(),
                helo: helo.to_string(),
                peer,
            });
    }
    // Counted last, so a watcher that sees the count also sees the message.
    let n = stats.messages.fetch_add(1, Ordering::Relaxed) + 1;
    if shared.opts.exit_after == Some(n) {
        shared.done.notify_one();
    }
}

/// The value of the first header named `name` (lower-case, with colon).
pub fn header_value(body: &[u8], name: &[u8]) -> Option<String> {
    let head_end = memchr::memmem::find(body, b"\r\n\r\n").unwrap_or(body.len());
    body[..head_end]
        .split(|&b| b == b'\n')
        .find(|line| line.len() > name.len() && line[..name.len()].eq_ignore_ascii_case(name))
        .map(|line| {
            String::from_utf8_lossy(&line[name.len()..])
                .trim()
                .to_string()
        })
}

/// Where `sluice sink` listens besides its main address (benchmark M:
/// many next hops in one process).
#[derive(Debug, Clone, Default)]
pub struct Extra {
    /// More well-behaved listeners, counted with the main one.
    pub listen: Vec<SocketAddr>,
    /// Tarpits: accept, then answer everything after `tarpit_delay`.
    pub tarpit: Vec<SocketAddr>,
    pub tarpit_delay: Duration,
    /// Dead hosts: listen with a backlog of one and never accept, so
    /// connections hang (the queue fills, later SYNs go unanswered).
    pub blackhole: Vec<SocketAddr>,
}

/// `sluice sink` on the command line.
pub async fn run_cli(
    opts: SinkOptions,
    extra: Extra,
    max_seconds: Option<u64>,
) -> std::io::Result<()> {
    let stats = Arc::new(SinkStats::default());
    let main = SinkOptions {
        stats: Some(stats.clone()),
        ..opts.clone()
    };
    let sink = Sink::start(main.clone()).await?;
    eprintln!("sink: listening on {}", sink.addr);
    let mut keep = Vec::new();
    for addr in &extra.listen {
        let more = Sink::start(SinkOptions {
            listen: Some(*addr),
            ..main.clone()
        });
        keep.push(more.await?);
    }
    let tarpit_stats = Arc::new(SinkStats::default());
    for addr in &extra.tarpit {
        let pit = Sink::start(SinkOptions {
            listen: Some(*addr),
            stats: Some(tarpit_stats.clone()),
            reply_delay: Some(extra.tarpit_delay),
            exit_after: None,
            ..opts.clone()
        });
        keep.push(pit.await?);
    }
    let mut holes = Vec::new();
    for addr in &extra.blackhole {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_reuseaddr(true)?;
        socket.bind(*addr)?;
        holes.push(socket.listen(1)?);
    }
    let started = Instant::now();
    let deadline = max_seconds.map(|s| started + Duration::from_secs(s));
    let mut last = 0u64;
    // SIGTERM ends it like --exit-after: with the SINK line.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        let tick = tokio::time::sleep(Duration::from_secs(1));
        tokio::select! {
            _ = sink.done.notified() => break,
            _ = term.recv() => break,
            _ = tick => {}
        }
        let n = stats.messages.load(Ordering::Relaxed);
        eprintln!(
            "sink: {n} messages, {:.1} MB, {} msg/s, {} connections ({} open, {} at most), tarpit {} messages",
            stats.bytes.load(Ordering::Relaxed) as f64 / 1e6,
            n - last,
            stats.connections.load(Ordering::Relaxed),
            stats.open.load(Ordering::Relaxed),
            stats.peak_open.load(Ordering::Relaxed),
            tarpit_stats.messages.load(Ordering::Relaxed),
        );
        last = n;
        if opts.exit_after.is_some_and(|want| n >= want)
            || deadline.is_some_and(|d| Instant::now() >= d)
        {
            break;
        }
    }
    let s = &stats;
    println!(
        "SINK messages={} bytes={} first={:.3} last={:.3} connections={} peak_open={} tarpit_messages={} tarpit_connections={}",
        s.messages.load(Ordering::Relaxed),
        s.bytes.load(Ordering::Relaxed),
        s.first_ms.load(Ordering::Relaxed) as f64 / 1000.0,
        s.last_ms.load(Ordering::Relaxed) as f64 / 1000.0,
        s.connections.load(Ordering::Relaxed),
        s.peak_open.load(Ordering::Relaxed),
        tarpit_stats.messages.load(Ordering::Relaxed),
        tarpit_stats.connections.load(Ordering::Relaxed),
    );
    drop((keep, holes));
    Ok(())
}
