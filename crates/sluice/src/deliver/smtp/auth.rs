//! SMTP AUTH to the next hop (Postfix's `smtp_sasl_*`): the credentials
//! for a hop from `smtp_sasl_password_maps`, the mechanism (PLAIN, else
//! LOGIN) among those the server's EHLO offers, and the exchange.
//!
//! Lookup order, as Postfix's smtp: the sender and then `@domain` (only
//! with `smtp_sender_dependent_authentication`), the next hop as written
//! (`[host]:port`, and `[host]` for port 25), then the remote host name;
//! the value is `username:password`.
//!
//! Trust: the tables are the administrator's; the server's replies are
//! the peer's (a 334 challenge is only base64 we do not need to read).
//! Invariants: the password is never logged nor in any error or `Debug`
//! text; it is not sent in clear when the security options in force
//! refuse plaintext mechanisms; a failure defers (4.7.0, or 4.3.0 for a
//! table that cannot answer), never bounces.

use std::sync::Arc;

use base64::Engine;

use super::conn::SmtpConn;
use crate::config::delivery::DeliveryConfig;
use crate::config::hop::NextHop;
pub use crate::config::sasl_client::{validate, Security};
use crate::log::{Event, Logger};
use crate::message::status::{Enhanced, Reply};
use crate::tables::Table;

/// A username and its password from the tables.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<hidden>")
            .finish()
    }
}

impl Credentials {
    /// `username:password` (the first colon splits; None without one).
    pub fn parse(value: &str) -> Option<Credentials> {
        let (user, pass) = value.trim().split_once(':')?;
        Some(Credentials {
            username: user.to_string(),
            password: pass.to_string(),
        })
    }
}

/// A mechanism we speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    Plain,
    Login,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Login => "LOGIN",
        }
    }
}

/// PLAIN, else LOGIN, among `offered` (smtp-proto's bits) that the
/// filter (empty: all) and `security` allow.
pub fn choose(offered: u64, security: Security, tls: bool, filter: &[String]) -> Option<Mechanism> {
    if !security.password_allowed(tls) {
        return None;
    }
    let allowed =
        |m: Mechanism| filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(m.name()));
    [
        (Mechanism::Plain, smtp_proto::AUTH_PLAIN),
        (Mechanism::Login, smtp_proto::AUTH_LOGIN),
    ]
    .into_iter()
    .find(|(m, bit)| offered & bit != 0 && allowed(*m))
    .map(|(m, _)| m)
}

/// The SMTP client's AUTH settings, built.
pub struct SaslClient {
    pub tables: Vec<Arc<Table>>,
    pub plain: Security,
    pub tls: Security,
    pub filter: Vec<String>,
    pub sender_dependent: bool,
}

/// Why AUTH did not happen or failed: the deferral (never the password).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", .0)]
pub struct AuthError(pub Reply);

impl SaslClient {
    /// From a validated `[delivery]` and its built tables (None: off).
    pub fn new(d: &DeliveryConfig, tables: Vec<Arc<Table>>) -> Option<SaslClient> {
        if !d.smtp_sasl_auth_enable || tables.is_empty() {
            return None;
        }
        let plain = Security::parse(&d.smtp_sasl_security_options).ok()?;
        let tls = match &d.smtp_sasl_tls_security_options {
            Some(t) => Security::parse(t).ok()?,
            None => plain,
        };
        Some(SaslClient {
            tables,
            plain,
            tls,
            filter: d.smtp_sasl_mechanism_filter.clone(),
            sender_dependent: d.smtp_sender_dependent_authentication,
        })
    }

    /// The sender's credentials (sender, then `@domain`), when
    /// sender-dependent; the null sender has none.
    pub async fn for_sender(&self, sender: &str) -> Result<Option<Arc<Credentials>>, AuthError> {
        if !self.sender_dependent || sender.is_empty() {
            return Ok(None);
        }
        let domain = crate::message::address::domain_of(sender);
        self.first(&sender_keys(sender, domain)).await
    }

    /// The hop's credentials: the next hop as written, then the host.
    pub async fn for_host(
        &self,
        nexthop: Option<(&str, u16, bool)>,
        host: &str,
    ) -> Result<Option<Arc<Credentials>>, AuthError> {
        self.first(&host_keys(nexthop, host)).await
    }

