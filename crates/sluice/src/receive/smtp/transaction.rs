//! The mail transaction between MAIL and the end of the body, and the one
//! way it ends: [`Session::finish`], shared by DATA and BDAT.
//!
//! Invariant: a transaction is answered `250 … queued as` only after the
//! intake (`intake/`) has had the spool sync the whole body; anything that made the body incomplete
//! (over the size limit, over the memory budget, malformed) is recorded in
//! `reject` while the rest of the body is read and dropped, and
//! `finish` refuses it — there is no path where a dropped body is queued.

use std::sync::Arc;

use sluice_proto::command::RcptParams;
use sluice_proto::data::{self, BareLinePolicy, DataFlaws};
use sluice_spool::Dsn;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::delegate::Verdict;
use super::session::Session;
use crate::config::content_filter::ContentFilter;
use crate::config::services::PolicyStage;
use crate::intake::headers::{self, SmtpTrace};
use crate::intake::{Accepted, Origin, SmtpClient, Submission};
use crate::log::qid;
use crate::log::{Event, Qid};
use crate::message::address::Target;
use crate::message::flags;

const MEMORY_EXHAUSTED: &str =
    "452 4.3.1 Error: insufficient system resources for this message now; try again later";

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
    /// (recipient, address given at RCPT) for those an alias expanded to.
    pub orig_rcpt: Vec<(String, String)>,
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
    /// Header fields a policy service asked to add (`PREPEND`), put
    /// right below our Received: field at the end of the message.
    pub prepend: Vec<String>,
    /// A policy service said `DISCARD`: accept, then drop the message.
    pub discard: bool,
    /// An access table said `HOLD`: the message is queued on hold, with
    /// this reason (Postfix's hold queue).
    pub hold: Option<String>,
    /// An access table said `REDIRECT` (the last one counts).
    pub redirect: Option<Target>,
    /// An access table said `BCC` (each address once).
    pub bcc: Vec<Target>,
    /// An access table said `FILTER` (the last one counts): over the
    /// listener's `content_filter`.
    pub filter: Option<ContentFilter>,
    /// Length of our Received: field at the start of `body`.
    trace_len: usize,
}

impl Transaction {
    pub fn new(id: u64, sender: String, flags: u32) -> Transaction {
        Transaction {
            id,
            sender,
            flags,
            recipients: Vec::new(),
            orig_rcpt: Vec::new(),
            body: Vec::new(),
            bdat: false,
            has_discarded: false,
            reject: None,
            memory: None,
            dsn: Dsn::default(),
            dsn_given: false,
            prepend: Vec::new(),
            discard: false,
            hold: None,
            redirect: None,
            bcc: Vec::new(),
            filter: None,
            trace_len: 0,
        }
    }

    /// Adds recipients not already present, each with the DSN parameters
    /// of the RCPT that named it (an alias's addresses inherit them) and,
    /// when it differs, the address `given` there (the log's `orig_to`);
    /// false (and nothing added) if that would make more than `max`.
    pub fn add_recipients(
        &mut self,
        new: impl Iterator<Item = String>,
        max: usize,
        params: &RcptParams,
        given: &str,
    ) -> bool {
        let before = self.recipients.len();
        let orig_before = self.orig_rcpt.len();
        for r in new {
            if !self.recipients.contains(&r) {
                if !r.eq_ignore_ascii_case(given) {
                    self.orig_rcpt.push((r.clone(), given.to_string()));
                }
                self.recipients.push(r);
                self.dsn.notify.push(params.notify);
                self.dsn
                    .orcpt
                    .push(params.orcpt.clone().unwrap_or_default());
            }
        }
        if self.recipients.len() > max {
            self.recipients.truncate(before);
            self.orig_rcpt.truncate(orig_before);
            self.dsn.notify.truncate(before);
            self.dsn.orcpt.truncate(before);
            return false;
        }
        if *params != RcptParams::default() {
            self.dsn_given = true;
        }
        true
    }

    /// Puts the fields a policy service asked for right below our
    /// Received: field (each already checked to be one `Name: value`).
    fn insert_prepended(&mut self) {
        if self.prepend.is_empty() {
            return;
        }
        let fields: String = self.prepend.iter().map(|h| format!("{h}\r\n")).collect();
        let at = self.trace_len.min(self.body.len());
        self.body.splice(at..at, fields.into_bytes());
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
        if self.ctx.config.smtpd.bare_line_ends == crate::config::BareLineEnds::Normalize {
            BareLinePolicy::Normalize
        } else {
            BareLinePolicy::Reject
        }
    }

