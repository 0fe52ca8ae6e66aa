//! Bounces: RFC 3464 delivery status notifications, stored like mail.
//!
//! A bounce is an ordinary message from the null sender (so it can never
//! bounce again) to the original sender, stored through the same spool
//! path as received mail. The queue marks the failed recipients final only
//! once [`store`] has returned, so a crash can at worst duplicate a bounce,
//! never lose one.
//!
//! Depends on the message types, the spool and the log only; the queue
//! calls it, never the other way round.

pub mod dsn;

use std::sync::Arc;
use std::time::Duration;

use sluice_spool::{BodyRef, Envelope, Spool};

use crate::log::{qid, Logger};
use crate::message::status::Failure;
use crate::message::{body, flags};
use crate::{log, timefmt};

/// Largest original returned whole (RET=FULL), in octets.
pub const RETURN_LIMIT: usize = 100 << 10;

/// A bounce safely in the spool, ready to be queued.
pub struct StoredBounce {
    pub envelope: Envelope,
    pub body_ref: BodyRef,
    pub body: Arc<Vec<u8>>,
}

/// Builds the DSN (`kind`) for `failed` recipients of `original` and stores it,
/// retrying (with backoff up to 5 minutes) until the spool takes it.
pub async fn store(
    hostname: &str,
    original: &Envelope,
    (cached, body_ref): (Option<Arc<Vec<u8>>>, BodyRef),
    failed: &[(u16, Failure)],
    kind: dsn::Notice,
    spool: &Spool,
    logger: &Logger,
) -> StoredBounce {
    let body = body::load(spool, &cached, body_ref).await.ok();
    let whole = body.as_deref().map(|b| &b[..]).unwrap_or_default();
    // RET=FULL: the whole message, up to a size (Postfix's
    // bounce_size_limit); otherwise, and past that, its headers.
    let full = original.dsn.as_ref().is_some_and(|d| d.ret == 1) && whole.len() <= RETURN_LIMIT;
    let returned = match full {
        true => dsn::Returned::Full(whole),
        false => dsn::Returned::Headers(body::headers(whole)),
    };
    let id = spool.new_id();
    let report = dsn::build_notice(kind, hostname, original, failed, returned, id);
    let mut bits = flags::BOUNCE;
    if report.eight_bit {
        bits |= flags::EIGHTBITMIME;
    }
    if report.utf8 {
        bits |= flags::SMTPUTF8;
    }
    let envelope = Envelope {
        id,
        arrival: timefmt::now_millis(),
        sender: String::new(),
        recipients: vec![original.sender.clone()],
        flags: bits,
        dsn: None,
    };
    let text = Arc::new(report.message);
    let mut wait = Duration::from_secs(1);
    loop {
        match spool.store(envelope.clone(), text.clone()).await {
            Ok(bounce_ref) => {
                log!(
                    logger,
                    "bounce",
                    "{}: sender {} notification: {}",
                    qid(original.id),
                    match kind {
                        dsn::Notice::Failed => "non-delivery",
                        dsn::Notice::Delayed => "delay",
                        dsn::Notice::Delivered | dsn::Notice::Relayed => "delivery status",
                    },
                    qid(id)
                );
                return StoredBounce {
                    envelope,
                    body_ref: bounce_ref,
                    body: text,
                };
            }
            Err(err) => {
                log!(
                    logger,
                    "bounce",
                    "{}: cannot store bounce: {err}; retrying in {}s",
                    qid(original.id),
                    wait.as_secs()
                );
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(300));
            }
        }
    }
}
