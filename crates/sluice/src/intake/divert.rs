//! `REDIRECT` and `BCC` from the door's access tables (Postfix's access(5)
//! actions), applied to the envelope after the content filters and before
//! the spool, as Postfix's cleanup(8) and qmgr(8) do:
//!
//! - each `BCC` address becomes one more recipient (every BCC of the
//!   transaction: Postfix 3.7 keeps them all), unless it is one already;
//!   its copy is never reported to the sender (`NOTIFY=NEVER`: a bounce
//!   would show the sender the hidden address). Postfix 3.7 queues it
//!   with no NOTIFY (seen with postcat), but gives its own
//!   `always_bcc`/`*_bcc_maps` copies NOTIFY=NONE for that reason: Sluice
//!   does so here too, on purpose;
//! - then a `REDIRECT` (the last of the transaction) replaces every
//!   recipient, the BCC copies included, by its address. That one
//!   recipient keeps what qmgr(8) keeps: the attributes of the recipient
//!   it sorts first (by domain, then address), its DSN `NOTIFY`/`ORCPT`
//!   and the address it was given as (the log's `orig_to`).
//!
//! Applied once the filters left some recipient (a message they emptied
//! is dropped, BCC or not) and after the sender limits (they count the
//! recipients the client gave, not these).
//!
//! Trust: the addresses are [`Target`]s, mailboxes the access-table parser
//! checked; the recipients are the filters' and the door's.
//! Invariants: the envelope stays lined up: `dsn.notify` and `dsn.orcpt`
//! (when there is a DSN block) have one entry per recipient, and the
//! (recipient, given) pairs name only recipients.

use sluice_proto::dsn::NOTIFY_NEVER;
use sluice_spool::Dsn;

use super::Submission;
use crate::log::{Event, Logger, Qid};
use crate::message::address::Target;

/// Applies the submission's BCC addresses, then its REDIRECT, logging
/// each.
pub(super) fn apply(logger: &Logger, sub: &mut Submission) {
    for bcc in std::mem::take(&mut sub.bcc) {
        if add_bcc(sub, &bcc) {
            logger.emit(&Event::Bcc {
                queue_id: Qid(sub.id),
                to: bcc.as_str().into(),
            });
        }
    }
    if let Some(target) = sub.redirect.take() {
        let replaced = sub.recipients.len();
        if redirect(sub, &target) {
            logger.emit(&Event::Redirect {
                queue_id: Qid(sub.id),
                to: target.as_str().into(),
                replaced: replaced as u64,
            });
        }
    }
}

/// One more recipient, not reported on; false if it is one already.
pub(super) fn add_bcc(sub: &mut Submission, bcc: &Target) -> bool {
    let address = bcc.as_str();
    if sub.recipients.iter().any(|r| r == address) {
        return false;
    }
    let n = sub.recipients.len();
    let dsn = sub.dsn.get_or_insert_with(|| Box::new(blank(n)));
    dsn.notify.push(NOTIFY_NEVER);
    dsn.orcpt.push(String::new());
    sub.recipients.push(address.to_string());
    true
}

/// A DSN block that says nothing: as if the client gave no parameter.
fn blank(recipients: usize) -> Dsn {
    Dsn {
        ret: 0,
        envid: String::new(),
        notify: vec![0; recipients],
        orcpt: vec![String::new(); recipients],
    }
}

/// Every recipient replaced by `target`, with the attributes of the one
/// qmgr(8) would keep; false (nothing changed) when there is none.
fn redirect(sub: &mut Submission, target: &Target) -> bool {
    let Some(kept) = qmgr_first(&sub.recipients) else {
        return false;
    };
    let to = target.as_str().to_string();
    let given = sub
        .orig_rcpt
        .iter()
        .find(|(r, _)| *r == sub.recipients[kept])
        .map_or_else(|| sub.recipients[kept].clone(), |(_, g)| g.clone());
    sub.orig_rcpt = match given.eq_ignore_ascii_case(&to) {
        true => Vec::new(),
        false => vec![(to.clone(), given)],
    };
    if let Some(dsn) = sub.dsn.as_mut() {
        let notify = dsn.notify.get(kept).copied().unwrap_or(0);
        let orcpt = dsn.orcpt.get(kept).cloned().unwrap_or_default();
        dsn.notify = vec![notify];
        dsn.orcpt = vec![orcpt];
    }
    sub.recipients = vec![to];
    true
}

