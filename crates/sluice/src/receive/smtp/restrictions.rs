//! The restriction lists in a session (`receive/restrict` decides): which
//! lists run at which command, what the session tells them, and how their
//! refusal or their effects reach the client, the transaction and the log.
//!
//! With `delay_reject` (the default, as Postfix's), the client, HELO and
//! sender lists run at each RCPT TO, before the relay and recipient
//! lists; without it, each at its own command (the client list at MAIL,
//! as its refusal needs a command to answer). DATA and end-of-data lists
//! run at their commands.
//!
//! Trust: see `restrict/mod.rs`. Invariants: a refusal is written with
//! its typed event (`Reject::Restriction`, or `Reject::Relay` for
//! relaying, as before); `421`/`521` end the session; a `5XX` counts as
//! a client error.

use tokio::io::{AsyncRead, AsyncWrite};

use super::session::{Next, Session};
use crate::config::content_filter::ContentFilter;
use crate::deliver::verify::Kind;
use crate::intake::rewrite::virtual_alias::RcptLookup;
use crate::log::{Event, Qid, Reject};
use crate::message::address::domain_of;
use crate::receive::access::{self, Action};
use crate::receive::dnscheck::{ClientNames, DnsCheck, NameStatus};
use crate::receive::policy::PolicyClient;
use crate::receive::restrict::eval::Evaluation;
use crate::receive::restrict::unverified::{verdict, Verdict};
use crate::receive::restrict::{DnsRestriction, Effect, Env, Facts, Outcome, Refusal, Stage};
use crate::routing::mailboxes::Resolution;

