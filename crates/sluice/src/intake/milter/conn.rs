//! One connection to a filter, for one message: the option negotiation,
//! a step and its answer, the body in pieces, the changes at the end.
//!
//! Trust: the filter's bytes are parsed by `proto.rs`; every read has a
//! deadline; the changes one message may collect are bounded
//! ([`MAX_CHANGES`], [`MAX_CHANGE_BYTES`]). Invariant: any failure is a
//! [`MilterError`], for which the caller applies the default action.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufStream};

use super::proto::{self, action, step, Command, ProtoError, Response};
use super::Verdict;
use crate::config::services::ServiceAddr;
use crate::message::reply::{Enhanced, Reply};
use crate::smtp::wire::Wire;

/// Changes one filter may ask for on one message at most ...
const MAX_CHANGES: usize = 10_000;
/// ... and their bytes (a replaced body included).
const MAX_CHANGE_BYTES: usize = 64 << 20;

/// Body pieces at most this long (the protocol's limit).
const BODY_CHUNK: usize = 65_535;

/// Why talking to a filter failed.
#[derive(Debug, thiserror::Error)]
pub enum MilterError {
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol: {0}")]
    Proto(#[from] ProtoError),
    #[error("unexpected answer {0:?}")]
    Unexpected(Box<Response>),
    #[error("the filter shut the connection down")]
    Shutdown,
    #[error("more changes than a message may have")]
    TooManyChanges,
}

pub(super) struct Conn {
    io: BufStream<Wire>,
    /// The steps the filter asked to skip or not to answer (SMFIP_*).
    pub steps: u32,
    command: Duration,
    out: Vec<u8>,
}

impl Conn {
    /// Connects and negotiates (version 6, every action allowed).
    pub async fn open(
        service: &ServiceAddr,
        connect: Duration,
        command: Duration,
    ) -> Result<Conn, MilterError> {
        let wire = match tokio::time::timeout(connect, crate::smtp::wire::connect(service)).await {
            Ok(Ok(w)) => w,
            Ok(Err(e)) => return Err(MilterError::Connect(e)),
            Err(_) => return Err(MilterError::Timeout(connect)),
        };
        let mut c = Conn {
            io: BufStream::new(wire),
            steps: 0,
            command,
            out: Vec::with_capacity(4096),
        };
        c.send(Command::Negotiate {
            version: proto::VERSION,
            actions: action::ALL,
            steps: step::ALL,
        })
        .await?;
        match c.read(command).await? {
            Response::Negotiate { steps, .. } => c.steps = steps & step::ALL,
            other => return Err(MilterError::Unexpected(Box::new(other))),
        }
        Ok(c)
    }

    async fn send(&mut self, cmd: Command<'_>) -> Result<(), MilterError> {
        self.out.clear();
        cmd.encode(&mut self.out);
        self.io.write_all(&self.out).await?;
        self.io.flush().await?;
        Ok(())
    }

    /// The next answer other than "in progress", within `within` of the
    /// last thing heard.
    async fn read(&mut self, within: Duration) -> Result<Response, MilterError> {
        loop {
            let frame = tokio::time::timeout(within, async {
                let mut head = [0u8; 4];
                self.io.read_exact(&mut head).await?;
                let mut frame = vec![0u8; proto::frame_len(head)?];
                self.io.read_exact(&mut frame).await?;
                Ok::<_, MilterError>(frame)
            })
            .await
            .map_err(|_| MilterError::Timeout(within))??;
            match proto::decode(&frame)? {
                Response::Progress => continue,
                Response::Shutdown => return Err(MilterError::Shutdown),
                r => return Ok(r),
            }
        }
    }

    /// Sends the macros for a stage (a filter keeps what it wants).
    pub async fn macros(&mut self, stage: u8, pairs: &[(&str, String)]) -> Result<(), MilterError> {
        self.send(Command::Macros { stage, pairs }).await
    }

    /// One step: skipped if the filter asked (`no`), unanswered if it
    /// asked (`no_reply`); Some(verdict) if its answer ends the filter's
    /// part in this message.
    pub async fn stage(
        &mut self,
        cmd: Command<'_>,
        no: u32,
        no_reply: u32,
    ) -> Result<Option<Verdict>, MilterError> {
        if self.steps & no != 0 {
            return Ok(None);
        }
        self.send(cmd).await?;
        if self.steps & no_reply != 0 {
            return Ok(None);
        }
        let answer = self.read(self.command).await?;
        verdict(answer)
    }

