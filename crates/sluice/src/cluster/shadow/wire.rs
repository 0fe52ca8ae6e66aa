//! The shadow protocol's frames, between a node (the *origin* of a
//! message) and the peer that keeps a copy of it (the *holder*).
//!
//! A frame is `len u32 | kind u8 | payload` (big-endian; `len` counts the
//! kind byte and the payload). The holder opens with a challenge; the
//! origin answers with its name, its spool's incarnation and an
//! HMAC-SHA256 of the challenge under the shared secret; then the origin
//! sends copies and outcomes, the holder acknowledges each copy once it
//! is on disk.
//!
//! Hand-written: a dozen fields in one fixed order, on a link between our
//! own nodes; a serialisation crate would add more than it saves.
//!
//! Trust: nothing decoded is trusted. Every length is checked against what
//! is left of the frame (never allocated ahead), and a frame longer than
//! the reader's limit is refused before it is read.

use ring::hmac;
use sluice_spool::{Dsn, Envelope};
use tokio::io::{AsyncRead, AsyncReadExt};

pub const CHALLENGE: u8 = 0;
pub const HELLO: u8 = 1;
pub const STORE: u8 = 2;
pub const ACK: u8 = 3;
pub const OUTCOMES: u8 = 4;
pub const WELCOME: u8 = 5;
pub const REFUSED: u8 = 6;

/// Hello frames and the like are small; only a STORE may be large.
pub const SMALL_FRAME: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("frame of {0} bytes is over the limit of {1}")]
    TooLong(usize, usize),
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
}

/// Reads one frame: its kind and payload.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    limit: usize,
) -> Result<(u8, Vec<u8>), WireError> {
    let len = r.read_u32().await? as usize;
    if len == 0 {
        return Err(WireError::Malformed("empty frame"));
    }
    if len > limit {
        return Err(WireError::TooLong(len, limit));
    }
    let kind = r.read_u8().await?;
    let mut payload = vec![0; len - 1];
    r.read_exact(&mut payload).await?;
    Ok((kind, payload))
}

/// A frame of `kind` around what `fill` writes.
pub fn frame(kind: u8, fill: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = vec![0, 0, 0, 0, kind];
    fill(&mut out);
    let len = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&len.to_be_bytes());
    out
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
}

/// The proof an origin gives: HMAC-SHA256 over the challenge, its name and
/// incarnation.
pub fn proof(secret: &str, nonce: &[u8], node: &str, incarnation: u64) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    let mut ctx = hmac::Context::with_key(&key);
    ctx.update(nonce);
    ctx.update(node.as_bytes());
    ctx.update(&incarnation.to_be_bytes());
    ctx.sign().as_ref().to_vec()
}

/// Checks a proof in constant time.
pub fn proof_ok(secret: &str, nonce: &[u8], hello: &Hello) -> bool {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    let mut msg = nonce.to_vec();
    msg.extend_from_slice(hello.node.as_bytes());
    msg.extend_from_slice(&hello.incarnation.to_be_bytes());
    hmac::verify(&key, &msg, &hello.mac).is_ok()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub node: String,
    pub incarnation: u64,
    pub mac: Vec<u8>,
}

pub fn hello(h: &Hello) -> Vec<u8> {
    frame(HELLO, |out| {
        put_bytes(out, h.node.as_bytes());
        out.extend_from_slice(&h.incarnation.to_be_bytes());
        put_bytes(out, &h.mac);
    })
}

pub fn decode_hello(payload: &[u8]) -> Result<Hello, WireError> {
    let mut c = Cursor(payload);
    let node = c.string()?;
    let incarnation = c.u64()?;
    let mac = c.bytes()?.to_vec();
    c.end()?;
    Ok(Hello {
        node,
        incarnation,
        mac,
    })
}

/// A copy of a message: its envelope (the origin's queue ID) and body.
pub fn store(seq: u64, env: &Envelope, body: &[u8]) -> Vec<u8> {
    frame(STORE, |out| {
        out.reserve(body.len() + 256);
        out.extend_from_slice(&seq.to_be_bytes());
        out.extend_from_slice(&env.id.to_be_bytes());
        out.extend_from_slice(&env.arrival.to_be_bytes());
        out.extend_from_slice(&env.flags.to_be_bytes());
        put_bytes(out, env.sender.as_bytes());
        out.extend_from_slice(&(env.recipients.len() as u32).to_be_bytes());
        for r in &env.recipients {
            put_bytes(out, r.as_bytes());
        }
        match &env.dsn {
            None => out.push(0),
            Some(dsn) => {
                out.push(1);
                out.push(dsn.ret);
                put_bytes(out, dsn.envid.as_bytes());
                put_bytes(out, &dsn.notify);
                out.extend_from_slice(&(dsn.orcpt.len() as u32).to_be_bytes());
                for o in &dsn.orcpt {
                    put_bytes(out, o.as_bytes());
                }
            }
        }
        out.extend_from_slice(body);
    })
}

pub struct Stored {
    pub seq: u64,
    pub envelope: Envelope,
    pub body: Vec<u8>,
}

