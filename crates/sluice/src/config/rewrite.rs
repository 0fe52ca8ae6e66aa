//! `[rewrite]`: what the intake's rewriting stage does to the envelope,
//! under Postfix's names (issue 39): the canonical maps (envelope
//! addresses) and the archive copies (`always_bcc`, `sender_bcc_maps`,
//! `recipient_bcc_maps`).
//!
//! Trust: the administrator's. Invariant: [`RewriteConfig::validate`]
//! passes before the intake uses it (`always_bcc` is a mailbox).

use serde::{Deserialize, Serialize};

/// `[rewrite]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RewriteConfig {
    /// Postfix's `always_bcc`: a copy of every message we accept from a
    /// client or a local user goes to this address ("" none).
    pub always_bcc: String,
    /// Postfix's `sender_bcc_maps`: tables (`[tables]` names or Postfix
    /// `type:name`) from an envelope sender to the address that gets a
    /// copy of its mail.
    pub sender_bcc_maps: Vec<String>,
    /// Postfix's `recipient_bcc_maps`: the same, by recipient.
    pub recipient_bcc_maps: Vec<String>,
    /// Postfix's `canonical_maps`: address -> address, for the envelope
    /// sender and recipients (after the two below).
    pub canonical_maps: Vec<String>,
    /// Postfix's `sender_canonical_maps`: for the envelope sender only.
    pub sender_canonical_maps: Vec<String>,
    /// Postfix's `recipient_canonical_maps`: for the envelope recipients
    /// only.
    pub recipient_canonical_maps: Vec<String>,
}

impl RewriteConfig {
    pub fn validate(&self) -> Result<(), String> {
        if !self.always_bcc.is_empty() {
            crate::message::address::Target::new(&self.always_bcc)
                .map_err(|e| format!("always_bcc: {:?}: {e:?}", self.always_bcc))?;
        }
        Ok(())
    }

    /// Whether the stage has anything to do.
    pub fn any(&self) -> bool {
        !self.always_bcc.is_empty()
            || !self.sender_bcc_maps.is_empty()
            || !self.recipient_bcc_maps.is_empty()
            || !self.canonical_maps.is_empty()
            || !self.sender_canonical_maps.is_empty()
            || !self.recipient_canonical_maps.is_empty()
    }
}
