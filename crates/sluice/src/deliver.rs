//! Delivery workers: one task per outbound SMTP connection.
//!
//! A worker is started by the scheduler with a first job, delivers it,
//! reports per-recipient outcomes, and then waits (up to
//! `connection_idle_secs`) for the next job to the same next hop, so busy
//! destinations reuse connections: no new TCP and EHLO handshake per
//! message. Commands are pipelined when the peer offers PIPELINING; after a
//! failed transaction the session is reset with RSET. A cached connection
//! the peer has closed is detected on first use and replaced once.
//!
//! Trust: the peer's replies are parsed defensively; anything unexpected is
//! a temporary failure (deferred), never a silent success.

use std::sync::Arc;
use std::time::Duration;

use sluice_proto::dotstuff;
use sluice_spool::{BodyRef, Envelope, Spool};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::config::Config;
use crate::local::{deliver_maildir, Local};
use crate::log::Logger;
use crate::receive::{FLAG_8BITMIME, FLAG_SMTPUTF8};
use crate::route::NextHop;
use crate::schedule::Event;

pub type WorkerId = u64;

/// One message's recipients for one next hop.
pub struct Job {
    pub msg: u64,
    pub envelope: Arc<Envelope>,
    /// The body if still in memory; otherwise it is read from the spool.
    pub body: Option<Arc<Vec<u8>>>,
    pub body_ref: BodyRef,
    pub rcpts: Vec<u16>,
}

/// A recipient's result for one attempt.
#[derive(Debug, Clone)]
pub enum Outcome {
    Delivered { relay: String, reply: String },
    Deferred { relay: String, reason: String },
    Bounced { relay: String, reason: String },
}

#[allow(clippy::too_many_arguments)]
pub fn spawn_worker(
    worker: WorkerId,
    dest: Arc<str>,
    hop: Arc<NextHop>,
    first: Job,
    rx: mpsc::Receiver<Job>,
    config: Arc<Config>,
    local: Arc<Local>,
    spool: Spool,
    logger: Logger,
    events: mpsc::UnboundedSender<Event>,
) {
    tokio::spawn(async move {
        let mut w = Worker {
            worker,
            dest,
            hop,
            config,
            local,
            spool,
            logger,
            events,
            conn: None,
        };
        w.run(first, rx).await;
    });
}

struct Worker {
    worker: WorkerId,
    dest: Arc<str>,
    hop: Arc<NextHop>,
    config: Arc<Config>,
    local: Arc<Local>,
    spool: Spool,
    logger: Logger,
    events: mpsc::UnboundedSender<Event>,
    conn: Option<SmtpConn>,
}

impl Worker {
    async fn run(&mut self, first: Job, mut rx: mpsc::Receiver<Job>) {
        let idle = Duration::from_secs(self.config.delivery.connection_idle_secs.max(1));
        let limit = self.config.delivery.messages_per_connection.max(1);
        let mut job = first;
        let mut sent = 0usize;
        loop {
            let (results, connect_failed) = self.attempt(&job).await;
            sent += 1;
            let keep = !connect_failed && sent < limit;
            let _ = self.events.send(Event::JobDone {
                dest: self.dest.clone(),
                worker: self.worker,
                msg: job.msg,
                results,
                connect_failed,
                keep,
            });
            if !keep {
                break;
            }
            match tokio::time::timeout(idle, rx.recv()).await {
                Ok(Some(next)) => job = next,
                _ => break,
            }
        }
        rx.close();
        let mut returned = Vec::new();
        while let Ok(job) = rx.try_recv() {
            returned.push(job);
        }
        if let Some(conn) = self.conn.take() {
            conn.quit().await;
        }
        let _ = self.events.send(Event::WorkerExit {
            dest: self.dest.clone(),
            worker: self.worker,
            returned,
        });
    }

