//! The SMTP verbs, one function each: what each command checks, what it
//! changes in the session, and its reply (RCPT in `rcpt.rs`).

use std::borrow::Cow;

use sluice_proto::address::Path;
use sluice_proto::command::{parse_command, Body, Command, CommandError, MailParams};
use sluice_proto::data::{DataDecoder, DataLimits};
use sluice_proto::dsn::Ret;
use tokio::io::{AsyncRead, AsyncWrite};

use super::delegate::Verdict;
use super::session::{Mode, Next, Session};
use super::transaction::Transaction;
use crate::config::services::PolicyStage;
use crate::log::{Event, Qid};
use crate::message::flags;

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
