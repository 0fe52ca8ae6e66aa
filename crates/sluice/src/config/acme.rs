//! `[acme]`: certificates from an ACME CA (RFC 8555: Let's Encrypt, or a
//! private CA such as step-ca or pebble) for the SMTP listeners' STARTTLS
//! and implicit TLS, in place of `[tls] cert_file`/`key_file`.
//!
//! Trust: the directory URL and the CA file are the administrator's.
//! Invariant: a configuration that cannot work (no domain, no listener for
//! the challenge, a directory that is not https) fails when the file is
//! read, with the setting named.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::names::Domain;
use super::ConfigError;

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct AcmeConfig {
    /// The CA's directory URL (https only), e.g.
    /// `https://acme-v02.api.letsencrypt.org/directory`.
    pub directory: String,
    /// The names the certificate is for (the first is its subject).
    pub domains: Vec<Domain>,
    /// Contact URLs for the account, e.g. `mailto:postmaster@example.org`.
    #[serde(default)]
    pub contact: Vec<String>,
    /// A PEM CA certificate to trust for the directory's HTTPS (a private
    /// CA); default: the system's roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Where http-01 challenges are answered: the CA connects to port 80
    /// of each domain, so this is usually `0.0.0.0:80` (or a port a proxy
    /// forwards port 80 to).
    pub http_listen: SocketAddr,
    /// Renew when the certificate has fewer days than this left.
    #[serde(default = "default_renew_before_days")]
    pub renew_before_days: u64,
    /// After a failed order, try again this much later (the current
    /// certificate stays in use).
    #[serde(default = "default_retry_secs")]
    pub retry_secs: u64,
    /// How often the certificate's expiry is looked at.
    #[serde(default = "default_check_secs")]
    pub check_secs: u64,
}

fn default_renew_before_days() -> u64 {
    30
}

fn default_retry_secs() -> u64 {
    3600
}

fn default_check_secs() -> u64 {
    12 * 3600
}

impl AcmeConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |why: String| Err(ConfigError::Invalid(format!("acme.{why}")));
        if !self.directory.starts_with("https://") {
            return invalid(format!(
                "directory: {:?} (want an https:// URL)",
                self.directory
            ));
        }
        if self.domains.is_empty() {
            return invalid("domains: empty (want the names the certificate is for)".into());
        }
        if self.retry_secs == 0 || self.check_secs == 0 {
            return invalid("retry_secs and check_secs: 0 (want at least 1)".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acme(directory: &str, domains: &[&str]) -> AcmeConfig {
        AcmeConfig {
            directory: directory.into(),
            domains: domains.iter().map(|d| d.parse().unwrap()).collect(),
            contact: Vec::new(),
            ca_file: None,
            http_listen: "127.0.0.1:80".parse().unwrap(),
            renew_before_days: 30,
            retry_secs: 3600,
            check_secs: 3600,
        }
    }

    #[test]
    fn a_directory_in_clear_or_no_domain_is_refused() {
        assert!(acme("https://ca.test/dir", &["mx.test"]).validate().is_ok());
        let clear = acme("http://ca.test/dir", &["mx.test"]).validate();
        assert!(clear.unwrap_err().to_string().contains("acme.directory"));
        let none = acme("https://ca.test/dir", &[]).validate();
        assert!(none.unwrap_err().to_string().contains("acme.domains"));
    }
}
