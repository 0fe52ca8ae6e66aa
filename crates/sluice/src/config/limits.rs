//! `[sender_limits]`: how much mail one of our own users may send in an
//! hour before their new mail is held for an operator (issue 38, item
//! 6). Postfix has no such setting (its anvil counts per client
//! address); the names say what they count.
//!
//! A login is an SMTP AUTH identity or a local account (sendmail); a
//! sender is the envelope sender of mail from a login or from
//! mynetworks. Strangers' mail (inbound) and our own notices are never
//! counted.
//!
//! Trust: the administrator's. Invariant: [`SenderLimits::validate`]
//! passes before the counters use them: at least one limit is set when
//! the section is there, and exemptions are addresses or logins.

use serde::{Deserialize, Serialize};

/// `[sender_limits]`; every limit 0 means none.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SenderLimits {
    /// Messages one login may submit in an hour.
    pub login_messages_per_hour: u64,
    /// Recipients, over all its messages, one login may address in an
    /// hour.
    pub login_recipients_per_hour: u64,
    /// Messages with one envelope sender in an hour (from logins and
    /// mynetworks).
    pub sender_messages_per_hour: u64,
    /// Recipients of messages with one envelope sender in an hour.
    pub sender_recipients_per_hour: u64,
    /// How long a login or sender that crossed a limit stays contained
    /// (its new mail held), in hours; 0: until an operator releases it
    /// (`sluice queue release --login L` / `--sender S`).
    pub contain_hours: u64,
    /// Logins and sender addresses never counted (a newsletter account).
    pub exempt: Vec<String>,
}

impl SenderLimits {
    /// Whether any limit is set (nothing is counted otherwise).
    pub fn any(&self) -> bool {
        self.login_messages_per_hour > 0
            || self.login_recipients_per_hour > 0
            || self.sender_messages_per_hour > 0
            || self.sender_recipients_per_hour > 0
    }

    /// Whether logins are counted.
    pub fn logins(&self) -> bool {
        self.login_messages_per_hour > 0 || self.login_recipients_per_hour > 0
    }

    /// Whether senders are counted.
    pub fn senders(&self) -> bool {
        self.sender_messages_per_hour > 0 || self.sender_recipients_per_hour > 0
    }

    /// Whether `who` (a login or an address) is exempt.
    pub fn exempt(&self, who: &str) -> bool {
        self.exempt.iter().any(|e| e.eq_ignore_ascii_case(who))
    }

    pub fn validate(&self) -> Result<(), String> {
        if let Some(bad) = self
            .exempt
            .iter()
            .find(|e| e.is_empty() || e.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            return Err(format!("exempt: {bad:?} is not a login or an address"));
        }
        if self.contain_hours > 24 * 366 {
            return Err("contain_hours: more than a year; use 0 (until released)".into());
        }
        Ok(())
    }
}