    /// One delivery attempt; returns outcomes and whether connecting failed.
    async fn attempt(&mut self, job: &Job) -> (Vec<(u16, Outcome)>, bool) {
        let body = match load_body(&self.spool, &job.body, job.body_ref).await {
            Ok(b) => b,
            Err(e) => {
                let why = format!("4.3.0 cannot read queue file: {e}");
                return (defer_all(job, "none", &why), false);
            }
        };
        let hop = self.hop.clone();
        let (host, port) = match &*hop {
            NextHop::Smtp { host, port, .. } => (host, port),
            NextHop::Maildir => return (self.maildir(job, body).await, false),
            NextHop::Discard => {
                let why = "4.3.5 no delivery agent for this next hop";
                return (defer_all(job, "none", why), false);
            }
        };
        // A cached connection may have been closed by the peer: one retry on a fresh one.
        for _ in 0..2 {
            let reused = self.conn.is_some();
            if self.conn.is_none() {
                match SmtpConn::connect(host, *port, &self.config).await {
                    Ok(conn) => self.conn = Some(conn),
                    Err(why) => {
                        let relay = format!("{host}[{host}]:{port}");
                        crate::log!(self.logger, "smtp", "connect to {relay}: {why}");
                        return (defer_all(job, &relay, &why), true);
                    }
                }
            }
            let conn = self.conn.as_mut().expect("connected above");
            match conn.transaction(job, &body).await {
                Ok(results) => return (results, false),
                Err(TxError::Stale) if reused => {
                    self.conn = None;
                    continue;
                }
                Err(TxError::Stale) => {
                    let relay = conn.relay.clone();
                    self.conn = None;
                    return (
                        defer_all(job, &relay, "4.4.2 lost connection before any reply"),
                        false,
                    );
                }
                Err(TxError::Broken(why)) => {
                    let relay = conn.relay.clone();
                    self.conn = None;
                    return (defer_all(job, &relay, &why), false);
                }
            }
        }
        (
            defer_all(job, "none", "4.4.2 connection failed twice"),
            false,
        )
    }
}

impl Worker {
    /// Local delivery of one job: each recipient into its Maildir.
    async fn maildir(&self, job: &Job, body: Arc<Vec<u8>>) -> Vec<(u16, Outcome)> {
        let mut results = Vec::with_capacity(job.rcpts.len());
        for &r in &job.rcpts {
            let rcpt = job.envelope.recipients[r as usize].clone();
            let outcome = match self.local.maildir_of(&rcpt).await {
                Ok(None) => Outcome::Bounced {
                    relay: "maildir".into(),
                    reason: "5.1.1 user unknown in virtual mailbox table".into(),
                },
                Err(err) => Outcome::Deferred {
                    relay: "maildir".into(),
                    reason: format!("4.3.0 temporary lookup failure: {err}"),
                },
                Ok(Some(dir)) => {
                    let (hostname, sender, body) = (
                        self.config.hostname.clone(),
                        job.envelope.sender.clone(),
                        body.clone(),
                    );
                    let shown = dir.display().to_string();
                    let written = tokio::task::spawn_blocking(move || {
                        deliver_maildir(&dir, &hostname, &sender, &rcpt, &body)
                    })
                    .await;
                    match written {
                        Ok(Ok(name)) => Outcome::Delivered {
                            relay: "maildir".into(),
                            reply: format!("delivered to maildir {shown}/new/{name}"),
                        },
                        Ok(Err(err)) => Outcome::Deferred {
                            relay: "maildir".into(),
                            reason: err.to_string(),
                        },
                        Err(err) => Outcome::Deferred {
                            relay: "maildir".into(),
                            reason: format!("4.3.0 delivery task failed: {err}"),
                        },
                    }
                }
            };
            results.push((r, outcome));
        }
        results
    }
}

