//! The mail transaction between MAIL and the end of the body, and the one
//! way it ends: [`Session::finish`], shared by DATA and BDAT.
//!
//! Invariant: a transaction is answered `250 … queued as` only after the
//! spool has synced the whole body; anything that made the body incomplete
//! (over the size limit, over the memory budget, malformed) is recorded in
//! `reject` while the rest of the body is read and dropped, and
//! `finish` refuses it — there is no path where a dropped body is queued.

use std::sync::Arc;

use sluice_proto::command::RcptParams;
use sluice_proto::data::{self, BareLinePolicy, DataFlaws};
use sluice_spool::{Dsn, Envelope, SpoolError};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::sender_auth;
use super::session::Session;
use crate::log;
use crate::log::qid;
use crate::message::{body, flags};
use crate::queue::QueuedMessage;
use crate::timefmt;

const MEMORY_EXHAUSTED: &str =
    "452 4.3.1 Error: insufficient system resources for this message now; try again later";
const TOO_BIG: &str = "552 5.3.4 Error: message file too big";
const BARE_LINE_END: &str =
    "554 5.6.0 Error: bare <CR> or <LF> in message; lines must end with <CR><LF>";
const NUL_IN_MESSAGE: &str = "554 5.6.0 Error: NUL character in message";
const LINE_TOO_LONG: &str = "554 5.6.0 Error: message line longer than 1000 octets (RFC 5321)";

/// Bytes reserved from the body-memory budget at a time.
const MEMORY_STEP_KIB: u32 = 64;

/// Why the body being received will be refused at its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reject {
    TooBig,
    OverBudget,
}

pub(super) struct Transaction {
    pub id: u64,
    pub sender: String,
    pub flags: u32,
    pub recipients: Vec<String>,
    pub body: Vec<u8>,
    /// BDAT has been used in this transaction (DATA is then refused).
    pub bdat: bool,
    /// Some recipient resolved to "discard": accept even with none left.
    pub has_discarded: bool,
    /// Set when the body can no longer be kept; the rest is read and dropped.
    pub reject: Option<Reject>,
    /// Share of the global body-memory budget held for `body`.
    memory: Option<OwnedSemaphorePermit>,
    /// DSN parameters (RFC 3461), one NOTIFY/ORCPT per recipient ...
    pub dsn: Dsn,
    /// ... stored only if the client gave any.
    pub dsn_given: bool,
}

impl Transaction {
    pub fn new(id: u64, sender: String, flags: u32) -> Transaction {
        Transaction {
            id,
            sender,
            flags,
            recipients: Vec::new(),
            body: Vec::new(),
            bdat: false,
            has_discarded: false,
            reject: None,
            memory: None,
            dsn: Dsn::default(),
            dsn_given: false,
        }
    }

    /// Adds recipients not already present, each with the DSN parameters
    /// of the RCPT that named it (an alias's addresses inherit them);
    /// false (and nothing added) if that would make more than `max`.
    pub fn add_recipients(
        &mut self,
        new: impl Iterator<Item = String>,
        max: usize,
        params: &RcptParams,
    ) -> bool {
        let before = self.recipients.len();
        for r in new {
            if !self.recipients.contains(&r) {
                self.recipients.push(r);
                self.dsn.notify.push(params.notify);
                self.dsn
                    .orcpt
                    .push(params.orcpt.clone().unwrap_or_default());
            }
        }
        if self.recipients.len() > max {
            self.recipients.truncate(before);
            self.dsn.notify.truncate(before);
            self.dsn.orcpt.truncate(before);
            return false;
        }
        if *params != RcptParams::default() {
            self.dsn_given = true;
        }
        true
    }

    /// Drops the body: it will be refused with `why`.
    fn drop_body(&mut self, why: Reject) {
        self.reject.get_or_insert(why);
        self.body = Vec::new();
        self.memory = None;
    }

    /// Reserves budget for a grown body; on exhaustion drops the body.
    pub fn account_memory(&mut self, budget: &Arc<Semaphore>) {
        if self.reject.is_some() {
            self.body.clear();
            return;
        }
        let held = |t: &Transaction| t.memory.as_ref().map_or(0, |p| p.num_permits()) << 10;
        // Capacity, not length: that is what is resident (audit §D4).
        while self.body.capacity() > held(self) {
            match budget.clone().try_acquire_many_owned(MEMORY_STEP_KIB) {
                Ok(more) => match self.memory.as_mut() {
                    Some(permit) => permit.merge(more),
                    None => self.memory = Some(more),
                },
                Err(_) => return self.drop_body(Reject::OverBudget),
            }
        }
    }

