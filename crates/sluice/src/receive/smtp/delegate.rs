//! The policy service in a session (`receive/policy.rs` is the client):
//! the request built from what the session knows, and the answer applied
//! to the recipient or the transaction, as Postfix's check_policy_service.
//!
//! Trust: the request carries the client's HELO and addresses (the client
//! sanitizes them); the answer is the operator's server's, parsed into a
//! `PolicyAction` (no line breaks can reach a reply or a header).
//! Invariants: the server is asked only once Sluice itself would accept
//! (so `DEFER_IF_PERMIT` is a deferral and nothing it says can open a
//! relay), and by default not for clients that may relay (mynetworks,
//! authenticated), as `permit_mynetworks, permit_sasl_authenticated`
//! before `check_policy_service` in Postfix. A server that cannot answer,
//! or answers with an action Sluice does not apply, gets the configured
//! default action.

use tokio::io::{AsyncRead, AsyncWrite};

use super::session::{Next, Session};
use crate::config::services::{PolicyAction, PolicyStage};
use crate::log::qid;
use crate::log::{Event, Qid, Reject};
use crate::message::reply::Reply;
use crate::receive::policy::Request;

/// What the session does after asking.
pub(super) enum Verdict {
    /// Go on (the answer, if any, was recorded in the transaction).
    Go,
    /// Refused: the reply is written; the command's result is this.
    Refused(Next),
}

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    /// Asks the policy service about `stage` (and `recipient` at RCPT),
    /// if it is to be asked, and applies its answer.
    pub(super) async fn delegate(
        &mut self,
        stage: PolicyStage,
        recipient: Option<&str>,
    ) -> Verdict {
        let smtpd = &self.ctx.config.smtpd;
        let exempt = smtpd.policy_service_exempt_trusted && self.may_relay();
        let Some(client) = self.ctx.policy_service.clone() else {
            return Verdict::Go;
        };
        if exempt || !smtpd.policy_service_at.contains(&stage) {
            return Verdict::Go;
        }
        if self.txn.is_none() {
            return Verdict::Go;
        }
        let request = self.policy_request(stage.protocol_state(), recipient);
        let (mut action, failed) = client.ask(&request).await;
        let id = self.txn.as_ref().map_or(0, |t| t.id);
        let ip = self.peer.ip();
        let server = client.addr().to_string();
        if let Some(err) = failed {
            self.ctx.logger.emit(&Event::PolicyFailed {
                queue_id: Qid(id),
                client_ip: ip,
                server: server.to_string().into(),
                error: err.to_string().into(),
            });
        }
        if let PolicyAction::Unsupported(text) = &action {
            self.ctx.logger.emit(&Event::PolicyUnsupported {
                queue_id: Qid(id),
                client_ip: ip,
                server: server.to_string().into(),
                action: text.to_string().into(),
            });
            action = self.ctx.config.smtpd.policy_service_default_action.clone();
        }
        self.apply(stage, recipient, action)
    }

    /// The attributes Postfix sends (those Sluice knows) at `state`
    /// (`RCPT`, `DATA`, …), with or without a transaction.
    pub(super) fn policy_request(&self, state: &str, recipient: Option<&str>) -> Request {
        let txn = self.txn.as_ref();
        let at_rcpt = state == "RCPT";
        let only = match txn.map(|t| t.recipients.as_slice()) {
            Some([one]) if !at_rcpt => Some(one.as_str()),
            _ => None,
        };
        let (protocol, cipher) = match self
            .tls
            .as_deref()
            .and_then(|t| t.split_once(" with cipher "))
        {
            Some((p, c)) => (p, c),
            None => ("", ""),
        };
        let id = txn.map(|t| qid(t.id)).unwrap_or_default();
        let cc = self.ccert.as_ref();
        // Names only of a verified certificate, xtext-encoded (Postfix's
        // ENCODE_CN): an unverified CN is anyone's choice.
        let cn = |name: fn(&super::ccert::PeerCert) -> &String| match cc {
            Some(c) if c.verified => super::ccert::xtext(name(c)),
            _ => String::new(),
        };
        let count = match (at_rcpt, txn) {
            (false, Some(t)) => t.recipients.len(),
            _ => 0,
        };
        let mut r = Request::new();
        r.add("protocol_state", state)
            .add("protocol_name", if self.esmtp { "ESMTP" } else { "SMTP" })
            .add("helo_name", self.helo.as_deref().unwrap_or(""))
            .add("queue_id", &id)
            .add("instance", &id)
            .add("sender", txn.map_or("", |t| t.sender.as_str()))
            .add("recipient", recipient.or(only).unwrap_or(""))
            .add("recipient_count", &count.to_string())
            .add("client_address", &self.peer.ip().to_string())
            .add("client_port", &self.peer.port().to_string())
            .add(
                "client_name",
                self.names.as_ref().map_or("unknown", |n| n.name.as_str()),
            )
            .add(
                "reverse_client_name",
                self.names
                    .as_ref()
                    .map_or("unknown", |n| n.reverse_name.as_str()),
            )
            .add("server_address", &self.listener.listen.ip().to_string())
            .add("server_port", &self.listener.listen.port().to_string())
            .add("sasl_username", self.auth.as_deref().unwrap_or(""))
            .add("size", &txn.map_or(0, |t| t.body.len()).to_string())
            .add("encryption_protocol", protocol)
            .add("encryption_cipher", cipher)
            .add("ccert_subject", &cn(|c| &c.subject))
            .add("ccert_issuer", &cn(|c| &c.issuer))
            .add(
                "ccert_fingerprint",
                cc.map_or("", |c| c.fingerprint.as_str()),
            )
            .add(
                "ccert_pubkey_fingerprint",
                cc.map_or("", |c| c.pubkey_fingerprint.as_str()),
            )
            // Always sent by Postfix (empty but after ETRN): postgrey
            // answers its 4.2.0 only when it is there.
            .add("etrn_domain", "");
        r
    }

    /// Applies an answer (never `Unsupported`: that became the default).
    fn apply(
        &mut self,
        stage: PolicyStage,
        recipient: Option<&str>,
        action: PolicyAction,
    ) -> Verdict {
        let id = self.txn.as_ref().map_or(0, |t| t.id);
        let ip = self.peer.ip();
        match action {
            PolicyAction::Reject(reply) | PolicyAction::Defer(reply) => {
                Verdict::Refused(self.policy_refused(stage, recipient, &reply))
            }
            PolicyAction::Prepend(header) => {
                if let Some(txn) = self.txn.as_mut() {
                    txn.prepend.push(header);
                }
                Verdict::Go
            }
            PolicyAction::Discard(text) => {
                self.ctx.logger.emit(&Event::PolicyDiscard {
                    queue_id: Qid(id),
                    client_ip: ip,
                    why: text.to_string().into(),
                });
                if let Some(txn) = self.txn.as_mut() {
                    txn.discard = true;
                }
                Verdict::Go
            }
            PolicyAction::Log(text) => {
                self.ctx.logger.emit(&Event::PolicyWarn {
                    queue_id: Qid(id),
                    client_ip: ip,
                    text: text.to_string().into(),
                });
                Verdict::Go
            }
            PolicyAction::Dunno
            | PolicyAction::Ok
            | PolicyAction::DeferIfReject
            | PolicyAction::Unsupported(_) => Verdict::Go,
        }
    }

    /// A refusal in Postfix's words; a 5xx counts as a client error.
    fn policy_refused(&mut self, stage: PolicyStage, recipient: Option<&str>, r: &Reply) -> Next {
        let id = self.txn.as_ref().map_or(0, |t| t.id);
        let ip = self.peer.ip();
        let what = match (stage, recipient) {
            (PolicyStage::Rcpt, Some(to)) => format!("<{to}>: Recipient address rejected"),
            (PolicyStage::EndOfMessage, _) => "<END-OF-MESSAGE>: End-of-data rejected".into(),
            _ => "<DATA>: Data command rejected".into(),
        };
        // A policy reply always has its status (services.rs).
        let (code, text) = (r.code, r.text.as_str());
        let dsn = r.status.map(|s| s.to_string()).unwrap_or_default();
        self.ctx.logger.emit(&Event::Reject(Reject::Policy {
            queue_id: Qid(id),
            stage: stage.protocol_state().into(),
            client_ip: ip,
            to: recipient.unwrap_or("").into(),
            code,
            dsn: dsn.as_str().into(),
            cause: "policy".into(),
            why: text.into(),
        }));
        self.reply_fmt(format_args!("{code} {dsn} {what}: {text}"));
        if code >= 500 {
            return self.error_counted();
        }
        Next::Continue
    }
}
