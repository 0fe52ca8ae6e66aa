//! One outbound mail transaction over an open connection: the envelope
//! (MAIL, RCPT, DATA — pipelined when the peer offers PIPELINING, else in
//! lock step), the body, and one outcome per recipient.
//!
//! Invariant: once a reply for a recipient is known it stands. A failure
//! later in the transaction (the DATA reply, the body, the final dot, RSET)
//! defers only the recipients still open and retires the connection; it
//! never turns a known refusal into a deferral.

use sluice_proto::dotstuff;
use sluice_proto::dsn::notify_value;

use super::conn::{SmtpConn, TxError};
use crate::log::io_text;
use crate::message::flags;
use crate::message::reply::{Enhanced, Relay, Reply};
use crate::message::status::Outcome;
use crate::queue::Job;

/// The replies to the envelope of one transaction.
struct EnvelopeReplies {
    mail: Reply,
    /// One per job recipient, in order (fewer if MAIL was refused).
    rcpts: Vec<Reply>,
    /// Indices (into the job's recipients) the peer accepted.
    accepted: Vec<usize>,
    /// The DATA reply, if DATA was sent; an error if it never came.
    data: Option<std::io::Result<Reply>>,
}

impl SmtpConn {
    /// RSET after a transaction whose results are already known: if it
    /// fails, those results stand and only the connection is given up.
    async fn reset_known(&mut self) {
        if self.reset().await.is_err() {
            self.usable = false;
        }
    }

    /// Sends one message to the job's recipients; per-recipient outcomes.
    pub async fn transaction(
        &mut self,
        job: &Job,
        body: &[u8],
    ) -> Result<Vec<(u16, Outcome)>, TxError> {
        let env = self.envelope(job, body.len()).await?;
        let (relay, shown) = (self.peer.clone(), self.relay.clone());
        let lost = |why: &dyn std::fmt::Display| {
            let text = format!("lost connection with {shown}: {why}");
            Reply::smtp(451, Enhanced::new(4, 4, 2), text)
        };
        let mut results: Vec<(u16, Outcome)> = Vec::with_capacity(job.rcpts.len());
        if env.mail.class() != 2 {
            for &r in &job.rcpts {
                results.push((r, outcome(&env.mail, &relay)));
            }
            self.reset_known().await;
            return Ok(results);
        }
        for (i, reply) in env.rcpts.iter().enumerate() {
            if reply.class() != 2 {
                results.push((job.rcpts[i], outcome(reply, &relay)));
            }
        }
        let open = |results: &mut Vec<(u16, Outcome)>, reply: &Reply| {
            for &i in &env.accepted {
                results.push((job.rcpts[i], outcome(reply, &relay)));
            }
        };
        let data = match env.data {
            Some(Ok(reply)) => reply,
            Some(Err(e)) => {
                self.usable = false;
                open(&mut results, &lost(&e));
                return Ok(results);
            }
            None => {
                self.reset_known().await;
                return Ok(results);
            }
        };
        if env.accepted.is_empty() {
            // Pipelined DATA to no recipient: end it empty if it was taken.
            let ended = data.code != 354 || self.send_then_read(b".\r\n").await.is_ok();
            if ended {
                self.reset_known().await;
            } else {
                self.usable = false;
            }
            return Ok(results);
        }
        if data.code != 354 {
            if data.class() == 4 || data.class() == 5 {
                open(&mut results, &data);
                self.reset_known().await;
            } else {
                // A success (or anything else) that is not "354 go ahead"
                // delivered nothing: never record it as delivered.
                self.usable = false;
                let why = format!("unexpected reply to DATA from {shown}: {data}");
                open(&mut results, &Reply::smtp(451, Enhanced::new(4, 5, 0), why));
            }
            return Ok(results);
        }
        if self.lmtp {
            self.lmtp_end(job, body, &env.accepted, &mut results).await;
            return Ok(results);
        }
        match self.body(body).await {
            Ok(end) => {
                open(&mut results, &end);
                if end.class() != 2 {
                    self.reset_known().await;
                }
            }
            Err(e) => {
                // The message may or may not have arrived: retry (at worst
                // a duplicate, never a loss).
                self.usable = false;
                open(&mut results, &lost(&e));
            }
        }
        Ok(results)
    }