/// The recipient qmgr(8) sorts first (`qmgr_message_sort_compare`, before
/// any is resolved): by domain (the text from the last `@`, without
/// regard to case; an address without one last), then by address.
fn qmgr_first(recipients: &[String]) -> Option<usize> {
    let key = |r: &String| {
        let domain = r.rfind('@').map(|at| r[at..].to_ascii_lowercase());
        (domain.is_none(), domain, r.clone())
    };
    (0..recipients.len()).min_by_key(|&i| key(&recipients[i]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intake::Origin;

    fn sub(recipients: &[&str]) -> Submission {
        Submission {
            id: 1,
            origin: Origin::Notice,
            sender: "s@ext.test".into(),
            recipients: recipients.iter().map(|r| r.to_string()).collect(),
            orig_rcpt: Vec::new(),
            flags: 0,
            dsn: None,
            body: Vec::new(),
            flaws: None,
            hold: None,
            redirect: None,
            bcc: Vec::new(),
            filter: Default::default(),
        }
    }

    fn target(a: &str) -> Target {
        Target::new(a).unwrap()
    }

    fn lined_up(s: &Submission) -> bool {
        let n = s.recipients.len();
        let dsn = s
            .dsn
            .as_ref()
            .is_none_or(|d| d.notify.len() == n && d.orcpt.len() == n);
        dsn && s.orig_rcpt.iter().all(|(r, _)| s.recipients.contains(r))
    }

    #[test]
    fn qmgr_sorts_by_domain_then_address() {
        fn first<'a>(list: &[&'a str]) -> Option<&'a str> {
            let owned: Vec<String> = list.iter().map(|s| s.to_string()).collect();
            qmgr_first(&owned).map(|i| list[i])
        }
        assert_eq!(
            first(&["plain@relay.test", "red@relay.test", "other@relay.test"]),
            Some("other@relay.test")
        );
        assert_eq!(
            first(&["red@relay.test", "red2@relay.test"]),
            Some("red2@relay.test")
        );
        assert_eq!(
            first(&["bcc@relay.test", "red@relay.test", "bcc-target@far.test"]),
            Some("bcc-target@far.test")
        );
        assert_eq!(first(&["z@A.test", "a@b.test"]), Some("z@A.test"));
        assert_eq!(first(&["local", "x@y.test"]), Some("x@y.test"));
        assert_eq!(first(&[]), None);
    }

    #[test]
    fn redirect_keeps_one_recipient_lined_up() {
        let mut s = sub(&["b@relay.test", "a@relay.test"]);
        s.orig_rcpt = vec![("a@relay.test".into(), "alias@relay.test".into())];
        s.dsn = Some(Box::new(Dsn {
            ret: 1,
            envid: "e".into(),
            notify: vec![2, 4],
            orcpt: vec!["rfc822;b@x".into(), "rfc822;a@x".into()],
        }));
        s.redirect = Some(target("t@far.test"));
        apply(&Logger::disabled(), &mut s);
        assert_eq!(s.recipients, ["t@far.test"]);
        assert_eq!(
            s.orig_rcpt,
            [("t@far.test".to_string(), "alias@relay.test".to_string())]
        );
        let dsn = s.dsn.as_ref().unwrap();
        assert_eq!(
            (dsn.notify.as_slice(), dsn.orcpt.as_slice()),
            (&[4u8][..], &["rfc822;a@x".to_string()][..])
        );
        assert!(lined_up(&s));
        // To itself: no orig_to.
        let mut s = sub(&["t@far.test", "u@far.test"]);
        s.redirect = Some(target("t@far.test"));
        apply(&Logger::disabled(), &mut s);
        assert_eq!(
            (s.recipients.as_slice(), s.orig_rcpt.len()),
            (&["t@far.test".to_string()][..], 0)
        );
    }

    #[test]
    fn bcc_adds_a_copy_never_reported_then_redirect_takes_it() {
        let mut s = sub(&["a@relay.test"]);
        s.bcc = vec![
            target("c@far.test"),
            target("a@relay.test"),
            target("d@far.test"),
        ];
        apply(&Logger::disabled(), &mut s);
        assert_eq!(s.recipients, ["a@relay.test", "c@far.test", "d@far.test"]);
        let dsn = s.dsn.as_ref().unwrap();
        assert_eq!(dsn.notify, [0, NOTIFY_NEVER, NOTIFY_NEVER]);
        assert!(lined_up(&s));

        let mut s = sub(&["a@relay.test"]);
        s.bcc = vec![target("c@far.test")];
        s.redirect = Some(target("t@far.test"));
        apply(&Logger::disabled(), &mut s);
        assert_eq!(s.recipients, ["t@far.test"]);
        assert_eq!(
            s.orig_rcpt,
            [("t@far.test".to_string(), "c@far.test".to_string())]
        );
        assert_eq!(s.dsn.as_ref().unwrap().notify, [NOTIFY_NEVER]);
        assert!(lined_up(&s));
    }

    #[test]
    fn nothing_to_redirect_stays_nothing() {
        let mut s = sub(&[]);
        s.redirect = Some(target("t@far.test"));
        apply(&Logger::disabled(), &mut s);
        assert!(s.recipients.is_empty() && lined_up(&s));
    }
}
