//! RCPT TO: one recipient decided, as Postfix's smtpd does: the per
//! client rate, sender-specified routing, the restriction lists, then the
//! rewriting maps, the local mailboxes and aliases or the relay recipient
//! table; the replies and log lines of a refusal.
//!
//! Trust: the address is the client's, parsed by sluice-proto; the
//! tables are the administrator's. Invariant: a lookup that cannot
//! answer is a 451, never a 550 (a directory outage never loses mail).

use sluice_proto::address::Path;
use sluice_proto::command::RcptParams;
use tokio::io::{AsyncRead, AsyncWrite};

use super::delegate::Verdict;
use super::session::{Next, Session};
use crate::config::services::PolicyStage;
use crate::intake::rewrite::virtual_alias::RcptLookup;
use crate::log::{Event, Qid, Reject};
use crate::message::address::domain_of;
use crate::message::flags;
use crate::routing::mailboxes::Resolution;

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    pub(super) async fn rcpt(&mut self, path: Path, params: RcptParams) -> Next {
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
        if self.is_srs_recipient(&address) {
            return self.srs_recipient(address, params).await;
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
    pub(super) fn over_rate(&mut self, what: &str, from: &str, to: Option<&str>) -> Next {
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
            Resolution::Unknown if ctx.mailboxes.system().is_system_domain(domain_of(&address)) => {
                // Postfix's unknown_local_recipient_reject_code (550).
                return self.unknown_user(&address, "local recipient table", 550);
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
}
