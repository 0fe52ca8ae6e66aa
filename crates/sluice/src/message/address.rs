//! Envelope addresses: splitting and the limits of RFC 5321 §4.5.3.1.
//!
//! Addresses arrive already parsed (and unquoted) by `smtp-proto`; these
//! helpers only split them. Invariant: the domain is what follows the
//! rightmost `@`, so `"a@b"@c` has domain `c`. A [`Target`] is an address
//! from configuration or a table (not a client) checked as RCPT TO checks
//! one, before it may become a recipient.

/// Longest address we accept (RFC 5321 path limit, less the brackets).
pub const MAX_ADDRESS: usize = 256;

/// The domain part of an address (empty if there is none).
pub fn domain_of(address: &str) -> &str {
    split(address).1
}

/// (local part, domain); the domain is empty without an `@`.
pub fn split(address: &str) -> (&str, &str) {
    address.rsplit_once('@').unwrap_or((address, ""))
}

/// The address of a `REDIRECT` or `BCC`: a mailbox as RCPT TO takes it,
/// in its canonical form (safe inside `<…>`, no space, no control
/// character), and ASCII (a UTF-8 address would need the message to be
/// SMTPUTF8, which the client did not ask for); made only by
/// [`Target::new`] (the access-table parser's `REDIRECT` and `BCC`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target(String);

impl Target {
    /// `address` if it is a mailbox (`local@domain`, no brackets).
    pub fn new(address: &str) -> Result<Target, sluice_proto::address::AddressError> {
        use sluice_proto::address::{parse_mailbox, AddressError};
        // (The parser's callers refuse these first; so does this one.)
        if !address.is_ascii() || address.bytes().any(|b| b.is_ascii_control()) {
            return Err(AddressError::Syntax);
        }
        parse_mailbox(address).map(|m| Target(m.address()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_domain_follows_the_last_at() {
        assert_eq!(domain_of("a@b.example"), "b.example");
        assert_eq!(domain_of("x@y@z.example"), "z.example");
        assert_eq!(domain_of("postmaster"), "");
        assert_eq!(split("u@d"), ("u", "d"));
    }

    #[test]
    fn a_target_is_a_mailbox_or_nothing() {
        assert_eq!(Target::new("A@B.Example").unwrap().as_str(), "A@b.example");
        for bad in [
            "",
            "@",
            "a@",
            "@b",
            "a b@c",
            "<a@b>",
            "a@b\r\nRCPT TO:<c@d>",
            "ü@b.test",
        ] {
            assert!(Target::new(bad).is_err(), "{bad:?}");
        }
    }
}
