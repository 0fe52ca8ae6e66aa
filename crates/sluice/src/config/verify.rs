//! Address verification's settings, with Postfix's names (less the
//! `address_verify_` prefix, and `_secs` for times) and Postfix 3.7's
//! defaults (`postconf -d`), so a main.cf translates one to one.
//!
//! Trust: the administrator's. Invariant: [`VerifySettings::validate`]
//! passes before a [`Verifier`](super::Verifier) uses them (no zero
//! bound that would stop every probe, reply codes of the right class).

use std::time::Duration;

/// What to do when a verification cannot decide yet (Postfix's
/// `unverified_*_tempfail_action`, `reject_tempfail_action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TempfailAction {
    /// Reply with the defer code now.
    Defer,
    /// Defer only if the rest of the restrictions would permit.
    DeferIfPermit,
}

/// `[verify]` (Postfix: `address_verify_*`, `unverified_*`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct VerifySettings {
    /// `address_verify_sender` (`$double_bounce_sender`, `double-bounce`):
    /// the probe's `MAIL FROM`; without `@`, at our hostname (Postfix's
    /// `$myorigin`); `<>` or empty: the null sender.
    pub sender: String,
    /// `address_verify_poll_count` (3): how many times smtpd asks before
    /// answering "in progress".
    pub poll_count: u32,
    /// `address_verify_poll_delay` (3 s): between two asks. Sluice waits
    /// on the probe itself, so an answer comes as soon as the probe ends,
    /// at most `poll_count × poll_delay` after the first ask.
    pub poll_delay_secs: u64,
    /// `address_verify_positive_expire_time` (31 days).
    pub positive_expire_secs: u64,
    /// `address_verify_positive_refresh_time` (7 days): older, a
    /// deliverable answer is still given, and a new probe starts.
    pub positive_refresh_secs: u64,
    /// `address_verify_negative_cache` (yes): remember undeliverable
    /// answers; no: every ask of such an address probes again.
    pub negative_cache: bool,
    /// `address_verify_negative_expire_time` (3 days).
    pub negative_expire_secs: u64,
    /// `address_verify_negative_refresh_time` (3 hours).
    pub negative_refresh_secs: u64,
    /// `address_verify_cache_cleanup_interval` (12 hours): expired
    /// entries are removed this often (0: never).
    pub cache_cleanup_interval_secs: u64,
    /// `address_verify_pending_request_limit` (5000 in Postfix): probes
    /// in flight or waiting for a slot; beyond, an address not known yet
    /// is "unknown" without a probe.
    pub pending_request_limit: usize,
    /// Sluice's own: probes connected at once (Postfix bounds them with
    /// the delivery agents' process limit).
    pub max_concurrent_probes: usize,
    /// Sluice's own: a probe that has not ended after this long is a
    /// temporary failure (a next hop that accepts and never answers).
    pub probe_timeout_secs: u64,
    /// Sluice's own: entries the cache file keeps at most; the oldest go
    /// first.
    pub cache_max_entries: u64,
    /// `unverified_recipient_reject_code` (450).
    pub unverified_recipient_reject_code: u16,
    /// `unverified_recipient_defer_code` (450).
    pub unverified_recipient_defer_code: u16,
    /// `unverified_recipient_tempfail_action` (`defer_if_permit`).
    pub unverified_recipient_tempfail_action: TempfailAction,
    /// `unverified_recipient_reject_reason` (empty: the next hop's words).
    pub unverified_recipient_reject_reason: String,
    /// `unverified_sender_reject_code` (450).
    pub unverified_sender_reject_code: u16,
    /// `unverified_sender_defer_code` (450).
    pub unverified_sender_defer_code: u16,
    /// `unverified_sender_tempfail_action` (`defer_if_permit`).
    pub unverified_sender_tempfail_action: TempfailAction,
    /// `unverified_sender_reject_reason` (empty).
    pub unverified_sender_reject_reason: String,
}

const DAY: u64 = 86_400;

