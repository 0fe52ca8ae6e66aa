//! `[rewrite]`: what the intake's rewriting stage does to the envelope
//! and the headers, under Postfix's names (issue 39): the canonical maps
//! and their classes, which clients' headers are rewritten, address
//! masquerading, the virtual alias maps (any recipient, to one or more
//! addresses), the archive copies (`always_bcc`, `sender_bcc_maps`,
//! `recipient_bcc_maps`); and `smtp_generic_maps`, used by the SMTP
//! client on the way out.
//!
//! Trust: the administrator's. Invariant: [`RewriteConfig::validate`]
//! passes before the intake uses it (`always_bcc` is a mailbox, every
//! class and client entry known).

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
    /// Postfix's `canonical_classes`: what `canonical_maps` rewrites, of
    /// `envelope_sender`, `envelope_recipient`, `header_sender`,
    /// `header_recipient` (default all four).
    pub canonical_classes: Vec<String>,
    /// Postfix's `sender_canonical_classes` (default `envelope_sender`,
    /// `header_sender`).
    pub sender_canonical_classes: Vec<String>,
    /// Postfix's `recipient_canonical_classes` (default
    /// `envelope_recipient`, `header_recipient`).
    pub recipient_canonical_classes: Vec<String>,
    /// Postfix's `local_header_rewrite_clients`: the SMTP clients whose
    /// headers are rewritten (local submissions always are): of
    /// `permit_inet_interfaces` (the client is one of this machine's
    /// addresses), `permit_mynetworks`, `permit_sasl_authenticated`, and
    /// address blocks (`192.0.2.0/24`). Default `permit_inet_interfaces`.
    pub local_header_rewrite_clients: Vec<String>,
    /// Postfix's `remote_header_rewrite_domain`: other clients' headers
    /// are rewritten too when set, a header address without a domain
    /// given this one ("" none: their headers are left alone).
    pub remote_header_rewrite_domain: String,
    /// Postfix's `masquerade_domains`: `user@host.example.com` becomes
    /// `user@example.com` when `example.com` is listed; `!domain` leaves
    /// that domain and its subdomains alone; the first that matches wins.
    pub masquerade_domains: Vec<String>,
    /// Postfix's `masquerade_exceptions`: local parts never masqueraded.
    pub masquerade_exceptions: Vec<String>,
    /// Postfix's `masquerade_classes` (default `envelope_sender`,
    /// `header_sender`, `header_recipient`).
    pub masquerade_classes: Vec<String>,
    /// Postfix's `smtp_generic_maps`: address -> address, applied by the
    /// SMTP client to the envelope and the headers of what it sends to
    /// another host (not LMTP, not local delivery).
    pub smtp_generic_maps: Vec<String>,
}

/// The address classes of Postfix's `*_classes` parameters.
pub const CLASSES: [&str; 4] = [
    "envelope_sender",
    "envelope_recipient",
    "header_sender",
    "header_recipient",
];

fn own(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
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
            canonical_classes: own(&CLASSES),
            sender_canonical_classes: own(&["envelope_sender", "header_sender"]),
            recipient_canonical_classes: own(&["envelope_recipient", "header_recipient"]),
            local_header_rewrite_clients: own(&["permit_inet_interfaces"]),
            remote_header_rewrite_domain: String::new(),
            masquerade_domains: Vec::new(),
            masquerade_exceptions: Vec::new(),
            masquerade_classes: own(&["envelope_sender", "header_sender", "header_recipient"]),
            smtp_generic_maps: Vec::new(),
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
        let lists = [
            ("canonical_classes", &self.canonical_classes),
            ("sender_canonical_classes", &self.sender_canonical_classes),
            (
                "recipient_canonical_classes",
                &self.recipient_canonical_classes,
            ),
            ("masquerade_classes", &self.masquerade_classes),
        ];
        for (name, list) in lists {
            if let Some(bad) = list.iter().find(|c| !CLASSES.contains(&c.as_str())) {
                return Err(format!("{name}: {bad:?} is none of {CLASSES:?}"));
            }
        }
        for entry in &self.local_header_rewrite_clients {
            let known = matches!(
                entry.as_str(),
                "permit_inet_interfaces" | "permit_mynetworks" | "permit_sasl_authenticated"
            );
            if !known && crate::config::hop::Cidr::parse(entry).is_none() {
                return Err(format!(
                    "local_header_rewrite_clients: {entry:?} is no permit_inet_interfaces, \
                     permit_mynetworks, permit_sasl_authenticated or address block"
                ));
            }
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
            || !self.masquerade_domains.is_empty()
            || !self.remote_header_rewrite_domain.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_postfix_and_unknown_names_are_refused() {
        let d = RewriteConfig::default();
        assert_eq!(d.canonical_classes, CLASSES);
        assert_eq!(
            d.masquerade_classes,
            own(&["envelope_sender", "header_sender", "header_recipient"])
        );
        assert!(d.validate().is_ok() && !d.any());
        let bad = RewriteConfig {
            canonical_classes: own(&["header_from"]),
            ..RewriteConfig::default()
        };
        assert!(bad.validate().unwrap_err().contains("canonical_classes"));
        let bad = RewriteConfig {
            local_header_rewrite_clients: own(&["permit_everyone"]),
            ..RewriteConfig::default()
        };
        assert!(bad.validate().is_err());
        let fine = RewriteConfig {
            local_header_rewrite_clients: own(&["permit_mynetworks", "10.0.0.0/8", "::1"]),
            ..RewriteConfig::default()
        };
        assert!(fine.validate().is_ok());
    }
}
