//! `[[smtpd.listeners]]` and `[tls]`: what each listening socket speaks,
//! and the certificate.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::content_filter::ContentFilter;
use super::services::{BadService, ServiceAddr};

/// What a listener is for, as Postfix's master.cf `smtp`, `submission`
/// and `submissions` services.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ListenerKind {
    /// Port 25: STARTTLS offered, AUTH offered once encrypted.
    #[default]
    Smtp,
    /// Port 587: STARTTLS and AUTH required before MAIL.
    Submission,
    /// Port 465: TLS from the first byte (RFC 8314), AUTH required.
    Submissions,
}

impl ListenerKind {
    /// Its name in the configuration and the log: `smtp`, `submission`,
    /// `submissions` (Postfix's master.cf service names).
    pub fn as_str(self) -> &'static str {
        match self {
            ListenerKind::Smtp => "smtp",
            ListenerKind::Submission => "submission",
            ListenerKind::Submissions => "submissions",
        }
    }

    /// AUTH is required before MAIL.
    pub fn requires_auth(self) -> bool {
        self != ListenerKind::Smtp
    }
}

/// One `[[smtpd.listeners]]` entry.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// Parsed when the file is read (a bad address names its line).
    pub listen: std::net::SocketAddr,
    #[serde(default)]
    pub kind: ListenerKind,
    /// Behind a load balancer: each connection starts with a PROXY
    /// protocol v1 or v2 header giving the real client address.
    #[serde(default)]
    pub proxy_protocol: bool,
    /// The load balancers' networks: only a connection from one of them
    /// may send a PROXY header; any other peer is disconnected. Required
    /// with `proxy_protocol` (Postfix and HAProxy practice).
    #[serde(default)]
    pub proxy_protocol_from: Vec<super::hop::Cidr>,
    /// Offer AUTH on this listener. Default: on for `submission` and
    /// `submissions`, and on `smtp` only with `[auth] offer_on_smtp`, as
    /// Postfix's master.cf enables SASL on its submission services and
    /// main.cf's `smtpd_sasl_auth_enable` is `no`: port 25 is no place to
    /// guess passwords.
    #[serde(default)]
    pub auth: Option<bool>,
    /// Offer AUTH before TLS (only for trusted networks; off by default).
    #[serde(default)]
    pub auth_without_tls: bool,
    /// Check SPF, DKIM and DMARC of mail from clients that may not relay
    /// and add an Authentication-Results: header.
    #[serde(default)]
    pub sender_auth: bool,
    /// With `sender_auth`: refuse mail failing DMARC when the From:
    /// domain publishes p=reject (550 5.7.1).
    #[serde(default)]
    pub dmarc_reject: bool,
    /// This listener's own restriction lists (master.cf's `-o
    /// smtpd_recipient_restrictions=…`): each one set replaces the main
    /// one of `[restrictions]` here.
    #[serde(default)]
    pub restrictions: super::restrictions::ListOverrides,
    /// This listener's own header and body checks (a master.cf service
    /// with `-o header_checks=…` on its own cleanup service, as sites
    /// strip the client's `Received:` on submission): each one set
    /// replaces the main one of `[content_checks]` here.
    #[serde(default)]
    pub content_checks: super::content_checks::CheckOverrides,
    /// master.cf's `-o` for this listener: `[smtpd]` and `[tls]` settings
    /// that replace the main ones here (`overrides.rs`), e.g.
    /// `smtpd.banner`, `smtpd.milters`, `smtpd.message_size_limit`,
    /// `tls.cert_file`.
    #[serde(default, skip_serializing_if = "toml::Table::is_empty")]
    pub overrides: toml::Table,
    /// Postfix's smtpd_tls_ask_ccert for this listener (master.cf's `-o
    /// smtpd_tls_ask_ccert=yes`); unset: `[tls]`'s.
    #[serde(default)]
    pub smtpd_tls_ask_ccert: Option<bool>,
    /// This listener's own `content_filter` (master.cf's `-o
    /// content_filter=…`), over `[content_checks] content_filter`; `""`
    /// turns it off: the listener an after-queue filter sends its mail
    /// back in on (keep that one on loopback, `validate` warns).
    #[serde(default)]
    pub content_filter: Option<ContentFilter>,
}

