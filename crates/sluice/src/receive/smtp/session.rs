//! One SMTP session: an explicit state machine over the pure parsers of
//! `sluice-proto`, one async task per connection.
//!
//! Replies to pipelined commands are collected and written in one go just
//! before the session would block reading. Deadlines bound everything (see
//! [`Session::converse`]): a client that trickles, stops sending or stops
//! reading is dropped with `421`, so it cannot hold a session slot. A
//! session starts with the PROXY header on listeners behind a balancer, the
//! per-client limits, and TLS on `submissions` listeners; STARTTLS swaps
//! the stream in the middle.
//!
//! Trust: everything the client sends is hostile until parsed; the client
//! address is the TCP peer's or, on a `proxy_protocol` listener, the
//! header sent by a peer in `proxy_protocol_from` (anyone else is
//! disconnected before a byte is read). Every error path has a defined reply; `max_errors`
//! and `junk_command_limit` bound how long a misbehaving client may keep
//! trying. Invariant: nothing read before a TLS handshake is used after it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_proto::data::DataDecoder;
use sluice_proto::line::{Frame, LineError, LineFramer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::anvil::Refusal;
use super::auth::AuthStep;
use super::tls::Io;
use super::transaction::Transaction;
use super::SessionContext;
use crate::config::listener::{ListenerConfig, ListenerKind};
use crate::log::{Event, Reject};
use crate::smtp::io::MaybeTls;

pub(super) enum Mode {
    Command,
    /// Inside an AUTH exchange: the next line answers a `334`.
    Auth(AuthStep),
    Data(DataDecoder),
    Bdat {
        remaining: usize,
        last: bool,
        discard: bool,
    },
}

/// What the command loop should do after a step.
#[derive(PartialEq, Eq)]
pub(super) enum Next {
    Continue,
    Close,
    /// `220` to STARTTLS was queued: flush it, drop anything the client
    /// pipelined behind it, and hand the stream to TLS.
    StartTls,
}

pub struct Session<S> {
    /// The client's stream, plain or TLS (STARTTLS and implicit TLS
    /// upgrade it in place).
    pub(super) io: Io<S>,
    /// The listener the client came in on: its kind, AUTH, PROXY and
    /// sender checks.
    pub(super) listener: Arc<ListenerConfig>,
    /// "TLSv1.3 with cipher …" once the session is encrypted.
    pub(super) tls: Option<String>,
    /// The client's certificate, when the listener asked for one and the
    /// client sent it (`ccert.rs`).
    pub(super) ccert: Option<super::ccert::PeerCert>,
    /// The AUTH user, once authenticated.
    pub(super) auth: Option<String>,
    /// What every session shares: settings, the intake, tables, limits.
    pub(super) ctx: Arc<SessionContext>,
    /// The address the client connected to, when known (for Dovecot's
    /// `lip`).
    pub(super) local: Option<SocketAddr>,
    /// The client's address (after a PROXY header, the real one), IPv4
    /// as IPv4 (`canonical`).
    pub(super) peer: SocketAddr,
    /// The client is in mynetworks: it may relay without AUTH.
    pub(super) trusted: bool,
    /// Bytes read and not yet taken as a command or message data.
    pub(super) inbuf: Vec<u8>,
    /// Replies written and not yet flushed (a pipelined group is sent in
    /// one write).
    out: Vec<u8>,
    /// Cuts `inbuf` into command lines, within the line length limit.
    framer: LineFramer,
    /// Commands, an AUTH exchange, DATA or BDAT: what the next bytes are.
    pub(super) mode: Mode,
    /// The HELO/EHLO name, once given.
    pub(super) helo: Option<String>,
    /// EHLO (not HELO) was given: ESMTP parameters are allowed.
    pub(super) esmtp: bool,
    /// The mail transaction after MAIL FROM, until the message is queued
    /// or RSET.
    pub(super) txn: Option<Transaction>,
    /// Refused commands so far: past `smtpd.max_errors` the session ends.
    pub(super) errors: u32,
    /// NOOP, RSET, VRFY, HELP, EHLO/HELO so far (junk_command_limit).
    pub(super) junk: u32,
    /// Messages queued in this session (the log's `session_end`).
    pub(super) messages: u32,
    /// Why the session ended, when not by the client closing it: `quit`,
    /// or a timeout (the `session_end` event's cause).
    pub(super) ended: Option<&'static str>,
    /// More input was already buffered behind the command being run.
    pub(super) pipelined_more: bool,
    /// The client sent commands ahead where it may not (RFC 2920), or
    /// without having been offered PIPELINING: `reject_unauth_pipelining`.
    pub(super) improper_pipelining: bool,
    /// A `defer_if_permit` MAIL's checks left pending (without
    /// `delay_reject`), applied at each RCPT that passes.
    pub(super) defer_if_permit: Option<crate::receive::restrict::Refusal>,
    /// The client's names, looked up at the first list that needs them.
    pub(super) names: Option<crate::receive::dnscheck::ClientNames>,
}

/// An IPv4 client seen as `::ffff:a.b.c.d` (a dual-stack listener, or a
/// PROXY header) as the IPv4 address it is, once, so every decision that
/// follows (blocklists, mynetworks, policy, milters, `Received:`) sees the
/// same address a v4 listener would.
pub(super) fn canonical(peer: SocketAddr) -> SocketAddr {
    SocketAddr::new(peer.ip().to_canonical(), peer.port())
}

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    pub fn new(
        io: S,
        peer: SocketAddr,
        ctx: Arc<SessionContext>,
        listener: Arc<ListenerConfig>,
    ) -> Self {
        let peer = canonical(peer);
        let trusted = ctx.policy.is_trusted(peer.ip());
        let framer = LineFramer::new(ctx.config.smtpd.command_line_limit);
        Session {
            io: MaybeTls::Plain(io),
            listener,
            tls: None,
            ccert: None,
            auth: None,
            ctx,
            local: None,
            peer,
            trusted,
            inbuf: Vec::with_capacity(1024),
            out: Vec::with_capacity(512),
            framer,
            mode: Mode::Command,
            helo: None,
            esmtp: false,
            txn: None,
            errors: 0,
            junk: 0,
            messages: 0,
            ended: None,
            pipelined_more: false,
            improper_pipelining: false,
            defer_if_permit: None,
            names: None,
        }
    }

    /// The address the client connected to (`local_addr`).
    pub fn with_local(mut self, local: Option<SocketAddr>) -> Self {
        self.local = local.map(canonical);
        self
    }

    /// Runs the session to its end.
    pub async fn run(mut self) {
        let ctx = self.ctx.clone();
        // Rare or heavy steps (here, and lookups, AUTH and the spool store in
        // commands) are boxed: an idle session's future then holds little
        // more than what waiting for a read needs (bench/idle.sh).
        if self.listener.proxy_protocol && !Box::pin(self.read_proxy_header()).await {
            return;
        }
        let (ip, port) = (self.peer.ip(), self.peer.port());
        ctx.logger.emit(&Event::Connect {
            client_ip: ip,
            client_port: port,
        });
        let _open = OpenSession::new();
        let _slot = match self.trusted {
            true => None,
            false => match ctx.anvil.connect(ip) {
                Ok(slot) => Some(slot),
                Err(refusal) => return Box::pin(self.refuse_client(refusal)).await,
            },
        };
        if self.listener.kind == ListenerKind::Submissions && !Box::pin(self.handshake()).await {
            return;
        }
        // (Boxed, and only when there is something to screen: most
        // sessions have neither lists nor a greeting pause.)
        let screened = ctx.dnsbl.is_some() || ctx.config.smtpd.greet_pause_ms > 0;
        if screened && !Box::pin(self.screen()).await {
            return;
        }
        self.reply_fmt(format_args!(
            "220 {} {}",
            ctx.config.hostname, ctx.config.smtpd.banner
        ));
        let mut cause = "closed";
        if let Err(err) = self.converse().await {
            // (A write that timed out is the client not reading.)
            cause = match err.kind() {
                std::io::ErrorKind::TimedOut => "write_timeout",
                _ => "lost",
            };
            let err = crate::log::io_text(&err);
            ctx.logger.emit(&Event::LostConnection {
                client_ip: ip,
                cause: cause.into(),
                error: err.as_str().into(),
            });
        }
        let cause = self.ended.unwrap_or(cause);
        ctx.logger.emit(&Event::SessionEnd {
            client_ip: ip,
            client_port: port,
            cause: cause.into(),
            messages: self.messages as u64,
            errors: self.errors as u64,
            tls: self.tls.is_some(),
        });
        let tls = if self.tls.is_some() { "yes" } else { "no" };
        metrics::counter!("sluice_sessions_total", "tls" => tls).increment(1);
    }

    /// `421 4.7.0` for a client over its session or connection-rate limit.
    async fn refuse_client(&mut self, refusal: Refusal) {
        let ip = self.peer.ip();
        let what = match refusal {
            Refusal::TooManySessions => "too many connections",
            Refusal::ConnectionRate => "too many connections per minute",
        };
        let cause = match refusal {
            Refusal::TooManySessions => "sessions",
            Refusal::ConnectionRate => "connection_rate",
        };
        self.ctx.logger.emit(&Event::Reject(Reject::Connect {
            stage: "connect".into(),
            client_ip: ip,
            code: 421,
            dsn: "4.7.0".into(),
            cause: cause.into(),
        }));
        let host = self.ctx.config.hostname.clone();
        self.reply_fmt(format_args!("421 4.7.0 {host} Error: {what} from {ip}"));
        let _ = self.flush(Duration::from_secs(5)).await;
    }

    /// The command loop. Deadlines, not per-read timers: a command line
    /// must be complete within `idle_timeout_secs` of the previous one
    /// (bytes trickled one at a time do not extend it); inside DATA/BDAT
    /// the client has `data_timeout_secs` plus one second per
    /// `min_data_rate` octets received; and the whole session ends after
    /// `max_session_secs`. Each ends it with `421 4.4.2`.
    async fn converse(&mut self) -> std::io::Result<()> {
        let smtpd = &self.ctx.config.smtpd;
        let idle = Duration::from_secs(smtpd.idle_timeout_secs.max(1));
        let data_wait = Duration::from_secs(smtpd.data_timeout_secs.max(1));
        let min_rate = smtpd.min_data_rate;
        let session_end = Instant::now() + Duration::from_secs(smtpd.max_session_secs.max(1));
        let mut command_deadline = Instant::now() + idle;
        let mut data: Option<(Instant, u64)> = None;
        loop {
            let before = self.inbuf.len();
            let next = self.process_input().await;
            self.flush(idle).await?;
            match next {
                Next::Close => return Ok(()),
                Next::StartTls if !Box::pin(self.handshake()).await => return Ok(()),
                _ => {}
            }
            if self.inbuf.len() < before {
                command_deadline = Instant::now() + idle;
            }
            let deadline = match self.mode {
                Mode::Command | Mode::Auth(_) => {
                    data = None;
                    command_deadline
                }
                _ => {
                    let (start, got) = *data.get_or_insert((Instant::now(), 0));
                    let earned = got.checked_div(min_rate).unwrap_or(u64::MAX / 4);
                    start + data_wait + Duration::from_secs(earned.min(u32::MAX as u64))
                }
            };
            // Small while idle (most sessions, most of the time), large
            // reads for message text.
            let spare = match self.mode {
                Mode::Command | Mode::Auth(_) => 512,
                _ => 8 << 10,
            };
            if self.inbuf.capacity() - self.inbuf.len() < spare {
                self.inbuf.reserve(16 << 10);
            } else if self.inbuf.is_empty() && self.inbuf.capacity() > 64 << 10 {
                self.inbuf.shrink_to(1024);
            }
            let until = deadline.min(session_end);
            match tokio::time::timeout_at(until.into(), self.io.read_buf(&mut self.inbuf)).await {
                Ok(Ok(0)) => return Ok(()),
                Ok(Ok(n)) => {
                    if let Some((_, got)) = data.as_mut() {
                        *got += n as u64;
                    }
                }
                Ok(Err(err)) => return Err(err),
                Err(_) => return Box::pin(self.timed_out(until == session_end, idle)).await,
            }
        }
    }

    /// The TLS handshake (STARTTLS or a `submissions` listener); false
    /// when it failed and the session is over. RFC 3207 §4.2: the client
    /// starts again from EHLO.
    async fn handshake(&mut self) -> bool {
        let Some(tls) = self.ctx.tls.clone() else {
            return false;
        };
        let limit = Duration::from_secs(self.ctx.config.tls.handshake_timeout_secs.max(1));
        let ip = self.peer.ip();
        let ask = self
            .listener
            .asks_ccert(self.ctx.config.tls.smtpd_tls_ask_ccert);
        match tokio::time::timeout(limit, self.io.start_tls(tls.acceptor(ask))).await {
            Ok(Ok(())) => {
                self.tls = self.io.tls_summary();
                self.ccert = self.io.tls_stream().and_then(|t| tls.peer_cert(t));
                let summary = self.tls.as_deref().unwrap_or("TLS");
                self.ctx.logger.emit(&Event::TlsIn {
                    client_ip: ip,
                    result: "established".into(),
                    detail: summary.into(),
                });
                // RFC 3207 §4.2: everything learnt before is forgotten,
                // an authentication too (it was over the clear channel).
                self.helo = None;
                self.esmtp = false;
                self.txn = None;
                self.auth = None;
                self.mode = Mode::Command;
                true
            }
            Ok(Err(err)) => {
                self.ctx.logger.emit(&Event::TlsInFailed {
                    client_ip: ip,
                    error: err.to_string().into(),
                });
                false
            }
            Err(_) => {
                self.ctx.logger.emit(&Event::TlsInTimeout { client_ip: ip });
                false
            }
        }
    }

    /// Ends the session on a deadline with `421 4.4.2`.
    async fn timed_out(&mut self, session: bool, idle: Duration) -> std::io::Result<()> {
        let what = if session {
            "session time limit exceeded"
        } else {
            "timeout exceeded"
        };
        let cause = if session {
            "session_limit"
        } else {
            "idle_timeout"
        };
        self.ended = Some(cause);
        self.ctx.logger.emit(&Event::Timeout {
            client_ip: self.peer.ip(),
            cause: cause.into(),
            code: 421,
            dsn: "4.4.2".into(),
        });
        let host = self.ctx.config.hostname.clone();
        self.reply_fmt(format_args!("421 4.4.2 {host} Error: {what}"));
        self.flush(idle).await
    }

    /// Writes the collected replies; a client that does not read them
    /// within `limit` is dropped.
    pub(super) async fn flush(&mut self, limit: Duration) -> std::io::Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        let write = async {
            self.io.write_all(&self.out).await?;
            self.io.flush().await
        };
        match tokio::time::timeout(limit, write).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "client stopped reading (write timeout)",
                ))
            }
        }
        self.out.clear();
        Ok(())
    }

    /// Handles everything complete in the input buffer.
    async fn process_input(&mut self) -> Next {
        // Take the buffer out so commands can borrow lines from it while
        // the session is mutated: no copy per command line.
        let mut inbuf = std::mem::take(&mut self.inbuf);
        let mut pos = 0;
        let mut next = Next::Continue;
        while pos < inbuf.len() && next == Next::Continue {
            match &mut self.mode {
                Mode::Command | Mode::Auth(_) => match self.framer.next_frame(&inbuf[pos..]) {
                    Frame::Incomplete => break,
                    Frame::Discard(n) => pos += n,
                    Frame::Bad(n, why) => {
                        pos += n;
                        next = self.line_error(why);
                    }
                    Frame::Line(n) => {
                        let line = &inbuf[pos..pos + n];
                        pos += n;
                        self.pipelined_more = pos < inbuf.len();
                        next = match std::mem::replace(&mut self.mode, Mode::Command) {
                            Mode::Auth(step) => Box::pin(self.auth_line(step, line)).await,
                            _ => self.command(line).await,
                        };
                        if next == Next::StartTls && pos < inbuf.len() {
                            // CVE-2011-0411: nothing sent in clear before the
                            // handshake may count as a command after it.
                            self.ctx.logger.emit(&Event::StarttlsInjection {
                                client_ip: self.peer.ip(),
                                octets: (inbuf.len() - pos) as u64,
                            });
                            pos = inbuf.len();
                        }
                    }
                },
                Mode::Data(_) => {
                    let (used, then) = self.data_bytes(&inbuf[pos..]).await;
                    pos += used;
                    next = then;
                }
                Mode::Bdat { .. } => pos += self.chunk_bytes(&inbuf[pos..]).await,
            }
        }
        inbuf.drain(..pos);
        self.inbuf = inbuf;
        next
    }

    /// Feeds DATA bytes to the decoder; returns how many were used, and
    /// whether the session goes on.
    async fn data_bytes(&mut self, input: &[u8]) -> (usize, Next) {
        let (Mode::Data(decoder), Some(txn)) = (&mut self.mode, self.txn.as_mut()) else {
            self.mode = Mode::Command;
            return (0, Next::Continue);
        };
        let fed = decoder.feed(input, &mut txn.body);
        txn.account_memory(&self.ctx.body_memory);
        match fed {
            Some(used) => {
                let flaws = decoder.flaws();
                self.mode = Mode::Command;
                // Commands behind the end of data, sent before our reply:
                // what a smuggler relies on (Postfix's
                // smtpd_forbid_unauth_pipelining); the message is not taken.
                if used < input.len() && self.forbids_pipelining() {
                    return (input.len(), self.out_of_sync("end of DATA"));
                }
                Box::pin(self.end_of_data(flaws)).await;
                (used, Next::Continue)
            }
            None => (input.len(), Next::Continue),
        }
    }

    /// Takes BDAT chunk bytes; returns how many were used.
    async fn chunk_bytes(&mut self, input: &[u8]) -> usize {
        let Mode::Bdat {
            remaining,
            last,
            discard,
        } = &mut self.mode
        else {
            return 0;
        };
        let take = (*remaining).min(input.len());
        *remaining -= take;
        let (done, last, discard) = (*remaining == 0, *last, *discard);
        if done {
            self.mode = Mode::Command;
        }
        if discard {
            return take;
        }
        let limit = self.ctx.config.smtpd.message_size_limit;
        if let Some(txn) = self.txn.as_mut() {
            txn.append_chunk(&input[..take], limit, &self.ctx.body_memory);
        }
        if done {
            Box::pin(self.end_of_chunk(last)).await;
        }
        take
    }

    pub(super) fn reply(&mut self, text: &str) {
        self.out.extend_from_slice(text.as_bytes());
        self.out.extend_from_slice(b"\r\n");
    }

    pub(super) fn reply_fmt(&mut self, args: std::fmt::Arguments<'_>) {
        use std::io::Write;
        let _ = self.out.write_fmt(args);
        self.out.extend_from_slice(b"\r\n");
    }

    /// Counts a client error; past the limit the session ends with 421.
    pub(super) fn error(&mut self, text: &str) -> Next {
        self.reply(text);
        self.error_counted()
    }

    /// Counts an error whose reply was already written.
    pub(super) fn error_counted(&mut self) -> Next {
        self.errors += 1;
        if self.errors >= self.ctx.config.smtpd.max_errors {
            let ctx = self.ctx.clone();
            self.reply_fmt(format_args!(
                "421 4.7.0 {} Error: too many errors",
                ctx.config.hostname
            ));
            return Next::Close;
        }
        Next::Continue
    }

    fn line_error(&mut self, why: LineError) -> Next {
        match why {
            LineError::TooLong => self.error("500 5.5.2 Error: command line too long"),
            LineError::BareLf => {
                self.error("500 5.5.2 Error: bare <LF> received; commands must end with <CR><LF>")
            }
            LineError::Nul => self.error("501 5.5.2 Error: NUL character in command"),
        }
    }
}

/// SMTP sessions open in this process (`sluice_sessions_open`).
pub(super) static OPEN_SESSIONS: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

/// Counts a session in [`OPEN_SESSIONS`] for as long as it lives.
struct OpenSession;

impl OpenSession {
    fn new() -> OpenSession {
        OPEN_SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        OpenSession
    }
}

impl Drop for OpenSession {
    fn drop(&mut self) {
        OPEN_SESSIONS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}
