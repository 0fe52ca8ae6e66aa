//! SMTP AUTH (RFC 4954) with the PLAIN (RFC 4616) and LOGIN mechanisms;
//! passwords are checked against argon2 or SHA-512-crypt hashes from a
//! table, or by an LDAP bind as the user (`[auth] ldap_bind`). With
//! `[auth] type = "dovecot"` Dovecot decides instead (`sasl.rs`), with
//! the same offering rules, delay and penalty.
//!
//! AUTH is offered only on an encrypted session unless the listener says
//! `auth_without_tls`. A failed attempt is answered `535 5.7.8`
//! `[auth] failure_delay_ms` after the attempt began (not after the
//! check, so the answer takes the same time whatever was checked), counted
//! per client, and the failure that reaches `client_auth_failure_limit`
//! in a minute (the Nth `535`) is followed by `421 4.7.0`, the session
//! ends and the client is penalised: for a minute every AUTH is refused
//! before any password is looked at, the right one too.
//! A table that cannot answer, or a hashing pool that is full, gives
//! `454 4.7.0` (try later), never `535`; a full pool's `454` counts
//! towards the penalty like a failure.
//!
//! Trust: the client's base64 is hostile; hashes come from the
//! administrator's table. Hashing runs on a bounded pool of its own
//! (`hash_pool.rs`: one thread per core, each with one reused argon2
//! buffer, bounded queues, `mynetworks` clients served first), so a flood
//! of attempts costs bounded memory. An unknown user costs a real argon2
//! check of a dummy hash, so timing does not tell which users exist.

use std::time::{Duration, Instant};

use base64::Engine;
use tokio::io::{AsyncRead, AsyncWrite};

use super::hash_pool::{self, Busy, Lane};
pub use super::password::{check_hash, hash_password};
use super::session::{Mode, Next, Session};
use crate::log::Event;
use crate::receive::sasl_dovecot::Exchange;
use crate::tables::{LookupError, Table};

/// Where an AUTH exchange stands, waiting for the client's next line.
#[derive(Debug)]
pub(super) enum AuthStep {
    Plain,
    LoginUser,
    LoginPassword(String),
    /// Dovecot's challenge was sent (`sasl.rs`): the mechanism, and the
    /// exchange (its connection) to continue.
    Dovecot {
        mech: String,
        exchange: Box<Exchange>,
    },
}

