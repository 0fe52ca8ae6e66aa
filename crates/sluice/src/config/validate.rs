//! [`Config::validate`]: what serde cannot check (bounds, settings that
//! must agree, each section's own checks), run once a file is read and by
//! `check-config`.
//!
//! Trust: the administrator's file. Invariant: a configuration that
//! passes starts (or fails later only on the system: ports, files), and
//! one that fails names the setting.

use super::{Config, ConfigError, MAX_RECIPIENTS};

impl Config {
    /// Checks what serde cannot: addresses, networks, next hops.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.metrics.max_connections == 0 {
            let why = "metrics.max_connections: 0 (want at least 1)";
            return Err(ConfigError::Invalid(why.into()));
        }
        if self.smtpd.client_ipv6_prefix > 128 {
            return Err(ConfigError::Invalid(format!(
                "smtpd.client_ipv6_prefix: {} (want 0 to 128)",
                self.smtpd.client_ipv6_prefix
            )));
        }
        if self.smtpd.max_recipients > MAX_RECIPIENTS {
            return Err(ConfigError::Invalid(format!(
                "smtpd.max_recipients: {} is more than the spool can record ({MAX_RECIPIENTS})",
                self.smtpd.max_recipients
            )));
        }
        self.auth.validate()?;
        self.srs.validate().map_err(ConfigError::Invalid)?;
        self.verify
            .validate()
            .map_err(|e| ConfigError::Invalid(format!("verify: {e}")))?;
        self.sender_limits
            .validate()
            .map_err(|e| ConfigError::Invalid(format!("sender_limits: {e}")))?;
        super::sasl_client::validate(&self.delivery)
            .map_err(|e| ConfigError::Invalid(format!("delivery: {e}")))?;
        self.validate_transports().map_err(ConfigError::Invalid)?;
        self.rewrite
            .validate()
            .map_err(|e| ConfigError::Invalid(format!("rewrite: {e}")))?;
        let overrides: Vec<_> = self
            .smtpd
            .listeners
            .iter()
            .map(|l| &l.content_checks)
            .collect();
        self.content_checks
            .validate(&overrides, |name| self.tables.contains_key(name))
            .map_err(|e| ConfigError::Invalid(format!("content_checks: {e}")))?;
        for l in self.all_listeners() {
            l.validate(self.tls.enabled, self.auth.provided())?;
        }
        self.validate_overrides()?;
        super::listener::check_bypass(&self.content_checks.content_filter, &self.smtpd.listeners)
            .map_err(ConfigError::Invalid)?;
        if let Some(cluster) = &self.cluster {
            cluster.validate()?;
        }
        if let Some(acme) = &self.acme {
            acme.validate()?;
            if self.tls.cert_file.is_some() || !self.tls.enabled {
                let why = "acme: set with [tls] cert_file, or with TLS off (choose one source)";
                return Err(ConfigError::Invalid(why.into()));
            }
        }
        Ok(())
    }

    /// The egress settings, and that every transport a configured next
    /// hop names is defined (the tables' values are checked as loaded).
    fn validate_transports(&self) -> Result<(), String> {
        self.delivery.egress().validate("delivery")?;
        for (name, t) in &self.transports {
            super::delivery::ClientCert::of(
                t.smtp_tls_cert_file.as_ref(),
                t.smtp_tls_key_file.as_ref(),
            )
            .map_err(|e| format!("transports.{name}: {e}"))?;
        }
        let hops = self
            .transport
            .values()
            .map(|h| ("transport", h))
            .chain(
                self.delivery
                    .relayhost
                    .iter()
                    .map(|h| ("delivery.relayhost", h)),
            )
            .chain(std::iter::once(("local.transport", &self.local.transport)))
            .chain(
                std::iter::once(&self.content_checks.content_filter)
                    .chain(
                        self.smtpd
                            .listeners
                            .iter()
                            .filter_map(|l| l.content_filter.as_ref()),
                    )
                    .filter_map(|f| Some(("content_filter", f.hop()?))),
            );
        for (setting, hop) in [
            ("delivery.relayhost", self.delivery.relayhost.as_ref()),
            ("local.transport", Some(&self.local.transport)),
        ] {
            if let Some(super::hop::NextHop::Inherit { .. }) = hop {
                return Err(format!(
                    "{setting}: {hop:?} names no next hop (want NAME:[host]:port)",
                    hop = hop.map(|h| h.key()).unwrap_or_default()
                ));
            }
        }
        let used: Vec<(&str, &str)> = hops
            .filter_map(|(setting, hop)| Some((setting, &**hop.transport()?)))
            .collect();
        super::transports::validate(&self.transports, used.into_iter())
    }
}
