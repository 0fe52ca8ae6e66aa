//! Evaluating restriction lists, as Postfix's smtpd_check: each
//! restriction in order; `permit` (or an access table's `OK`) ends the
//! list, a refusal ends the decision, anything else goes on to the next.
//! An [`Evaluation`] spans one decision (one RCPT with its delayed
//! client, HELO and sender lists, or one DATA): `defer_if_permit` turns a
//! later pass into a `450`, `defer_if_reject` a later `5XX` into a `450`,
//! `warn_if_reject` the next restriction's refusal into a logged warning.
//!
//! Classes, and lists an access table answers, are applied in place (a
//! stack of frames, not recursion, at most [`MAX_DEPTH`] deep: deeper is a
//! configuration error, `451 4.3.5`).
//!
//! Trust: see `mod.rs`. Invariant: every failure to look up or to read an
//! answer is a `4XX`, never a pass.

use std::sync::Arc;

use super::checks::{
    config_error, dsn_split, fqdn_address, fqdn_host, is_literal, lookup_failed, namaddr,
    relay_denied, reply, search, subject, valid_helo,
};
use super::keys::{address_keys, client_address_keys, host_keys, AccessKey};
use super::unverified::Verdict;
use super::DnsRestriction;
use super::{keyword, Facts, LoginCheck, Refusal, Restriction, Restrictions, Stage, TableCheck};
use crate::receive::access::{self, Action};
use crate::receive::dnscheck::DnsCheck;
use crate::receive::policy::PolicyClient;
use crate::tables::search::Rules;
use crate::tables::{LookupError, Table};

/// Frames (lists within lists) at most.
pub const MAX_DEPTH: usize = 16;

/// What only the daemon can tell.
#[allow(async_fn_in_trait)]
pub trait Env {
    /// The recipient's domain is one Sluice receives mail for (local or
    /// relay domains): `reject_unauth_destination` lets it through.
    fn auth_destination(&self, recipient: &str) -> bool;
    /// The address's domain is local (for login-map search keys).
    fn is_local(&self, address: &str) -> bool;
    /// `recipient_delimiter`.
    fn delimiters(&self) -> &str;
    /// Whether `address` is unknown where it should be listed: the code
    /// and the table to name, or None (listed, or not ours to judge).
    async fn unlisted(
        &self,
        address: &str,
        recipient: bool,
    ) -> Result<Option<(u16, &'static str)>, LookupError>;
    /// What a DNS restriction decides (its own codes and replies).
    async fn dns(&self, check: &DnsRestriction, facts: &Facts<'_>) -> DnsCheck;
    /// What address verification answers (None: no verifier, a
    /// configuration error).
    async fn unverified(&self, address: &str, recipient: bool) -> Option<Verdict>;
    /// The policy service's answer, as an access action.
    async fn policy(
        &self,
        client: &PolicyClient,
        stage: Stage,
        facts: &Facts<'_>,
    ) -> Result<Action, access::ActionError>;
}

/// Something a table asked for besides the decision (applied by the
/// session to the transaction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    Prepend(String),
    Discard(String),
    Hold(String),
    Filter(String),
    Redirect(access::Target),
    Bcc(access::Target),
    Info(String),
    Warn(String),
    /// A refusal `warn_if_reject` turned into a warning.
    Warned(Refusal),
    /// An answer that could not be acted on (the lists said "try again"):
    /// why, for the log.
    Broken(String),
}

/// The end of one decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Refuse(Refusal),
}

pub(super) enum Step {
    Next,
    Permit,
    Refuse(Refusal),
    Nested(Arc<Vec<Restriction>>),
}

/// One decision in progress.
pub struct Evaluation<'r> {
    r: &'r Restrictions,
    pub(super) defer_if_permit: Option<Refusal>,
    pub(super) defer_if_reject: Option<Refusal>,
    pub effects: Vec<Effect>,
}

impl<'r> Evaluation<'r> {
    pub fn new(r: &'r Restrictions) -> Self {
        Evaluation {
            r,
            defer_if_permit: None,
            defer_if_reject: None,
            effects: Vec::new(),
        }
    }

