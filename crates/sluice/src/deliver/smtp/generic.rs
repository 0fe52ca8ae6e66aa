//! `smtp_generic_maps` (Postfix's smtp(8) generic mapping): what the SMTP
//! client sends to another host — the envelope sender (not the null
//! one), the job's recipients, and the addresses of the header's sender
//! and recipient fields (`intake::rewrite::headers`) — goes through the
//! generic tables: Postfix's keys (the address, `user` for a local
//! domain, `@domain`), a value `@domain` keeping the local part, one
//! lookup (no recursion), and no extension put back
//! (`propagate_unmatched_extensions` does not name `generic` by default).
//! LMTP and local delivery are left alone (Postfix's lmtp_generic_maps is
//! its own parameter, not done here).
//!
//! The queue, the log and the notices keep the original addresses (the
//! rewritten job is a copy, its recipients still lined up with the
//! queue's), as Postfix's smtp logs `to=` before mapping.
//!
//! Trust: the tables are the administrator's; the addresses and header
//! the sender's. Invariants: nothing is looked up, copied or allocated
//! when no generic table is configured; a table that cannot answer
//! defers the job (`451 4.3.0`), never sends it unmapped.

use std::sync::Arc;

use crate::intake::rewrite::address_list::external;
use crate::intake::rewrite::headers;
use crate::message::status::{Enhanced, Reply};
use crate::queue::Job;
use crate::routing::mailboxes::VirtualMailboxes;
use crate::tables::search::{mapped_address, Rules};
use crate::tables::Table;

/// The generic tables and what their keys need.
pub struct Generic {
    pub tables: Vec<Arc<Table>>,
    pub mailboxes: Arc<VirtualMailboxes>,
    pub delimiters: String,
}

/// A job and body as they go out, when the tables changed them.
pub struct Mapped {
    pub job: Option<Job>,
    pub body: Option<Arc<Vec<u8>>>,
}

impl Generic {
    /// `job` and `body` through the tables; `Err` the deferral when a
    /// table could not answer.
    pub async fn apply(&self, job: &Job, body: &[u8]) -> Result<Mapped, Reply> {
        let env = &job.envelope;
        let mut out: Option<sluice_spool::Envelope> = None;
        if !env.sender.is_empty() {
            if let Some(now) = self.map(&env.sender).await? {
                out.get_or_insert_with(|| (**env).clone()).sender = now;
            }
        }
        for &r in &job.rcpts {
            let Some(rcpt) = env.recipients.get(usize::from(r)) else {
                continue;
            };
            if let Some(now) = self.map(rcpt).await? {
                out.get_or_insert_with(|| (**env).clone()).recipients[usize::from(r)] = now;
            }
        }
        let mut edits = Vec::new();
        for a in headers::addresses(body, |_| true) {
            if let Some(now) = self.map(&external(&a.address)).await? {
                edits.push((a.span, now));
            }
        }
        Ok(Mapped {
            job: out.map(|envelope| Job {
                msg: job.msg,
                envelope: Arc::new(envelope),
                body: None,
                body_ref: job.body_ref,
                rcpts: job.rcpts.clone(),
            }),
            body: (!edits.is_empty()).then(|| Arc::new(headers::apply(body, &edits))),
        })
    }

    /// What the tables map `address` to, when that is another address.
    async fn map(&self, address: &str) -> Result<Option<String>, Reply> {
        let domain = crate::message::address::domain_of(address);
        let rules = Rules {
            delimiters: &self.delimiters,
            local: self.mailboxes.is_local_domain(domain),
            owner_request_special: true,
        };
        match crate::tables::find_address(&self.tables, address, &rules).await {
            Ok(found) => Ok(found.and_then(|f| {
                let value = f.values.first()?;
                let now = mapped_address(address, value, f.dropped.as_deref(), false);
                (now != address).then_some(now)
            })),
            Err(e) => Err(Reply::own(
                451,
                Enhanced::new(4, 3, 0),
                format!("smtp_generic_maps: lookup of {address:?} failed: {e}"),
            )),
        }
    }
}