    /// Authenticates `conn` (to `host`, for `hop`) when the tables have
    /// credentials: the sender's (`sender`, looked up per job) or the
    /// hop's; logs `sasl_out` (username and mechanism) once done. No
    /// credentials: no AUTH (as Postfix).
    pub(super) async fn login(
        &self,
        conn: &mut SmtpConn,
        hop: &NextHop,
        host: &str,
        sender: Option<Arc<Credentials>>,
        logger: &Logger,
    ) -> Result<(), AuthError> {
        let creds = match &sender {
            Some(c) => Some(c.clone()),
            None => {
                let nexthop = match hop {
                    NextHop::Smtp {
                        host,
                        port,
                        bracketed,
                        ..
                    } => Some((host.as_str(), *port, *bracketed)),
                    _ => None,
                };
                self.for_host(nexthop, host).await?
            }
        };
        let Some(creds) = creds else {
            return Ok(());
        };
        let mech = self.authenticate(conn, &creds).await?;
        conn.sasl_sender = sender;
        logger.emit(&Event::SaslOut {
            relay: conn.relay.as_str().into(),
            sasl_username: creds.username.as_str().into(),
            sasl_method: mech.name().into(),
        });
        Ok(())
    }

    /// The first answer for `keys` from the tables, in order.
    async fn first(&self, keys: &[String]) -> Result<Option<Arc<Credentials>>, AuthError> {
        for key in keys {
            for t in &self.tables {
                match t.lookup(&crate::tables::fold(key)).await {
                    Ok(Some(v)) => return Ok(Credentials::parse(v.raw()).map(Arc::new)),
                    Ok(None) => {}
                    Err(e) => {
                        let text =
                            format!("smtp_sasl_password_maps: lookup of {key:?} failed: {e}");
                        return Err(AuthError(Reply::own(451, Enhanced::new(4, 3, 0), text)));
                    }
                }
            }
        }
        Ok(None)
    }

    /// AUTH on `conn` (after EHLO, and STARTTLS+EHLO) with `creds`.
    pub(super) async fn authenticate(
        &self,
        conn: &mut SmtpConn,
        creds: &Credentials,
    ) -> Result<Mechanism, AuthError> {
        let tls = conn.tls.is_some();
        let security = if tls { self.tls } else { self.plain };
        let failed = |text: String| AuthError(Reply::own(451, Enhanced::new(4, 7, 0), text));
        let Some(mech) = choose(conn.auth_mechanisms, security, tls, &self.filter) else {
            return Err(failed(format!(
                "SASL authentication failed; cannot authenticate to server {}: no mechanism available",
                conn.relay
            )));
        };
        let b64 = |s: &[u8]| base64::engine::general_purpose::STANDARD.encode(s);
        let steps: Vec<String> = match mech {
            Mechanism::Plain => {
                let mut raw = vec![0u8];
                raw.extend(creds.username.as_bytes());
                raw.push(0);
                raw.extend(creds.password.as_bytes());
                vec![format!("AUTH PLAIN {}\r\n", b64(&raw))]
            }
            Mechanism::Login => vec![
                "AUTH LOGIN\r\n".into(),
                format!("{}\r\n", b64(creds.username.as_bytes())),
                format!("{}\r\n", b64(creds.password.as_bytes())),
            ],
        };
        let relay = conn.relay.clone();
        let broken = |e: std::io::Error| {
            failed(format!(
                "SASL authentication failed; lost connection with {relay}: {}",
                crate::log::io_text(&e)
            ))
        };
        for (i, step) in steps.iter().enumerate() {
            conn.send(step.as_bytes()).await.map_err(broken)?;
            let reply = conn.read_reply().await.map_err(broken)?;
            let last = i + 1 == steps.len();
            match reply.code {
                235 if last => return Ok(mech),
                334 if !last => {}
                _ => {
                    // The connection is in an unknown state: not reused.
                    conn.usable = false;
                    return Err(failed(format!(
                        "SASL authentication failed; server {} said: {reply}",
                        conn.relay
                    )));
                }
            }
        }
        Err(failed("SASL authentication failed".into()))
    }
}

/// The sender's keys: the address, then `@domain`.
fn sender_keys(sender: &str, domain: &str) -> Vec<String> {
    let mut keys = vec![sender.to_string()];
    if !domain.is_empty() {
        keys.push(format!("@{domain}"));
    }
    keys
}