/// What the daemon knows, for one evaluation in a session.
struct SessionEnv<'a, S> {
    s: &'a Session<S>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Env for SessionEnv<'_, S> {
    fn auth_destination(&self, recipient: &str) -> bool {
        let ctx = &self.s.ctx;
        let domain = domain_of(recipient);
        ctx.mailboxes.is_local_domain(domain)
            || ctx.restrictions.rewrite.is_virtual_alias_domain(domain)
            || ctx.policy.is_relay_domain(recipient)
            || self.s.is_srs_recipient(recipient)
    }

    fn is_local(&self, address: &str) -> bool {
        self.s.ctx.mailboxes.is_local_domain(domain_of(address))
    }

    fn delimiters(&self) -> &str {
        &self.s.ctx.config.recipient_delimiter
    }

    async fn unlisted(
        &self,
        address: &str,
        _recipient: bool,
    ) -> Result<Option<(u16, &'static str)>, crate::tables::LookupError> {
        let ctx = &self.s.ctx;
        let c = &ctx.restrictions.config;
        let delimiters = ctx.config.recipient_delimiter.as_str();
        let rewrite = &ctx.restrictions.rewrite;
        let resolution = match rewrite
            .rcpt_lookup(&ctx.mailboxes, delimiters, address)
            .await?
        {
            RcptLookup::Mapped => return Ok(None),
            RcptLookup::UnknownAlias => {
                return Ok(Some((
                    c.unknown_virtual_alias_reject_code,
                    "virtual alias table",
                )))
            }
            RcptLookup::Local(r) => r,
        };
        match resolution {
            Resolution::Unknown => Ok(Some((
                c.unknown_virtual_mailbox_reject_code,
                "virtual mailbox table",
            ))),
            Resolution::NotLocal if ctx.policy.is_relay_domain(address) => {
                match ctx.mailboxes.relay_recipient_known(address).await? {
                    true => Ok(None),
                    false => Ok(Some((
                        c.unknown_relay_recipient_reject_code,
                        "relay recipient table",
                    ))),
                }
            }
            _ => Ok(None),
        }
    }

    async fn dns(&self, check: &DnsRestriction, f: &Facts<'_>) -> DnsCheck {
        use DnsRestriction::*;
        let Some(c) = self.s.ctx.dnscheck.as_deref() else {
            return DnsCheck::Pass;
        };
        let unknown = ClientNames::unknown(NameStatus::Perm);
        let names = self.s.names.as_ref().unwrap_or(&unknown);
        let ip = f.client_ip;
        match check {
            UnknownSenderDomain => c.unknown_sender_domain(f.sender.unwrap_or("")).await,
            UnknownRecipientDomain => c.unknown_recipient_domain(f.recipient.unwrap_or("")).await,
            UnknownHeloHostname => c.unknown_helo_hostname(f.helo.unwrap_or("")).await,
            UnknownClientHostname => c.unknown_client_hostname(names, ip),
            UnknownReverseClientHostname => c.unknown_reverse_client_hostname(names, ip),
            RblClient(l) => c.rbl_client(l, ip).await,
            DnswlClient(l) => c.dnswl_client(l, ip).await,
            RhsblClient(l) => c.rhsbl_client(l, names).await,
            RhsblReverseClient(l) => c.rhsbl_reverse_client(l, names).await,
            RhsblSender(l) => c.rhsbl_sender(l, f.sender.unwrap_or("")).await,
            RhsblHelo(l) => c.rhsbl_helo(l, f.helo.unwrap_or("")).await,
        }
    }

    async fn unverified(&self, address: &str, recipient: bool) -> Option<Verdict> {
        let verifier = self.s.ctx.verifier.as_ref()?;
        let kind = if recipient {
            Kind::Recipient
        } else {
            Kind::Sender
        };
        let status = verifier.status(address, kind).await;
        Some(verdict(&status, kind, address, verifier.settings()))
    }

    async fn policy(
        &self,
        client: &PolicyClient,
        stage: Stage,
        facts: &Facts<'_>,
    ) -> Result<Action, access::ActionError> {
        let state = match stage {
            Stage::Data => "DATA",
            Stage::EndOfData => "END-OF-MESSAGE",
            _ if facts.recipient.is_some() => "RCPT",
            Stage::Sender => "MAIL",
            Stage::Helo => "HELO",
            _ => "CONNECT",
        };
        let request = self.s.policy_request(state, facts.recipient);
        // Read as an access table's answer, as Postfix does: a
        // DEFER_IF_PERMIT waits for the end of the lists (a later
        // refusal wins), and a text's own enhanced code is kept.
        let (answer, _failed) = client.ask_access(&request).await;
        access::parse(&answer)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    /// What the lists see now (the recipient at RCPT).
    fn facts<'a>(&'a self, recipient: Option<&'a str>) -> Facts<'a> {
        let txn = self.txn.as_ref();
        Facts {
            client_ip: self.peer.ip(),
            client_name: self.names.as_ref().map_or("unknown", |n| n.name.as_str()),
            reverse_client_name: self
                .names
                .as_ref()
                .map_or("unknown", |n| n.reverse_name.as_str()),
            helo: self.helo.as_deref(),
            sender: txn.map(|t| t.sender.as_str()),
            recipient,
            sasl_user: self.auth.as_deref(),
            sasl_enabled: self.auth.is_some() || self.offers_auth(),
            mynetworks: self.trusted,
            improper_pipelining: self.improper_pipelining,
            recipient_count: txn.map_or(0, |t| t.recipients.len()),
            ccert: self.ccert.as_ref(),
        }
    }

    /// Runs `stages` as one decision; Err is the command's result after
    /// the refusal was written.
    async fn restrict(&mut self, stages: &[Stage], recipient: Option<&str>) -> Result<(), Next> {
        let ctx = self.ctx.clone();
        let r = &ctx.restrictions;
        if self.names.is_none() && r.needs_names() {
            if let Some(c) = &ctx.dnscheck {
                self.names = Some(c.client_names(self.peer.ip()).await);
            }
        }
        let lists = r.lists(self.listener.listen);
        let delayed = r.config.delay_reject;
        let at_rcpt = recipient.is_some();
        let pending = match (delayed, at_rcpt) {
            (false, true) => self.defer_if_permit.clone(),
            _ => None,
        };
        let mut eval = Evaluation::new(r).with_defer_if_permit(pending);
        let outcome = {
            let env = SessionEnv { s: &*self };
            let facts = self.facts(recipient);
            let mut refused = None;
            for stage in stages {
                // An empty list too: starting the relay list ends the
                // sender list's defer_if_reject (Postfix's RCPT check
                // starts afresh).
                let list = lists.get(*stage);
                if let Some(r) = eval.list(*stage, list, &facts, &env).await {
                    refused = Some(r);
                    break;
                }
            }
            refused
        };
        let at_mail = !delayed && !at_rcpt && stages[0] == Stage::Client;
        let outcome = match outcome {
            Some(r) => Outcome::Refuse(r),
            // Without delay_reject, MAIL's checks keep a pending
            // defer_if_permit for each RCPT (as Postfix does).
            None if at_mail => {
                self.defer_if_permit = eval.take_defer_if_permit();
                Outcome::Pass
            }
            None => eval.finish(),
        };
        let refused = match outcome {
            Outcome::Refuse(r) => Some(r),
            Outcome::Pass => None,
        };
        self.apply_effects(std::mem::take(&mut eval.effects), refused.is_none());
        match refused {
            None => Ok(()),
            Some(refusal) => Err(self.restriction_refused(stages, recipient, &refusal)),
        }
    }

    /// At RCPT TO: the delayed lists, then relay and recipient.
    pub(super) async fn restrict_rcpt(&mut self, recipient: &str) -> Result<(), Next> {
        const DELAYED: &[Stage] = &[
            Stage::Client,
            Stage::Helo,
            Stage::Sender,
            Stage::Relay,
            Stage::Recipient,
        ];
        let stages = match self.ctx.restrictions.config.delay_reject {
            true => DELAYED,
            false => &DELAYED[3..],
        };
        self.restrict(stages, Some(recipient)).await
    }

    /// At MAIL FROM without `delay_reject`: the client, HELO and sender
    /// lists (the sender is in the transaction already).
    pub(super) async fn restrict_mail(&mut self) -> Result<(), Next> {
        if self.ctx.restrictions.config.delay_reject {
            return Ok(());
        }
        self.restrict(&[Stage::Client, Stage::Helo, Stage::Sender], None)
            .await
    }

    /// At DATA (or the first BDAT), and at the end of the message.
    pub(super) async fn restrict_data(&mut self, end: bool) -> Result<(), Next> {
        let stage = if end { Stage::EndOfData } else { Stage::Data };
        self.restrict(&[stage], None).await
    }

    /// Applies what the tables asked for besides the decision (on a pass:
    /// a refused recipient adds no header and discards nothing).
    fn apply_effects(&mut self, effects: Vec<Effect>, passed: bool) {
        let id = self.txn.as_ref().map_or(0, |t| t.id);
        let ip = self.peer.ip();
        for effect in effects {
            match effect {
                Effect::Warned(r) => self.ctx.logger.emit(&Event::RestrictionWarn {
                    queue_id: Qid(id),
                    client_ip: ip,
                    by: r.by.into(),
                    reply: r.line().into(),
                }),
                Effect::Info(t) | Effect::Warn(t) => self.ctx.logger.emit(&Event::PolicyWarn {
                    queue_id: Qid(id),
                    client_ip: ip,
                    text: t.into(),
                }),
                Effect::Broken(error) => self.ctx.logger.emit(&Event::AccessAnswerBad {
                    queue_id: Qid(id),
                    client_ip: ip,
                    error: error.into(),
                }),
                _ if !passed => {}
                Effect::Prepend(h) => {
                    if let Some(txn) = self.txn.as_mut() {
                        txn.prepend.push(h);
                    }
                }
                Effect::Discard(t) => {
                    self.ctx.logger.emit(&Event::PolicyDiscard {
                        queue_id: Qid(id),
                        client_ip: ip,
                        why: t.into(),
                    });
                    if let Some(txn) = self.txn.as_mut() {
                        txn.discard = true;
                    }
                }
                Effect::Hold(t) => {
                    // Postfix's text when the table gave none.
                    let reason = match t.is_empty() {
                        true => "held by an access table".to_string(),
                        false => t,
                    };
                    if let Some(txn) = self.txn.as_mut() {
                        txn.hold.get_or_insert(reason);
                    }
                }
                // Postfix keeps the last REDIRECT, and every BCC.
                Effect::Redirect(to) => {
                    if let Some(txn) = self.txn.as_mut() {
                        txn.redirect = Some(to);
                    }
                }
                Effect::Bcc(to) => {
                    if let Some(txn) = self.txn.as_mut().filter(|t| !t.bcc.contains(&to)) {
                        txn.bcc.push(to);
                    }
                }
                // Postfix's FILTER: the last one counts, over the
                // listener's content_filter (an access table's FILTER
                // must name an SMTP or LMTP next hop: else it is logged
                // and ignored, as an action Sluice cannot carry out).
                Effect::Filter(t) => match ContentFilter::parse(&t) {
                    Ok(filter) if filter.hop().is_some() => {
                        if let Some(txn) = self.txn.as_mut() {
                            txn.filter = Some(filter);
                        }
                    }
                    _ => self.ctx.logger.emit(&Event::PolicyUnsupported {
                        queue_id: Qid(id),
                        client_ip: ip,
                        server: "access table".into(),
                        action: format!("FILTER {t}").into(),
                    }),
                },
            }
        }
    }

    /// Writes a refusal and logs it.
    fn restriction_refused(
        &mut self,
        stages: &[Stage],
        recipient: Option<&str>,
        r: &Refusal,
    ) -> Next {
        let id = self.txn.as_ref().map_or(0, |t| t.id);
        let ip = self.peer.ip();
        let from = self
            .txn
            .as_ref()
            .map(|t| t.sender.clone())
            .unwrap_or_default();
        let stage = match stages.last() {
            Some(Stage::Data) => "DATA",
            Some(Stage::EndOfData) => "END-OF-MESSAGE",
            _ if recipient.is_some() => "RCPT",
            _ => "MAIL",
        };
        if r.by.ends_with("_unauth_destination") {
            // Relaying refused: the event and counter it always had.
            metrics::counter!("sluice_messages_rejected_total", "reason" => "relay_denied")
                .increment(1);
            self.ctx.logger.emit(&Event::Reject(Reject::Relay {
                stage: "rcpt".into(),
                client_ip: ip,
                to: recipient.unwrap_or("").into(),
                code: r.code,
                dsn: r.enhanced.as_str().into(),
                cause: "relay_denied".into(),
                why: r.by.into(),
            }));
        } else {
            metrics::counter!("sluice_messages_rejected_total", "reason" => "restriction")
                .increment(1);
            self.ctx.logger.emit(&Event::Reject(Reject::Restriction {
                queue_id: Qid(id),
                stage: stage.into(),
                client_ip: ip,
                from: from.into(),
                to: recipient.unwrap_or("").into(),
                code: r.code,
                dsn: r.enhanced.as_str().into(),
                cause: "restriction".into(),
                by: r.by.into(),
                text: r.text.as_str().into(),
            }));
        }
        self.reply(&r.line());
        if r.code == 421 || r.code == 521 {
            return Next::Close;
        }
        if r.code >= 500 {
            return self.error_counted();
        }
        Next::Continue
    }
}