    /// MAIL, RCPTs and DATA, with their replies.
    async fn envelope(&mut self, job: &Job, size: usize) -> Result<EnvelopeReplies, TxError> {
        self.xforward(job).await?;
        let (cmds, mail_len) = self.envelope_commands(job, size);
        let relay = self.relay.clone();
        let broken = |e: std::io::Error| {
            let text = format!("lost connection with {relay}: {}", io_text(&e));
            TxError::Broken(Reply::own(451, Enhanced::new(4, 4, 2), text))
        };
        // MAIL (and, pipelined, RCPTs and DATA) in one write.
        let first = if self.pipelining {
            &cmds[..]
        } else {
            &cmds[..mail_len]
        };
        self.send(first).await.map_err(|_| TxError::Stale)?;
        let mail = self.read_reply().await.map_err(|_| TxError::Stale)?;
        let mut rcpts = Vec::with_capacity(job.rcpts.len());
        let mut offset = mail_len;
        for _ in &job.rcpts {
            if !self.pipelining {
                if mail.class() != 2 {
                    break;
                }
                let end = offset + memchr::memchr(b'\n', &cmds[offset..]).map_or(0, |i| i + 1);
                self.send(&cmds[offset..end]).await.map_err(&broken)?;
                offset = end;
            }
            rcpts.push(self.read_reply().await.map_err(&broken)?);
        }
        let accepted: Vec<usize> = (0..rcpts.len())
            .filter(|&i| rcpts[i].class() == 2)
            .collect();
        let data = if self.pipelining {
            Some(self.read_reply().await)
        } else if mail.class() == 2 && !accepted.is_empty() {
            Some(self.send_then_read(b"DATA\r\n").await)
        } else {
            None
        };
        Ok(EnvelopeReplies {
            mail,
            rcpts,
            accepted,
            data,
        })
    }

    /// `MAIL FROM` with its parameters and every `RCPT TO` (and, when
    /// pipelining, `DATA`); returns the bytes and where MAIL ends.
    /// To an after-queue filter that offers it: who the client was
    /// (Postfix's `smtp_send_xforward_command = yes`), before MAIL. The
    /// attributes are our own text (`intake/xforward.rs`); a refusal is
    /// not the message's fault, and the transaction goes on without them.
    async fn xforward(&mut self, job: &Job) -> Result<(), TxError> {
        let attrs = &job.envelope.xforward;
        if !self.xforward || attrs.is_empty() || job.envelope.filter.is_empty() {
            return Ok(());
        }
        let line = format!("XFORWARD {attrs}\r\n");
        self.send_then_read(line.as_bytes())
            .await
            .map_err(|_| TxError::Stale)?;
        Ok(())
    }

