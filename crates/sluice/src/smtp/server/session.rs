//! One SMTP session: an explicit state machine over the pure parsers of
//! `sluice-proto`, one async task per connection.
//!
//! Replies to pipelined commands are collected and written in one go just
//! before the session would block reading. Reads and writes are timed out
//! (`idle_timeout_secs`, `data_timeout_secs`): a client that stops sending
//! or stops reading is dropped with `421`, so it cannot hold a session slot.
//!
//! Trust: everything the client sends is hostile until parsed. Every error
//! path has a defined reply; `max_errors` bounds how long a misbehaving
//! client may keep trying.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_proto::data::DataDecoder;
use sluice_proto::line::{Frame, LineError, LineFramer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::transaction::Transaction;
use super::SessionContext;
use crate::log;

pub(super) enum Mode {
    Command,
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
}

pub struct Session<S> {
    io: S,
    pub(super) ctx: Arc<SessionContext>,
    pub(super) peer: SocketAddr,
    pub(super) trusted: bool,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    framer: LineFramer,
    pub(super) mode: Mode,
    pub(super) helo: Option<String>,
    pub(super) esmtp: bool,
    pub(super) txn: Option<Transaction>,
    pub(super) errors: u32,
    /// NOOP, RSET, VRFY, HELP, EHLO/HELO so far (junk_command_limit).
    pub(super) junk: u32,
    pub(super) messages: u32,
    /// More input was already buffered behind the command being run.
    pub(super) pipelined_more: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    pub fn new(io: S, peer: SocketAddr, ctx: Arc<SessionContext>) -> Self {
        let trusted = ctx.policy.is_trusted(peer.ip());
        let framer = LineFramer::new(ctx.config.smtpd.command_line_limit);
        Session {
            io,
            ctx,
            peer,
            trusted,
            inbuf: Vec::with_capacity(4096),
            out: Vec::with_capacity(512),
            framer,
            mode: Mode::Command,
            helo: None,
            esmtp: false,
            txn: None,
            errors: 0,
            junk: 0,
            messages: 0,
            pipelined_more: false,
        }
    }

    /// Runs the session to its end.
    pub async fn run(mut self) {
        let ctx = self.ctx.clone();
        let (ip, port) = (self.peer.ip(), self.peer.port());
        log!(ctx.logger, "smtpd", "connect from [{ip}]:{port}");
        if self.talks_before_greeting().await {
            log!(
                ctx.logger,
                "smtpd",
                "PREGREET from [{ip}]:{port}: client talked before the greeting; disconnecting"
            );
            self.reply_fmt(format_args!(
                "554 5.5.1 {} Error: SMTP protocol synchronization (talked before the greeting)",
                ctx.config.hostname
            ));
            let _ = self.flush(Duration::from_secs(5)).await;
            return;
        }
        self.reply_fmt(format_args!(
            "220 {} {}",
            ctx.config.hostname, ctx.config.smtpd.banner
        ));
        if let Err(err) = self.converse().await {
            log!(ctx.logger, "smtpd", "lost connection from [{ip}]: {err}");
        }
        log!(
            ctx.logger,
            "smtpd",
            "disconnect from [{ip}]:{port} messages={} errors={}",
            self.messages,
            self.errors
        );
    }

    /// Waits `greet_pause_ms` before the greeting; true if the client sent
    /// anything meanwhile (RFC 5321 §4.3.1: the client waits for the 220).
    async fn talks_before_greeting(&mut self) -> bool {
        let pause = Duration::from_millis(self.ctx.config.smtpd.greet_pause_ms);
        if pause.is_zero() {
            return false;
        }
        match tokio::time::timeout(pause, self.io.read_buf(&mut self.inbuf)).await {
            Ok(Ok(n)) => n > 0,
            Ok(Err(_)) => true,
            Err(_) => false,
        }
    }

    async fn converse(&mut self) -> std::io::Result<()> {
        let idle = Duration::from_secs(self.ctx.config.smtpd.idle_timeout_secs.max(1));
        let data_wait = Duration::from_secs(self.ctx.config.smtpd.data_timeout_secs.max(1));
        loop {
            if self.process_input().await == Next::Close {
                self.flush(idle).await?;
                return Ok(());
            }
            self.flush(idle).await?;
            let wait = match self.mode {
                Mode::Command => idle,
                _ => data_wait,
            };
            if self.inbuf.capacity() - self.inbuf.len() < 2048 {
                self.inbuf.reserve(16 << 10);
            }
            match tokio::time::timeout(wait, self.io.read_buf(&mut self.inbuf)).await {
                Ok(Ok(0)) => return Ok(()),
                Ok(Ok(_)) => {}
                Ok(Err(err)) => return Err(err),
                Err(_) => {
                    let ctx = self.ctx.clone();
                    self.reply_fmt(format_args!(
                        "421 4.4.2 {} Error: timeout exceeded",
                        ctx.config.hostname
                    ));
                    self.flush(idle).await?;
                    return Ok(());
                }
            }
        }
    }

    /// Writes the collected replies; a client that does not read them
    /// within `limit` is dropped.
    async fn flush(&mut self, limit: Duration) -> std::io::Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        match tokio::time::timeout(limit, self.io.write_all(&self.out)).await {
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
                Mode::Command => match self.framer.next_frame(&inbuf[pos..]) {
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
                        next = self.command(line).await;
                    }
                },
                Mode::Data(_) => pos += self.data_bytes(&inbuf[pos..]).await,
                Mode::Bdat { .. } => pos += self.chunk_bytes(&inbuf[pos..]).await,
            }
        }
        inbuf.drain(..pos);
        self.inbuf = inbuf;
        next
    }

    /// Feeds DATA bytes to the decoder; returns how many were used.
    async fn data_bytes(&mut self, input: &[u8]) -> usize {
        let (Mode::Data(decoder), Some(txn)) = (&mut self.mode, self.txn.as_mut()) else {
            self.mode = Mode::Command;
            return 0;
        };
        let fed = decoder.feed(input, &mut txn.body);
        txn.account_memory(&self.ctx.body_memory);
        match fed {
            Some(used) => {
                let flaws = decoder.flaws();
                self.mode = Mode::Command;
                self.end_of_data(flaws).await;
                used
            }
            None => input.len(),
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
            self.end_of_chunk(last).await;
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
