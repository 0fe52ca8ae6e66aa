//! `[rewrite]`: what the intake's rewriting stage does to the envelope,
//! under Postfix's names (issue 39): the canonical maps (envelope
//! addresses), the virtual alias maps (any recipient, to one or more
//! addresses) and the archive copies (`always_bcc`, `sender_bcc_maps`,
//! `recipient_bcc_maps`).
//!
//! Trust: the administrator's. Invariant: [`RewriteConfig::validate`]
//! passes before the intake uses it (`always_bcc` is a mailbox).

use serde::{Deserialize, Serialize};

/// `[rewrite]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
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
    /// Postfix's `virtual_alias_maps`: address -> one or more addresses,
    /// for every recipient of every message, in any domain (after the
    /// canonical maps), recursively.
    pub virtual_alias_maps: Vec<String>,
    /// Postfix's `virtual_alias_domains`: domains of which every address
    /// must be in `virtual_alias_maps` (others get `550 5.1.1`). Unset:
    /// Postfix's default `$virtual_alias_maps`, a domain that is a key of
    /// one of the maps (asked only of file tables, which answer without
    /// I/O; list the domains when the maps are SQL or LDAP).
    pub virtual_alias_domains: Option<Vec<crate::config::names::Domain>>,
    /// Postfix's `virtual_alias_recursion_limit`: how deep one address
    /// may be expanded before the message is deferred.
    pub virtual_alias_recursion_limit: usize,
    /// Postfix's `virtual_alias_expansion_limit`: how many addresses one
    /// recipient may become before the message is deferred.
    pub virtual_alias_expansion_limit: usize,
}

impl Default for RewriteConfig {
    fn default() -> RewriteConfig {
        RewriteConfig {
            always_bcc: String::new(),
            sender_bcc_maps: Vec::new(),
            recipient_bcc_maps: Vec::new(),
            canonical_maps: Vec::new(),
            sender_canonical_maps: Vec::new(),
            recipient_canonical_maps: Vec::new(),
            virtual_alias_maps: Vec::new(),
            virtual_alias_domains: None,
            virtual_alias_recursion_limit: 1000,
            virtual_alias_expansion_limit: 1000,
        }
    }
}

impl RewriteConfig {
    pub fn validate(&self) -> Result<(), String> {
        if !self.always_bcc.is_empty() {
            crate::message::address::Target::new(&self.always_bcc)
                .map_err(|e| format!("always_bcc: {:?}: {e:?}", self.always_bcc))?;
        }
        if self.virtual_alias_recursion_limit == 0 || self.virtual_alias_expansion_limit == 0 {
            return Err(
                "virtual_alias_recursion_limit and virtual_alias_expansion_limit \
                        must be at least 1"
                    .into(),
            );
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
            || !self.virtual_alias_maps.is_empty()
    }
}