    /// Runs one stage's list: Some(refusal) ends the decision.
    pub async fn list<E: Env>(
        &mut self,
        stage: Stage,
        list: &Arc<Vec<Restriction>>,
        facts: &Facts<'_>,
        env: &E,
    ) -> Option<Refusal> {
        // Postfix resets defer_if_reject at each check it makes (client,
        // HELO, sender, and RCPT's relay and recipient lists together);
        // a pending defer_if_permit lives on to the end of the decision.
        if stage != Stage::Recipient {
            self.defer_if_reject = None;
        }
        let mut frames = vec![(list.clone(), 0usize)];
        // warn_if_reject: the depth it was set at. It covers the next
        // restriction there, with every list that one nests (a class, a
        // table's answer), as Postfix's state->warn_if_reject.
        let mut warn: Option<usize> = None;
        loop {
            let depth = frames.len();
            let Some((list, at)) = frames.last_mut() else {
                break;
            };
            let Some(r) = list.get(*at).cloned() else {
                frames.pop();
                // The restriction that nested this list is done.
                warn = warn.filter(|w| *w < depth - 1);
                continue;
            };
            *at += 1;
            let warn_now = warn.is_some();
            let step = match &r {
                Restriction::WarnIfReject => {
                    warn.get_or_insert(depth);
                    Step::Next
                }
                Restriction::Class(name) => match self.r.class(name) {
                    Some(class) => Step::Nested(class.clone()),
                    None => Step::Refuse(config_error(keyword(&r))),
                },
                _ => self.one(&r, stage, facts, env).await,
            };
            if !matches!(r, Restriction::WarnIfReject) && !matches!(step, Step::Nested(_)) {
                warn = warn.filter(|w| *w < depth);
            }
            match step {
                Step::Next => {}
                Step::Permit => return None,
                Step::Nested(list) if frames.len() < MAX_DEPTH => frames.push((list, 0)),
                Step::Nested(_) => return Some(config_error("restriction_class")),
                Step::Refuse(refusal) if warn_now => self.effects.push(Effect::Warned(refusal)),
                Step::Refuse(refusal) => return Some(self.refused(refusal)),
            }
            // Both pending: whatever follows ends in a deferral, and
            // Postfix's generic_checks stops there (the list passes, so
            // its defer_if_permit answers).
            if self.defer_if_permit.is_some() && self.defer_if_reject.is_some() {
                return None;
            }
        }
        None
    }

    /// The end of the decision when no list refused: a pending
    /// `defer_if_permit` defers.
    pub fn finish(&mut self) -> Outcome {
        match self.defer_if_permit.take() {
            Some(r) => Outcome::Refuse(r),
            None => Outcome::Pass,
        }
    }

    /// The `defer_if_permit` pending, taken (a check that passed without
    /// `delay_reject` keeps it for RCPT).
    pub fn take_defer_if_permit(&mut self) -> Option<Refusal> {
        self.defer_if_permit.take()
    }

    /// Starts with a `defer_if_permit` an earlier check left pending.
    pub fn with_defer_if_permit(mut self, pending: Option<Refusal>) -> Self {
        self.defer_if_permit = pending;
        self
    }

    /// A refusal, or the pending `defer_if_reject` for a `5XX`.
    fn refused(&mut self, r: Refusal) -> Refusal {
        match &self.defer_if_reject {
            Some(d) if r.code >= 500 => d.clone(),
            _ => r,
        }
    }

