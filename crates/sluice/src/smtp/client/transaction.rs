//! One outbound mail transaction over an open connection: MAIL, RCPT and
//! DATA (pipelined when the peer offers PIPELINING, else in lock step),
//! the body, and one outcome per recipient.

use sluice_proto::dotstuff;

use super::conn::{Reply, SmtpConn, TxError};
use crate::message::flags;
use crate::message::status::Outcome;
use crate::queue::Job;

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
        let env = &job.envelope;
        let mut cmds = Vec::with_capacity(64 + 64 * job.rcpts.len());
        cmds.extend_from_slice(b"MAIL FROM:<");
        cmds.extend_from_slice(env.sender.as_bytes());
        cmds.push(b'>');
        if self.size {
            cmds.extend_from_slice(format!(" SIZE={}", body.len()).as_bytes());
        }
        if env.flags & flags::EIGHTBITMIME != 0 && self.eightbit {
            cmds.extend_from_slice(b" BODY=8BITMIME");
        }
        if env.flags & flags::SMTPUTF8 != 0 && self.smtputf8 {
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
            self.reset_known().await;
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
                if self.read_reply().await.is_err() {
                    self.usable = false;
                    return Ok(results);
                }
            }
            self.reset_known().await;
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
            self.reset_known().await;
            return Ok(results);
        }
        let mut wire = Vec::with_capacity(body.len() + body.len() / 64 + 8);
        dotstuff::stuff_into(body, &mut wire);
        self.send_body(&wire).await.map_err(&broken)?;
        let end = self
            .read_reply_within(self.data_done_timeout)
            .await
            .map_err(&broken)?;
        for &i in &accepted {
            results.push((job.rcpts[i], outcome(&end, &self.relay)));
        }
        if end.class() != 2 {
            self.reset_known().await;
        }
        Ok(results)
    }
}