    /// Appends one BDAT chunk (or drops it when the body is already lost).
    pub fn append_chunk(&mut self, chunk: &[u8], size_limit: usize, budget: &Arc<Semaphore>) {
        if self.reject.is_some() {
            return;
        }
        if self.body.len() + chunk.len() > size_limit {
            return self.drop_body(Reject::TooBig);
        }
        self.body.extend_from_slice(chunk);
        self.account_memory(budget);
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    pub(super) fn bare_line_policy(&self) -> BareLinePolicy {
        if self.ctx.config.smtpd.bare_line_ends == "normalize" {
            BareLinePolicy::Normalize
        } else {
            BareLinePolicy::Reject
        }
    }

    /// Starts the body with our Received: header (RFC 5321 §4.4).
    pub(super) fn start_body(&mut self) {
        let hostname = &self.ctx.config.hostname;
        let Some(txn) = self.txn.as_mut() else { return };
        let helo = self.helo.as_deref().unwrap_or("unknown");
        // RFC 3848 / RFC 6531 protocol names: S for TLS, A for AUTH.
        let with = format!(
            "{}SMTP{}{}",
            match (self.esmtp, txn.flags & flags::SMTPUTF8 != 0) {
                (true, true) => "UTF8",
                (true, false) => "E",
                _ => "",
            },
            if self.tls.is_some() { "S" } else { "" },
            if self.auth.is_some() { "A" } else { "" },
        );
        let tls = match &self.tls {
            Some(t) => format!("\r\n\t(using {t})"),
            None => String::new(),
        };
        let for_clause = match txn.recipients.as_slice() {
            [only] => format!("\r\n\tfor <{only}>"),
            _ => String::new(),
        };
        let header = format!(
            "Received: from {helo} ([{ip}]){tls}\r\n\tby {hostname} (Sluice) with {with} id {id}{for_clause};\r\n\t{date}\r\n",
            ip = self.peer.ip(),
            id = qid(txn.id),
            date = timefmt::rfc5322(timefmt::now_millis()),
        );
        txn.body.reserve(header.len() + 1024);
        txn.body.extend_from_slice(header.as_bytes());
    }

    /// The final dot of DATA.
    pub(super) async fn end_of_data(&mut self, flaws: DataFlaws) {
        if let Some(txn) = self.txn.take() {
            self.finish(txn, flaws).await;
        }
    }

    /// The end of a BDAT chunk; only `LAST` ends the transaction. A chunk
    /// that makes the message too big (or over the memory budget) is
    /// refused at once and ends the transaction (RFC 3030 §4.2), so the
    /// client does not upload the rest for nothing.
    pub(super) async fn end_of_chunk(&mut self, last: bool) {
        let Some(txn) = self.txn.as_ref() else { return };
        if !last && txn.reject.is_none() {
            let len = txn.body.len();
            self.reply_fmt(format_args!("250 2.0.0 Ok: {len} octets received"));
            return;
        }
        let Some(mut txn) = self.txn.take() else {
            return;
        };
        let mut flaws = DataFlaws::default();
        if txn.reject.is_none() {
            flaws = data::scan_body(&txn.body, self.text_line_limit());
            if flaws.bare_cr_or_lf && self.bare_line_policy() == BareLinePolicy::Normalize {
                txn.body = data::normalize_line_ends(&txn.body);
                flaws.bare_cr_or_lf = false;
            }
        }
        self.finish(txn, flaws).await;
    }

    /// `text_line_limit`, with 0 meaning none.
    pub(super) fn text_line_limit(&self) -> usize {
        match self.ctx.config.smtpd.text_line_limit {
            0 => usize::MAX,
            n => n,
        }
    }

    /// The one end of every transaction, DATA or BDAT: refuse, or spool
    /// and say 250.
    async fn finish(&mut self, txn: Transaction, flaws: DataFlaws) {
        let refusal = match txn.reject {
            Some(Reject::OverBudget) => Some(MEMORY_EXHAUSTED),
            Some(Reject::TooBig) => Some(TOO_BIG),
            None if flaws.too_big => Some(TOO_BIG),
            None if flaws.bare_cr_or_lf => Some(BARE_LINE_END),
            None if flaws.nul => Some(NUL_IN_MESSAGE),
            None if flaws.line_too_long => Some(LINE_TOO_LONG),
            None if body::received_headers(&txn.body) > self.ctx.config.smtpd.hop_count_limit => {
                Some("554 5.4.6 Error: too many hops (mail loop?)")
            }
            None => None,
        };
        match refusal {
            Some(reply) => self.reject(&txn, reply),
            None => self.queue(txn).await,
        }
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

    /// SPF, DKIM and DMARC (`sender_auth.rs`): our Authentication-Results:
    /// goes on top (forged ones naming us are removed); `Some(reply)` if
    /// DMARC says reject and the listener enforces it.
    async fn check_sender(&mut self, txn: &mut Transaction) -> Option<String> {
        let checker = self.ctx.sender_auth.clone()?;
        let host = &self.ctx.config.hostname;
        if let Some(stripped) = sender_auth::strip_forged_results(&txn.body, host) {
            txn.body = stripped;
        }
        let helo = self.helo.clone().unwrap_or_default();
        let ip = self.peer.ip();
        let dmarc_reject = self.listener.dmarc_reject;
        let max_signatures = self.ctx.config.smtpd.dkim_verify_max_signatures;
        let verdict = checker
            .check(
                ip,
                &helo,
                &txn.sender,
                &txn.body,
                dmarc_reject,
                max_signatures,
            )
            .await;
        log!(
            self.ctx.logger,
            "smtpd",
            "{}: sender authentication: {}",
            qid(txn.id),
            verdict.summary
        );
        if let Some(reply) = verdict.reject {
            log!(
                self.ctx.logger,
                "smtpd",
                "{}: reject: from [{ip}]: {reply}; from=<{}>",
                qid(txn.id),
                txn.sender
            );
            return Some(reply);
        }
        let mut body = Vec::with_capacity(verdict.header.len() + txn.body.len());
        body.extend_from_slice(verdict.header.as_bytes());
        body.extend_from_slice(&txn.body);
        txn.body = body;
        None
    }

    /// Whether this message may be DKIM-signed: its client may relay, and
    /// if only by its address (mynetworks), the message has not already
    /// passed through us (a loop never turns hostile mail into signed
    /// mail, security review H2). An authenticated user's mail is theirs.
    fn may_sign(&self, txn: &Transaction) -> bool {
        if self.auth.is_some() {
            return true;
        }
        if !self.trusted {
            return false;
        }
        if self.ctx.dkim.is_empty() {
            return true; // nothing would be signed: no need to read the headers
        }
        let hostname = &self.ctx.config.hostname;
        if body::carries_our_trace(&txn.body, hostname) {
            log!(
                self.ctx.logger,
                "smtpd",
                "{}: not DKIM-signed: it already passed through {hostname} (a loop)",
                qid(txn.id)
            );
            return false;
        }
        true
    }

    /// Prepends a DKIM signature when a key covers the From: domain
    /// (`dkim.rs`); a failure is logged and the message goes unsigned.
    fn dkim_sign(&self, txn: &mut Transaction) {
        let Some(signed) = self.ctx.dkim.sign(&txn.body) else {
            return;
        };
        match signed {
            Ok((header, domain)) => {
                let mut body = Vec::with_capacity(header.len() + txn.body.len());
                body.extend_from_slice(header.as_bytes());
                body.extend_from_slice(&txn.body);
                txn.body = body;
                log!(
                    self.ctx.logger,
                    "smtpd",
                    "{}: DKIM-Signature added (d={domain})",
                    qid(txn.id)
                );
            }
            Err(e) => log!(
                self.ctx.logger,
                "smtpd",
                "{}: warning: DKIM signing failed: {e}; sent unsigned",
                qid(txn.id)
            ),
        }
    }

    /// Spools the message and, once it is synced, says 250.
    async fn queue(&mut self, txn: Transaction) {
        if txn.recipients.is_empty() {
            // Every recipient was an alias to "discard": nothing to keep.
            let id = qid(txn.id);
            log!(
                self.ctx.logger,
                "smtpd",
                "{id}: discarded (no recipients left)"
            );
            self.reply_fmt(format_args!("250 2.0.0 Ok: discarded as {id}"));
            return;
        }
        let mut txn = txn;
        if self.may_relay() {
            if self.may_sign(&txn) {
                self.dkim_sign(&mut txn);
            }
        } else if self.listener.sender_auth {
            if let Some(reply) = Box::pin(self.check_sender(&mut txn)).await {
                self.reply(&reply);
                return;
            }
        }
        let envelope = Envelope {
            id: txn.id,
            arrival: timefmt::now_millis(),
            sender: txn.sender,
            recipients: txn.recipients,
            flags: txn.flags,
            dsn: txn.dsn_given.then(|| Box::new(txn.dsn)),
        };
        let body = Arc::new(txn.body);
        match self.ctx.spool.store(envelope.clone(), body.clone()).await {
            Ok(body_ref) => {
                self.messages += 1;
                metrics::counter!("sluice_messages_received_total").increment(1);
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
                let msg = QueuedMessage {
                    envelope,
                    body_ref,
                    body: Some(body),
                    done,
                };
                self.ctx.queue.enqueue(msg).await;
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
                    SpoolError::Invalid(_) => {
                        self.reply("554 5.3.4 Error: message envelope too large to store")
                    }
                    _ => self.reply("451 4.3.0 Error: queue file write error"),
                }
            }
        }
    }
}