    async fn one<E: Env>(&mut self, r: &Restriction, stage: Stage, f: &Facts<'_>, env: &E) -> Step {
        use Restriction::*;
        let c = &self.r.config;
        let by = keyword(r);
        // The list's own subject, made only for a reply (not on the path
        // of a restriction that passes).
        let said = |code, enhanced: &str, text: &str| {
            let (name, class) = subject(stage, f);
            reply(code, enhanced, &name, class, text, by)
        };
        let refuse = |code, enhanced: &str, text: &str| Step::Refuse(said(code, enhanced, text));
        match r {
            Permit => Step::Permit,
            Reject => refuse(c.reject_code, "5.7.1", "Access denied"),
            Defer => refuse(c.defer_code, "4.3.2", "Try again later"),
            DeferIfPermit => {
                let d = said(c.defer_code, "4.7.0", "defer_if_permit requested");
                self.defer_if_permit.get_or_insert(d);
                Step::Next
            }
            DeferIfReject => {
                let d = said(c.defer_code, "4.7.0", "defer_if_reject requested");
                self.defer_if_reject.get_or_insert(d);
                Step::Next
            }
            PermitMynetworks if f.mynetworks => Step::Permit,
            PermitSaslAuthenticated if f.sasl_user.is_some() => Step::Permit,
            PermitTlsClientcerts | PermitTlsAllClientcerts => {
                let all = matches!(r, PermitTlsAllClientcerts);
                super::ccert::permit(&self.r.relay_clientcerts, all, stage, f, by).await
            }
            RejectUnauthDestination | DeferUnauthDestination | PermitAuthDestination => {
                self.destination(r, f, env)
            }
            RejectUnauthPipelining if f.improper_pipelining => {
                refuse(503, "5.5.0", "Improper use of SMTP command pipelining")
            }
            RejectNonFqdnSender | RejectNonFqdnRecipient => self.non_fqdn(r, f),
            RejectNonFqdnHelo | RejectInvalidHelo => self.helo_syntax(r, f),
            RejectUnlistedRecipient | RejectUnlistedSender => {
                let recipient = matches!(r, RejectUnlistedRecipient);
                let addr = if recipient { f.recipient } else { f.sender };
                let Some(addr) = addr.filter(|a| !a.is_empty()) else {
                    return Step::Next;
                };
                unlisted(env, addr, recipient, by).await
            }
            RejectMultiRecipientBounce => {
                let limit = if f.recipient.is_some() { 0 } else { 1 };
                if f.sender == Some("") && f.recipient_count > limit {
                    Step::Refuse(reply(
                        c.multi_recipient_bounce_reject_code,
                        "5.5.3",
                        "",
                        "Sender address",
                        "Multi-recipient bounce",
                        by,
                    ))
                } else {
                    Step::Next
                }
            }
            SenderLogin(check) => self.sender_login(*check, f, env).await,
            Dns(check) => self.dns(check, f, env).await,
            RejectUnverified { recipient } => {
                let addr = if *recipient { f.recipient } else { f.sender };
                let Some(addr) = addr.filter(|a| !a.is_empty()) else {
                    return Step::Next;
                };
                self.verified(env.unverified(addr, *recipient).await, by)
            }
            Access(check, table) => self.access(*check, table, f, env).await,
            Policy(client) => {
                let action = env.policy(client, stage, f).await;
                let (name, class) = subject(stage, f);
                self.action(action, &name, class, by)
            }
            _ => Step::Next,
        }
    }

    /// `reject_unauth_destination` and its kin (RCPT only).
    fn destination<E: Env>(&self, r: &Restriction, f: &Facts<'_>, env: &E) -> Step {
        use Restriction::*;
        let c = &self.r.config;
        let by = keyword(r);
        let Some(rcpt) = f.recipient else {
            return Step::Next;
        };
        match (r, env.auth_destination(rcpt)) {
            (PermitAuthDestination, true) => Step::Permit,
            (RejectUnauthDestination, false) => {
                Step::Refuse(relay_denied(c.relay_domains_reject_code, "5.7.1", rcpt, by))
            }
            // Postfix's deferred form of the relay refusal: 5XX → 4XX.
            (DeferUnauthDestination, false) => {
                let code = c.relay_domains_reject_code;
                Step::Refuse(relay_denied(
                    code - 100 * u16::from(code >= 500),
                    "4.7.1",
                    rcpt,
                    by,
                ))
            }
            _ => Step::Next,
        }
    }

    /// `reject_non_fqdn_sender`, `reject_non_fqdn_recipient`.
    fn non_fqdn(&self, r: &Restriction, f: &Facts<'_>) -> Step {
        let (addr, class) = match r {
            Restriction::RejectNonFqdnSender => (f.sender, "Sender address"),
            _ => (f.recipient, "Recipient address"),
        };
        match addr.filter(|a| !a.is_empty() && !fqdn_address(a)) {
            Some(a) => Step::Refuse(reply(
                self.r.config.non_fqdn_reject_code,
                "5.5.2",
                a,
                class,
                "need fully-qualified address",
                keyword(r),
            )),
            None => Step::Next,
        }
    }