    fn envelope_commands<'a>(&self, job: &'a Job, size: usize) -> (Vec<u8>, usize) {
        let env = &job.envelope;
        let mut cmds = Vec::with_capacity(64 + 64 * job.rcpts.len());
        // (fit.rs has refused whatever cannot go without SMTPUTF8.)
        let wire = |a: &'a str| super::fit::wire_address(a, self.smtputf8).unwrap_or(a.into());
        cmds.extend_from_slice(b"MAIL FROM:<");
        cmds.extend_from_slice(wire(&env.sender).as_bytes());
        cmds.push(b'>');
        if self.size {
            cmds.extend_from_slice(format!(" SIZE={size}").as_bytes());
        }
        if env.flags & flags::EIGHTBITMIME != 0 && self.eightbit {
            cmds.extend_from_slice(b" BODY=8BITMIME");
        }
        if env.flags & flags::SMTPUTF8 != 0 && self.smtputf8 {
            cmds.extend_from_slice(b" SMTPUTF8");
        }
        // DSN requests go along to a hop that offers DSN (RFC 3461 §5.2).
        let dsn = env.dsn.as_deref().filter(|_| self.dsn);
        if let Some(d) = dsn {
            match d.ret {
                1 => cmds.extend_from_slice(b" RET=FULL"),
                2 => cmds.extend_from_slice(b" RET=HDRS"),
                _ => {}
            }
            if !d.envid.is_empty() {
                cmds.extend_from_slice(b" ENVID=");
                cmds.extend_from_slice(d.envid.as_bytes());
            }
        }
        cmds.extend_from_slice(b"\r\n");
        let mail_len = cmds.len();
        for &r in &job.rcpts {
            cmds.extend_from_slice(b"RCPT TO:<");
            cmds.extend_from_slice(wire(&env.recipients[r as usize]).as_bytes());
            cmds.push(b'>');
            if let Some(d) = dsn {
                let r = r as usize;
                if let Some(v) = d.notify.get(r).and_then(|&n| notify_value(n)) {
                    cmds.extend_from_slice(b" NOTIFY=");
                    cmds.extend_from_slice(v.as_bytes());
                }
                if let Some(o) = d.orcpt.get(r).filter(|o| !o.is_empty()) {
                    cmds.extend_from_slice(b" ORCPT=");
                    cmds.extend_from_slice(o.as_bytes());
                }
            }
            cmds.extend_from_slice(b"\r\n");
        }
        if self.pipelining {
            cmds.extend_from_slice(b"DATA\r\n");
        }
        (cmds, mail_len)
    }

    /// The dot-stuffed body and the final dot; the reply to it.
    async fn body(&mut self, body: &[u8]) -> std::io::Result<Reply> {
        self.send_stuffed(body).await?;
        self.read_reply_within(self.data_done_timeout).await
    }

    async fn send_stuffed(&mut self, body: &[u8]) -> std::io::Result<()> {
        let mut wire = Vec::with_capacity(body.len() + body.len() / 64 + 8);
        dotstuff::stuff_into(body, &mut wire);
        self.send_body(&wire).await
    }

    /// LMTP (RFC 2033 §4.2): the body, then one reply per accepted
    /// recipient, in RCPT order, each that recipient's outcome. If the
    /// connection breaks, the replies already read stand and only the
    /// recipients still waiting are deferred.
    async fn lmtp_end(
        &mut self,
        job: &Job,
        body: &[u8],
        accepted: &[usize],
        results: &mut Vec<(u16, Outcome)>,
    ) {
        let (relay, shown) = (self.peer.clone(), self.relay.clone());
        let mut broken = self.send_stuffed(body).await.err().map(|e| io_text(&e));
        for &i in accepted {
            if broken.is_none() {
                match self.read_reply_within(self.data_done_timeout).await {
                    Ok(reply) => {
                        results.push((job.rcpts[i], outcome(&reply, &relay)));
                        continue;
                    }
                    Err(e) => broken = Some(io_text(&e)),
                }
            }
            let why = broken.as_deref().unwrap_or_default();
            let text = format!("lost connection with {shown}: {why}");
            let lost = Reply::smtp(451, Enhanced::new(4, 4, 2), text);
            results.push((job.rcpts[i], outcome(&lost, &relay)));
        }
        if broken.is_some() {
            self.usable = false;
        }
    }

    async fn send_then_read(&mut self, line: &[u8]) -> std::io::Result<Reply> {
        self.send(line).await?;
        self.read_reply().await
    }
}

/// A recipient's outcome from the reply that settled it.
fn outcome(reply: &Reply, relay: &Relay) -> Outcome {
    let (relay, reply) = (relay.clone(), reply.clone());
    match reply.class() {
        2 => Outcome::Delivered {
            relay,
            reply,
            notified: false,
        },
        5 => Outcome::Bounced { relay, reply },
        _ => Outcome::Deferred { relay, reply },
    }
}