/// The hop's keys: the next hop as written (`[host]:port`, `host:port`,
/// and without the port when it is 25), then the host name.
fn host_keys(nexthop: Option<(&str, u16, bool)>, host: &str) -> Vec<String> {
    let mut keys = Vec::new();
    if let Some((name, port, bracketed)) = nexthop {
        let written = match bracketed {
            true => format!("[{name}]"),
            false => name.to_string(),
        };
        keys.push(format!("{written}:{port}"));
        if port == 25 {
            keys.push(written);
        }
    }
    if !keys.iter().any(|k| k.eq_ignore_ascii_case(host)) {
        keys.push(host.to_string());
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_asked_in_postfix_order() {
        assert_eq!(
            sender_keys("a@x.example", "x.example"),
            ["a@x.example", "@x.example"]
        );
        assert_eq!(
            host_keys(Some(("smtp.example.com", 587, true)), "smtp.example.com"),
            ["[smtp.example.com]:587", "smtp.example.com"]
        );
        assert_eq!(
            host_keys(Some(("relay.example", 25, false)), "mx1.example"),
            ["relay.example:25", "relay.example", "mx1.example"]
        );
        assert_eq!(host_keys(None, "mx1.example"), ["mx1.example"]);
    }

    #[test]
    fn plain_is_preferred_and_security_and_filter_are_honoured() {
        let both = smtp_proto::AUTH_PLAIN | smtp_proto::AUTH_LOGIN;
        let open = Security::parse("").unwrap();
        let strict = Security::parse("noplaintext, noanonymous").unwrap();
        let mutual = Security::parse("mutual_auth").unwrap();
        assert_eq!(choose(both, open, false, &[]), Some(Mechanism::Plain));
        assert_eq!(
            choose(smtp_proto::AUTH_LOGIN, open, false, &[]),
            Some(Mechanism::Login)
        );
        assert_eq!(
            choose(both, open, false, &["login".into()]),
            Some(Mechanism::Login)
        );
        // The default: no password in clear, PLAIN once TLS is up.
        assert_eq!(choose(both, strict, false, &[]), None);
        assert_eq!(choose(both, strict, true, &[]), Some(Mechanism::Plain));
        assert_eq!(choose(both, mutual, true, &[]), None);
        assert_eq!(choose(0, open, false, &[]), None);
        assert_eq!(choose(smtp_proto::AUTH_CRAM_MD5, open, true, &[]), None);
        assert!(Security::parse("nosuch").is_err());
    }

    #[tokio::test]
    async fn credentials_are_found_in_postfix_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sasl_passwd");
        let text = "a@x.example sender:one\n@x.example domain:two\n\
                    [relay.example]:587 hop:three\nmx.example host:four\n";
        std::fs::write(&path, text).unwrap();
        let format = crate::tables::Format::Text { strict: true };
        let logger = crate::log::Logger::disabled();
        let table = crate::tables::FileTable::load("t", &path, format, logger).unwrap();
        let mut sasl = SaslClient {
            tables: vec![Arc::new(Table::File(table))],
            plain: Security::parse("").unwrap(),
            tls: Security::parse("").unwrap(),
            filter: Vec::new(),
            sender_dependent: true,
        };
        let user = |c: Option<Arc<Credentials>>| c.map(|c| c.username.clone());
        let sender = |s| sasl.for_sender(s);
        assert_eq!(
            user(sender("A@x.example").await.unwrap()).as_deref(),
            Some("sender")
        );
        assert_eq!(
            user(sender("b@x.example").await.unwrap()).as_deref(),
            Some("domain")
        );
        assert_eq!(user(sender("c@y.example").await.unwrap()), None);
        assert_eq!(user(sender("").await.unwrap()), None);
        let hop = Some(("relay.example", 587, true));
        let found = sasl.for_host(hop, "mx.example").await.unwrap();
        assert_eq!(user(found).as_deref(), Some("hop"));
        let other = Some(("other.example", 25, true));
        let found = sasl.for_host(other, "mx.example").await.unwrap();
        assert_eq!(user(found).as_deref(), Some("host"));
        sasl.sender_dependent = false;
        assert_eq!(user(sasl.for_sender("a@x.example").await.unwrap()), None);
    }

    #[test]
    fn settings_are_checked_at_load() {
        let mut d = DeliveryConfig::default();
        assert!(validate(&d).is_ok());
        d.smtp_sasl_auth_enable = true;
        assert!(validate(&d).is_err(), "enabled without a table");
        d.smtp_sasl_password_maps = vec!["texthash:/etc/sluice/sasl_passwd".into()];
        assert!(validate(&d).is_ok());
        d.smtp_sasl_security_options = "noplaintext, nosuch".into();
        assert!(validate(&d).is_err());
        d.smtp_sasl_security_options = String::new();
        d.smtp_sasl_tls_security_options = Some("bogus".into());
        assert!(validate(&d).is_err());
        d.smtp_sasl_tls_security_options = None;
        d.smtp_sasl_mechanism_filter = vec!["CRAM-MD5".into()];
        assert!(validate(&d).is_err());
    }

    #[test]
    fn the_password_is_not_in_debug_text() {
        let c = Credentials::parse("user:s3cret:x").unwrap();
        assert_eq!(c.username, "user");
        assert_eq!(c.password, "s3cret:x");
        assert!(!format!("{c:?}").contains("s3cret"));
        assert!(Credentials::parse("nocolon").is_none());
    }
}