pub fn decode_store(payload: &[u8]) -> Result<Stored, WireError> {
    let mut c = Cursor(payload);
    let seq = c.u64()?;
    let mut env = Envelope {
        id: c.u64()?,
        arrival: c.u64()?,
        flags: c.u32()?,
        sender: c.string()?,
        ..Envelope::default()
    };
    let n = c.u32()?;
    for _ in 0..n {
        env.recipients.push(c.string()?);
    }
    if c.u8()? == 1 {
        let mut dsn = Dsn {
            ret: c.u8()?,
            envid: c.string()?,
            notify: c.bytes()?.to_vec(),
            orcpt: Vec::new(),
        };
        let n = c.u32()?;
        for _ in 0..n {
            dsn.orcpt.push(c.string()?);
        }
        env.dsn = Some(Box::new(dsn));
    }
    Ok(Stored {
        seq,
        envelope: env,
        body: c.0.to_vec(),
    })
}

pub fn ack(seq: u64, ok: bool) -> Vec<u8> {
    frame(ACK, |out| {
        out.extend_from_slice(&seq.to_be_bytes());
        out.push(ok as u8);
    })
}

pub fn decode_ack(payload: &[u8]) -> Result<(u64, bool), WireError> {
    let mut c = Cursor(payload);
    let seq = c.u64()?;
    let ok = c.u8()? == 1;
    c.end()?;
    Ok((seq, ok))
}

/// What the origin learnt of a message: these recipients are final, or
/// (complete) the whole message is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub id: u64,
    pub recipients: Vec<u16>,
    pub complete: bool,
}

pub fn outcomes(list: &[Outcome]) -> Vec<u8> {
    frame(OUTCOMES, |out| {
        out.extend_from_slice(&(list.len() as u32).to_be_bytes());
        for o in list {
            out.extend_from_slice(&o.id.to_be_bytes());
            out.push(o.complete as u8);
            out.extend_from_slice(&(o.recipients.len() as u16).to_be_bytes());
            for r in &o.recipients {
                out.extend_from_slice(&r.to_be_bytes());
            }
        }
    })
}

pub fn decode_outcomes(payload: &[u8]) -> Result<Vec<Outcome>, WireError> {
    let mut c = Cursor(payload);
    let n = c.u32()?;
    let mut list = Vec::new();
    for _ in 0..n {
        let id = c.u64()?;
        let complete = c.u8()? == 1;
        let k = c.u16()?;
        let mut recipients = Vec::new();
        for _ in 0..k {
            recipients.push(c.u16()?);
        }
        list.push(Outcome {
            id,
            recipients,
            complete,
        });
    }
    c.end()?;
    Ok(list)
}

/// Reads fields off a payload, checking every length against what is left.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError::Malformed("field runs past the frame"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into().expect("2")))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn bytes(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn string(&mut self) -> Result<String, WireError> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| WireError::Malformed("not UTF-8"))
    }
    fn end(&self) -> Result<(), WireError> {
        match self.0.is_empty() {
            true => Ok(()),
            false => Err(WireError::Malformed("bytes after the last field")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(f: &[u8]) -> &[u8] {
        &f[5..]
    }

    #[test]
    fn a_copy_comes_back_as_it_went() {
        let env = Envelope {
            id: 7,
            arrival: 1_700_000_000_000,
            sender: "a@example.org".into(),
            recipients: vec!["b@example.net".into(), "c@example.net".into()],
            flags: 5,
            dsn: Some(Box::new(Dsn {
                ret: 1,
                envid: "x".into(),
                notify: vec![1, 2],
                orcpt: vec!["rfc822;b@example.net".into(), String::new()],
            })),
        };
        let f = store(9, &env, b"Subject: hi\r\n\r\nbody\r\n");
        assert_eq!(
            u32::from_be_bytes(f[..4].try_into().unwrap()) as usize,
            f.len() - 4
        );
        let back = decode_store(payload(&f)).unwrap();
        assert_eq!((back.seq, &back.envelope), (9, &env));
        assert_eq!(back.body, b"Subject: hi\r\n\r\nbody\r\n");
    }

    #[test]
    fn lengths_past_the_frame_are_refused_not_allocated() {
        let env = Envelope {
            recipients: vec!["b@example.net".into()],
            ..Envelope::default()
        };
        let f = store(1, &env, b"");
        let mut p = payload(&f).to_vec();
        // The sender's length (after seq, id, arrival, flags) made huge.
        p[28..32].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(decode_store(&p), Err(WireError::Malformed(_))));
        let list = vec![Outcome {
            id: 3,
            recipients: vec![0, 2],
            complete: true,
        }];
        let f = outcomes(&list);
        assert_eq!(decode_outcomes(payload(&f)).unwrap(), list);
        assert!(decode_outcomes(&payload(&f)[..payload(&f).len() - 1]).is_err());
    }

    #[test]
    fn a_proof_holds_only_for_its_secret_challenge_and_name() {
        let secret = "0123456789abcdef";
        let nonce = [7u8; 32];
        let mut h = Hello {
            node: "n1".into(),
            incarnation: 42,
            mac: proof(secret, &nonce, "n1", 42),
        };
        assert!(proof_ok(secret, &nonce, &h));
        assert!(!proof_ok("0123456789abcdeX", &nonce, &h));
        assert!(!proof_ok(secret, &[8u8; 32], &h));
        h.node = "n2".into();
        assert!(!proof_ok(secret, &nonce, &h));
        let f = hello(&h);
        assert_eq!(decode_hello(payload(&f)).unwrap(), h);
    }
}