    /// `reject_non_fqdn_helo_hostname`, `reject_invalid_helo_hostname`.
    fn helo_syntax(&self, r: &Restriction, f: &Facts<'_>) -> Step {
        let c = &self.r.config;
        let Some(helo) = f.helo else {
            return Step::Next;
        };
        let by = keyword(r);
        let (code, text, bad) = match r {
            Restriction::RejectInvalidHelo => (
                c.invalid_hostname_reject_code,
                "Invalid name",
                !valid_helo(helo),
            ),
            _ => (
                c.non_fqdn_reject_code,
                "need fully-qualified hostname",
                !is_literal(helo) && !fqdn_host(helo),
            ),
        };
        if !bad {
            return Step::Next;
        }
        Step::Refuse(reply(code, "5.5.2", helo, "Helo command", text, by))
    }

    async fn sender_login<E: Env>(&self, check: LoginCheck, f: &Facts<'_>, env: &E) -> Step {
        let Some(sender) = f.sender.filter(|s| !s.is_empty() && f.sasl_enabled) else {
            return Step::Next;
        };
        let by = keyword(&Restriction::SenderLogin(check));
        let rules = Rules {
            delimiters: env.delimiters(),
            local: env.is_local(sender),
            owner_request_special: true,
        };
        let owners = match crate::tables::find_address(&self.r.sender_login, sender, &rules).await {
            Ok(found) => found.map(|f| f.values),
            Err(_) => return Step::Refuse(lookup_failed(sender, by)),
        };
        let text = match (check, f.sasl_user) {
            (LoginCheck::Unauthenticated, Some(_)) => return Step::Next,
            (LoginCheck::Authenticated, None) => return Step::Next,
            // Known (as Both and Unauthenticated): a sender the map lists
            // needs a login, as Postfix's reject_known_sender_login_mismatch.
            (_, None) if owners.is_some() => "not logged in".to_string(),
            (_, None) => return Step::Next,
            (check, Some(login)) => {
                let owned = owners.map(|v| v.iter().any(|o| o.eq_ignore_ascii_case(login)));
                let mismatch = match check {
                    LoginCheck::Known => owned == Some(false),
                    _ => owned != Some(true),
                };
                if !mismatch {
                    return Step::Next;
                }
                format!("not owned by user {login}")
            }
        };
        Step::Refuse(reply(553, "5.7.1", sender, "Sender address", &text, by))
    }

    /// `check_*_access`: the first key found decides (for a client, its
    /// name, then, if that said nothing, its address).
    async fn access<E: Env>(
        &mut self,
        check: TableCheck,
        table: &Arc<Table>,
        f: &Facts<'_>,
        env: &E,
    ) -> Step {
        let c = &self.r.config;
        let parents = c.parent_domain_matches_subdomains;
        let by = keyword(&Restriction::Access(check, table.clone()));
        let (name, class, searches): (String, &str, Vec<Vec<AccessKey>>) = match check {
            // The name (`unknown` too, as Postfix's check_namadr_access),
            // then the address and its networks.
            TableCheck::Client => (
                namaddr(f.client_name, f.client_ip),
                "Client host",
                vec![
                    host_keys(f.client_name, parents),
                    client_address_keys(f.client_ip),
                ],
            ),
            TableCheck::ReverseClient => (
                f.reverse_client_name.to_string(),
                "Unverified Client host",
                vec![
                    host_keys(f.reverse_client_name, parents),
                    client_address_keys(f.client_ip),
                ],
            ),
            TableCheck::Helo => match f.helo {
                Some(h) => (h.to_string(), "Helo command", vec![host_keys(h, parents)]),
                None => return Step::Next,
            },
            TableCheck::Sender => match f.sender {
                Some(s) => {
                    let keys =
                        address_keys(s, env.delimiters(), parents, &c.null_access_lookup_key);
                    (s.to_string(), "Sender address", vec![keys])
                }
                None => return Step::Next,
            },
            TableCheck::Recipient => match f.recipient {
                Some(r) => {
                    let keys =
                        address_keys(r, env.delimiters(), parents, &c.null_access_lookup_key);
                    (r.to_string(), "Recipient address", vec![keys])
                }
                None => return Step::Next,
            },
            TableCheck::Sasl => match f.sasl_user {
                Some(u) => (
                    namaddr(f.client_name, f.client_ip),
                    "Client host",
                    vec![vec![AccessKey {
                        text: u.to_string(),
                        partial: false,
                    }]],
                ),
                None => return Step::Next,
            },
            TableCheck::Ccert => match super::ccert::access_keys(f) {
                Some(found) => found,
                None => return Step::Next,
            },
        };
        for keys in searches {
            let found = match search(table, &keys).await {
                Ok(found) => found,
                Err(_) => return Step::Refuse(lookup_failed(&name, by)),
            };
            let Some(values) = found else { continue };
            let step = self.action(access::parse(values.raw()), &name, class, by);
            if !matches!(step, Step::Next) {
                return step;
            }
        }
        Step::Next
    }