/// The body from memory if cached, else read back from the spool.
pub(crate) async fn load_body(
    spool: &Spool,
    cached: &Option<Arc<Vec<u8>>>,
    body_ref: BodyRef,
) -> Result<Arc<Vec<u8>>, String> {
    if let Some(body) = cached {
        return Ok(body.clone());
    }
    let spool = spool.clone();
    match tokio::task::spawn_blocking(move || spool.read_body(body_ref)).await {
        Ok(Ok(body)) => Ok(Arc::new(body)),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Every recipient of `job` deferred with the same reason.
pub(crate) fn defer_all(job: &Job, relay: &str, reason: &str) -> Vec<(u16, Outcome)> {
    job.rcpts
        .iter()
        .map(|&r| {
            (
                r,
                Outcome::Deferred {
                    relay: relay.to_string(),
                    reason: reason.to_string(),
                },
            )
        })
        .collect()
}

/// An SMTP reply: code and text (multi-line replies joined by spaces).
struct Reply {
    code: u16,
    text: String,
}

impl Reply {
    fn class(&self) -> u16 {
        self.code / 100
    }
}

enum TxError {
    /// The connection died before the first reply of this transaction.
    Stale,
    /// The connection died or misbehaved mid-transaction.
    Broken(String),
}

struct SmtpConn {
    stream: TcpStream,
    rbuf: Vec<u8>,
    /// `host[ip]:port`, for the log.
    relay: String,
    pipelining: bool,
    size: bool,
    eightbit: bool,
    smtputf8: bool,
    timeout: Duration,
}

impl SmtpConn {
    async fn connect(host: &str, port: u16, config: &Config) -> Result<SmtpConn, String> {
        let connect_timeout = Duration::from_secs(config.delivery.connect_timeout_secs.max(1));
        let target = format!("{host}:{port}");
        let stream = match tokio::time::timeout(connect_timeout, TcpStream::connect(&target)).await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(format!("4.4.1 connect to {target}: {e}")),
            Err(_) => return Err(format!("4.4.1 connect to {target}: timed out")),
        };
        let _ = stream.set_nodelay(true);
        let ip = stream
            .peer_addr()
            .map(|a| a.ip().to_string())
            .unwrap_or_default();
        let mut conn = SmtpConn {
            stream,
            rbuf: Vec::with_capacity(1024),
            relay: format!("{host}[{ip}]:{port}"),
            pipelining: false,
            size: false,
            eightbit: false,
            smtputf8: false,
            timeout: Duration::from_secs(config.delivery.command_timeout_secs.max(1)),
        };
        let greeting = conn
            .read_reply()
            .await
            .map_err(|e| format!("4.4.2 {}: no greeting: {e}", conn.relay))?;
        if greeting.class() != 2 {
            return Err(format!(
                "4.4.0 {} refused to talk to me: {} {}",
                conn.relay, greeting.code, greeting.text
            ));
        }
        conn.send(format!("EHLO {}\r\n", config.hostname).as_bytes())
            .await
            .map_err(|e| format!("4.4.2 {}: {e}", conn.relay))?;
        let (ehlo, lines) = conn
            .read_reply_lines()
            .await
            .map_err(|e| format!("4.4.2 {}: {e}", conn.relay))?;
        if ehlo.class() == 2 {
            for line in lines.iter().skip(1) {
                let keyword = line
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_ascii_uppercase();
                match keyword.as_str() {
                    "PIPELINING" => conn.pipelining = true,
                    "SIZE" => conn.size = true,
                    "8BITMIME" => conn.eightbit = true,
                    "SMTPUTF8" => conn.smtputf8 = true,
                    _ => {}
                }
            }
        } else {
            conn.send(format!("HELO {}\r\n", config.hostname).as_bytes())
                .await
                .map_err(|e| format!("4.4.2 {}: {e}", conn.relay))?;
            let helo = conn
                .read_reply()
                .await
                .map_err(|e| format!("4.4.2 {}: {e}", conn.relay))?;
            if helo.class() != 2 {
                return Err(format!(
                    "4.4.0 {} rejected HELO: {} {}",
                    conn.relay, helo.code, helo.text
                ));
            }
        }
        Ok(conn)
    }

    async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match tokio::time::timeout(self.timeout, self.stream.write_all(bytes)).await {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "write timed out",
            )),
        }
    }

    async fn read_reply(&mut self) -> std::io::Result<Reply> {
        self.read_reply_lines().await.map(|(r, _)| r)
    }

    /// Reads one (possibly multi-line) reply; also returns each line's text.
    async fn read_reply_lines(&mut self) -> std::io::Result<(Reply, Vec<String>)> {
        let mut lines = Vec::new();
        let mut pos = 0;
        loop {
            while let Some(off) = memchr::memchr(b'\n', &self.rbuf[pos..]) {
                let end = pos + off;
                let line = &self.rbuf[pos..end];
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                if line.len() < 3 || !line[..3].iter().all(u8::is_ascii_digit) {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("malformed reply {:?}", String::from_utf8_lossy(line)),
                    ));
                }
                let code: u16 = std::str::from_utf8(&line[..3])
                    .unwrap_or("0")
                    .parse()
                    .unwrap_or(0);
                let more = line.get(3) == Some(&b'-');
                lines.push(String::from_utf8_lossy(line.get(4..).unwrap_or_default()).into_owned());
                pos = end + 1;
                if !more {
                    self.rbuf.drain(..pos);
                    let text = format!("{code} {}", lines.join(" "));
                    return Ok((Reply { code, text }, lines));
                }
            }
            if self.rbuf.len() > 64 << 10 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "reply too long",
                ));
            }
            self.rbuf.reserve(4096);
            let n = match tokio::time::timeout(self.timeout, self.stream.read_buf(&mut self.rbuf))
                .await
            {
                Ok(r) => r?,
                Err(_) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "reply timed out",
                    ))
                }
            };
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "connection closed",
                ));
            }
        }
    }

    /// Sends one message to the job's recipients; per-recipient outcomes.
    async fn transaction(
        &mut self,
        job: &Job,
        body: &[u8],
    ) -> Result<Vec<(u16, Outcome)>, TxError> {
        let env = &job.envelope;
        let mut cmds = Vec::with_capacity(64 + 64 * job.rcpts.len());
        cmds.extend_from_slice(b"MAIL FROM:<");
        cmds.extend_from_slice(env.sender.as_bytes());
        cmds.push(b'>');
        if self.size {
            cmds.extend_from_slice(format!(" SIZE={}", body.len()).as_bytes());
        }
        if env.flags & FLAG_8BITMIME != 0 && self.eightbit {
            cmds.extend_from_slice(b" BODY=8BITMIME");
        }
        if env.flags & FLAG_SMTPUTF8 != 0 && self.smtputf8 {
            cmds.extend_from_slice(b" SMTPUTF8");
        }
        cmds.extend_from_slice(b"\r\n");
        let mail_len = cmds.len();
        for &r in &job.rcpts {
            cmds.extend_from_slice(b"RCPT TO:<");
            cmds.extend_from_slice(env.recipients[r as usize].as_bytes());
            cmds.extend_from_slice(b">\r\n");
        }
        let relay = self.relay.clone();
        let broken =
            |e: std::io::Error| TxError::Broken(format!("4.4.2 lost connection with {relay}: {e}"));

        // MAIL (and, pipelined, RCPTs and DATA) in one write.
        let mail = if self.pipelining {
            cmds.extend_from_slice(b"DATA\r\n");
            self.send(&cmds).await.map_err(|_| TxError::Stale)?;
            self.read_reply().await.map_err(|_| TxError::Stale)?
        } else {
            self.send(&cmds[..mail_len])
                .await
                .map_err(|_| TxError::Stale)?;
            self.read_reply().await.map_err(|_| TxError::Stale)?
        };
        let mut rcpt_replies = Vec::with_capacity(job.rcpts.len());
        let mut offset = mail_len;
        for _ in &job.rcpts {
            if !self.pipelining {
                if mail.class() != 2 {
                    break;
                }
                let end = offset
                    + memchr::memchr(b'\n', &cmds[offset..])
                        .map(|i| i + 1)
                        .unwrap_or(0);
                self.send(&cmds[offset..end]).await.map_err(&broken)?;
                offset = end;
            }
            rcpt_replies.push(self.read_reply().await.map_err(&broken)?);
        }
        let accepted: Vec<usize> = rcpt_replies
            .iter()
            .enumerate()
            .filter(|(_, r)| r.class() == 2)
            .map(|(i, _)| i)
            .collect();
        let data_reply = if self.pipelining {
            Some(self.read_reply().await.map_err(&broken)?)
        } else if mail.class() == 2 && !accepted.is_empty() {
            self.send(b"DATA\r\n").await.map_err(&broken)?;
            Some(self.read_reply().await.map_err(&broken)?)
        } else {
            None
        };

        let mut results: Vec<(u16, Outcome)> = Vec::with_capacity(job.rcpts.len());
        let outcome = |reply: &Reply, relay: &str| match reply.class() {
            2 => Outcome::Delivered {
                relay: relay.to_string(),
                reply: reply.text.clone(),
            },
            5 => Outcome::Bounced {
                relay: relay.to_string(),
                reason: reply.text.clone(),
            },
            _ => Outcome::Deferred {
                relay: relay.to_string(),
                reason: reply.text.clone(),
            },
        };
        if mail.class() != 2 {
            for &r in &job.rcpts {
                results.push((r, outcome(&mail, &self.relay)));
            }
            self.reset().await.map_err(&broken)?;
            return Ok(results);
        }
        for (i, reply) in rcpt_replies.iter().enumerate() {
            if reply.class() != 2 {
                results.push((job.rcpts[i], outcome(reply, &self.relay)));
            }
        }
        let data_ok = data_reply.as_ref().is_some_and(|r| r.code == 354);
        if accepted.is_empty() {
            if data_ok {
                // The peer wants data it will not deliver: end it empty.
                self.send(b".\r\n").await.map_err(&broken)?;
                let _ = self.read_reply().await.map_err(&broken)?;
            }
            self.reset().await.map_err(&broken)?;
            return Ok(results);
        }
        if !data_ok {
            let reply = data_reply.unwrap_or(Reply {
                code: 451,
                text: "451 4.3.0 no reply to DATA".into(),
            });
            for &i in &accepted {
                results.push((job.rcpts[i], outcome(&reply, &self.relay)));
            }
            self.reset().await.map_err(&broken)?;
            return Ok(results);
        }
        let mut wire = Vec::with_capacity(body.len() + body.len() / 64 + 8);
        dotstuff::stuff_into(body, &mut wire);
        self.send(&wire).await.map_err(&broken)?;
        let end = self.read_reply().await.map_err(&broken)?;
        for &i in &accepted {
            results.push((job.rcpts[i], outcome(&end, &self.relay)));
        }
        if end.class() != 2 {
            self.reset().await.map_err(&broken)?;
        }
        Ok(results)
    }

    async fn reset(&mut self) -> std::io::Result<()> {
        self.send(b"RSET\r\n").await?;
        let reply = self.read_reply().await?;
        if reply.class() != 2 {
            return Err(std::io::Error::other(format!(
                "RSET refused: {}",
                reply.text
            )));
        }
        Ok(())
    }

    async fn quit(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            self.send(b"QUIT\r\n").await?;
            self.read_reply().await
        })
        .await;
    }
}
