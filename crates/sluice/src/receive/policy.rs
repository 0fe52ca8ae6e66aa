//! Policy delegation: a client of Postfix's SMTP access policy protocol
//! (SMTPD_POLICY_README): `name=value` lines and an empty line out, an
//! `action=...` line and an empty line back, on connections kept open
//! and reused (e.g. postgrey for greylisting, quota or rate services).
//!
//! Trust: the server is the operator's, but it is read with limits — a
//! reply of at most [`MAX_REPLY`] bytes within the timeout, its action
//! parsed by `config::services::PolicyAction` (control characters
//! removed). What we send carries client-chosen text (HELO, addresses):
//! every value is stripped of CR, LF and other control characters, so a
//! client cannot add attributes or end the request early.
//! Invariant: a server that is down, slow, closes, or answers nonsense
//! gives the configured default action (Postfix's: `451 4.3.5`), never an
//! accept by accident; a stale kept connection is retried at once on a
//! fresh one.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufStream};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::Semaphore;

use crate::config::services::{PolicyAction, ServiceAddr};
use crate::config::smtpd::SmtpdConfig;

/// Largest reply read from a policy server (Postfix allows far less in
/// practice: one action line and an empty line).
pub const MAX_REPLY: usize = 8192;

/// Pause between tries (Postfix: smtpd_policy_service_retry_delay).
const RETRY_DELAY: Duration = Duration::from_secs(1);

/// Idle connections kept for reuse at most.
const MAX_IDLE: usize = 32;

/// Why one try failed.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{addr}: {err}")]
    Io { addr: String, err: std::io::Error },
    #[error("{0}: no answer within the timeout")]
    Timeout(String),
    #[error("{0}: reply without an action")]
    NoAction(String),
    #[error("{0}: reply over {MAX_REPLY} bytes")]
    TooLong(String),
    #[error("{0}: closed the connection")]
    Closed(String),
}

/// A request: attributes in order (`request=smtpd_access_policy` first).
#[derive(Debug, Default, Clone)]
pub struct Request {
    text: String,
}

impl Request {
    pub fn new() -> Request {
        let mut r = Request::default();
        r.add("request", "smtpd_access_policy");
        r
    }

    /// Adds `name=value`, the value with control characters removed (a
    /// client's HELO or address cannot start a new attribute).
    pub fn add(&mut self, name: &str, value: &str) -> &mut Request {
        self.text.push_str(name);
        self.text.push('=');
        self.text.extend(value.chars().filter(|c| !c.is_control()));
        self.text.push('\n');
        self
    }