    /// What an access action (a table's, or a policy service's) does.
    fn action(
        &mut self,
        action: Result<Action, access::ActionError>,
        name: &str,
        class: &str,
        by: &'static str,
    ) -> Step {
        let c = &self.r.config;
        // The reply with the table's text (and the enhanced code it starts
        // with, as Postfix's dsn_split), or Postfix's when it gave none.
        let say = |code: u16, enhanced: &str, text: &str, default: &str| {
            let (enhanced, text) = dsn_split(enhanced, text);
            let text = if text.is_empty() { default } else { text };
            reply(code, enhanced, name, class, text, by)
        };
        let action = match action {
            Ok(action) => action,
            Err(e) => {
                self.effects.push(Effect::Broken(e.to_string()));
                return Step::Refuse(config_error(by));
            }
        };
        match action {
            Action::Ok => Step::Permit,
            Action::Dunno => Step::Next,
            Action::Reject(t) => {
                Step::Refuse(say(c.access_map_reject_code, "5.7.1", &t, "Access denied"))
            }
            Action::Defer(t) => {
                Step::Refuse(say(c.access_map_defer_code, "4.7.1", &t, "Access denied"))
            }
            Action::DeferIfPermit(t) => {
                let d = say(c.defer_code, "4.7.1", &t, "Service unavailable");
                self.defer_if_permit.get_or_insert(d);
                Step::Next
            }
            Action::DeferIfReject(t) => {
                let d = say(c.defer_code, "4.7.1", &t, "Service unavailable");
                self.defer_if_reject.get_or_insert(d);
                Step::Next
            }
            Action::Reply(r) => {
                let enhanced = r
                    .enhanced
                    .unwrap_or_else(|| format!("{}.7.1", r.code / 100));
                Step::Refuse(say(r.code, &enhanced, &r.text, "Access denied"))
            }
            Action::Discard(t) => {
                self.effects.push(Effect::Discard(t));
                Step::Permit
            }
            Action::Hold(t) => self.effect(Effect::Hold(t)),
            Action::Filter(t) => self.effect(Effect::Filter(t)),
            Action::Redirect(t) => self.effect(Effect::Redirect(t)),
            Action::Bcc(t) => self.effect(Effect::Bcc(t)),
            Action::Prepend(t) => self.effect(Effect::Prepend(t)),
            Action::Info(t) => self.effect(Effect::Info(t)),
            Action::Warn(t) => self.effect(Effect::Warn(t)),
            Action::Restrictions(words) => match self.r.parse_answer(&words.join(" ")) {
                Ok(list) => Step::Nested(Arc::new(list)),
                Err(_) => Step::Refuse(config_error(by)),
            },
        }
    }

    fn effect(&mut self, e: Effect) -> Step {
        self.effects.push(e);
        Step::Next
    }
}

async fn unlisted<E: Env>(env: &E, addr: &str, recipient: bool, by: &'static str) -> Step {
    match env.unlisted(addr, recipient).await {
        Ok(None) => Step::Next,
        Ok(Some((code, table))) => {
            // (Postfix resolves a virtual alias domain's unknown address
            // to its error transport, "5.1.1", which smtpd_dsn_fix makes
            // 5.1.7 for a sender; the other tables say 5.1.0 for one.)
            let (enhanced, class) = match (recipient, table) {
                (true, _) => ("5.1.1", "Recipient address"),
                (false, "virtual alias table") => ("5.1.7", "Sender address"),
                (false, _) => ("5.1.0", "Sender address"),
            };
            let text = format!("User unknown in {table}");
            Step::Refuse(reply(code, enhanced, addr, class, &text, by))
        }
        Err(_) => Step::Refuse(lookup_failed(addr, by)),
    }
}
