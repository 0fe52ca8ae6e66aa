//! SMTP AUTH decided by Dovecot (`[auth] type = "dovecot"`): the session's
//! side of `receive/sasl_dovecot.rs`. The mechanisms offered are the ones
//! Dovecot lists; its challenges go to the client as `334`, the client's
//! lines back as `CONT`, so any mechanism Dovecot offers works.
//!
//! As with a table: AUTH is offered where it is today (`auth.rs`); a
//! penalised client is refused before Dovecot is asked; `FAIL` is
//! `535 5.7.8` after `failure_delay_ms` and counts towards the penalty;
//! `*` cancels (`501 5.7.0`). A Dovecot that says `FAIL temp`, cannot be
//! reached, hangs past the timeout or answers nonsense gives
//! `454 4.7.0` and the session goes on, not authenticated.
//!
//! Trust: the client's lines are hostile: only base64 that decodes is
//! passed on (else `501 5.5.2`), only a mechanism Dovecot offered (else
//! `504 5.5.4`). The login is the user Dovecot's `OK` names, not what the
//! client typed.

use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite};

use super::auth::AuthStep;
use super::session::{Mode, Next, Session};
use crate::log::Event;
use crate::receive::sasl_dovecot::{is_base64, DovecotAuth, Error, Exchange, Peer, Step};

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    /// `AUTH mechanism [initial-response]`, offered and allowed.
    pub(super) async fn dovecot_start(
        &mut self,
        dovecot: &DovecotAuth,
        mechanism: &str,
        initial: Option<&str>,
    ) -> Next {
        let mech = mechanism.to_ascii_uppercase();
        if !dovecot.offered_now(self.plaintext_ok()).contains(&mech) {
            return self.error("504 5.5.4 Error: unsupported authentication mechanism");
        }
        if initial.is_some_and(|resp| !is_base64(resp)) {
            return self.error("501 5.5.2 Error: malformed base64");
        }
        let ip = self.peer.ip();
        if !self.ctx.anvil.auth_allowed(ip) {
            // Penalised: Dovecot is not asked, so nothing is learned.
            self.log_auth(&mech, None, "penalised", None);
            return self.too_many_failures();
        }
        let peer = Peer {
            rip: ip,
            lip: self.local.map(|a| a.ip()),
            secured: self.tls.is_some(),
        };
        let began = Instant::now();
        let step = dovecot.begin(&mech, initial, peer).await;
        self.dovecot_answer(mech, began, step).await
    }

    /// The client's line after a Dovecot challenge (`*` was handled:
    /// dropping the exchange closed its connection).
    pub(super) async fn dovecot_next(&mut self, mech: String, ex: Exchange, line: &str) -> Next {
        let Some(dovecot) = self.ctx.dovecot.clone() else {
            return self.error("503 5.5.1 Error: authentication not enabled");
        };
        if !is_base64(line) {
            return self.error("501 5.5.2 Error: malformed base64");
        }
        let began = Instant::now();
        let step = dovecot.next(ex, line).await;
        self.dovecot_answer(mech, began, step).await
    }

    async fn dovecot_answer(
        &mut self,
        mech: String,
        began: Instant,
        step: Result<Step, Error>,
    ) -> Next {
        let ip = self.peer.ip();
        match step {
            Ok(Step::Challenge(text, exchange)) => {
                self.reply_fmt(format_args!("334 {text}"));
                let exchange = Box::new(exchange);
                self.mode = Mode::Auth(AuthStep::Dovecot { mech, exchange });
                Next::Continue
            }
            Ok(Step::Ok(user)) => {
                self.log_auth(&mech, Some(&user), "ok", None);
                self.auth = Some(user);
                self.reply("235 2.7.0 Authentication successful");
                Next::Continue
            }
            Ok(Step::Fail { user }) => {
                self.log_auth(&mech, user.as_deref(), "failed", None);
                self.failure_delay(began).await;
                self.reply("535 5.7.8 Error: authentication failed");
                if !self.ctx.anvil.auth_failure(ip) {
                    return self.penalised(ip);
                }
                self.error_counted()
            }
            Ok(Step::TempFail) => self.unavailable(&mech, "dovecot: FAIL temp"),
            Err(err) => self.unavailable(&mech, &err.to_string()),
        }
    }

    /// Dovecot could not decide: `454`, not counted (as a table that
    /// cannot answer).
    fn unavailable(&mut self, mech: &str, why: &str) -> Next {
        self.log_auth(mech, None, "unavailable", Some(why));
        self.reply("454 4.7.0 Temporary authentication failure");
        Next::Continue
    }

    fn log_auth(&self, mech: &str, user: Option<&str>, result: &str, error: Option<&str>) {
        self.ctx.logger.emit(&Event::Auth {
            client_ip: self.peer.ip(),
            method: mech.into(),
            username: user.map(Into::into),
            result: result.into(),
            error: error.map(Into::into),
        });
    }
}
