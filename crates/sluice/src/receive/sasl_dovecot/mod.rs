//! Dovecot SASL: a client of Dovecot's authentication protocol (the
//! auth-client socket; Postfix's `smtpd_sasl_type = dovecot`), so SMTP
//! AUTH is decided by the Dovecot that serves the users' IMAP.
//!
//! The protocol is LF-ended lines of TAB-separated fields. A connection
//! starts with `VERSION 1 0` and `CPID pid` from us, and `VERSION`,
//! `MECH name flags…` lines and `DONE` from Dovecot; then
//! `AUTH id mech service=smtp nologin lip= rip= [secured] [resp=]` and
//! `CONT id data` from us, `CONT id challenge`, `OK id user=…` or
//! `FAIL id [temp] …` from Dovecot. A connection serves one exchange at a
//! time; between exchanges it waits in a small pool of kept connections
//! (Postfix keeps one per smtpd process).
//!
//! Trust: the client's bytes are hostile. Only base64 they sent (checked
//! to decode) and a mechanism name Dovecot itself offered ever reach the
//! connection, so no TAB, CR or LF of theirs can add a field or a line.
//! Dovecot is the operator's but is read with limits: a line is at most
//! [`MAX_LINE`] bytes, every answer must come within the timeout,
//! mechanism names and challenges must be what they claim (a name, base64)
//! and the user it names is unescaped and stripped of control characters.
//! Invariants: a Dovecot that is absent, hangs, closes or answers
//! nonsense is an [`Error`] (the session answers `454 4.7.0`), never a
//! success; only `OK` with a user name is one. A connection is kept for
//! reuse only after an exchange that ended cleanly; one cancelled or
//! failed half-way is closed. A kept connection found closed when used is
//! replaced once by a fresh one.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufStream};
use tokio::net::{TcpStream, UnixStream};

use crate::config::listener::AuthConfig;
use crate::config::services::ServiceAddr;

mod wire;

pub use wire::is_base64;
use wire::{auth_line, handshake_line, parse_answer, Answer, Handshake};

/// Longest line read from Dovecot (its protocol document expects lines
/// to fit in 16384 bytes).
pub const MAX_LINE: usize = 16384;

/// Kept idle connections at most.
const MAX_IDLE: usize = 8;

/// `MECH` lines read from one handshake at most.
const MAX_MECHS: usize = 64;

/// What is offered when Dovecot's list is not known (it was never
/// reached): PLAIN and LOGIN, which it always has; an AUTH then gets
/// `454` until it answers.
const FALLBACK: &[&str] = &["PLAIN", "LOGIN"];

/// Why Dovecot could not decide (the session answers `454 4.7.0`).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("dovecot auth {addr}: {err}")]
    Io { addr: String, err: std::io::Error },
    #[error("dovecot auth {0}: no answer within the timeout")]
    Timeout(String),
    #[error("dovecot auth {0}: closed the connection")]
    Closed(String),
    #[error("dovecot auth {0}: line over {MAX_LINE} bytes")]
    TooLong(String),
    #[error("dovecot auth {addr}: {what}")]
    Protocol { addr: String, what: String },
}

impl Error {
    /// The connection was found closed: a kept one may be stale.
    fn stale(&self) -> bool {
        matches!(self, Error::Closed(_) | Error::Io { .. })
    }
}

/// A mechanism Dovecot offers (`MECH name flags`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mech {
    pub name: String,
    /// Sends the password in the clear (PLAIN, LOGIN).
    pub plaintext: bool,
    /// Logs in anonymously: never offered (Postfix's default
    /// `smtpd_sasl_security_options = noanonymous`).
    pub anonymous: bool,
}

/// Who is authenticating: for Dovecot's own policy (its penalty, its
/// rules for plaintext over unencrypted connections).
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pub rip: IpAddr,
    pub lip: Option<IpAddr>,
    /// The SMTP session is encrypted.
    pub secured: bool,
}

/// What Dovecot said to one step.
#[derive(Debug)]
pub enum Step {
    /// `CONT`: the base64 challenge for the client, and the exchange to
    /// continue with the client's answer.
    Challenge(String, Exchange),
    /// `OK` with the user Dovecot authenticated.
    Ok(String),
    /// `FAIL`; `user` when Dovecot named one.
    Fail { user: Option<String> },
    /// `FAIL temp`: Dovecot could not check now.
    TempFail,
}