impl ListenerConfig {
    /// Whether this listener asks clients for a certificate, given
    /// `[tls] smtpd_tls_ask_ccert`.
    pub fn asks_ccert(&self, global: bool) -> bool {
        self.smtpd_tls_ask_ccert.unwrap_or(global)
    }

    /// The content filter of mail taken here: the listener's own, else
    /// `main` (`[content_checks] content_filter`).
    pub fn content_filter<'a>(&'a self, main: &'a ContentFilter) -> &'a ContentFilter {
        self.content_filter.as_ref().unwrap_or(main)
    }

    /// Whether AUTH belongs here, given `[auth] offer_on_smtp`.
    pub fn offers_auth(&self, on_smtp: bool) -> bool {
        self.auth.unwrap_or(self.kind.requires_auth() || on_smtp)
    }

    /// Checks one listener against the TLS and AUTH it needs
    /// (`tls_enabled`, `auth_table`: whether `[tls]` and `[auth]` provide
    /// them; `[auth]` does with a table or with Dovecot).
    pub fn validate(&self, tls_enabled: bool, auth_table: bool) -> Result<(), super::ConfigError> {
        use super::ConfigError;
        let l = self;
        if l.proxy_protocol && l.proxy_protocol_from.is_empty() {
            return Err(ConfigError::Invalid(format!(
                "smtpd.listeners: {} has proxy_protocol = true but no proxy_protocol_from: \
                 name the load balancers' networks (a PROXY header from anyone else \
                 would let them choose their client address)",
                l.listen
            )));
        }
        if l.kind.requires_auth() && !tls_enabled && !l.auth_without_tls {
            return Err(ConfigError::Invalid(format!(
                "smtpd.listeners: {} is `{}`, which needs TLS, but [tls] is disabled",
                l.listen,
                l.kind.as_str()
            )));
        }
        if l.kind.requires_auth() && l.auth == Some(false) {
            return Err(ConfigError::Invalid(format!(
                "smtpd.listeners: {} is `{}`, which requires AUTH, but has auth = false",
                l.listen,
                l.kind.as_str()
            )));
        }
        if l.kind.requires_auth() && !auth_table {
            return Err(ConfigError::Invalid(format!(
                "smtpd.listeners: {} requires AUTH, but [auth] names no table \
                 (nor type = \"dovecot\")",
                l.listen
            )));
        }
        Ok(())
    }
}

// The reinjection listener of an after-queue filter is a door around
// the filter: whoever reaches it skips the filter. `check_bypass` refuses
// one on a wildcard address (every interface, the Internet's side too),
// `bypass_warnings` names one on any other address that is not loopback
// (a filter on another host of a private network may need it).

/// The listeners that take mail unfiltered (`content_filter = ""`) while
/// other mail is filtered (`main`, or another listener's own).
fn bypasses<'a>(
    main: &'a ContentFilter,
    listeners: &'a [ListenerConfig],
) -> impl Iterator<Item = &'a ListenerConfig> + 'a {
    let filtering = main.hop().is_some()
        || listeners
            .iter()
            .any(|l| l.content_filter.as_ref().is_some_and(|f| f.hop().is_some()));
    listeners
        .iter()
        .filter(move |l| filtering && l.content_filter(main).hop().is_none())
        .filter(|l| l.content_filter.is_some())
}

/// Refuses a listener that turns the filter off on a wildcard address.
pub fn check_bypass(main: &ContentFilter, listeners: &[ListenerConfig]) -> Result<(), String> {
    match bypasses(main, listeners).find(|l| l.listen.ip().is_unspecified()) {
        Some(l) => Err(format!(
            "smtpd.listeners: {} has content_filter = \"\" on every address: mail from \
             anyone who reaches it skips the content filter; listen on 127.0.0.1 (the \
             filter's reinjection port, as Postfix's FILTER_README)",
            l.listen
        )),
        None => Ok(()),
    }
}

