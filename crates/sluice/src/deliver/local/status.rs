//! What local delivery made of one recipient: delivered, bounced or
//! deferred with a status and text (the switch's own, or a command's
//! reply as the pipe(8) runner judged it), and how outcomes combine: the
//! worst of a recipient's targets is its result. Pure.

use crate::message::reply::Reply;

/// The result for the top-level recipient: the worst of its targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Delivered(String),
    Bounced(&'static str, String),
    Deferred(&'static str, String),
    /// A command's failure, as the runner judged it (4xx or 5xx).
    Replied(Reply),
}

impl Status {
    /// Delivered, then bounced, then deferred: the worse wins.
    pub fn rank(&self) -> u8 {
        match self {
            Status::Delivered(_) => 0,
            Status::Bounced(..) => 1,
            Status::Replied(r) if !r.is_temporary() => 1,
            Status::Deferred(..) | Status::Replied(_) => 2,
        }
    }

    pub fn is_deferred(&self) -> bool {
        self.rank() == 2
    }
}

/// Keeps the worse of `status` and `s` in `status`.
pub fn note(status: &mut Option<Status>, s: Status) {
    if status.as_ref().is_none_or(|old| s.rank() > old.rank()) {
        *status = Some(s);
    }
}
