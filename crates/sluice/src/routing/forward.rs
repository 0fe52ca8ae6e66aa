//! What forwarding is, for SRS and ARC (`[srs]`, `[arc]`): a recipient
//! in a domain that is not ours, given to us as an address in one of our
//! domains (a local alias, a virtual alias, an access table's REDIRECT:
//! the spool's `orig_rcpt`). Such mail leaves with an SRS envelope
//! sender (`deliver/smtp`, per transaction) unless its sender is ours or
//! null, and is ARC-sealed at the intake (`intake/arc.rs`).
//!
//! "Ours": a local domain, a virtual alias domain (asked through
//! [`AlsoOurs`], the intake's rewriting maps), a relay domain, the
//! hostname, the SRS domain.
//!
//! Trust: the configuration and the secret file are the administrator's;
//! addresses are the senders'. Invariants: the secret is read once per
//! build and never logged; a missing default secret file is made once,
//! mode 0600, with 32 random bytes (base64, one line: postsrsd's format);
//! nothing here does I/O per message.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use ring::rand::SecureRandom;

use crate::config::names::DomainPattern;
use crate::config::Config;
use crate::message::address::domain_of;
use crate::message::srs::{self, Srs};
use crate::routing::policy::RelayPolicy;
use crate::routing::LocalDomains;

/// Why forwarding could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("srs.secret_file {}: {err}", path.display())]
    Secret { path: PathBuf, err: std::io::Error },
    #[error("srs.secret_file {}: no secret in it", .0.display())]
    Empty(PathBuf),
}

/// Other domains that are ours (virtual alias domains), asked without
/// I/O; given by the daemon, so routing does not import the intake.
pub type AlsoOurs = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The forwarding predicate and, with `[srs] enabled`, the SRS codec.
pub struct Forwarding {
    pub srs: Option<Srs>,
    domains: Arc<LocalDomains>,
    also_ours: AlsoOurs,
    relay: RelayPolicy,
    hostname: String,
    exclude: Vec<DomainPattern>,
}

impl Forwarding {
    /// `None` when neither SRS nor ARC is on (nothing to do, no cost).
    /// `create`: make a missing default secret file (`serve`; not
    /// `check-config`, which then checks no secret).
    pub fn build(
        config: &Config,
        domains: Arc<LocalDomains>,
        also_ours: AlsoOurs,
        create: bool,
    ) -> Result<Option<Forwarding>, ForwardError> {
        if !config.srs.enabled && !config.arc.enabled {
            return Ok(None);
        }
        let hostname = config.hostname.as_str().to_ascii_lowercase();
        let srs = match config.srs.enabled {
            false => None,
            true => {
                let path = config.srs.secret_path(&config.data_dir);
                let made = config.srs.secret_file.is_none() && create;
                let secrets = read_secrets(&path, made)?.unwrap_or_default();
                if secrets.is_empty() && create {
                    return Err(ForwardError::Empty(path));
                }
                let domain = config.srs.domain_or(&hostname);
                Some(Srs::new(&secrets, domain, config.srs.max_age_days))
            }
        };
        Ok(Some(Forwarding {
            srs,
            domains,
            also_ours,
            relay: RelayPolicy::new(Vec::new(), &config.smtpd.relay_domains)
                .with_parent_matches(config.restrictions.parent_domain_matches_subdomains),
            hostname,
            exclude: config.srs.exclude_domains.clone(),
        }))
    }

    /// `domain` is one we receive mail for.
    pub fn is_ours(&self, domain: &str) -> bool {
        let domain = domain.trim_end_matches('.');
        domain.eq_ignore_ascii_case(&self.hostname)
            || self.srs.as_ref().is_some_and(|s| s.is_srs_domain(domain))
            || self.domains.is_local_domain(domain)
            || (self.also_ours)(domain)
            || self.relay.is_relay_domain(&format!("@{domain}"))
    }

    /// `recipient`, given to us as `given`, is forwarded: its domain is
    /// not ours and `given`'s is.
    pub fn is_forwarded(&self, recipient: &str, given: &str) -> bool {
        !given.is_empty()
            && !recipient.eq_ignore_ascii_case(given)
            && !self.is_ours(domain_of(recipient))
            && self.is_ours(domain_of(given))
    }