    /// The body in pieces (until the filter says it has seen enough).
    pub async fn body(
        &mut self,
        body: &[u8],
        within: Duration,
    ) -> Result<Option<Verdict>, MilterError> {
        if self.steps & step::NO_BODY != 0 {
            return Ok(None);
        }
        for chunk in body.chunks(BODY_CHUNK) {
            self.send(Command::Body(chunk)).await?;
            if self.steps & step::NR_BODY != 0 {
                continue;
            }
            match self.read(within).await? {
                Response::Skip => break,
                answer => {
                    if let Some(v) = verdict(answer)? {
                        return Ok(Some(v));
                    }
                }
            }
        }
        Ok(None)
    }

    /// The end of the message: the filter's changes, then its verdict.
    pub async fn end_of_message(
        &mut self,
        within: Duration,
    ) -> Result<(Verdict, Vec<Response>), MilterError> {
        self.send(Command::EndOfMessage).await?;
        let (mut changes, mut bytes) = (Vec::new(), 0usize);
        loop {
            let answer = self.read(within).await?;
            let size = match &answer {
                Response::AddHeader { name, value }
                | Response::InsertHeader { name, value, .. }
                | Response::ChangeHeader { name, value, .. } => name.len() + value.len(),
                Response::ReplaceBody(b) => b.len(),
                Response::AddRcpt(r) | Response::DeleteRcpt(r) => r.len(),
                Response::AddRcptPar(a, b) | Response::ChangeFrom(a, b) => a.len() + b.len(),
                Response::Quarantine(_) => 0,
                _ => return Ok((verdict(answer)?.unwrap_or(Verdict::Pass), changes)),
            };
            bytes += size;
            if changes.len() >= MAX_CHANGES || bytes > MAX_CHANGE_BYTES {
                return Err(MilterError::TooManyChanges);
            }
            changes.push(answer);
        }
    }

    /// Says goodbye (errors do not matter any more).
    pub async fn quit(&mut self) {
        let _ = self.send(Command::Quit).await;
    }
}

/// What an answer to a step means: None goes on.
fn verdict(answer: Response) -> Result<Option<Verdict>, MilterError> {
    Ok(match answer {
        Response::Continue => None,
        Response::Accept => Some(Verdict::Pass),
        Response::Discard => Some(Verdict::Discard),
        Response::Reject => Some(Verdict::Refuse(rejected())),
        Response::Tempfail => Some(Verdict::Refuse(tempfail())),
        Response::Reply(text) => Some(Verdict::Refuse(reply(&text))),
        other => return Err(MilterError::Unexpected(Box::new(other))),
    })
}

/// `550 5.7.1 Command rejected`: a filter's (or the default) refusal.
pub(super) fn rejected() -> Reply {
    Reply::smtp(550, Enhanced::new(5, 7, 1), "Command rejected")
}

/// `451 4.7.1 Service unavailable - try again later`.
pub(super) fn tempfail() -> Reply {
    let text = "Service unavailable - try again later";
    Reply::smtp(451, Enhanced::new(4, 7, 1), text)
}

/// A filter's own reply, if it is one (a 4xx or 5xx code, printable
/// text, one line); else the generic rejection of its class. The filter's
/// text is parsed once, here, where it comes in.
fn reply(text: &str) -> Reply {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(400)
        .collect();
    let coded = clean.len() > 4 && clean.as_bytes()[..3].iter().all(u8::is_ascii_digit);
    match clean.as_bytes().first() {
        Some(b'4') if coded => Reply::parse(&clean, 451),
        Some(b'5') if coded => Reply::parse(&clean, 550),
        Some(b'4') => tempfail(),
        _ => rejected(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_reply_is_one_clean_line_or_the_generic_one() {
        let text = |t: &str| reply(t).to_string();
        assert_eq!(text("554 5.7.1 Gtube pattern"), "554 5.7.1 Gtube pattern");
        assert_eq!(text("450 4.7.1 later\r\n250 ok"), "450 4.7.1 later  250 ok");
        assert_eq!(text("250 2.0.0 fine"), "550 5.7.1 Command rejected");
        assert_eq!(text("4"), "451 4.7.1 Service unavailable - try again later");
        // Typed where it comes in: the code decides, the status is kept.
        let r = reply("450 4.7.1 later");
        assert!(r.is_temporary() && r.status == Enhanced::new(4, 7, 1));
        assert_eq!(reply("4501 odd").to_string(), "4501 odd");
        assert!(reply("4501 odd").is_temporary());
    }
}