/// A warning for each listener that turns the filter off on an address
/// that is not loopback.
pub fn bypass_warnings(main: &ContentFilter, listeners: &[ListenerConfig]) -> Vec<String> {
    bypasses(main, listeners)
        .filter(|l| !l.listen.ip().is_loopback() && !l.listen.ip().is_unspecified())
        .map(|l| {
            format!(
                "warning: smtpd.listeners: {} has content_filter = \"\" and is not on \
                 loopback: mail from whoever reaches it skips the content filter; keep it \
                 for the filter's host (a firewall, its restrictions)",
                l.listen
            )
        })
        .collect()
}

/// `[tls]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// Offer STARTTLS (and serve `submissions` listeners). On by default.
    pub enabled: bool,
    /// PEM certificate chain and key; when both are unset a self-signed
    /// certificate for `hostname` is generated under `<data_dir>/tls/`.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// Seconds a TLS handshake may take.
    pub handshake_timeout_secs: u64,
    /// Postfix's smtpd_tls_ask_ccert: ask every client for a certificate
    /// (it may send none); per listener too. Off by default, as Postfix.
    pub smtpd_tls_ask_ccert: bool,
    /// Postfix's smtpd_tls_fingerprint_digest: the digest of a client
    /// certificate's fingerprints (`relay_clientcerts`,
    /// `check_ccert_access`): `sha256` (Postfix 3.6+'s default), `sha1`,
    /// `md5`.
    pub smtpd_tls_fingerprint_digest: FingerprintDigest,
    /// Postfix's smtpd_tls_CAfile: the CAs (PEM) a client certificate is
    /// verified against, for `permit_tls_all_clientcerts`, and named to
    /// clients when asking. None: no client certificate is verified.
    #[serde(rename = "smtpd_tls_CAfile")]
    pub smtpd_tls_ca_file: Option<PathBuf>,
}

/// `[tls] smtpd_tls_fingerprint_digest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum FingerprintDigest {
    #[default]
    Sha256,
    Sha1,
    Md5,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            enabled: true,
            cert_file: None,
            key_file: None,
            handshake_timeout_secs: 30,
            smtpd_tls_ask_ccert: false,
            smtpd_tls_fingerprint_digest: FingerprintDigest::Sha256,
            smtpd_tls_ca_file: None,
        }
    }
}

/// Who checks AUTH passwords (Postfix's `smtpd_sasl_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AuthType {
    /// Sluice itself, against `[auth] table` (hashes, or an LDAP bind).
    #[default]
    Table,
    /// A Dovecot auth server at `[auth] dovecot_path`
    /// (`smtpd_sasl_type = dovecot`).
    Dovecot,
}

/// `[auth]`: SMTP AUTH (PLAIN, LOGIN; with Dovecot, what it offers).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// `table` (default) or `dovecot`.
    #[serde(rename = "type")]
    pub kind: AuthType,
    /// With `type = "dovecot"`: its auth-client socket, `/path`,
    /// `unix:/path` or `inet:host:port` (Postfix's `smtpd_sasl_path`).
    pub dovecot_path: Option<DovecotPath>,
    /// With `type = "dovecot"`: seconds for connecting and for each
    /// answer (Postfix's built-in 10).
    pub dovecot_timeout_secs: u64,
    /// Table (from `[tables]`) of user → password hash: argon2
    /// (`$argon2id$…`, see `sluice hash-password`) or SHA-512-crypt
    /// (`$6$…`); an `{ARGON2}`/`{CRYPT}` prefix (LDAP userPassword) is
    /// accepted. AUTH is offered only when set.
    pub table: Option<String>,
    /// Check passwords by binding to the directory as the user's entry
    /// (found with the LDAP `table`'s filter) instead of comparing hashes.
    pub ldap_bind: bool,
    /// Milliseconds before answering a failed attempt.
    pub failure_delay_ms: u64,
    /// Offer AUTH on `smtp` listeners too (Postfix's main.cf
    /// `smtpd_sasl_auth_enable = yes`); off by default: AUTH is for the
    /// `submission` and `submissions` listeners.
    pub offer_on_smtp: bool,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            kind: AuthType::Table,
            dovecot_path: None,
            dovecot_timeout_secs: 10,
            table: None,
            ldap_bind: false,
            failure_delay_ms: 1000,
            offer_on_smtp: false,
        }
    }
}

