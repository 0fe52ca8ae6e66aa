//! SMTP receive: one async task per session, an explicit state machine over
//! the pure parsers of `sluice-proto`.
//!
//! Replies to pipelined commands are collected and written in one go just
//! before the session would block reading. A message is acknowledged with
//! `250` only after the spool has synced it (group commit); then it is
//! handed to the scheduler.
//!
//! Trust: everything the client sends is hostile until parsed. Every error
//! path has a defined reply; `max_errors` bounds how long a misbehaving
//! client may keep trying.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_proto::command::{parse_command, ParseError, Request};
use sluice_proto::data::{self, BareLinePolicy, DataDecoder, DataLimits};
use sluice_proto::line::{Frame, LineError, LineFramer};
use sluice_spool::{Envelope, SpoolError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::local::Resolution;
use crate::log::qid;
use crate::schedule::{Event, Incoming};
use crate::server::Context;
use crate::{log, timefmt};

/// Envelope flag: the body was declared 8BITMIME.
pub const FLAG_8BITMIME: u32 = 1;
/// Envelope flag: the client asked for SMTPUTF8.
pub const FLAG_SMTPUTF8: u32 = 2;

const MEMORY_EXHAUSTED: &str =
    "452 4.3.1 Error: insufficient system resources for this message now; try again later";

/// Longest address we accept (RFC 5321 path limit).
const MAX_ADDRESS: usize = 256;

enum Mode {
    Command,
    Data(DataDecoder),
    Bdat {
        remaining: usize,
        last: bool,
        discard: bool,
    },
}

/// The mail transaction between MAIL and the end of data.
struct Transaction {
    id: u64,
    sender: String,
    flags: u32,
    recipients: Vec<String>,
    body: Vec<u8>,
    /// BDAT has been used in this transaction (DATA is then refused).
    bdat: bool,
    /// A BDAT chunk overflowed the size limit; the rest is read and dropped.
    bdat_too_big: bool,
    /// Some recipient resolved to "discard": accept even with no recipients left.
    discard: bool,
    /// Share of the global body-memory budget held for `body`.
    memory: Option<OwnedSemaphorePermit>,
    /// The budget ran out: the rest is read and dropped, then 452.
    over_budget: bool,
}

/// Bytes reserved from the body-memory budget at a time.
const MEMORY_STEP_KIB: u32 = 64;

/// Reserves budget for a grown body; on exhaustion drops the body.
fn account_memory(budget: &Arc<Semaphore>, txn: &mut Transaction) {
    if txn.over_budget {
        txn.body = Vec::new();
        return;
    }
    let held = |t: &Transaction| t.memory.as_ref().map_or(0, |p| p.num_permits()) << 10;
    while txn.body.len() > held(txn) {
        match budget.clone().try_acquire_many_owned(MEMORY_STEP_KIB) {
            Ok(more) => match txn.memory.as_mut() {
                Some(permit) => permit.merge(more),
                None => txn.memory = Some(more),
            },
            Err(_) => {
                txn.over_budget = true;
                txn.body = Vec::new();
                txn.memory = None;
                return;
            }
        }
    }
}

/// What the command loop should do after a step.
#[derive(PartialEq, Eq)]
enum Next {
    Continue,
    Close,
}

pub struct Session<S> {
    io: S,
    ctx: Arc<Context>,
    peer: SocketAddr,
    trusted: bool,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    framer: LineFramer,
    mode: Mode,
    helo: Option<String>,
    esmtp: bool,
    txn: Option<Transaction>,
    errors: u32,
    messages: u32,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    pub fn new(io: S, peer: SocketAddr, ctx: Arc<Context>) -> Self {
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
            messages: 0,
        }
    }

    /// Runs the session to its end.
    pub async fn run(mut self) {
        let ctx = self.ctx.clone();
        log!(
            ctx.logger,
            "smtpd",
            "connect from [{}]:{}",
            self.peer.ip(),
            self.peer.port()
        );
        self.reply_fmt(format_args!(
            "220 {} {}",
            ctx.config.hostname, ctx.config.smtpd.banner
        ));
        let result = self.converse().await;
        if let Err(err) = result {
            log!(
                ctx.logger,
                "smtpd",
                "lost connection from [{}]: {err}",
                self.peer.ip()
            );
        }
        log!(
            ctx.logger,
            "smtpd",
            "disconnect from [{}]:{} messages={} errors={}",
            self.peer.ip(),
            self.peer.port(),
            self.messages,
            self.errors
        );
    }

    async fn converse(&mut self) -> std::io::Result<()> {
        let idle = Duration::from_secs(self.ctx.config.smtpd.idle_timeout_secs.max(1));
        let data_wait = Duration::from_secs(self.ctx.config.smtpd.data_timeout_secs.max(1));
        loop {
            if self.process_input().await == Next::Close {
                self.flush().await?;
                return Ok(());
            }
            self.flush().await?;
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
                    self.flush().await?;
                    return Ok(());
                }
            }
        }
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        if !self.out.is_empty() {
            self.io.write_all(&self.out).await?;
            self.out.clear();
        }
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
                        next = self.command(line).await;
                    }
                },
                Mode::Data(decoder) => {
                    let txn = self.txn.as_mut().expect("DATA mode has a transaction");
                    let fed = decoder.feed(&inbuf[pos..], &mut txn.body);
                    account_memory(&self.ctx.body_memory, txn);
                    match fed {
                        Some(used) => {
                            pos += used;
                            let flaws = decoder.flaws();
                            self.mode = Mode::Command;
                            self.end_of_message(flaws).await;
                        }
                        None => pos = inbuf.len(),
                    }
                }
                Mode::Bdat {
                    remaining,
                    last,
                    discard,
                } => {
                    let take = (*remaining).min(inbuf.len() - pos);
                    let (last, discard) = (*last, *discard);
                    *remaining -= take;
                    let done = *remaining == 0;
                    if discard {
                        pos += take;
                        if done {
                            self.mode = Mode::Command;
                        }
                        continue;
                    }
                    let txn = self.txn.as_mut().expect("BDAT mode has a transaction");
                    if !txn.bdat_too_big {
                        if txn.body.len() + take > self.ctx.config.smtpd.message_size_limit {
                            txn.bdat_too_big = true;
                            txn.body = Vec::new();
                        } else {
                            txn.body.extend_from_slice(&inbuf[pos..pos + take]);
                            account_memory(&self.ctx.body_memory, txn);
                        }
                    }
                    pos += take;
                    if done {
                        self.mode = Mode::Command;
                        self.end_of_chunk(last).await;
                    }
                }
            }
        }
        inbuf.drain(..pos);
        self.inbuf = inbuf;
        next
    }

    fn reply(&mut self, text: &str) {
        self.out.extend_from_slice(text.as_bytes());
        self.out.extend_from_slice(b"\r\n");
    }

    fn reply_fmt(&mut self, args: std::fmt::Arguments<'_>) {
        use std::io::Write;
        let _ = self.out.write_fmt(args);
        self.out.extend_from_slice(b"\r\n");
    }

    /// Counts a client error; past the limit the session ends with 421.
    fn error(&mut self, text: &str) -> Next {
        self.reply(text);
        self.error_counted()
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

    async fn command(&mut self, line: &[u8]) -> Next {
        let request = match parse_command(line) {
            Ok(req) => req,
            Err(err) => return self.parse_error(err),
        };
        match request {
            Request::Ehlo { host } => self.hello(host.into_owned(), true),
            Request::Helo { host } => self.hello(host.into_owned(), false),
            Request::Mail { from } => {
                if self.helo.is_none() {
                    return self.error("503 5.5.1 Error: send HELO/EHLO first");
                }
                if self.txn.is_some() {
                    return self.error("503 5.5.1 Error: nested MAIL command");
                }
                if from.address.len() > MAX_ADDRESS {
                    return self.error("501 5.1.7 Bad sender address syntax");
                }
                let limit = self.ctx.config.smtpd.message_size_limit;
                if from.size > limit {
                    return self.error("552 5.3.4 Message size exceeds fixed limit");
                }
                let mut flags = 0;
                if from.flags & smtp_proto::MAIL_BODY_8BITMIME != 0 {
                    flags |= FLAG_8BITMIME;
                }
                if from.flags & smtp_proto::MAIL_SMTPUTF8 != 0 {
                    flags |= FLAG_SMTPUTF8;
                }
                if !from.address.is_ascii() && flags & FLAG_SMTPUTF8 == 0 {
                    return self.error("553 5.6.7 Error: non-ASCII sender address needs SMTPUTF8");
                }
                self.txn = Some(Transaction {
                    id: self.ctx.spool.new_id(),
                    sender: from.address.into_owned(),
                    flags,
                    recipients: Vec::new(),
                    body: Vec::new(),
                    bdat: false,
                    bdat_too_big: false,
                    discard: false,
                    memory: None,
                    over_budget: false,
                });
                self.reply("250 2.1.0 Ok");
                Next::Continue
            }
            Request::Rcpt { to } => {
                let max = self.ctx.config.smtpd.max_recipients;
                let trusted = self.trusted;
                let Some(txn) = self.txn.as_mut() else {
                    return self.error("503 5.5.1 Error: need MAIL command");
                };
                let address = to.address.into_owned();
                if address.is_empty() || address.len() > MAX_ADDRESS || !address.contains('@') {
                    return self.error("501 5.1.3 Bad recipient address syntax");
                }
                if !address.is_ascii() && txn.flags & FLAG_SMTPUTF8 == 0 {
                    return self
                        .error("553 5.6.7 Error: non-ASCII recipient address needs SMTPUTF8");
                }
                if txn.recipients.len() >= max {
                    self.reply("452 4.5.3 Error: too many recipients");
                    return Next::Continue;
                }
                self.recipient(address, trusted).await
            }
            Request::Data => {
                let Some(txn) = self.txn.as_mut() else {
                    return self.error("503 5.5.1 Error: need MAIL command");
                };
                if txn.bdat {
                    return self.error("503 5.5.1 Error: DATA after BDAT");
                }
                if txn.recipients.is_empty() && !txn.discard {
                    return self.error("554 5.5.1 Error: no valid recipients");
                }
                self.start_body();
                let smtpd = &self.ctx.config.smtpd;
                self.mode = Mode::Data(DataDecoder::new(DataLimits {
                    max_size: smtpd.message_size_limit,
                    max_line: if smtpd.text_line_limit == 0 {
                        usize::MAX
                    } else {
                        smtpd.text_line_limit
                    },
                    bare_line: self.bare_line_policy(),
                }));
                self.reply("354 End data with <CR><LF>.<CR><LF>");
                Next::Continue
            }
            Request::Bdat {
                chunk_size,
                is_last,
            } => {
                // The chunk follows the command whatever we answer, so it is
                // always read; a refused chunk is read and thrown away.
                let accepted = match self.txn.as_mut() {
                    Some(txn) if !txn.recipients.is_empty() || txn.discard => {
                        let first = !txn.bdat;
                        txn.bdat = true;
                        if first {
                            self.start_body();
                        }
                        true
                    }
                    _ => false,
                };
                if chunk_size > 0 {
                    self.mode = Mode::Bdat {
                        remaining: chunk_size,
                        last: is_last,
                        discard: !accepted,
                    };
                }
                if !accepted {
                    return self.error("503 5.5.1 Error: need MAIL and RCPT before BDAT");
                }
                if chunk_size == 0 {
                    self.end_of_chunk(is_last).await;
                }
                Next::Continue
            }
            Request::Rset => {
                self.txn = None;
                self.reply("250 2.0.0 Ok");
                Next::Continue
            }
            Request::Noop { .. } => {
                self.reply("250 2.0.0 Ok");
                Next::Continue
            }
            Request::Quit => {
                self.reply("221 2.0.0 Bye");
                Next::Close
            }
            Request::Vrfy { .. } => {
                self.reply(
                    "252 2.0.0 Cannot VRFY user, but will accept message and attempt delivery",
                );
                Next::Continue
            }
            Request::Help { .. } => {
                self.reply(
                    "214 2.0.0 Commands: EHLO HELO MAIL RCPT DATA BDAT RSET NOOP QUIT VRFY HELP",
                );
                Next::Continue
            }
            Request::StartTls
            | Request::Auth { .. }
            | Request::Expn { .. }
            | Request::Etrn { .. } => self.error("502 5.5.1 Error: command not implemented"),
            _ => self.error("502 5.5.1 Error: command not implemented"),
        }
    }

    /// Decides one recipient: local mailbox/alias, relay, or refusal.
    async fn recipient(&mut self, address: String, trusted: bool) -> Next {
        let ctx = self.ctx.clone();
        let resolution = ctx.local.resolve(&address).await;
        let Some(txn) = self.txn.as_mut() else {
            return Next::Continue;
        };
        match resolution {
            Ok(Resolution::NotLocal) => {
                if !ctx.policy.allows(trusted, &address) {
                    log!(
                        ctx.logger,
                        "smtpd",
                        "NOQUEUE: reject: RCPT from [{}]: 554 5.7.1 <{address}>: Relay access denied",
                        self.peer.ip()
                    );
                    self.reply_fmt(format_args!("554 5.7.1 <{address}>: Relay access denied"));
                    self.errors += 1;
                    return Next::Continue;
                }
                if !txn.recipients.contains(&address) {
                    txn.recipients.push(address);
                }
            }
            Ok(Resolution::Accept(targets)) => {
                for t in targets {
                    if !txn.recipients.contains(&t) {
                        txn.recipients.push(t);
                    }
                }
            }
            Ok(Resolution::Discard) => {
                txn.discard = true;
                log!(
                    ctx.logger,
                    "smtpd",
                    "{}: to=<{address}>: discarded by alias",
                    qid(txn.id)
                );
            }
            Ok(Resolution::Unknown) => {
                log!(
                    ctx.logger,
                    "smtpd",
                    "NOQUEUE: reject: RCPT from [{}]: 550 5.1.1 <{address}>: User unknown",
                    self.peer.ip()
                );
                self.reply_fmt(format_args!(
                    "550 5.1.1 <{address}>: Recipient address rejected: User unknown in virtual mailbox table"
                ));
                return self.error_counted();
            }
            Err(err) => {
                log!(
                    ctx.logger,
                    "smtpd",
                    "NOQUEUE: reject: RCPT from [{}]: 451 4.3.0 <{address}>: Temporary lookup failure: {err}",
                    self.peer.ip()
                );
                self.reply_fmt(format_args!(
                    "451 4.3.0 <{address}>: Temporary lookup failure"
                ));
                return Next::Continue;
            }
        }
        self.reply("250 2.1.5 Ok");
        Next::Continue
    }

    fn parse_error(&mut self, err: ParseError) -> Next {
        match err {
            ParseError::UnknownCommand => self.error("500 5.5.1 Error: command not recognized"),
            ParseError::InvalidSenderAddress => self.error("501 5.1.7 Bad sender address syntax"),
            ParseError::InvalidRecipientAddress => {
                self.error("501 5.1.3 Bad recipient address syntax")
            }
            ParseError::SyntaxError { syntax } => {
                self.reply_fmt(format_args!("501 5.5.4 Syntax: {syntax}"));
                self.error_counted()
            }
            ParseError::InvalidParameter { param } => {
                self.reply_fmt(format_args!("501 5.5.4 Invalid parameter {param:?}"));
                self.error_counted()
            }
            ParseError::UnsupportedParameter { param } => {
                self.reply_fmt(format_args!("555 5.5.4 Unsupported parameter {param:?}"));
                self.error_counted()
            }
            _ => self.error("501 5.5.4 Syntax error"),
        }
    }

    /// Counts an error whose reply was already written.
    fn error_counted(&mut self) -> Next {
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

    fn hello(&mut self, host: String, esmtp: bool) -> Next {
        if host.is_empty() {
            return self.error("501 5.5.4 Syntax: EHLO hostname");
        }
        self.txn = None;
        self.helo = Some(host);
        self.esmtp = esmtp;
        let ctx = self.ctx.clone();
        let name = &ctx.config.hostname;
        if esmtp {
            let size = ctx.config.smtpd.message_size_limit;
            self.reply_fmt(format_args!(
                "250-{name}\r\n250-PIPELINING\r\n250-SIZE {size}\r\n250-8BITMIME\r\n250-ENHANCEDSTATUSCODES\r\n250-SMTPUTF8\r\n250 CHUNKING"
            ));
        } else {
            self.reply_fmt(format_args!("250 {name}"));
        }
        Next::Continue
    }

    fn bare_line_policy(&self) -> BareLinePolicy {
        if self.ctx.config.smtpd.bare_line_ends == "normalize" {
            BareLinePolicy::Normalize
        } else {
            BareLinePolicy::Reject
        }
    }

    /// Starts the body with our Received: header (RFC 5321 §4.4).
    fn start_body(&mut self) {
        let hostname = &self.ctx.config.hostname;
        let Some(txn) = self.txn.as_mut() else { return };
        let helo = self.helo.as_deref().unwrap_or("unknown");
        let with = match (self.esmtp, txn.flags & FLAG_SMTPUTF8 != 0) {
            (true, true) => "UTF8SMTP",
            (true, false) => "ESMTP",
            _ => "SMTP",
        };
        let for_clause = match txn.recipients.as_slice() {
            [only] => format!("\r\n\tfor <{only}>"),
            _ => String::new(),
        };
        let header = format!(
            "Received: from {helo} ([{ip}])\r\n\tby {hostname} (Sluice) with {with} id {id}{for_clause};\r\n\t{date}\r\n",
            ip = self.peer.ip(),
            id = qid(txn.id),
            date = timefmt::rfc5322(timefmt::now_millis()),
        );
        txn.body.reserve(header.len() + 1024);
        txn.body.extend_from_slice(header.as_bytes());
    }

    async fn end_of_message(&mut self, flaws: data::DataFlaws) {
        let Some(txn) = self.txn.take() else { return };
        if txn.over_budget {
            self.reject(&txn, MEMORY_EXHAUSTED);
        } else if flaws.too_big {
            self.reject(&txn, "552 5.3.4 Error: message file too big");
        } else if flaws.bare_cr_or_lf {
            self.reject(
                &txn,
                "554 5.6.0 Error: bare <CR> or <LF> in message; lines must end with <CR><LF>",
            );
        } else if flaws.line_too_long {
            self.reject(
                &txn,
                "554 5.6.0 Error: message line longer than 1000 octets (RFC 5321)",
            );
        } else {
            self.queue(txn).await;
        }
    }

    async fn end_of_chunk(&mut self, last: bool) {
        let (too_big, len) = match self.txn.as_ref() {
            Some(t) => (t.bdat_too_big, t.body.len()),
            None => return,
        };
        if !last {
            self.reply_fmt(format_args!("250 2.0.0 Ok: {len} octets received"));
            return;
        }
        let Some(mut txn) = self.txn.take() else {
            return;
        };
        if too_big {
            self.reject(&txn, "552 5.3.4 Error: message file too big");
            return;
        }
        if data::has_bare_cr_or_lf(&txn.body) {
            if self.bare_line_policy() == BareLinePolicy::Reject {
                self.reject(
                    &txn,
                    "554 5.6.0 Error: bare <CR> or <LF> in message; lines must end with <CR><LF>",
                );
                return;
            }
            txn.body = data::normalize_line_ends(&txn.body);
        }
        self.queue(txn).await;
    }

    fn reject(&mut self, txn: &Transaction, reply: &str) {
        log!(
            self.ctx.logger,
            "smtpd",
            "{}: reject: end of data from [{}]: {reply}; from=<{}>",
            qid(txn.id),
            self.peer.ip(),
            txn.sender
        );
        self.reply(reply);
        self.errors += 1;
    }

    /// Spools the message and, once it is synced, says 250.
    async fn queue(&mut self, txn: Transaction) {
        // A mail loop shows as a growing pile of Received: headers.
        if received_headers(&txn.body) > self.ctx.config.smtpd.hop_count_limit {
            self.reject(&txn, "554 5.4.6 Error: too many hops (mail loop?)");
            return;
        }
        if txn.recipients.is_empty() {
            // Every recipient was an alias to "discard": nothing to keep.
            log!(
                self.ctx.logger,
                "smtpd",
                "{}: discarded (no recipients left)",
                qid(txn.id)
            );
            self.reply_fmt(format_args!("250 2.0.0 Ok: discarded as {}", qid(txn.id)));
            return;
        }
        let envelope = Envelope {
            id: txn.id,
            arrival: timefmt::now_millis(),
            sender: txn.sender,
            recipients: txn.recipients,
            flags: txn.flags,
        };
        let body = Arc::new(txn.body);
        match self.ctx.spool.store(envelope.clone(), body.clone()).await {
            Ok(body_ref) => {
                self.messages += 1;
                log!(
                    self.ctx.logger,
                    "smtpd",
                    "{}: client=[{}]:{}, from=<{}>, size={}, nrcpt={} (queue active)",
                    qid(envelope.id),
                    self.peer.ip(),
                    self.peer.port(),
                    envelope.sender,
                    body.len(),
                    envelope.recipients.len()
                );
                self.reply_fmt(format_args!("250 2.0.0 Ok: queued as {}", qid(envelope.id)));
                let done = vec![false; envelope.recipients.len()];
                let _ = self.ctx.scheduler.send(Event::Incoming(Incoming {
                    envelope,
                    body_ref,
                    body: Some(body),
                    done,
                }));
            }
            Err(err) => {
                log!(
                    self.ctx.logger,
                    "smtpd",
                    "{}: reject: spool: {err}; from=<{}>",
                    qid(envelope.id),
                    envelope.sender
                );
                match err {
                    SpoolError::Full => self.reply("452 4.3.1 Error: insufficient system storage"),
                    _ => self.reply("451 4.3.0 Error: queue file write error"),
                }
            }
        }
    }
}

/// Number of `Received:` headers in the header section of `body`.
fn received_headers(body: &[u8]) -> usize {
    let end = memchr::memmem::find(body, b"\r\n\r\n").unwrap_or(body.len());
    body[..end]
        .split(|&b| b == b'\n')
        .filter(|line| line.len() >= 9 && line[..9].eq_ignore_ascii_case(b"received:"))
        .count()
}
