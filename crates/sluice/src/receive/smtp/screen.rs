//! The screen before the greeting: DNS block- and allowlists
//! (`receive/dnsbl.rs`) asked while the greeting pause runs, and the
//! pause itself (a client that talks before the 220 is a bot that does
//! not wait for the server, RFC 5321 §4.3.1).
//!
//! Trust: the client's address (the PROXY header's, behind a balancer)
//! and whether it spoke early. Invariants: the greeting waits at most the
//! longer of `greet_pause_ms` and `dnsbl_timeout_ms`; only port-25
//! listeners (`kind = "smtp"`) are screened by the lists, and clients that
//! may relay (mynetworks) are not looked up.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use super::session::Session;
use crate::config::listener::ListenerKind;
use crate::log::{Event, Reject};
use crate::receive::dnsbl::{Dnsbl, Verdict};

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    /// Runs the screen; false if the client was refused and the session
    /// is over.
    pub(super) async fn screen(&mut self) -> bool {
        let ctx = self.ctx.clone();
        let (ip, port) = (self.peer.ip(), self.peer.port());
        let dnsbl = match (&ctx.dnsbl, self.trusted, self.listener.kind) {
            (Some(d), false, ListenerKind::Smtp) => Some(d.clone()),
            _ => None,
        };
        let lists = async {
            match &dnsbl {
                Some(d) => Some(d.check(ip).await),
                None => None,
            }
        };
        let (pregreet, verdict) = tokio::join!(self.talks_before_greeting(), lists);
        if let (Some(d), Some(v)) = (&dnsbl, &verdict) {
            if self.dnsbl_verdict(d, v).await {
                return false;
            }
        }
        if pregreet {
            ctx.logger.emit(&Event::Pregreet {
                client_ip: ip,
                client_port: port,
            });
            self.reply_fmt(format_args!(
                "554 5.5.1 {} Error: SMTP protocol synchronization (talked before the greeting)",
                ctx.config.hostname
            ));
            let _ = self.flush(Duration::from_secs(5)).await;
            return false;
        }
        true
    }

    /// Logs what the DNS lists said of the client; true if it was refused
    /// (`554 5.7.1`, naming the list) and the session is over.
    async fn dnsbl_verdict(&mut self, dnsbl: &Dnsbl, v: &Verdict) -> bool {
        let ip = self.peer.ip();
        if !v.listed_by.is_empty() || !v.unanswered.is_empty() {
            let _silent = match v.unanswered.is_empty() {
                true => String::new(),
                false => format!("; no answer from {}", v.unanswered.join(" ")),
            };
            self.ctx.logger.emit(&Event::Dnsbl {
                client_ip: ip,
                score: v.score,
                listed_by: v.listed_by.iter().map(|z| z.as_str().into()).collect(),
                unanswered: v.unanswered.iter().map(|z| z.as_str().into()).collect(),
            });
        }
        if !dnsbl.refuses(v) {
            return false;
        }
        let list = v.blocked_by.as_deref().unwrap_or_default();
        self.ctx.logger.emit(&Event::Reject(Reject::Dnsbl {
            stage: "connect".into(),
            client_ip: ip,
            code: 554,
            dsn: "5.7.1".into(),
            cause: "dnsbl".into(),
            list: list.into(),
        }));
        self.reply_fmt(format_args!(
            "554 5.7.1 Service unavailable; client [{ip}] blocked using {list}"
        ));
        let _ = self.flush(Duration::from_secs(5)).await;
        true
    }

    /// Waits `greet_pause_ms` before the greeting; true if the client sent
    /// anything meanwhile (RFC 5321 §4.3.1: the client waits for the 220).
    async fn talks_before_greeting(&mut self) -> bool {
        let pause = Duration::from_millis(self.ctx.config.smtpd.greet_pause_ms);
        if pause.is_zero() {
            return false;
        }
        match tokio::time::timeout(pause, self.io.read_buf(&mut self.inbuf)).await {
            Ok(Ok(n)) => n > 0,
            Ok(Err(_)) => true,
            Err(_) => false,
        }
    }
}