    /// Whether mail from `sender` is rewritten when forwarded: not the
    /// null sender, not ours, not an excluded domain.
    pub fn rewrites_sender(&self, sender: &str) -> bool {
        let domain = domain_of(sender).trim_end_matches('.').to_ascii_lowercase();
        !domain.is_empty()
            && !self.is_ours(&domain)
            && !self.exclude.iter().any(|p| p.matches(&domain))
    }

    /// The SRS sender for a transaction of `sender`'s mail to recipients
    /// given as `pairs` (recipient, address given; "" as given), or `None`
    /// to keep the sender.
    pub fn srs_sender<'a>(
        &self,
        sender: &str,
        mut pairs: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> Option<String> {
        let srs = self.srs.as_ref()?;
        if !self.rewrites_sender(sender) || !pairs.any(|(r, g)| self.is_forwarded(r, g)) {
            return None;
        }
        srs.forward(sender, srs::today())
    }
}

/// The secrets in `path`; a missing file is made first when `make` (the
/// default file), else `None`.
fn read_secrets(path: &Path, make: bool) -> Result<Option<Vec<Vec<u8>>>, ForwardError> {
    let err = |err| ForwardError::Secret {
        path: path.to_path_buf(),
        err,
    };
    match std::fs::read(path) {
        Ok(text) => Ok(Some(srs::secrets_of(&text))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && make => {
            make_secret(path).map_err(err)?;
            let text = std::fs::read(path).map_err(err)?;
            Ok(Some(srs::secrets_of(&text)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(err(e)),
    }
}

/// A new secret file: 32 random bytes in base64, one line, mode 0600,
/// never over an existing file.
fn make_secret(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| std::io::Error::other("no random bytes"))?;
    let line = base64::engine::general_purpose::STANDARD.encode(bytes) + "\n";
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(line.as_bytes())?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_secret_is_made_once_and_kept_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("srs.secret");
        let first = read_secrets(&path, true).unwrap().unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].len(), 44);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(read_secrets(&path, true).unwrap().unwrap(), first);
        let other = dir.path().join("none");
        assert!(read_secrets(&other, false).unwrap().is_none());
    }

    fn forwarding(relay: &str) -> Forwarding {
        Forwarding {
            srs: Some(Srs::new(&[b"k".to_vec()], "srs.ours.test", 21)),
            domains: LocalDomains::none(),
            also_ours: Arc::new(|d: &str| d == "virtual.test"),
            relay: RelayPolicy::new(Vec::new(), &[relay.parse().unwrap()]),
            hostname: "mx.ours.test".into(),
            exclude: vec![".friend.test".parse().unwrap()],
        }
    }

    #[test]
    fn only_forwarded_mail_of_strangers_is_rewritten() {
        let f = forwarding("relay.test");
        let fwd = [("bob@gmail.test", "alias@relay.test")];
        let srs = f.srs_sender("a@origin.test", fwd.into_iter()).unwrap();
        assert!(srs.starts_with("SRS0=") && srs.ends_with("@srs.ours.test"));
        // Not forwarded: given as itself, or to one of our domains.
        let direct = [("bob@gmail.test", "")];
        assert_eq!(f.srs_sender("a@origin.test", direct.into_iter()), None);
        let inside = [("x@relay.test", "alias@relay.test")];
        assert_eq!(f.srs_sender("a@origin.test", inside.into_iter()), None);
        let virtual_alias = [("bob@gmail.test", "alias@virtual.test")];
        let srs = f.srs_sender("a@origin.test", virtual_alias.into_iter());
        assert!(srs.is_some());
        let outside = [("x@gmail.test", "alias@gmail.test")];
        assert_eq!(f.srs_sender("a@origin.test", outside.into_iter()), None);
        // Our own senders, the null sender, excluded domains: kept.
        for sender in ["me@relay.test", "me@MX.ours.test", "", "x@a.friend.test"] {
            assert_eq!(f.srs_sender(sender, fwd.into_iter()), None, "{sender}");
        }
    }
}