    /// The bytes on the wire: the attributes and the empty line.
    pub fn wire(&self) -> String {
        format!("{}\n", self.text)
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// An open connection and when it was opened and last used.
struct Conn {
    io: BufStream<Box<dyn Io>>,
    opened: Instant,
    used: Instant,
}

/// The client: settings, a bound on connections, and the idle ones.
pub struct PolicyClient {
    addr: ServiceAddr,
    timeout: Duration,
    tries: u32,
    max_idle: Duration,
    max_ttl: Duration,
    default_action: PolicyAction,
    slots: Semaphore,
    idle: Mutex<Vec<Conn>>,
}

impl PolicyClient {
    /// The client for `smtpd.policy_service`, if one is set.
    pub fn from_config(smtpd: &SmtpdConfig) -> Option<PolicyClient> {
        Some(PolicyClient {
            addr: smtpd.policy_service.clone()?,
            timeout: Duration::from_secs(smtpd.policy_service_timeout_secs.max(1)),
            tries: smtpd.policy_service_try_limit.max(1),
            max_idle: Duration::from_secs(smtpd.policy_service_max_idle_secs),
            max_ttl: Duration::from_secs(smtpd.policy_service_max_ttl_secs),
            default_action: smtpd.policy_service_default_action.clone(),
            slots: Semaphore::new(smtpd.policy_service_max_connections.max(1)),
            idle: Mutex::new(Vec::new()),
        })
    }

    pub fn addr(&self) -> &ServiceAddr {
        &self.addr
    }

    /// The action for `request`: the server's, or the default action
    /// (with the last error) when every try failed.
    pub async fn ask(&self, request: &Request) -> (PolicyAction, Option<PolicyError>) {
        match self.ask_text(request).await {
            (Some(text), _) => (PolicyAction::parse(&text), None),
            (None, err) => (self.default_action.clone(), err),
        }
    }

    /// The server's action as it wrote it (for a restriction list, which
    /// reads it as an access table's answer, as Postfix does), or the
    /// default action's text (with the last error) when every try failed.
    pub async fn ask_access(&self, request: &Request) -> (String, Option<PolicyError>) {
        match self.ask_text(request).await {
            (Some(text), _) => (text, None),
            (None, err) => (self.default_action.to_string(), err),
        }
    }

    /// The server's `action=` value, or None (with the last error).
    async fn ask_text(&self, request: &Request) -> (Option<String>, Option<PolicyError>) {
        let wire = request.wire();
        let mut last = None;
        for attempt in 0..self.tries {
            if attempt > 0 {
                tokio::time::sleep(RETRY_DELAY).await;
            }
            match tokio::time::timeout(self.timeout, self.try_once(&wire)).await {
                Ok(Ok(action)) => return (Some(action), None),
                Ok(Err(err)) => last = Some(err),
                Err(_) => last = Some(PolicyError::Timeout(self.addr.to_string())),
            }
        }
        (None, last)
    }

    /// One try: a kept connection if there is a fresh one (a stale one
    /// that fails is replaced at once by a new one), else a new one.
    async fn try_once(&self, wire: &str) -> Result<String, PolicyError> {
        let _slot = self.slots.acquire().await.expect("never closed");
        if let Some(mut conn) = self.take_idle() {
            if let Ok(action) = self.exchange(&mut conn, wire).await {
                self.keep(conn);
                return Ok(action);
            }
        }
        let mut conn = self.connect().await?;
        let action = self.exchange(&mut conn, wire).await?;
        self.keep(conn);
        Ok(action)
    }

    async fn connect(&self) -> Result<Conn, PolicyError> {
        let io: Box<dyn Io> = match &self.addr {
            ServiceAddr::Inet { host, port } => {
                let s = TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(|err| self.io_error(err))?;
                let _ = s.set_nodelay(true);
                Box::new(s)
            }
            ServiceAddr::Unix(path) => Box::new(
                UnixStream::connect(path)
                    .await
                    .map_err(|err| self.io_error(err))?,
            ),
        };
        let now = Instant::now();
        Ok(Conn {
            io: BufStream::new(io),
            opened: now,
            used: now,
        })
    }

    /// Writes the request and reads the reply up to its empty line.
    async fn exchange(&self, conn: &mut Conn, wire: &str) -> Result<String, PolicyError> {
        let io = &mut conn.io;
        io.write_all(wire.as_bytes())
            .await
            .map_err(|e| self.io_error(e))?;
        io.flush().await.map_err(|e| self.io_error(e))?;
        let mut limited = io.take(MAX_REPLY as u64);
        let mut action = None;
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = limited
                .read_until(b'\n', &mut line)
                .await
                .map_err(|e| self.io_error(e))?;
            if n == 0 || line.last() != Some(&b'\n') {
                return Err(match limited.limit() {
                    0 => PolicyError::TooLong(self.addr.to_string()),
                    _ => PolicyError::Closed(self.addr.to_string()),
                });
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\r', '\n']);
            if text.is_empty() {
                break;
            }
            if let Some(value) = text.strip_prefix("action=") {
                action.get_or_insert_with(|| value.to_string());
            }
        }
        conn.used = Instant::now();
        action.ok_or_else(|| PolicyError::NoAction(self.addr.to_string()))
    }

    fn take_idle(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        idle.retain(|c| self.fresh(c, now));
        idle.pop()
    }

    fn keep(&self, conn: Conn) {
        if !self.fresh(&conn, Instant::now()) {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    fn fresh(&self, conn: &Conn, now: Instant) -> bool {
        now.duration_since(conn.used) < self.max_idle
            && now.duration_since(conn.opened) < self.max_ttl
    }

    fn io_error(&self, err: std::io::Error) -> PolicyError {
        PolicyError::Io {
            addr: self.addr.to_string(),
            err,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_cannot_add_attributes() {
        let mut r = Request::new();
        r.add("helo_name", "evil\nrecipient=postmaster@x\n\nrequest=x");
        r.add("sender", "a\r@b");
        assert_eq!(
            r.wire(),
            "request=smtpd_access_policy\nhelo_name=evilrecipient=postmaster@xrequest=x\nsender=a@b\n\n"
        );
    }

    /// A server at a Unix socket in a temp dir answering each request
    /// (read up to its empty line) with `answer(n)`, n counting requests
    /// on the connection; after `per_conn` answers it closes.
    fn server(answer: fn(usize) -> Vec<u8>, per_conn: usize) -> (tempfile::TempDir, SmtpdConfig) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut s = BufStream::new(s);
                    for n in 0..per_conn {
                        let mut line = String::new();
                        loop {
                            line.clear();
                            if s.read_line(&mut line).await.unwrap_or(0) == 0 {
                                return;
                            }
                            if line == "\n" {
                                break;
                            }
                        }
                        let _ = s.write_all(&answer(n)).await;
                        let _ = s.flush().await;
                    }
                });
            }
        });
        let mut smtpd = SmtpdConfig {
            policy_service: Some(ServiceAddr::Unix(path)),
            policy_service_try_limit: 1,
            policy_service_timeout_secs: 5,
            ..SmtpdConfig::default()
        };
        smtpd.policy_service_default_action = PolicyAction::server_problem();
        (dir, smtpd)
    }

    #[tokio::test]
    async fn answers_are_read_and_connections_reused() {
        let (_d, cfg) = server(|n| format!("action=PREPEND X-N: {n}\n\n").into_bytes(), 10);
        let client = PolicyClient::from_config(&cfg).unwrap();
        for n in 0..3 {
            let (action, err) = client.ask(&Request::new()).await;
            assert!(err.is_none(), "{err:?}");
            assert_eq!(
                action,
                PolicyAction::Prepend(format!("X-N: {n}")),
                "one connection"
            );
        }
    }

    #[tokio::test]
    async fn a_kept_connection_the_server_closed_is_replaced_at_once() {
        let (_d, cfg) = server(|_| b"action=DUNNO\n\n".to_vec(), 1);
        let client = PolicyClient::from_config(&cfg).unwrap();
        for _ in 0..3 {
            let (action, err) = client.ask(&Request::new()).await;
            assert!(err.is_none(), "one try suffices: {err:?}");
            assert_eq!(action, PolicyAction::Dunno);
        }
    }

    #[tokio::test]
    async fn nonsense_gets_the_default_action() {
        for answer in [
            (|_| b"hello=world\n\n".to_vec()) as fn(usize) -> Vec<u8>,
            |_| vec![b'a'; MAX_REPLY * 2],
            |_| b"action=DUNNO\n".to_vec(),
        ] {
            let (_d, cfg) = server(answer, 1);
            let client = PolicyClient::from_config(&cfg).unwrap();
            let (action, err) = client.ask(&Request::new()).await;
            assert_eq!(action, PolicyAction::server_problem());
            assert!(err.is_some());
        }
    }
}
