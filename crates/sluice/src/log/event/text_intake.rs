//! The human lines of the intake's events (cleanup's: content filters,
//! holds, sender limits, REDIRECT/BCC, DKIM, sender authentication), the
//! part of `text.rs`'s `Display` that is about one message on its way
//! into the queue.
//!
//! Trusts the event's fields, as `text.rs`.

use std::fmt::{self, Formatter};

use super::Event;

impl Event<'_> {
    pub(super) fn fmt_intake(&self, f: &mut Formatter<'_>) -> fmt::Result {
        use Event::*;
        match self {
            MilterDiscard { queue_id } => {
                write!(f, "{queue_id}: discarded by a content filter (milter)")
            }
            NoRecipientsLeft { queue_id } => {
                write!(f, "{queue_id}: discarded (no recipients left)")
            }
            Hold {
                queue_id,
                cause,
                reason,
            } if cause == "milter" => write!(f, "{queue_id}: milter-hold: {reason}"),
            Hold {
                queue_id, reason, ..
            } => write!(f, "{queue_id}: hold: {reason}"),
            Redirect { queue_id, to, replaced } => {
                write!(f, "{queue_id}: redirect: to=<{to}> ({replaced} recipients replaced)")
            }
            Bcc { queue_id, to } => write!(f, "{queue_id}: bcc: to=<{to}> (access BCC)"),
            HeaderCheck { line, .. } => f.write_str(line),
            LimitCrossed {
                queue_id,
                kind,
                who,
                what,
                count,
                limit,
            } => write!(
                f,
                "{queue_id}: sender limit: {kind} {who} sent {count} {what} in the last hour, over {limit}: its new mail is held"
            ),
            LimitReleased {
                kind,
                who,
                contained,
                released,
            } => write!(
                f,
                "sender limit: {kind} {who} released by an administrator (was contained: {contained}; {released} held messages released)"
            ),
            LimitsAlone { error: Some(e) } => write!(
                f,
                "warning: sender limits: Redis cannot be used ({e}): counting on this node alone"
            ),
            LimitsAlone { error: None } => write!(f, "sender limits: counting in Redis again"),
            MilterFailed { queue_id, milter, error } => {
                write!(f, "{queue_id}: milter {milter}: {error}")
            }
            DkimNotSigned { queue_id, cause, from, user } => write!(
                f,
                "{queue_id}: not DKIM-signed: local user {user} sent it with From: <{from}> ({cause})"
            ),
            DkimLoop { queue_id, hostname } => write!(
                f,
                "{queue_id}: not DKIM-signed: it already passed through {hostname} (a loop)"
            ),
            DkimSigned { queue_id, domain } => {
                write!(f, "{queue_id}: DKIM-Signature added (d={domain})")
            }
            DkimFailed { queue_id, error } => write!(
                f,
                "{queue_id}: warning: DKIM signing failed: {error}; sent unsigned"
            ),
            SenderAuth { line, .. } => f.write_str(line),
            SrsForward { queue_id, from, srs } => {
                write!(f, "{queue_id}: srs: from=<{from}> sent as <{srs}>")
            }
            SrsReverse { queue_id, client_ip, to, orig_to } => write!(
                f,
                "{queue_id}: srs: RCPT from [{client_ip}]: to=<{to}> reversed to <{orig_to}>"
            ),
            SrsRefused { queue_id, client_ip, to, reason } => write!(
                f,
                "{queue_id}: srs: RCPT from [{client_ip}]: to=<{to}> refused ({reason})"
            ),
            ArcSealed { queue_id, domain, cv, sealed: true, .. } => {
                write!(f, "{queue_id}: ARC set added (d={domain}, cv={cv})")
            }
            ArcSealed { queue_id, domain, cv, error, .. } => write!(
                f,
                "{queue_id}: warning: not ARC-sealed (d={domain}, cv={cv}): {error}"
            ),
            Received { queue_id, origin, client_ip, client_port, uid, from, size, nrcpt } => {
                write!(f, "{queue_id}: ")?;
                match (&**origin, client_ip, client_port) {
                    ("smtpd", Some(ip), Some(port)) => write!(f, "client=[{ip}]:{port}")?,
                    ("sendmail", ..) => match uid {
                        Some(uid) => write!(f, "uid={uid}")?,
                        None => f.write_str("uid=unknown")?,
                    },
                    _ => f.write_str("notice")?,
                }
                write!(
                    f,
                    ", from=<{from}>, size={size}, nrcpt={nrcpt} (queue active)"
                )
            }
            SenderReplaced { uid, asked, sender } => write!(
                f,
                "uid={uid}: sender <{asked}> replaced by <{sender}> (not a trusted user)"
            ),
            _ => self.fmt_smtpd(f),
        }
    }
}
