//! RCPT TO an SRS address at our SRS domain (`[srs] enabled`): a bounce
//! (or any reply) to mail we forwarded. A valid address is accepted and
//! replaced by the address it stands for (the original sender, or the
//! previous forwarder's SRS0 address), which is then relayed or
//! delivered as any recipient; a forged, expired or malformed one gets
//! `550 5.1.1`, logged as `srs_refused` with the reason.
//!
//! Trust: the address is the client's, anyone's; the codec refuses what
//! our secrets did not sign. Invariant: the restriction lists run on the
//! SRS address itself (it counts as a destination of ours there, see
//! `restrictions.rs`), so a stranger's RCPT never reaches a foreign
//! recipient except through a hash we made.

use sluice_proto::command::RcptParams;
use tokio::io::{AsyncRead, AsyncWrite};

use super::session::{Next, Session};
use crate::log::{Event, Qid};
use crate::message::srs::{self, SrsError};
use crate::routing::mailboxes::Resolution;

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    /// Whether `address` is for this file: SRS on, and an SRS-shaped
    /// local part at the SRS domain. (Anything else at the SRS domain is
    /// whatever that domain otherwise is.)
    pub(super) fn is_srs_recipient(&self, address: &str) -> bool {
        let forwarding = self.ctx.intake.forwarding.as_ref();
        forwarding
            .and_then(|f| f.srs.as_ref())
            .is_some_and(|s| s.looks_like_ours(address))
    }

    /// Decides an SRS recipient (see the module head).
    pub(super) async fn srs_recipient(&mut self, address: String, params: RcptParams) -> Next {
        if let Err(next) = self.restrict_rcpt(&address).await {
            return next;
        }
        let ctx = self.ctx.clone();
        let Some(codec) = ctx.intake.forwarding.as_ref().and_then(|f| f.srs.as_ref()) else {
            return Next::Continue;
        };
        let original = match codec.reverse(&address, srs::today()) {
            Ok(o) => o,
            Err(e) => return self.srs_refused(&address, e),
        };
        // The original sender could be in a local domain (not one we
        // rewrite, but an alias may have changed since): resolved as any.
        let targets = match ctx.mailboxes.resolve(&original).await {
            Ok(Resolution::NotLocal) => vec![original.clone()],
            Ok(Resolution::Accept(list)) => list,
            Ok(Resolution::Discard | Resolution::Unknown) => {
                return self.srs_refused(&address, SrsError::NotSrs)
            }
            Err(err) => {
                let text = format!("451 4.3.0 <{address}>: Temporary lookup failure ({err})");
                self.reply(&text);
                return Next::Continue;
            }
        };
        let max = ctx.config.smtpd.max_recipients;
        let ip = self.peer.ip();
        let Some(txn) = self.txn.as_mut() else {
            return Next::Continue;
        };
        if !txn.add_recipients(targets.into_iter(), max, &params, &address) {
            self.reply("452 4.5.3 Error: too many recipients");
            return Next::Continue;
        }
        ctx.logger.emit(&Event::SrsReverse {
            queue_id: Qid(txn.id),
            client_ip: ip,
            to: address.as_str().into(),
            orig_to: original.as_str().into(),
        });
        self.reply("250 2.1.5 Ok");
        Next::Continue
    }

    /// `550 5.1.1`, logged as `srs_refused`, counted as an error.
    fn srs_refused(&mut self, address: &str, why: SrsError) -> Next {
        metrics::counter!("sluice_messages_rejected_total", "reason" => "srs").increment(1);
        let id = self.txn.as_ref().map_or(0, |t| t.id);
        self.ctx.logger.emit(&Event::SrsRefused {
            queue_id: Qid(id),
            client_ip: self.peer.ip(),
            to: address.into(),
            reason: why.as_str().into(),
        });
        self.reply_fmt(format_args!(
            "550 5.1.1 <{address}>: Recipient address rejected: {why}"
        ));
        self.error_counted()
    }
}
