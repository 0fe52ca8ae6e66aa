//! Bounces: RFC 3464 delivery status notifications, stored like mail.
//!
//! A bounce is an ordinary message from the null sender (so it can never
//! bounce again) to the original sender, taken by the same intake as
//! received mail (`intake/`), which stores and queues it. The queue marks the failed recipients final only
//! once [`store`] has returned, so a crash can at worst duplicate a bounce,
//! never lose one.
//!
//! Depends on the message types and the intake; the queue calls it,
//! never the other way round.

pub mod dsn;

use std::sync::Arc;
use std::time::Duration;

use sluice_spool::{BodyRef, Envelope};

use crate::config::content_filter::ContentFilter;
use crate::intake::{Intake, Origin, Submission};
use crate::log::{Event, Qid};
use crate::message::status::Failure;
use crate::message::{body, flags};

/// Largest original returned whole (RET=FULL), in octets.
pub const RETURN_LIMIT: usize = 100 << 10;

/// Builds the DSN (`kind`) for `failed` recipients of `original` and hands
/// it to the intake, retrying (with backoff up to 5 minutes) while the
/// intake can only say "later" (a full spool). Returns once the notice is
/// stored and queued (`true`), or refused for good (`false`, logged).
pub async fn store(
    intake: &Intake,
    original: &Envelope,
    (cached, body_ref): (Option<Arc<Vec<u8>>>, BodyRef),
    failed: &[(u16, Failure)],
    kind: dsn::Notice,
) -> bool {
    let logger = &intake.logger;
    let body = body::load(&intake.spool, &cached, body_ref).await.ok();
    let whole = body.as_deref().map(|b| &b[..]).unwrap_or_default();
    // RET=FULL: the whole message, up to a size (Postfix's
    // bounce_size_limit); otherwise, and past that, its headers.
    let full = original.dsn.as_ref().is_some_and(|d| d.ret == 1) && whole.len() <= RETURN_LIMIT;
    let returned = match full {
        true => dsn::Returned::Full(whole),
        false => dsn::Returned::Headers(body::headers(whole)),
    };
    let id = intake.new_id();
    let report = dsn::build_notice(
        kind,
        &intake.config.hostname,
        original,
        failed,
        returned,
        id,
    );
    let mut bits = flags::BOUNCE;
    if report.eight_bit {
        bits |= flags::EIGHTBITMIME;
    }
    if report.utf8 {
        bits |= flags::SMTPUTF8;
    }
    let mut wait = Duration::from_secs(1);
    loop {
        let notice = Submission {
            id,
            origin: Origin::Notice,
            sender: String::new(),
            recipients: vec![original.sender.clone()],
            orig_rcpt: Vec::new(),
            flags: bits,
            dsn: None,
            body: report.message.clone(),
            flaws: None,
            hold: None,
            redirect: None,
            bcc: Vec::new(),
            filter: ContentFilter::NONE, // never filtered, as Postfix's bounces
        };
        match intake.accept(notice).await {
            Ok(_) => {
                let (_what, kind) = match kind {
                    dsn::Notice::Failed => ("non-delivery", "failure"),
                    dsn::Notice::Delayed => ("delay", "delay"),
                    dsn::Notice::Delivered => ("delivery status", "success"),
                    dsn::Notice::Relayed => ("delivery status", "relayed"),
                };
                logger.emit(&Event::Notice {
                    queue_id: Qid(original.id),
                    kind: kind.into(),
                    notice_id: Qid(id),
                });
                return true;
            }
            Err(refusal) if refusal.is_temporary() => {
                logger.emit(&Event::NoticeRetry {
                    queue_id: Qid(original.id),
                    error: refusal.to_string().into(),
                    retry_secs: wait.as_secs(),
                });
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(300));
            }
            Err(refusal) => {
                logger.emit(&Event::NoticeRefused {
                    queue_id: Qid(original.id),
                    error: refusal.to_string().into(),
                });
                return false;
            }
        }
    }
}
