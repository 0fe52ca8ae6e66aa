//! The SMTP verbs, one function each: what each command checks, what it
//! changes in the session, and its reply.

use std::borrow::Cow;

use sluice_proto::address::Path;
use sluice_proto::command::{parse_command, Body, Command, CommandError, MailParams, RcptParams};
use sluice_proto::data::{DataDecoder, DataLimits};
use sluice_proto::dsn::Ret;
use tokio::io::{AsyncRead, AsyncWrite};

use super::delegate::Verdict;
use super::session::{Mode, Next, Session};
use super::transaction::Transaction;
use crate::config::services::PolicyStage;
use crate::intake::rewrite::virtual_alias::RcptLookup;
use crate::log::{Event, Qid, Reject};
use crate::message::flags;
use crate::routing::mailboxes::Resolution;

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    pub(super) async fn command(&mut self, line: &[u8]) -> Next {
        let command = match parse_command(line) {
            Ok(c) => c,
            Err(err) => return self.parse_error(err),
        };
        // RFC 2920 §3.1: these end a pipelined group.
        let ends_group = match command {
            Command::Ehlo(_) => Some("EHLO"),
            Command::Helo(_) => Some("HELO"),
            Command::Data => Some("DATA"),
            Command::Vrfy => Some("VRFY"),
            Command::Expn => Some("EXPN"),
            Command::Noop => Some("NOOP"),
            _ => None,
        };
        if self.pipelined_more && (ends_group.is_some() || !self.esmtp) {
            self.improper_pipelining = true;
        }
        if let Some(verb) = ends_group.filter(|_| self.pipelined_more) {
            if self.forbids_pipelining() {
                return self.out_of_sync(verb);
            }
        }
        if matches!(
            command,
            Command::Noop
                | Command::Rset
                | Command::Vrfy
                | Command::Help
                | Command::Ehlo(_)
                | Command::Helo(_)
        ) {
            self.junk += 1;
            if self.junk > self.ctx.config.smtpd.junk_command_limit
                && self.error_counted() == Next::Close
            {
                return Next::Close;
            }
        }
        match command {
            Command::Ehlo(host) => {
                let mechs = match self.offers_auth() && self.auth.is_none() {
                    true => Some(self.mechanisms().await),
                    false => None,
                };
                self.hello(host, true, mechs)
            }
            Command::Helo(host) => self.hello(host, false, None),
            Command::Mail(path, params) => {
                // In-flow pacing: a new transaction waits (a bounded
                // time) while local delivery is behind (`intake/flow.rs`).
                // Boxed, and only then: the wait's timer would otherwise
                // grow every session's future, and the check is two loads.
                let flow = &self.ctx.intake.flow;
                if flow.behind() {
                    Box::pin(flow.pace()).await;
                }
                if let Err(next) = self.mail(path, params) {
                    return next;
                }
                if !self.ctx.restrictions.config.delay_reject {
                    if let Err(next) = Box::pin(self.restrict_mail()).await {
                        self.txn = None;
                        return next;
                    }
                }
                self.reply("250 2.1.0 Ok");
                Next::Continue
            }
            // Boxed (here and at the end of a message): the lookups and the
            // spool store are big futures an idle session must not carry.
            Command::Rcpt(path, params) => Box::pin(self.rcpt(path, params)).await,
            Command::Data => Box::pin(self.data()).await,
            Command::Bdat { size, last } => Box::pin(self.bdat(size, last)).await,
            Command::Rset => {
                self.txn = None;
                self.reply("250 2.0.0 Ok");
                Next::Continue
            }
            Command::Noop => {
                self.reply("250 2.0.0 Ok");
                Next::Continue
            }
            Command::Quit => {
                self.ended = Some("quit");
                self.reply("221 2.0.0 Bye");
                Next::Close
            }
            Command::Vrfy => {
                self.reply(
                    "252 2.0.0 Cannot VRFY user, but will accept message and attempt delivery",
                );
                Next::Continue
            }
            Command::Help => {
                self.reply(
                    "214 2.0.0 Commands: EHLO HELO MAIL RCPT DATA BDAT RSET NOOP QUIT VRFY HELP",
                );
                Next::Continue
            }
            Command::StartTls => self.starttls(),
            Command::Auth(mechanism, initial) => Box::pin(self.auth(mechanism, initial)).await,
            Command::Expn => self.error("502 5.5.1 Error: command not implemented"),
        }
    }

    /// EHLO or HELO; `mechs`: AUTH's mechanisms, when offered.
    fn hello(&mut self, host: String, esmtp: bool, mechs: Option<Cow<'static, str>>) -> Next {
        self.txn = None;
        self.helo = Some(host);
        self.esmtp = esmtp;
        let ctx = self.ctx.clone();
        let name = &ctx.config.hostname;
        if esmtp {
            let size = ctx.config.smtpd.message_size_limit;
            let starttls = if self.offers_starttls() {
                "250-STARTTLS\r\n"
            } else {
                ""
            };
            let (auth, mechs, end) = match &mechs {
                Some(m) if !m.is_empty() => ("250-AUTH ", m.as_ref(), "\r\n"),
                _ => ("", "", ""),
            };
            self.reply_fmt(format_args!(
                "250-{name}\r\n250-PIPELINING\r\n250-SIZE {size}\r\n{starttls}{auth}{mechs}{end}250-8BITMIME\r\n250-DSN\r\n250-ENHANCEDSTATUSCODES\r\n250-SMTPUTF8\r\n250 CHUNKING"
            ));
        } else {
            self.reply_fmt(format_args!("250 {name}"));
        }
        Next::Continue
    }

    fn offers_starttls(&self) -> bool {
        self.ctx.tls.is_some() && self.tls.is_none()
    }

    /// RFC 3207: `220`, then the handshake (see `Next::StartTls`).
    fn starttls(&mut self) -> Next {
        if self.tls.is_some() {
            return self.error("503 5.5.1 Error: TLS already active");
        }
        if self.ctx.tls.is_none() {
            return self.error("454 4.7.0 TLS not available");
        }
        if self.txn.is_some() {
            return self.error("503 5.5.1 Error: MAIL transaction in progress");
        }
        self.reply("220 2.0.0 Ready to start TLS");
        Next::StartTls
    }

    /// Checks MAIL FROM and opens the transaction (the caller replies
    /// `250` once the lists that run at MAIL passed).
    fn mail(&mut self, path: Path, params: MailParams) -> Result<(), Next> {
        if self.helo.is_none() && self.ctx.restrictions.config.helo_required {
            return Err(self.error("503 5.5.1 Error: send HELO/EHLO first"));
        }
        if self.txn.is_some() {
            return Err(self.error("503 5.5.1 Error: nested MAIL command"));
        }
        if let Some(refusal) = self.unoffered_parameter(&params) {
            return Err(self.error(&refusal));
        }
        if self.listener.kind.requires_auth() && self.auth.is_none() {
            if self.tls.is_none() && self.offers_starttls() {
                return Err(self.error("530 5.7.0 Must issue a STARTTLS command first"));
            }
            return Err(self.error("530 5.7.0 Authentication required"));
        }
        let sender = match path {
            Path::Null => String::new(),
            Path::Mailbox { mailbox, .. } => mailbox.address(),
            Path::Postmaster => {
                return Err(
                    self.error("501 5.1.7 Bad sender address syntax: address without a domain")
                )
            }
        };
        if !self.trusted && !self.ctx.anvil.message(self.peer.ip()) {
            return Err(self.over_rate("too much mail", &sender, None));
        }
        if params.size.unwrap_or(0) > self.ctx.config.smtpd.message_size_limit as u64 {
            return Err(self.error("552 5.3.4 Message size exceeds fixed limit"));
        }
        let mut bits = 0;
        if params.body == Some(Body::EightBitMime) {
            bits |= flags::EIGHTBITMIME;
        }
        if params.smtputf8 {
            bits |= flags::SMTPUTF8;
        }
        if !sender.is_ascii() && bits & flags::SMTPUTF8 == 0 {
            return Err(self.error("553 5.6.7 Error: non-ASCII sender address needs SMTPUTF8"));
        }
        let id = self.ctx.spool.new_id();
        let mut txn = Transaction::new(id, sender, bits);
        if params.ret.is_some() || params.envid.is_some() {
            txn.dsn_given = true;
            txn.dsn.ret = match params.ret {
                None => 0,
                Some(Ret::Full) if self.may_relay() => 1,
                Some(Ret::Full) => {
                    // A stranger's RET=FULL would have us send a body of
                    // its choosing to whatever sender it claims: notices
                    // carry the headers only (docs/SECURITY.md).
                    self.ctx.logger.emit(&Event::RetFullRefused {
                        queue_id: Qid(id),
                        client_ip: self.peer.ip(),
                    });
                    2
                }
                Some(Ret::Hdrs) => 2,
            };
            txn.dsn.envid = params.envid.unwrap_or_default();
        }
        self.txn = Some(txn);
        Ok(())
    }

    /// A `555` for MAIL parameters this session did not offer: none after
    /// HELO, and AUTH= only where AUTH is offered (RFC 5321 §4.1.1.11).
    fn unoffered_parameter(&self, params: &MailParams) -> Option<String> {
        if !self.esmtp && params.any() {
            return Some("555 5.5.4 Error: parameters need EHLO".into());
        }
        // RFC 4954 §5: AUTH= is accepted (and not trusted) where AUTH is.
        params
            .auth
            .as_ref()
            .filter(|_| !self.offers_auth() && self.auth.is_none())
            .map(|a| CommandError::Parameter(format!("AUTH={a}")).reply())
    }

    async fn rcpt(&mut self, path: Path, params: RcptParams) -> Next {
        let max = self.ctx.config.smtpd.max_recipients;
        if !self.esmtp && params != RcptParams::default() {
            return self.error("555 5.5.4 Error: parameters need EHLO");
        }
        let Some(txn) = self.txn.as_mut() else {
            return self.error("503 5.5.1 Error: need MAIL command");
        };
        let postmaster = path == Path::Postmaster;
        let (address, routed) = match path {
            Path::Null => return self.error("501 5.1.3 Bad recipient address syntax"),
            Path::Postmaster => (self.ctx.config.postmaster_address(), false),
            Path::Mailbox {
                mailbox,
                source_route,
            } => {
                let routed = source_route || mailbox.has_routing();
                (mailbox.address(), routed)
            }
        };
        if !address.is_ascii() && txn.flags & flags::SMTPUTF8 == 0 {
            return self.error("553 5.6.7 Error: non-ASCII recipient address needs SMTPUTF8");
        }
        if txn.recipients.len() >= max {
            self.reply("452 4.5.3 Error: too many recipients");
            return Next::Continue;
        }
        if !self.trusted && !self.ctx.anvil.recipient(self.peer.ip()) {
            let sender = txn.sender.clone();
            return self.over_rate("too many recipients", &sender, Some(&address));
        }
        if routed && !self.may_relay() {
            // RFC 2505 §2: %-hacks, bang paths, quoted @ and source routes
            // are relay attempts, whatever the domain (Postfix:
            // allow_untrusted_routing = no).
            return self.relay_denied(&address, "sender-specified routing");
        }
        self.recipient(address, postmaster, params).await
    }

    /// Clients in mynetworks and authenticated clients may relay.
    pub(super) fn may_relay(&self) -> bool {
        self.trusted || self.auth.is_some()
    }

    /// `450 4.7.1` for a client over a per-minute rate, at MAIL (the
    /// messages) or RCPT (`to`, the recipients), logged as Postfix does:
    /// `NOQUEUE: reject: RCPT from [ip]: 450 4.7.1 Error: too many
    /// recipients from ip; from=<…> to=<…> proto=ESMTP helo=<…>`.
    fn over_rate(&mut self, what: &str, from: &str, to: Option<&str>) -> Next {
        let ip = self.peer.ip();
        let (stage, _verb) = match to {
            Some(_) => ("rcpt", "RCPT"),
            None => ("mail", "MAIL"),
        };
        let proto = if self.esmtp { "ESMTP" } else { "SMTP" };
        let helo = self.helo.as_deref().unwrap_or_default();
        let _shown_to = to.map(|to| format!(" to=<{to}>")).unwrap_or_default();
        self.ctx.logger.emit(&Event::Reject(Reject::RateLimit {
            stage: stage.into(),
            client_ip: ip,
            code: 450,
            dsn: "4.7.1".into(),
            cause: "rate_limit".into(),
            from: from.into(),
            to: to.map(Into::into),
            proto: proto.into(),
            helo: helo.into(),
        }));
        self.reply_fmt(format_args!("450 4.7.1 Error: {what} from {ip}"));
        Next::Continue
    }

    /// `554 5.7.1 Relay access denied`, logged and counted as an error.
    fn relay_denied(&mut self, address: &str, why: &str) -> Next {
        metrics::counter!("sluice_messages_rejected_total", "reason" => "relay_denied")
            .increment(1);
        let ip = self.peer.ip();
        self.ctx.logger.emit(&Event::Reject(Reject::Relay {
            stage: "rcpt".into(),
            client_ip: ip,
            to: address.into(),
            code: 554,
            dsn: "5.7.1".into(),
            cause: "relay_denied".into(),
            why: why.into(),
        }));
        self.reply_fmt(format_args!("554 5.7.1 <{address}>: Relay access denied"));
        self.error_counted()
    }

    /// Decides one recipient: the restriction lists first (Postfix's
    /// order: relaying is refused before a user is looked up), then the
    /// local mailbox or alias, or the relay recipient table (Postfix's
    /// implicit `reject_unlisted_recipient`). The postmaster (`RCPT
    /// TO:<Postmaster>`) is accepted from anyone.
    async fn recipient(&mut self, address: String, postmaster: bool, params: RcptParams) -> Next {
        let ctx = self.ctx.clone();
        if !postmaster {
            if let Err(next) = self.restrict_rcpt(&address).await {
                return next;
            }
        }
        let delimiters = ctx.config.recipient_delimiter.as_str();
        let rewrite = &ctx.restrictions.rewrite;
        let resolution = match rewrite
            .rcpt_lookup(&ctx.mailboxes, delimiters, &address)
            .await
        {
            // A rewriting map has it: taken as given, the intake rewrites it.
            Ok(RcptLookup::Mapped) => Resolution::Accept(vec![address.clone()]),
            Ok(RcptLookup::UnknownAlias) => {
                let code = ctx.restrictions.config.unknown_virtual_alias_reject_code;
                return self.unknown_user(&address, "virtual alias table", code);
            }
            Ok(RcptLookup::Local(r)) => r,
            Err(err) => return self.lookup_failed(&address, &err.to_string()),
        };
        if matches!(resolution, Resolution::NotLocal)
            && !postmaster
            && ctx.policy.is_relay_domain(&address)
        {
            match ctx.mailboxes.relay_recipient_known(&address).await {
                Ok(true) => {}
                Ok(false) => {
                    let code = ctx.restrictions.config.unknown_relay_recipient_reject_code;
                    return self.unknown_user(&address, "relay recipient table", code);
                }
                Err(err) => return self.lookup_failed(&address, &err.to_string()),
            }
        }
        if !matches!(resolution, Resolution::Unknown) {
            let asked = self.delegate(PolicyStage::Rcpt, Some(&address)).await;
            if let Verdict::Refused(next) = asked {
                return next;
            }
        }
        let max = ctx.config.smtpd.max_recipients;
        let ip = self.peer.ip();
        let Some(txn) = self.txn.as_mut() else {
            return Next::Continue;
        };
        match resolution {
            Resolution::NotLocal => {
                let given = address.clone();
                if !txn.add_recipients(std::iter::once(address), max, &params, &given) {
                    self.reply("452 4.5.3 Error: too many recipients");
                    return Next::Continue;
                }
            }
            Resolution::Accept(targets) => {
                // An alias may not take the message past the recipient limit.
                if !txn.add_recipients(targets.into_iter(), max, &params, &address) {
                    ctx.logger.emit(&Event::AliasTooMany {
                        queue_id: Qid(txn.id),
                        client_ip: ip,
                        to: address.as_str().into(),
                        max: max as u64,
                    });
                    self.reply("452 4.5.3 Error: too many recipients");
                    return Next::Continue;
                }
            }
            Resolution::Discard => {
                txn.has_discarded = true;
                ctx.logger.emit(&Event::AliasDiscard {
                    queue_id: Qid(txn.id),
                    to: address.as_str().into(),
                });
            }
            Resolution::Unknown => {
                let code = ctx.restrictions.config.unknown_virtual_mailbox_reject_code;
                return self.unknown_user(&address, "virtual mailbox table", code);
            }
        }
        self.reply("250 2.1.5 Ok");
        Next::Continue
    }

    /// `550 5.1.1 User unknown` (Postfix's smtpd_reject_unlisted_recipient,
    /// with its `unknown_*_reject_code`: a `450` is `4.1.1`), logged; a
    /// `5XX` is counted as an error.
    fn unknown_user(&mut self, address: &str, table: &str, code: u16) -> Next {
        metrics::counter!("sluice_messages_rejected_total", "reason" => "unknown_user")
            .increment(1);
        let ip = self.peer.ip();
        let dsn = format!("{}.1.1", code / 100);
        self.ctx.logger.emit(&Event::Reject(Reject::UnknownUser {
            stage: "rcpt".into(),
            client_ip: ip,
            to: address.into(),
            code,
            dsn: dsn.as_str().into(),
            cause: "unknown_user".into(),
            table: table.into(),
        }));
        self.reply_fmt(format_args!(
            "{code} {dsn} <{address}>: Recipient address rejected: User unknown in {table}"
        ));
        match code >= 500 {
            true => self.error_counted(),
            false => Next::Continue,
        }
    }

    /// `451 4.3.0`: a table could not answer; never a 5xx.
    fn lookup_failed(&mut self, address: &str, err: &str) -> Next {
        metrics::counter!("sluice_messages_rejected_total", "reason" => "lookup_failed")
            .increment(1);
        let ip = self.peer.ip();
        self.ctx.logger.emit(&Event::Reject(Reject::LookupFailed {
            stage: "rcpt".into(),
            client_ip: ip,
            to: address.into(),
            code: 451,
            dsn: "4.3.0".into(),
            cause: "lookup_failed".into(),
            error: err.into(),
        }));
        self.reply_fmt(format_args!(
            "451 4.3.0 <{address}>: Temporary lookup failure"
        ));
        Next::Continue
    }

    async fn data(&mut self) -> Next {
        let Some(txn) = self.txn.as_mut() else {
            return self.refuse_data("503 5.5.1 Error: need MAIL command");
        };
        if txn.bdat {
            return self.refuse_data("503 5.5.1 Error: DATA after BDAT");
        }
        if txn.recipients.is_empty() && !txn.has_discarded {
            return self.refuse_data("554 5.5.1 Error: no valid recipients");
        }
        // A refusal by the DATA list keeps the transaction, as Postfix's
        // (MAIL again is a nested MAIL; RSET ends it).
        if let Err(next) = self.restrict_data(false).await {
            return self.data_refused(next);
        }
        if let Verdict::Refused(next) = self.delegate(PolicyStage::Data, None).await {
            self.txn = None;
            return self.data_refused(next);
        }
        self.start_body();
        let smtpd = &self.ctx.config.smtpd;
        self.mode = Mode::Data(DataDecoder::new(DataLimits {
            max_size: smtpd.message_size_limit,
            max_line: self.text_line_limit(),
            bare_line: self.bare_line_policy(),
        }));
        self.reply("354 End data with <CR><LF>.<CR><LF>");
        Next::Continue
    }

    /// Whether this client is held to RFC 2920's pipelining rules
    /// (`smtpd.forbid_unauth_pipelining`): not in mynetworks, not
    /// authenticated.
    pub(super) fn forbids_pipelining(&self) -> bool {
        self.ctx.config.smtpd.forbid_unauth_pipelining && !self.trusted && self.auth.is_none()
    }

    /// A client that did not wait for a reply where it must: 554 5.5.0,
    /// the transaction dropped (nothing it sent is stored), disconnected.
    pub(super) fn out_of_sync(&mut self, after: &str) -> Next {
        self.txn = None;
        self.ctx.logger.emit(&Event::PipeliningViolation {
            client_ip: self.peer.ip(),
            after: after.into(),
        });
        self.reply("554 5.5.0 Error: SMTP protocol synchronization");
        Next::Close
    }

    /// Refuses DATA. Whatever the client sent behind it without waiting
    /// for the reply (RFC 2920 §3.1: DATA ends a pipelined group) is the
    /// message, not commands: the session ends rather than run it.
    fn refuse_data(&mut self, reply: &str) -> Next {
        let next = self.error(reply);
        self.data_refused(next)
    }

    /// After a refused DATA (the reply written, `next` its result).
    fn data_refused(&mut self, next: Next) -> Next {
        if next == Next::Close {
            return Next::Close;
        }
        if self.pipelined_more {
            self.ctx.logger.emit(&Event::PipeliningViolation {
                client_ip: self.peer.ip(),
                after: "DATA".into(),
            });
            return Next::Close;
        }
        Next::Continue
    }

    async fn bdat(&mut self, chunk_size: usize, is_last: bool) -> Next {
        // The chunk follows the command whatever we answer, so it is
        // always read; a refused chunk is read and thrown away.
        let (ready, first) = match self.txn.as_ref() {
            Some(txn) => (!txn.recipients.is_empty() || txn.has_discarded, !txn.bdat),
            None => (false, false),
        };
        // The first chunk is the DATA of the policy service; a refusal
        // ends the transaction, so no later chunk can start a message
        // that lacks this one.
        let mut refused = None;
        if ready && first {
            if let Err(next) = self.restrict_data(false).await {
                self.txn = None;
                refused = Some(next);
            }
        }
        if ready && first && refused.is_none() {
            match self.delegate(PolicyStage::Data, None).await {
                Verdict::Refused(next) => {
                    self.txn = None;
                    refused = Some(next);
                }
                Verdict::Go => {
                    if let Some(txn) = self.txn.as_mut() {
                        txn.bdat = true;
                    }
                    self.start_body();
                }
            }
        }
        let accepted = ready && refused.is_none();
        if chunk_size > 0 {
            self.mode = Mode::Bdat {
                remaining: chunk_size,
                last: is_last,
                discard: !accepted,
            };
        }
        if let Some(next) = refused {
            return next;
        }
        if !accepted {
            return self.error("503 5.5.1 Error: need MAIL and RCPT before BDAT");
        }
        if chunk_size == 0 {
            self.end_of_chunk(is_last).await;
        }
        Next::Continue
    }

    fn parse_error(&mut self, err: CommandError) -> Next {
        self.reply(&err.reply());
        if err == CommandError::BdatSyntax {
            // The chunk that follows cannot be found: no way to stay in sync.
            return Next::Close;
        }
        self.error_counted()
    }
}