/// An exchange waiting for the client's next line: its connection and
/// request id. Dropping it closes the connection.
#[derive(Debug)]
pub struct Exchange {
    conn: Conn,
    id: u32,
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> Io for T {}

struct Conn {
    io: BufStream<Box<dyn Io>>,
    next_id: u32,
    /// Taken from the pool (may have been closed meanwhile).
    reused: bool,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("next_id", &self.next_id)
            .finish()
    }
}

/// The client: where Dovecot is, the timeout, kept connections and the
/// mechanisms its last handshake listed.
pub struct DovecotAuth {
    addr: ServiceAddr,
    shown: String,
    timeout: Duration,
    idle: Mutex<Vec<Conn>>,
    mechs: Mutex<Option<Arc<[Mech]>>>,
}

impl DovecotAuth {
    /// The client `[auth]` asks for, if it names Dovecot.
    pub fn from_config(auth: &AuthConfig) -> Option<DovecotAuth> {
        use crate::config::listener::AuthType;
        let path = auth
            .dovecot_path
            .as_ref()
            .filter(|_| auth.kind == AuthType::Dovecot)?;
        Some(DovecotAuth::new(
            path.0.clone(),
            Duration::from_secs(auth.dovecot_timeout_secs.max(1)),
        ))
    }

    pub fn new(addr: ServiceAddr, timeout: Duration) -> DovecotAuth {
        DovecotAuth {
            shown: addr.to_string(),
            addr,
            timeout,
            idle: Mutex::new(Vec::new()),
            mechs: Mutex::new(None),
        }
    }

    /// The mechanisms to offer a client (`plaintext_ok`: where plaintext
    /// ones may be used): Dovecot's, less private (never listed) and
    /// anonymous ones. Connects (within the timeout) when no handshake
    /// has listed them yet; while Dovecot cannot be reached, PLAIN LOGIN.
    pub async fn offered(&self, plaintext_ok: bool) -> Vec<String> {
        if self.known().is_none() {
            if let Ok(Ok(conn)) = tokio::time::timeout(self.timeout, self.connect()).await {
                self.keep(conn);
            }
        }
        self.offered_now(plaintext_ok)
    }

    /// [`Self::offered`] as the last handshake listed them, without
    /// connecting (an AUTH is checked against what EHLO offered).
    pub fn offered_now(&self, plaintext_ok: bool) -> Vec<String> {
        match self.known() {
            Some(m) => m
                .iter()
                .filter(|m| !m.anonymous && (plaintext_ok || !m.plaintext))
                .map(|m| m.name.clone())
                .collect(),
            None if plaintext_ok => FALLBACK.iter().map(|m| m.to_string()).collect(),
            None => Vec::new(),
        }
    }