    /// Starts the body with our Received: header (RFC 5321 §4.4), as the
    /// intake writes it (`intake/headers.rs`).
    pub(super) fn start_body(&mut self) {
        let hostname = &self.ctx.config.hostname;
        let Some(txn) = self.txn.as_mut() else { return };
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
        let only = match txn.recipients.as_slice() {
            [only] => Some(only.as_str()),
            _ => None,
        };
        let trace = SmtpTrace {
            helo: self.helo.as_deref().unwrap_or("unknown"),
            ip: self.peer.ip(),
            tls: self.tls.as_deref(),
            with,
            only_recipient: only,
        };
        let header = headers::smtp_trace(hostname, txn.id, &trace);
        txn.body.reserve(header.len() + 1024);
        txn.body.extend_from_slice(header.as_bytes());
        txn.trace_len = header.len();
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

    /// The one end of every transaction, DATA or BDAT: the intake checks,
    /// signs, stores and queues it (or refuses it), then the reply.
    async fn finish(&mut self, txn: Transaction, mut flaws: DataFlaws) {
        match txn.reject {
            Some(Reject::OverBudget) => return self.reject(&txn, MEMORY_EXHAUSTED),
            Some(Reject::TooBig) => flaws.too_big = true,
            None => {}
        }
        let Some(mut txn) = self.end_of_message_policy(txn, &flaws).await else {
            return;
        };
        if txn.discard {
            self.reply_fmt(format_args!("250 2.0.0 Ok: discarded as {}", qid(txn.id)));
            return;
        }
        txn.insert_prepended();
        let origin = Origin::Smtp(SmtpClient {
            peer: self.peer,
            listener: self.listener.listen,
            helo: self.helo.clone().unwrap_or_default(),
            trusted: self.trusted,
            authenticated: self.auth.is_some(),
            auth_user: self.auth.clone(),
            sender_auth: self.listener.sender_auth,
            dmarc_reject: self.listener.dmarc_reject,
        });
        let submission = Submission {
            id: txn.id,
            origin,
            sender: std::mem::take(&mut txn.sender),
            recipients: std::mem::take(&mut txn.recipients),
            orig_rcpt: std::mem::take(&mut txn.orig_rcpt),
            flags: txn.flags,
            dsn: txn
                .dsn_given
                .then(|| Box::new(std::mem::take(&mut txn.dsn))),
            body: std::mem::take(&mut txn.body),
            flaws: Some(flaws),
            hold: txn.hold.take(),
            redirect: txn.redirect.take(),
            bcc: std::mem::take(&mut txn.bcc),
            filter: txn.filter.take().unwrap_or_else(|| {
                let main = &self.ctx.config.content_checks.content_filter;
                self.listener.content_filter(main).clone()
            }),
        };
        // Its share of the body-memory budget is held until the intake has
        // stored the message: a body waiting on a slow filter or a shadow
        // peer still counts (without it, 40 bodies of 5 MB sat behind a
        // 20 s milter against a 20 MiB budget).
        let memory = txn.memory.take();
        drop(txn);
        let intake = self.ctx.intake.clone();
        let accepted = intake.accept(submission).await;
        drop(memory);
        match accepted {
            Ok(Accepted::Queued(id)) => {
                self.messages += 1;
                metrics::counter!("sluice_messages_received_total").increment(1);
                crate::rates::count(crate::rates::Tally::Received);
                self.reply_fmt(format_args!("250 2.0.0 Ok: queued as {}", qid(id)));
            }
            Ok(Accepted::Discarded(id)) => {
                self.reply_fmt(format_args!("250 2.0.0 Ok: discarded as {}", qid(id)));
            }
            Err(refusal) => {
                self.reply_fmt(format_args!("{}", refusal.reply()));
                if !refusal.is_temporary() {
                    self.errors += 1;
                }
            }
        }
    }

    /// Asks the policy service at the end of a complete message; None if
    /// it refused (the reply written).
    async fn end_of_message_policy(
        &mut self,
        txn: Transaction,
        flaws: &DataFlaws,
    ) -> Option<Transaction> {
        if flaws.too_big {
            return Some(txn);
        }
        self.txn = Some(txn);
        if self.restrict_data(true).await.is_err() {
            self.txn = None;
            return None;
        }
        if self.ctx.policy_service.is_none() {
            return self.txn.take();
        }
        let verdict = self.delegate(PolicyStage::EndOfMessage, None).await;
        let txn = self.txn.take()?;
        match verdict {
            Verdict::Go => Some(txn),
            Verdict::Refused(_) => None,
        }
    }

    /// Refuses a transaction the door itself could not keep.
    fn reject(&mut self, txn: &Transaction, reply: &str) {
        self.ctx.logger.emit(&Event::DataRejected {
            queue_id: Qid(txn.id),
            client_ip: self.peer.ip(),
            reply: reply.to_string().into(),
            from: txn.sender.as_str().into(),
        });
        self.reply(reply);
        self.errors += 1;
    }
}
