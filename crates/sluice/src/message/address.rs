//! Envelope addresses: splitting and the limits of RFC 5321 §4.5.3.1.
//!
//! Addresses arrive already parsed (and unquoted) by `smtp-proto`; these
//! helpers only split them. Invariant: the domain is what follows the
//! rightmost `@`, so `"a@b"@c` has domain `c`.

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
}