    fn known(&self) -> Option<Arc<[Mech]>> {
        self.mechs.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Starts an exchange: `AUTH` with `mech` (as offered) and the
    /// client's initial response (base64, checked by the caller with
    /// [`is_base64`]). Everything (a connection, its handshake, the
    /// answer) within the timeout.
    pub async fn begin(
        &self,
        mech: &str,
        initial: Option<&str>,
        peer: Peer,
    ) -> Result<Step, Error> {
        tokio::time::timeout(self.timeout, self.begin_untimed(mech, initial, peer))
            .await
            .unwrap_or_else(|_| Err(Error::Timeout(self.shown.clone())))
    }

    async fn begin_untimed(
        &self,
        mech: &str,
        initial: Option<&str>,
        peer: Peer,
    ) -> Result<Step, Error> {
        let mut conn = match self.take_idle() {
            Some(conn) => conn,
            None => self.connect().await?,
        };
        loop {
            let id = conn.next_id;
            conn.next_id = conn.next_id.wrapping_add(1).max(1);
            let line = auth_line(id, mech, initial, peer);
            match self.exchange(conn, id, &line).await {
                Err((err, true)) if err.stale() => conn = self.connect().await?,
                Err((err, _)) => return Err(err),
                Ok(step) => return Ok(step),
            }
        }
    }

    /// Continues `ex` with the client's base64 line (checked by the
    /// caller with [`is_base64`]), within the timeout.
    pub async fn next(&self, ex: Exchange, response: &str) -> Result<Step, Error> {
        let line = format!("CONT\t{}\t{response}\n", ex.id);
        let step = self.exchange(ex.conn, ex.id, &line);
        match tokio::time::timeout(self.timeout, step).await {
            Ok(result) => result.map_err(|(err, _)| err),
            Err(_) => Err(Error::Timeout(self.shown.clone())),
        }
    }

    /// Sends `line`, reads the answer to request `id`; a clean end puts
    /// the connection back in the pool. An error says whether the
    /// connection was a kept one.
    async fn exchange(&self, mut conn: Conn, id: u32, line: &str) -> Result<Step, (Error, bool)> {
        let reused = std::mem::replace(&mut conn.reused, false);
        let sent = async {
            conn.io.write_all(line.as_bytes()).await?;
            conn.io.flush().await
        };
        if let Err(err) = sent.await {
            return Err((self.io_error(err), reused));
        }
        let answer = loop {
            let line = self.read_line(&mut conn).await.map_err(|e| (e, reused))?;
            if let Some(answer) = parse_answer(&line, id) {
                break answer;
            }
        };
        let answer = answer.map_err(|what| (self.protocol(what), false))?;
        Ok(match answer {
            Answer::Cont(challenge) => Step::Challenge(challenge, Exchange { conn, id }),
            Answer::Ok(user) => {
                self.keep(conn);
                match user {
                    Some(user) => Step::Ok(user),
                    None => return Err((self.protocol("OK without a user".into()), false)),
                }
            }
            Answer::Fail { temp, user } => {
                self.keep(conn);
                match temp {
                    true => Step::TempFail,
                    false => Step::Fail { user },
                }
            }
        })
    }

    /// A new connection, after its handshake (which refreshes the
    /// mechanism list).
    async fn connect(&self) -> Result<Conn, Error> {
        let io: Box<dyn Io> = match &self.addr {
            ServiceAddr::Inet { host, port } => {
                let s = TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(|e| self.io_error(e))?;
                let _ = s.set_nodelay(true);
                Box::new(s)
            }
            ServiceAddr::Unix(path) => Box::new(
                UnixStream::connect(path)
                    .await
                    .map_err(|e| self.io_error(e))?,
            ),
        };
        let mut conn = Conn {
            io: BufStream::new(io),
            next_id: 1,
            reused: false,
        };
        let hello = format!("VERSION\t1\t0\nCPID\t{}\n", std::process::id());
        let sent = async {
            conn.io.write_all(hello.as_bytes()).await?;
            conn.io.flush().await
        };
        sent.await.map_err(|e| self.io_error(e))?;
        let mut mechs = Vec::new();
        loop {
            let line = self.read_line(&mut conn).await?;
            match handshake_line(&line).map_err(|what| self.protocol(what))? {
                Handshake::Done => break,
                Handshake::Mech(m) if mechs.len() < MAX_MECHS => mechs.push(m),
                Handshake::Mech(_) | Handshake::Other => {}
            }
        }
        *self.mechs.lock().unwrap_or_else(|p| p.into_inner()) = Some(mechs.into());
        Ok(conn)
    }

    /// One line (without its LF), at most [`MAX_LINE`] bytes.
    async fn read_line(&self, conn: &mut Conn) -> Result<String, Error> {
        let mut line = Vec::new();
        let mut limited = (&mut conn.io).take(MAX_LINE as u64 + 1);
        let n = limited
            .read_until(b'\n', &mut line)
            .await
            .map_err(|e| self.io_error(e))?;
        if line.last() != Some(&b'\n') {
            return Err(match n > MAX_LINE {
                true => Error::TooLong(self.shown.clone()),
                false => Error::Closed(self.shown.clone()),
            });
        }
        line.pop();
        Ok(String::from_utf8_lossy(&line).into_owned())
    }

    fn take_idle(&self) -> Option<Conn> {
        let mut conn = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()?;
        conn.reused = true;
        Some(conn)
    }

    fn keep(&self, conn: Conn) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    fn io_error(&self, err: std::io::Error) -> Error {
        Error::Io {
            addr: self.shown.clone(),
            err,
        }
    }

    fn protocol(&self, what: String) -> Error {
        Error::Protocol {
            addr: self.shown.clone(),
            what,
        }
    }
}
