//! `sluice queue release --login L` / `--sender S`: an operator lifts a
//! sender limit's containment (`intake/limits.rs`) and releases the mail
//! it held on this node.
//!
//! Trust: the admin socket's (an administrator). Invariant: only mail
//! held by the limits (flag `LIMITED`) of that login or sender is
//! released; mail held by an access table, a milter or an operator stays
//! held.

use super::protocol::{Entry, Filter, Response};
use super::Admin;
use crate::intake::limits::Kind;
use crate::log::Event;
use crate::queue::admin::{AdminRequest, Op};

impl Admin {
    /// Lifts `who`'s containment, then releases what it held.
    pub(super) async fn release_limited(&self, kind: Kind, who: &str) -> Response {
        let counter = self.submitter.load().intake.limits.clone();
        let contained = counter.release(kind, who).await;
        let filter = Filter {
            state: Some("hold".into()),
            ..Default::default()
        };
        let held = match self.entries(&filter, None).await {
            Ok(entries) => entries,
            Err(e) => return super::Response::error(e),
        };
        let ids: Vec<u64> = held
            .iter()
            .filter(|e| e.limited && held_for(e, kind, who))
            .filter_map(|e| super::parse_id(&e.id).ok())
            .collect();
        let response = match ids.is_empty() {
            true => Response::count(0),
            false => {
                self.applied(AdminRequest::Apply(Op::Release, Some(ids)))
                    .await
            }
        };
        self.logger.emit(&Event::LimitReleased {
            kind: kind.as_str().into(),
            who: who.into(),
            contained,
            released: response.count as u64,
        });
        response
    }
}

/// Whether `e` is `who`'s mail: its login, or its envelope sender.
fn held_for(e: &Entry, kind: Kind, who: &str) -> bool {
    match kind {
        Kind::Login => e
            .login
            .as_deref()
            .is_some_and(|l| l.eq_ignore_ascii_case(who)),
        Kind::Sender => e.sender.eq_ignore_ascii_case(who),
    }
}
