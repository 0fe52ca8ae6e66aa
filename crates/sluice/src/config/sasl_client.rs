//! The SMTP client's SASL settings as `[delivery]` holds them (Postfix's
//! `smtp_sasl_security_options`, `smtp_sasl_tls_security_options`,
//! `smtp_sasl_mechanism_filter`): parsed and checked at load, so the
//! configuration does not depend on the client that uses them
//! (`deliver::smtp::auth`).
//!
//! Trust: the administrator's configuration; unknown words are errors.

use super::delivery::DeliveryConfig;

/// What the security options allow (Postfix's names). PLAIN and LOGIN
/// pass the password: `noplaintext`, `noactive` and `nodictionary`
/// refuse them without TLS (over TLS they are lifted, as Cyrus SASL
/// does for an external security layer); `mutual_auth` always.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Security {
    pub no_plaintext: bool,
    pub mutual_auth: bool,
}

impl Security {
    /// Parses Postfix's list (comma or space separated); unknown words are errors.
    pub fn parse(text: &str) -> Result<Security, String> {
        let mut s = Security {
            no_plaintext: false,
            mutual_auth: false,
        };
        for word in text.split([',', ' ', '\t']).filter(|w| !w.is_empty()) {
            match word.to_ascii_lowercase().as_str() {
                "noanonymous" => {}
                "noplaintext" | "noactive" | "nodictionary" => s.no_plaintext = true,
                "mutual_auth" => s.mutual_auth = true,
                other => return Err(format!("unknown security option {other:?}")),
            }
        }
        Ok(s)
    }

    /// Whether PLAIN and LOGIN may be used, over TLS (`tls`) or not.
    pub fn password_allowed(self, tls: bool) -> bool {
        !self.mutual_auth && (tls || !self.no_plaintext)
    }
}

/// Checks `[delivery]`'s SASL settings (at load).
pub fn validate(d: &DeliveryConfig) -> Result<(), String> {
    Security::parse(&d.smtp_sasl_security_options)
        .map_err(|e| format!("smtp_sasl_security_options: {e}"))?;
    if let Some(t) = &d.smtp_sasl_tls_security_options {
        Security::parse(t).map_err(|e| format!("smtp_sasl_tls_security_options: {e}"))?;
    }
    if let Some(m) = d
        .smtp_sasl_mechanism_filter
        .iter()
        .find(|m| !m.eq_ignore_ascii_case("PLAIN") && !m.eq_ignore_ascii_case("LOGIN"))
    {
        return Err(format!(
            "smtp_sasl_mechanism_filter: {m:?} (only PLAIN and LOGIN are spoken)"
        ));
    }
    if d.smtp_sasl_auth_enable && d.smtp_sasl_password_maps.is_empty() {
        return Err("smtp_sasl_auth_enable without smtp_sasl_password_maps".into());
    }
    Ok(())
}