/// Why a password could not be checked now (answered `454 4.7.0`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum CheckError {
    #[error("credentials table unavailable: {0}")]
    Table(#[from] LookupError),
    #[error("{0}")]
    Busy(#[from] Busy),
}

/// Checks `password` against `user`'s hash in `table`, in `lane` of the
/// hashing pool.
pub async fn verify(
    table: &Table,
    user: &str,
    password: &str,
    lane: Lane,
) -> Result<bool, CheckError> {
    // A static table splits values at commas, and a PHC string has
    // some (`m=19456,t=2,p=1`): join them back.
    let hash = table
        .lookup(user)
        .await?
        .filter(|v| !v.is_empty())
        .map(|v| strip_scheme(&v.join(",")).to_string());
    let known = hash.is_some();
    let hash = hash.unwrap_or_else(|| DUMMY_HASH.to_string());
    let ok = hash_pool::check(lane, hash, password.to_string()).await?;
    Ok(ok && known)
}

/// An argon2id hash of nothing in particular, checked for unknown users.
const DUMMY_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$c2x1aWNlZHVtbXlzYWx0$7yFxvAYl7Ej9yWQnKk0WmqUZ0N0wYHxvU6K0fZJ5ZQk";

/// `{CRYPT}$6$…` or `{ARGON2}$argon2id$…` as LDAP stores them.
fn strip_scheme(hash: &str) -> &str {
    match hash.strip_prefix('{').and_then(|h| h.split_once('}')) {
        Some((_, rest)) => rest,
        None => hash,
    }
}

fn b64(s: &str) -> Option<Vec<u8>> {
    if s == "=" {
        return Some(Vec::new());
    }
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    /// AUTH is offered on this session now.
    pub(super) fn offers_auth(&self) -> bool {
        (self.ctx.credentials.is_some() || self.ctx.dovecot.is_some())
            && self
                .listener
                .offers_auth(self.ctx.config.auth.offer_on_smtp)
            && (self.tls.is_some() || self.listener.auth_without_tls)
    }

    /// `AUTH mechanism [initial-response]`.
    pub(super) async fn auth(&mut self, mechanism: &str, initial: Option<&str>) -> Next {
        if !self.offers_auth() {
            return self.error("503 5.5.1 Error: authentication not enabled");
        }
        if self.auth.is_some() {
            return self.error("503 5.5.1 Error: already authenticated");
        }
        if self.txn.is_some() {
            return self.error("503 5.5.1 Error: MAIL transaction in progress");
        }
        if let Some(dovecot) = self.ctx.dovecot.clone() {
            return self.dovecot_start(&dovecot, mechanism, initial).await;
        }
        match (mechanism.to_ascii_uppercase().as_str(), initial) {
            ("PLAIN", Some(resp)) => self.auth_plain(resp).await,
            ("PLAIN", None) => self.challenge(AuthStep::Plain, ""),
            ("LOGIN", Some(user)) => match b64(user) {
                Some(u) => self.challenge(
                    AuthStep::LoginPassword(String::from_utf8_lossy(&u).into_owned()),
                    "UGFzc3dvcmQ6",
                ),
                None => self.error("501 5.5.2 Error: malformed base64"),
            },
            ("LOGIN", None) => self.challenge(AuthStep::LoginUser, "VXNlcm5hbWU6"),
            _ => self.error("504 5.5.4 Error: unsupported authentication mechanism"),
        }
    }

    /// The mechanisms EHLO offers: PLAIN LOGIN, or Dovecot's (boxed:
    /// asking it may mean connecting, a large future for every EHLO).
    pub(super) async fn mechanisms(&self) -> std::borrow::Cow<'static, str> {
        match &self.ctx.dovecot {
            None => "PLAIN LOGIN".into(),
            Some(d) => {
                let offered = Box::pin(d.offered(self.plaintext_ok())).await;
                offered.join(" ").into()
            }
        }
    }

    /// Mechanisms that send passwords in the clear may be used (as
    /// PLAIN and LOGIN are wherever AUTH is offered).
    pub(super) fn plaintext_ok(&self) -> bool {
        self.tls.is_some() || self.listener.auth_without_tls
    }

    fn challenge(&mut self, step: AuthStep, text: &str) -> Next {
        self.reply_fmt(format_args!("334 {text}"));
        self.mode = Mode::Auth(step);
        Next::Continue
    }

    /// One client line inside an AUTH exchange.
    pub(super) async fn auth_line(&mut self, step: AuthStep, line: &[u8]) -> Next {
        self.mode = Mode::Command;
        let line = String::from_utf8_lossy(line.strip_suffix(b"\r\n").unwrap_or(line)).into_owned();
        if line == "*" {
            return self.error("501 5.7.0 Error: authentication aborted");
        }
        match step {
            AuthStep::Plain => self.auth_plain(&line).await,
            AuthStep::LoginUser => match b64(&line) {
                Some(u) => self.challenge(
                    AuthStep::LoginPassword(String::from_utf8_lossy(&u).into_owned()),
                    "UGFzc3dvcmQ6",
                ),
                None => self.error("501 5.5.2 Error: malformed base64"),
            },
            AuthStep::Dovecot { mech, exchange } => self.dovecot_next(mech, *exchange, &line).await,
            AuthStep::LoginPassword(user) => match b64(&line) {
                Some(p) => {
                    self.check(&user, &String::from_utf8_lossy(&p), "LOGIN")
                        .await
                }
                None => self.error("501 5.5.2 Error: malformed base64"),
            },
        }
    }

    /// PLAIN: `authzid NUL authcid NUL password`.
    async fn auth_plain(&mut self, response: &str) -> Next {
        let Some(raw) = b64(response) else {
            return self.error("501 5.5.2 Error: malformed base64");
        };
        let parts: Vec<&[u8]> = raw.split(|&b| b == 0).collect();
        let [authz, user, password] = parts[..] else {
            return self.error("501 5.5.2 Error: malformed PLAIN response");
        };
        if !authz.is_empty() && authz != user {
            return self.error("535 5.7.8 Error: authorization identity not allowed");
        }
        let (user, password) = (
            String::from_utf8_lossy(user).into_owned(),
            String::from_utf8_lossy(password).into_owned(),
        );
        self.check(&user, &password, "PLAIN").await
    }

    async fn check(&mut self, user: &str, password: &str, method: &str) -> Next {
        let began = Instant::now();
        let ctx = self.ctx.clone();
        let ip = self.peer.ip();
        let Some(table) = ctx.credentials.as_ref() else {
            return self.error("503 5.5.1 Error: authentication not enabled");
        };
        // Users are looked up as given, control characters never reach the log.
        let shown: String = user.chars().filter(|c| !c.is_control()).take(256).collect();
        if !ctx.anvil.auth_allowed(ip) {
            // Penalised: nothing is checked, so nothing is learned or spent.
            ctx.logger.emit(&Event::Auth {
                client_ip: ip,
                method: method.into(),
                username: Some(shown.as_str().into()),
                result: "penalised".into(),
                error: None,
            });
            return self.too_many_failures();
        }
        let checked = match ctx.config.auth.ldap_bind {
            true => table.bind_check(&shown, password).await.map_err(Into::into),
            false => {
                let lane = match self.trusted {
                    true => Lane::Trusted,
                    false => Lane::Stranger,
                };
                verify(table, &shown, password, lane).await
            }
        };
        match checked {
            Ok(true) => {
                ctx.logger.emit(&Event::Auth {
                    client_ip: ip,
                    method: method.into(),
                    username: Some(shown.as_str().into()),
                    result: "ok".into(),
                    error: None,
                });
                self.auth = Some(shown);
                self.reply("235 2.7.0 Authentication successful");
                Next::Continue
            }
            Ok(false) => {
                ctx.logger.emit(&Event::Auth {
                    client_ip: ip,
                    method: method.into(),
                    username: Some(shown.as_str().into()),
                    result: "failed".into(),
                    error: None,
                });
                self.failure_delay(began).await;
                self.reply("535 5.7.8 Error: authentication failed");
                if !ctx.anvil.auth_failure(ip) {
                    return self.penalised(ip);
                }
                self.error_counted()
            }
            Err(err) => {
                ctx.logger.emit(&Event::Auth {
                    client_ip: ip,
                    method: method.into(),
                    username: None,
                    result: "unavailable".into(),
                    error: Some(err.to_string().into()),
                });
                match err {
                    CheckError::Busy(_) => {
                        // As slow as a failure and counted like one: a
                        // flood gains no speed from a full pool, its log
                        // lines stay few, and its addresses reach their
                        // penalty (then cost nothing) as fast as if every
                        // attempt had been hashed.
                        self.failure_delay(began).await;
                        self.reply("454 4.7.0 Temporary authentication failure");
                        if !ctx.anvil.auth_failure(ip) {
                            return self.penalised(ip);
                        }
                        self.error_counted()
                    }
                    CheckError::Table(_) => {
                        self.reply("454 4.7.0 Temporary authentication failure");
                        Next::Continue
                    }
                }
            }
        }
    }

    /// Waits until `failure_delay_ms` after `began`.
    pub(super) async fn failure_delay(&self, began: Instant) {
        let delay = Duration::from_millis(self.ctx.config.auth.failure_delay_ms);
        tokio::time::sleep_until((began + delay).into()).await;
    }

    /// The failure that started `ip`'s penalty: logged, then
    /// [`Self::too_many_failures`].
    pub(super) fn penalised(&mut self, ip: std::net::IpAddr) -> Next {
        self.ctx
            .logger
            .emit(&Event::AuthPenaltyClose { client_ip: ip });
        self.too_many_failures()
    }

    /// `421 4.7.0` and the end of the session.
    pub(super) fn too_many_failures(&mut self) -> Next {
        let host = self.ctx.config.hostname.clone();
        self.reply_fmt(format_args!(
            "421 4.7.0 {host} Error: too many failed authentications"
        ));
        Next::Close
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_of_both_kinds_are_checked() {
        let argon = hash_password("s3cret").unwrap();
        assert!(check_hash(&argon, "s3cret"));
        assert!(!check_hash(&argon, "wrong"));
        let params = sha_crypt::Sha512Params::new(5000).unwrap();
        let sha = sha_crypt::sha512_simple("s3cret", &params).unwrap();
        assert!(sha.starts_with("$6$"));
        assert!(check_hash(
            strip_scheme(&format!("{{CRYPT}}{sha}")),
            "s3cret"
        ));
        assert!(!check_hash(&sha, "wrong"));
        assert!(
            !check_hash("plaintext", "plaintext"),
            "unhashed values never match"
        );
        assert!(!check_hash(DUMMY_HASH, ""));
        assert!(
            argon2::password_hash::PasswordHash::new(DUMMY_HASH).is_ok(),
            "the dummy costs a real argon2 check"
        );
    }
}
