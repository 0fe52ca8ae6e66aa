//! Address masquerading (Postfix's `masquerade_domains`,
//! `masquerade_exceptions`): `user@host.sub.example.com` becomes
//! `user@example.com` when `example.com` is listed. As Postfix's
//! cleanup_masquerade_external: the listed domains are tried in order,
//! the first that is the address's domain or a parent of it decides: a
//! parent replaces the domain, the domain itself leaves it alone, and a
//! `!domain` entry (a domain or a parent) leaves it alone too; a local
//! part listed in `masquerade_exceptions` (case-insensitively, before
//! the `@`) is never masqueraded.
//!
//! Trust: the lists are the administrator's, the address the sender's.
//! Invariant: only the domain after the last `@` changes, and only to a
//! listed domain.

/// What masquerading does: the domains in order (with `!`), and the
/// local parts it leaves alone.
#[derive(Debug, Clone, Default)]
pub struct Masquerade {
    domains: Vec<(bool, String)>,
    exceptions: Vec<String>,
}

impl Masquerade {
    /// From `masquerade_domains` and `masquerade_exceptions`.
    pub fn new(domains: &[String], exceptions: &[String]) -> Masquerade {
        let domains = domains
            .iter()
            .filter_map(|d| {
                let bangs = d.bytes().take_while(|&b| b == b'!').count();
                let name = d[bangs..].trim_end_matches('.').to_ascii_lowercase();
                (!name.is_empty()).then_some((bangs % 2 == 0, name))
            })
            .collect();
        let exceptions = exceptions.iter().map(|e| e.to_ascii_lowercase()).collect();
        Masquerade {
            domains,
            exceptions,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// `address` masqueraded, if that changes it.
    pub fn apply(&self, address: &str) -> Option<String> {
        let at = address.rfind('@')?;
        let (local, domain) = (&address[..at], address[at + 1..].to_ascii_lowercase());
        if self
            .exceptions
            .iter()
            .any(|e| e.eq_ignore_ascii_case(local))
        {
            return None;
        }
        for (truncate, masq) in &self.domains {
            if *masq == domain {
                return None;
            }
            let parent = domain.len() > masq.len()
                && domain.ends_with(masq.as_str())
                && domain.as_bytes()[domain.len() - masq.len() - 1] == b'.';
            if parent {
                return truncate.then(|| format!("{local}@{masq}"));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(domains: &[&str], exceptions: &[&str]) -> Masquerade {
        let own = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Masquerade::new(&own(domains), &own(exceptions))
    }

    #[test]
    fn parents_are_replaced_in_order() {
        let masq = m(&["!sub.example.com", "example.com"], &["root"]);
        assert_eq!(
            masq.apply("a@host.dept.example.com").as_deref(),
            Some("a@example.com")
        );
        assert_eq!(
            masq.apply("a@Host.EXAMPLE.com").as_deref(),
            Some("a@example.com")
        );
        assert_eq!(masq.apply("a@example.com"), None);
        assert_eq!(masq.apply("a@sub.example.com"), None);
        assert_eq!(masq.apply("a@x.sub.example.com"), None);
        assert_eq!(masq.apply("a@notexample.com"), None);
        assert_eq!(masq.apply("Root@host.example.com"), None);
        assert_eq!(masq.apply("bare"), None);
        // The first listed parent wins.
        let masq = m(&["dept.example.com", "example.com"], &[]);
        assert_eq!(
            masq.apply("a@h.dept.example.com").as_deref(),
            Some("a@dept.example.com")
        );
    }
}
