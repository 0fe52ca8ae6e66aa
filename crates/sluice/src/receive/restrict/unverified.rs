//! What `reject_unverified_recipient` and `reject_unverified_sender`
//! answer for a [`VerifyStatus`], as Postfix 3.7's smtpd does:
//! - deliverable: nothing (the next restriction decides);
//! - undeliverable: `unverified_*_reject_code` (450) with `<addr>:
//!   Recipient address rejected: unverified address: <next hop's
//!   reply>`, as the tempfail action says (a 4XX does not reject: a
//!   later restriction's reject wins); with a 5XX code, a reject with
//!   `… rejected: undeliverable address: <next hop's reply>`; the text
//!   after `rejected:` is `unverified_*_reject_reason` if set;
//! - not known yet or a temporary failure: `unverified_*_defer_code`
//!   (450) with `… rejected: unverified address: <why>`, as the
//!   `unverified_*_tempfail_action` says (`defer_if_permit`).
//!
//! The enhanced status is X.1.1 for a recipient and X.1.7 for a sender,
//! its class the reply code's (tests/it/verify.rs holds these to a real
//! Postfix's answers).
//!
//! Trust: the status's texts are already clean (`status.rs`); the address
//! is the client's and is cleaned here. Invariant: no reply text made
//! here holds a control character.

use crate::deliver::verify::status::clean;
use crate::deliver::verify::{Kind, TempfailAction, VerifySettings, VerifyStatus};
use crate::receive::access::Reply;

/// What the restriction does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No objection: on to the next restriction (Postfix's DUNNO).
    Pass,
    /// Reply now with this (a 4XX or 5XX).
    Reject(Reply),
    /// Defer with this reply now (`tempfail_action = defer`).
    Defer(Reply),
    /// Defer with this reply only if the rest would permit.
    DeferIfPermit(Reply),
}

/// The answer of `reject_unverified_{sender,recipient}` for `address`.
pub fn verdict(
    status: &VerifyStatus,
    kind: Kind,
    address: &str,
    settings: &VerifySettings,
) -> Verdict {
    let (reject_code, defer_code, action, reason, class, detail) = match kind {
        Kind::Recipient => (
            settings.unverified_recipient_reject_code,
            settings.unverified_recipient_defer_code,
            settings.unverified_recipient_tempfail_action,
            &settings.unverified_recipient_reject_reason,
            "Recipient address",
            1,
        ),
        Kind::Sender => (
            settings.unverified_sender_reject_code,
            settings.unverified_sender_defer_code,
            settings.unverified_sender_tempfail_action,
            &settings.unverified_sender_reject_reason,
            "Sender address",
            7,
        ),
    };
    let address = clean(address);
    let reply = |code: u16, text: String| Reply {
        code,
        enhanced: Some(format!("{}.1.{detail}", code / 100)),
        text: format!("<{address}>: {class} rejected: {text}"),
    };
    let tempfail = |r: Reply| match action {
        TempfailAction::Defer => Verdict::Defer(r),
        TempfailAction::DeferIfPermit => Verdict::DeferIfPermit(r),
    };
    match status {
        VerifyStatus::Deliverable => Verdict::Pass,
        // Postfix 3.7 rejects an undeliverable address only with a 5XX
        // code; with a 4XX (the default) it is "unverified" and the
        // tempfail action applies (a later reject wins).
        VerifyStatus::Undeliverable(_) if !reason.is_empty() => match reject_code / 100 {
            5 => Verdict::Reject(reply(reject_code, clean(reason))),
            _ => tempfail(reply(reject_code, clean(reason))),
        },
        VerifyStatus::Undeliverable(hop) if reject_code / 100 == 5 => {
            let text = format!("undeliverable address: {}", hop.describe());
            Verdict::Reject(reply(reject_code, text))
        }
        VerifyStatus::Undeliverable(_) => {
            let text = format!("unverified address: {}", status.reason());
            tempfail(reply(reject_code, text))
        }
        VerifyStatus::Unknown(_) => {
            let text = format!("unverified address: {}", status.reason());
            tempfail(reply(defer_code, text))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deliver::smtp::Command;
    use crate::deliver::verify::{HopReply, Unknown};
    use crate::message::reply::{Enhanced, Reply as Smtp};

    fn refused() -> VerifyStatus {
        let r = Smtp::smtp(550, Enhanced::new(5, 1, 1), "<u@b.test>: User unknown");
        let hop = HopReply::new(&r, Some("h[127.0.0.1]:25"), Some(Command::Rcpt));
        VerifyStatus::Undeliverable(hop)
    }

    #[test]
    fn postfix_defaults() {
        let s = VerifySettings::default();
        let v = verdict(&refused(), Kind::Recipient, "u@b.test", &s);
        let text = "<u@b.test>: Recipient address rejected: unverified address: \
            host h[127.0.0.1]:25 said: 550 5.1.1 <u@b.test>: User unknown \
            (in reply to RCPT TO command)";
        let want = Reply {
            code: 450,
            enhanced: Some("4.1.1".into()),
            text: text.into(),
        };
        assert_eq!(v, Verdict::DeferIfPermit(want));
        let pending = VerifyStatus::Unknown(Unknown::Pending);
        let Verdict::DeferIfPermit(r) = verdict(&pending, Kind::Sender, "s@a.test", &s) else {
            panic!("not defer_if_permit");
        };
        assert_eq!((r.code, r.enhanced.as_deref()), (450, Some("4.1.7")));
        assert_eq!(
            r.text,
            "<s@a.test>: Sender address rejected: unverified address: \
             Address verification in progress"
        );
        let pass = verdict(&VerifyStatus::Deliverable, Kind::Recipient, "u@b", &s);
        assert_eq!(pass, Verdict::Pass);
    }

    #[test]
    fn settings_change_codes_action_and_reason() {
        let s = VerifySettings {
            unverified_recipient_reject_code: 550,
            unverified_recipient_tempfail_action: TempfailAction::Defer,
            unverified_recipient_reject_reason: "Recipient address lookup failed".into(),
            ..VerifySettings::default()
        };
        let Verdict::Reject(r) = verdict(&refused(), Kind::Recipient, "u@b.test\r\n", &s) else {
            panic!("not a reject");
        };
        let five = verdict(
            &refused(),
            Kind::Recipient,
            "u@b.test",
            &VerifySettings {
                unverified_recipient_reject_code: 550,
                ..VerifySettings::default()
            },
        );
        let Verdict::Reject(five) = five else {
            panic!("not a reject")
        };
        assert!(five
            .text
            .contains("rejected: undeliverable address: host h[127.0.0.1]:25 said: 550"));
        assert_eq!((r.code, r.enhanced.as_deref()), (550, Some("5.1.1")));
        assert_eq!(
            r.text,
            "<u@b.test  >: Recipient address rejected: Recipient address lookup failed"
        );
        let pending = VerifyStatus::Unknown(Unknown::Pending);
        let v = verdict(&pending, Kind::Recipient, "u@b.test", &s);
        assert!(matches!(v, Verdict::Defer(r) if r.code == 450));
    }
}