impl Default for VerifySettings {
    fn default() -> VerifySettings {
        VerifySettings {
            sender: "double-bounce".into(),
            poll_count: 3,
            poll_delay_secs: 3,
            positive_expire_secs: 31 * DAY,
            positive_refresh_secs: 7 * DAY,
            negative_cache: true,
            negative_expire_secs: 3 * DAY,
            negative_refresh_secs: 3 * 3600,
            cache_cleanup_interval_secs: 12 * 3600,
            pending_request_limit: 5000,
            max_concurrent_probes: 20,
            probe_timeout_secs: 60,
            cache_max_entries: 100_000,
            unverified_recipient_reject_code: 450,
            unverified_recipient_defer_code: 450,
            unverified_recipient_tempfail_action: TempfailAction::DeferIfPermit,
            unverified_recipient_reject_reason: String::new(),
            unverified_sender_reject_code: 450,
            unverified_sender_defer_code: 450,
            unverified_sender_tempfail_action: TempfailAction::DeferIfPermit,
            unverified_sender_reject_reason: String::new(),
        }
    }
}

/// A setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("verify.{0} must be at least 1")]
    Zero(&'static str),
    #[error("verify.{0} = {1}: want a 4XX or 5XX code")]
    RejectCode(&'static str, u16),
    #[error("verify.{0} = {1}: want a 4XX code")]
    DeferCode(&'static str, u16),
    #[error("verify.{0} holds a control character")]
    Control(&'static str),
}

impl VerifySettings {
    /// Checks the invariants of the module head.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let nonzero = [
            ("max_concurrent_probes", self.max_concurrent_probes as u64),
            ("pending_request_limit", self.pending_request_limit as u64),
            ("probe_timeout_secs", self.probe_timeout_secs),
            ("cache_max_entries", self.cache_max_entries),
        ];
        for (name, value) in nonzero {
            if value == 0 {
                return Err(SettingsError::Zero(name));
            }
        }
        let rejects = [
            (
                "unverified_recipient_reject_code",
                self.unverified_recipient_reject_code,
            ),
            (
                "unverified_sender_reject_code",
                self.unverified_sender_reject_code,
            ),
        ];
        for (name, code) in rejects {
            if !(400..600).contains(&code) {
                return Err(SettingsError::RejectCode(name, code));
            }
        }
        let defers = [
            (
                "unverified_recipient_defer_code",
                self.unverified_recipient_defer_code,
            ),
            (
                "unverified_sender_defer_code",
                self.unverified_sender_defer_code,
            ),
        ];
        for (name, code) in defers {
            if !(400..500).contains(&code) {
                return Err(SettingsError::DeferCode(name, code));
            }
        }
        let texts = [
            ("sender", &self.sender),
            (
                "unverified_recipient_reject_reason",
                &self.unverified_recipient_reject_reason,
            ),
            (
                "unverified_sender_reject_reason",
                &self.unverified_sender_reject_reason,
            ),
        ];
        for (name, text) in texts {
            if text.chars().any(char::is_control) {
                return Err(SettingsError::Control(name));
            }
        }
        Ok(())
    }

    /// How long smtpd waits for a probe's answer before "in progress".
    pub fn poll_window(&self) -> Duration {
        Duration::from_secs(
            self.poll_delay_secs
                .saturating_mul(u64::from(self.poll_count)),
        )
    }

    /// The probe's `MAIL FROM` address (empty: the null sender).
    pub fn probe_sender(&self, hostname: &str) -> String {
        match self.sender.as_str() {
            "" | "<>" => String::new(),
            s if s.contains('@') => s.to_string(),
            s => format!("{s}@{hostname}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_postfixs_and_valid() {
        let s = VerifySettings::default();
        assert_eq!(s.validate(), Ok(()));
        assert_eq!(s.poll_window(), Duration::from_secs(9));
        assert_eq!(s.probe_sender("mx.test"), "double-bounce@mx.test");
        let null = VerifySettings {
            sender: "<>".into(),
            ..VerifySettings::default()
        };
        assert_eq!(null.probe_sender("mx.test"), "");
        let bad = VerifySettings {
            unverified_recipient_defer_code: 550,
            ..VerifySettings::default()
        };
        assert!(matches!(bad.validate(), Err(SettingsError::DeferCode(..))));
        let zero = VerifySettings {
            max_concurrent_probes: 0,
            ..VerifySettings::default()
        };
        assert!(matches!(zero.validate(), Err(SettingsError::Zero(_))));
    }
}