/// Where Dovecot's auth-client socket is: a [`ServiceAddr`], or a bare
/// absolute path for a Unix socket (as Postfix's `smtpd_sasl_path`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct DovecotPath(pub ServiceAddr);

impl TryFrom<String> for DovecotPath {
    type Error = BadService;
    fn try_from(text: String) -> Result<DovecotPath, BadService> {
        match text.starts_with('/') {
            true => Ok(DovecotPath(ServiceAddr::Unix(PathBuf::from(text)))),
            false => text.parse().map(DovecotPath),
        }
    }
}

impl std::fmt::Display for DovecotPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

super::as_text!(DovecotPath);

impl AuthConfig {
    /// AUTH can be offered: a table, or Dovecot.
    pub fn provided(&self) -> bool {
        match self.kind {
            AuthType::Table => self.table.is_some(),
            AuthType::Dovecot => true,
        }
    }

    /// Refuses settings that contradict each other.
    pub fn validate(&self) -> Result<(), super::ConfigError> {
        let why = match (self.kind, &self.dovecot_path) {
            (AuthType::Dovecot, None) => "auth: type = \"dovecot\" needs dovecot_path",
            (AuthType::Dovecot, Some(_)) if self.table.is_some() => {
                "auth: type = \"dovecot\" with a table (Dovecot checks the passwords: \
                 remove table, or use type = \"table\")"
            }
            (AuthType::Dovecot, Some(_)) if self.ldap_bind => {
                "auth: type = \"dovecot\" with ldap_bind (Dovecot checks the passwords: \
                 remove ldap_bind, or use type = \"table\")"
            }
            (AuthType::Table, Some(_)) => {
                "auth: dovecot_path is set but type is \"table\" (set type = \"dovecot\")"
            }
            _ => return Ok(()),
        };
        Err(super::ConfigError::Invalid(why.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_door_around_the_filter_is_refused_on_every_address() {
        let listener = |text: &str| -> ListenerConfig { toml::from_str(text).unwrap() };
        let main = ContentFilter::parse("smtp:[127.0.0.1]:10024").unwrap();
        let local = listener("listen = \"127.0.0.1:10025\"\ncontent_filter = \"\"");
        let lan = listener("listen = \"10.0.0.1:10025\"\ncontent_filter = \"\"");
        let any = listener("listen = \"0.0.0.0:10025\"\ncontent_filter = \"\"");
        let plain = listener("listen = \"0.0.0.0:25\"");
        let ok = [local.clone(), plain.clone()];
        assert!(check_bypass(&main, &ok).is_ok());
        assert!(bypass_warnings(&main, &ok).is_empty());
        let err = check_bypass(&main, &[local.clone(), any.clone()]).unwrap_err();
        assert!(err.contains("0.0.0.0:10025"), "{err}");
        let warned = bypass_warnings(&main, &[lan.clone(), local]);
        assert_eq!(warned.len(), 1);
        assert!(warned[0].contains("10.0.0.1:10025"), "{warned:?}");
        // No filter anywhere: nothing to go around.
        assert!(check_bypass(&ContentFilter::NONE, std::slice::from_ref(&any)).is_ok());
        assert!(bypass_warnings(&ContentFilter::NONE, &[lan]).is_empty());
        // A listener's own filter counts as filtering too.
        let mut own = plain;
        own.content_filter = Some(main);
        assert!(check_bypass(&ContentFilter::NONE, &[own, any]).is_err());
    }
}
