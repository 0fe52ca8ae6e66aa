//! The restrictions that ask outside Sluice's tables: the DNS checks
//! (`receive/dnscheck` decides) and address verification
//! (`deliver/verify` probes), and how their outcomes enter a decision:
//! a refusal now, or a pending `defer_if_permit` / `defer_if_reject`.
//!
//! Trust: the outcomes carry replies already made safe by their modules
//! (printable text, 4XX/5XX codes). Invariant: a lookup or probe that
//! failed is never a permit.

use super::checks::config_error;
use super::eval::{Env, Evaluation, Step};
use super::unverified::Verdict;
use super::{DnsRestriction, Facts, Refusal};
use crate::receive::access;
use crate::receive::dnscheck::DnsCheck;

impl Evaluation<'_> {
    /// A DNS restriction: skipped where Postfix skips it (no HELO, the
    /// null sender, our own domains), its outcome applied as Postfix's.
    pub(super) async fn dns<E: Env>(
        &mut self,
        check: &DnsRestriction,
        f: &Facts<'_>,
        env: &E,
    ) -> Step {
        use DnsRestriction::*;
        let skip = match check {
            UnknownHeloHostname | RhsblHelo(_) => f.helo.is_none(),
            UnknownSenderDomain | RhsblSender(_) => {
                f.sender.is_none_or(|s| s.is_empty() || env.is_local(s))
            }
            UnknownRecipientDomain => f.recipient.is_none_or(|r| env.is_local(r)),
            _ => false,
        };
        if skip {
            return Step::Next;
        }
        let by = check.keyword();
        let refusal = |r: access::Reply| Refusal {
            code: r.code,
            enhanced: r
                .enhanced
                .unwrap_or_else(|| format!("{}.7.1", r.code / 100)),
            text: r.text,
            by,
        };
        match env.dns(check, f).await {
            DnsCheck::Pass => Step::Next,
            // An allowlist permits a recipient only where the client may
            // send anyway (Postfix: permit_auth_destination at RCPT).
            DnsCheck::Permit => match f.recipient {
                Some(r) if !env.auth_destination(r) => Step::Next,
                _ => Step::Permit,
            },
            DnsCheck::Reject(r) | DnsCheck::Defer(r) => Step::Refuse(refusal(r)),
            DnsCheck::DeferIfPermit(r) => {
                self.defer_if_permit.get_or_insert(refusal(r));
                Step::Next
            }
            DnsCheck::DeferIfReject(r) => {
                self.defer_if_reject.get_or_insert(refusal(r));
                Step::Next
            }
        }
    }

    /// What a verification's verdict does to the decision.
    pub(super) fn verified(&mut self, verdict: Option<Verdict>, by: &'static str) -> Step {
        let refusal = |r: access::Reply| Refusal {
            code: r.code,
            enhanced: r
                .enhanced
                .unwrap_or_else(|| format!("{}.1.0", r.code / 100)),
            text: r.text,
            by,
        };
        match verdict {
            None => Step::Refuse(config_error(by)),
            Some(Verdict::Pass) => Step::Next,
            Some(Verdict::Reject(r) | Verdict::Defer(r)) => Step::Refuse(refusal(r)),
            Some(Verdict::DeferIfPermit(r)) => {
                self.defer_if_permit.get_or_insert(refusal(r));
                Step::Next
            }
        }
    }
}
