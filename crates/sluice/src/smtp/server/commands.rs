//! The SMTP verbs, one function each: what each command checks, what it
//! changes in the session, and its reply.

use sluice_proto::command::{parse_command, ParseError, Request};
use sluice_proto::data::{DataDecoder, DataLimits};
use tokio::io::{AsyncRead, AsyncWrite};

use super::session::{Mode, Next, Session};
use super::transaction::Transaction;
use crate::log;
use crate::log::qid;
use crate::message::address::MAX_ADDRESS;
use crate::message::flags;
use crate::routing::mailboxes::Resolution;

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    pub(super) async fn command(&mut self, line: &[u8]) -> Next {
        let request = match parse_command(line) {
            Ok(req) => req,
            Err(err) => return self.parse_error(err),
        };
        match request {
            Request::Ehlo { host } => self.hello(host.into_owned(), true),
            Request::Helo { host } => self.hello(host.into_owned(), false),
            Request::Mail { from } => self.mail(from),
            Request::Rcpt { to } => self.rcpt(to).await,
            Request::Data => self.data(),
            Request::Bdat {
                chunk_size,
                is_last,
            } => self.bdat(chunk_size, is_last).await,
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
            _ => self.error("502 5.5.1 Error: command not implemented"),
        }
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

    fn mail(&mut self, from: smtp_proto::MailFrom<std::borrow::Cow<'_, str>>) -> Next {
        if self.helo.is_none() {
            return self.error("503 5.5.1 Error: send HELO/EHLO first");
        }
        if self.txn.is_some() {
            return self.error("503 5.5.1 Error: nested MAIL command");
        }
        if from.address.len() > MAX_ADDRESS {
            return self.error("501 5.1.7 Bad sender address syntax");
        }
        if from.size > self.ctx.config.smtpd.message_size_limit {
            return self.error("552 5.3.4 Message size exceeds fixed limit");
        }
        let mut bits = 0;
        if from.flags & smtp_proto::MAIL_BODY_8BITMIME != 0 {
            bits |= flags::EIGHTBITMIME;
        }
        if from.flags & smtp_proto::MAIL_SMTPUTF8 != 0 {
            bits |= flags::SMTPUTF8;
        }
        if !from.address.is_ascii() && bits & flags::SMTPUTF8 == 0 {
            return self.error("553 5.6.7 Error: non-ASCII sender address needs SMTPUTF8");
        }
        let id = self.ctx.spool.new_id();
        self.txn = Some(Transaction::new(id, from.address.into_owned(), bits));
        self.reply("250 2.1.0 Ok");
        Next::Continue
    }

    async fn rcpt(&mut self, to: smtp_proto::RcptTo<std::borrow::Cow<'_, str>>) -> Next {
        let max = self.ctx.config.smtpd.max_recipients;
        let Some(txn) = self.txn.as_mut() else {
            return self.error("503 5.5.1 Error: need MAIL command");
        };
        let address = to.address.into_owned();
        if address.is_empty() || address.len() > MAX_ADDRESS || !address.contains('@') {
            return self.error("501 5.1.3 Bad recipient address syntax");
        }
        if !address.is_ascii() && txn.flags & flags::SMTPUTF8 == 0 {
            return self.error("553 5.6.7 Error: non-ASCII recipient address needs SMTPUTF8");
        }
        if txn.recipients.len() >= max {
            self.reply("452 4.5.3 Error: too many recipients");
            return Next::Continue;
        }
        self.recipient(address).await
    }

    /// Decides one recipient: local mailbox/alias, relay, or refusal.
    async fn recipient(&mut self, address: String) -> Next {
        let ctx = self.ctx.clone();
        let resolution = ctx.mailboxes.resolve(&address).await;
        let max = ctx.config.smtpd.max_recipients;
        let ip = self.peer.ip();
        let trusted = self.trusted;
        let Some(txn) = self.txn.as_mut() else {
            return Next::Continue;
        };
        match resolution {
            Ok(Resolution::NotLocal) => {
                if !ctx.policy.allows(trusted, &address) {
                    log!(
                        ctx.logger,
                        "smtpd",
                        "NOQUEUE: reject: RCPT from [{ip}]: 554 5.7.1 <{address}>: Relay access denied"
                    );
                    self.reply_fmt(format_args!("554 5.7.1 <{address}>: Relay access denied"));
                    self.errors += 1;
                    return Next::Continue;
                }
                if !txn.add_recipients(std::iter::once(address), max) {
                    self.reply("452 4.5.3 Error: too many recipients");
                    return Next::Continue;
                }
            }
            Ok(Resolution::Accept(targets)) => {
                // An alias may not take the message past the recipient limit.
                if !txn.add_recipients(targets.into_iter(), max) {
                    log!(
                        ctx.logger,
                        "smtpd",
                        "{}: reject: RCPT from [{ip}]: 452 4.5.3 <{address}>: alias expansion over {max} recipients",
                        qid(txn.id)
                    );
                    self.reply("452 4.5.3 Error: too many recipients");
                    return Next::Continue;
                }
            }
            Ok(Resolution::Discard) => {
                txn.has_discarded = true;
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
                    "NOQUEUE: reject: RCPT from [{ip}]: 550 5.1.1 <{address}>: User unknown"
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
                    "NOQUEUE: reject: RCPT from [{ip}]: 451 4.3.0 <{address}>: Temporary lookup failure: {err}"
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

    fn data(&mut self) -> Next {
        let Some(txn) = self.txn.as_mut() else {
            return self.error("503 5.5.1 Error: need MAIL command");
        };
        if txn.bdat {
            return self.error("503 5.5.1 Error: DATA after BDAT");
        }
        if txn.recipients.is_empty() && !txn.has_discarded {
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

    async fn bdat(&mut self, chunk_size: usize, is_last: bool) -> Next {
        // The chunk follows the command whatever we answer, so it is
        // always read; a refused chunk is read and thrown away.
        let accepted = match self.txn.as_mut() {
            Some(txn) if !txn.recipients.is_empty() || txn.has_discarded => {
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
}
