//! Local submission through the admin socket (`sendmail`): the message is
//! checked like SMTP input (addresses parsed strictly, local recipients
//! resolved through the same tables, aliases expanded), gets a
//! `Received:` header naming the submitting user (from the socket's peer
//! credentials), is stored with the same sync-before-acknowledge promise,
//! and is queued.
//!
//! Trust: the submitter can open a 0600 socket, so is the daemon's user or
//! root; the content is still untrusted mail.

use std::sync::Arc;

use sluice_proto::address::parse_mailbox;
use sluice_spool::{Envelope, Spool};

use super::protocol::Response;
use crate::log;
use crate::log::{qid, Logger};
use crate::queue::{QueueHandle, QueuedMessage};
use crate::routing::mailboxes::{Resolution, VirtualMailboxes};
use crate::timefmt;

/// What is needed to take a submission.
pub struct Submitter {
    pub hostname: String,
    pub mailboxes: Arc<VirtualMailboxes>,
    pub spool: Spool,
    pub queue: QueueHandle,
    pub logger: Logger,
    pub size_limit: usize,
}

/// Why a submission was refused, with sendmail(1)'s exit status.
fn refuse(code: i32, why: String) -> Response {
    let mut r = Response::error(why);
    r.exit_code = Some(code);
    r
}

/// sendmail(1) exit statuses (sysexits.h), for the daemon's refusals and
/// the client's own.
pub const EX_OK: i32 = 0;
pub const EX_USAGE: i32 = 64;
pub const EX_DATAERR: i32 = 65;
pub const EX_NOUSER: i32 = 67;
pub const EX_SOFTWARE: i32 = 70;
pub const EX_TEMPFAIL: i32 = 75;

impl Submitter {
    pub async fn submit(
        &self,
        uid: Option<u32>,
        sender: &str,
        recipients: &[String],
        message: Vec<u8>,
    ) -> Response {
        if message.len() > self.size_limit {
            return refuse(
                EX_DATAERR,
                format!("message of {} bytes is over the size limit", message.len()),
            );
        }
        if recipients.is_empty() {
            return refuse(EX_DATAERR, "no recipients".into());
        }
        let sender = match sender {
            "" => String::new(),
            s => match parse_mailbox(s) {
                Ok(m) => m.address(),
                Err(e) => {
                    return refuse(
                        EX_DATAERR,
                        format!("<{s}>: bad sender address: {}", e.text()),
                    )
                }
            },
        };
        let mut targets: Vec<String> = Vec::new();
        for r in recipients {
            let mailbox = match parse_mailbox(r) {
                Ok(m) => m.address(),
                Err(e) => {
                    return refuse(
                        EX_DATAERR,
                        format!("<{r}>: bad recipient address: {}", e.text()),
                    )
                }
            };
            match self.mailboxes.resolve(&mailbox).await {
                Ok(Resolution::NotLocal) => targets.push(mailbox),
                Ok(Resolution::Accept(list)) => targets.extend(list),
                Ok(Resolution::Discard) => {}
                Ok(Resolution::Unknown) => {
                    return refuse(EX_NOUSER, format!("<{mailbox}>: no such user"))
                }
                Err(e) => return refuse(EX_TEMPFAIL, format!("<{mailbox}>: lookup failed: {e}")),
            }
        }
        let mut seen = std::collections::HashSet::new();
        targets.retain(|t| seen.insert(t.clone()));
        let id = self.spool.new_id();
        let received = format!(
            "Received: by {} (Sluice sendmail, from userid {}) id {};\r\n\t{}\r\n",
            self.hostname,
            uid.map_or("unknown".into(), |u| u.to_string()),
            qid(id),
            timefmt::rfc5322(timefmt::now_millis()),
        );
        let mut body = Vec::with_capacity(received.len() + message.len());
        body.extend_from_slice(received.as_bytes());
        body.extend_from_slice(&message);
        if targets.is_empty() {
            log!(
                self.logger,
                "sendmail",
                "{}: discarded (no recipients left)",
                qid(id)
            );
            let mut r = Response::count(0);
            r.queue_id = Some(qid(id));
            return r;
        }
        let flags = if body.is_ascii() {
            0
        } else {
            crate::message::flags::EIGHTBITMIME
        };
        let envelope = Envelope {
            id,
            arrival: timefmt::now_millis(),
            sender,
            recipients: targets,
            flags,
            dsn: None,
        };
        let body = Arc::new(body);
        match self.spool.store(envelope.clone(), body.clone()).await {
            Ok(body_ref) => {
                log!(
                    self.logger,
                    "sendmail",
                    "{}: uid={}, from=<{}>, size={}, nrcpt={} (queue active)",
                    qid(id),
                    uid.map_or("unknown".into(), |u| u.to_string()),
                    envelope.sender,
                    body.len(),
                    envelope.recipients.len()
                );
                let done = vec![false; envelope.recipients.len()];
                self.queue
                    .enqueue(QueuedMessage {
                        envelope,
                        body_ref,
                        body: Some(body),
                        done,
                    })
                    .await;
                let mut r = Response::count(1);
                r.queue_id = Some(qid(id));
                r
            }
            Err(e) => refuse(EX_TEMPFAIL, format!("cannot queue the message: {e}")),
        }
    }
}
