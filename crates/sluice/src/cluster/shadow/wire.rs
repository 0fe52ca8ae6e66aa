//! The shadow protocol's frames, between a node (the *origin* of a
//! message) and the peer that keeps a copy of it (the *holder*).
//!
//! A frame is `len u32 | kind u8 | payload` (big-endian; `len` counts the
//! kind byte and the payload). The holder opens with a 32-byte challenge;
//! the origin answers with its name, its spool's incarnation, a challenge
//! of its own and an HMAC-SHA256 under the shared secret of both; the
//! holder's welcome carries its own proof of both (mutual: an impostor
//! holder cannot take copies and acknowledge them). Then the origin sends
//! copies and outcomes, the holder acknowledges each copy once it is on
//! disk.
//!
//! Hand-written: a dozen fields in one fixed order, on a link between our
//! own nodes; a serialisation crate would add more than it saves.
//!
//! Trust: nothing decoded is trusted. Every length is checked against what
//! is left of the frame (never allocated ahead), and a frame longer than
//! the reader's limit is refused before it is read.

use ring::hmac;
use sluice_spool::{Dsn, Envelope};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;

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

/// Writes the frames `rx` hands over, flushing once the queue is empty (one
/// write for a burst), until `rx` closes or a write fails.
pub async fn write_frames<W: AsyncWrite + Unpin>(write: W, mut rx: mpsc::Receiver<Vec<u8>>) {
    let mut out = BufWriter::with_capacity(256 * 1024, write);
    while let Some(frame) = rx.recv().await {
        let mut ok = out.write_all(&frame).await.is_ok();
        while let (true, Ok(more)) = (ok, rx.try_recv()) {
            ok = out.write_all(&more).await.is_ok();
        }
        if !ok || out.flush().await.is_err() {
            return;
        }
    }
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

/// Bytes of each side's challenge.
pub const NONCE: usize = 32;

/// An HMAC-SHA256 under the shared secret over a role label and
/// length-prefixed fields: no field can be shifted into another, and a
/// proof for one role never passes for the other.
pub fn mac(secret: &str, label: &[u8], fields: &[&[u8]]) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    hmac::sign(&key, &mac_input(label, fields))
        .as_ref()
        .to_vec()
}

/// Checks a [`mac`] in constant time.
pub fn mac_ok(secret: &str, label: &[u8], fields: &[&[u8]], tag: &[u8]) -> bool {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    hmac::verify(&key, &mac_input(label, fields), tag).is_ok()
}

fn mac_input(label: &[u8], fields: &[&[u8]]) -> Vec<u8> {
    let mut msg = label.to_vec();
    for f in fields {
        put_bytes(&mut msg, f);
    }
    msg
}

/// The origin's proof: both challenges, its name and incarnation.
pub fn hello_mac(secret: &str, theirs: &[u8], ours: &[u8], node: &str, inc: u64) -> Vec<u8> {
    let fields: [&[u8]; 4] = [theirs, ours, node.as_bytes(), &inc.to_be_bytes()];
    mac(secret, b"sluice-shadow-hello", &fields)
}

/// The holder's proof, in its welcome: the same fields, another label.
pub fn welcome_mac(secret: &str, theirs: &[u8], ours: &[u8], node: &str, inc: u64) -> Vec<u8> {
    let fields: [&[u8]; 4] = [theirs, ours, node.as_bytes(), &inc.to_be_bytes()];
    mac(secret, b"sluice-shadow-welcome", &fields)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub node: String,
    pub incarnation: u64,
    /// The origin's own challenge, for the holder to prove itself.
    pub nonce: Vec<u8>,
    pub mac: Vec<u8>,
}

pub fn hello(h: &Hello) -> Vec<u8> {
    frame(HELLO, |out| {
        put_bytes(out, h.node.as_bytes());
        out.extend_from_slice(&h.incarnation.to_be_bytes());
        put_bytes(out, &h.nonce);
        put_bytes(out, &h.mac);
    })
}

pub fn decode_hello(payload: &[u8]) -> Result<Hello, WireError> {
    let mut c = Cursor(payload);
    let node = c.string()?;
    let incarnation = c.u64()?;
    let nonce = c.bytes()?.to_vec();
    let mac = c.bytes()?.to_vec();
    c.end()?;
    if nonce.len() != NONCE {
        return Err(WireError::Malformed("challenge of the wrong length"));
    }
    Ok(Hello {
        node,
        incarnation,
        nonce,
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

/// Decodes a copy; the body is what is left of `payload`, moved to its
/// front, not copied out.
pub fn decode_store(mut payload: Vec<u8>) -> Result<Stored, WireError> {
    let mut c = Cursor(&payload);
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
    let header = payload.len() - c.0.len();
    payload.drain(..header);
    Ok(Stored {
        seq,
        envelope: env,
        body: payload,
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
    /// Mark bits recorded for it (`message::flags::MARK_*`; 0: none).
    pub marks: u32,
}

pub fn outcomes(list: &[Outcome]) -> Vec<u8> {
    frame(OUTCOMES, |out| {
        out.extend_from_slice(&(list.len() as u32).to_be_bytes());
        for o in list {
            out.extend_from_slice(&o.id.to_be_bytes());
            out.push(o.complete as u8);
            out.extend_from_slice(&o.marks.to_be_bytes());
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
        let marks = c.u32()?;
        let k = c.u16()?;
        let mut recipients = Vec::new();
        for _ in 0..k {
            recipients.push(c.u16()?);
        }
        list.push(Outcome {
            id,
            recipients,
            complete,
            marks,
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
            orig_rcpt: Vec::new(),
            login: String::new(),
            filter: String::new(),
            xforward: String::new(),
        };
        let f = store(9, &env, b"Subject: hi\r\n\r\nbody\r\n");
        assert_eq!(
            u32::from_be_bytes(f[..4].try_into().unwrap()) as usize,
            f.len() - 4
        );
        let back = decode_store(payload(&f).to_vec()).unwrap();
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
        assert!(matches!(decode_store(p), Err(WireError::Malformed(_))));
        let list = vec![Outcome {
            id: 3,
            recipients: vec![0, 2],
            complete: true,
            marks: 4,
        }];
        let f = outcomes(&list);
        assert_eq!(decode_outcomes(payload(&f)).unwrap(), list);
        assert!(decode_outcomes(&payload(&f)[..payload(&f).len() - 1]).is_err());
    }

    #[test]
    fn a_proof_holds_only_for_its_secret_challenges_name_and_role() {
        let secret = "0123456789abcdef";
        let (theirs, ours) = ([7u8; NONCE], [9u8; NONCE]);
        let tag = hello_mac(secret, &theirs, &ours, "n1", 42);
        let fields: [&[u8]; 4] = [&theirs, &ours, b"n1", &42u64.to_be_bytes()];
        assert!(mac_ok(secret, b"sluice-shadow-hello", &fields, &tag));
        assert!(!mac_ok(
            "0123456789abcdeX",
            b"sluice-shadow-hello",
            &fields,
            &tag
        ));
        // The holder's proof is not the origin's: a reflected hello fails.
        assert_ne!(tag, welcome_mac(secret, &theirs, &ours, "n1", 42));
        assert_ne!(tag, hello_mac(secret, &[8u8; NONCE], &ours, "n1", 42));
        assert_ne!(tag, hello_mac(secret, &theirs, &ours, "n2", 42));
        // Bytes moved from the challenge into the name change the proof.
        let shifted: [&[u8]; 4] = [&theirs[..31], &ours, b"\x07n1", &42u64.to_be_bytes()];
        assert!(!mac_ok(secret, b"sluice-shadow-hello", &shifted, &tag));
        let h = Hello {
            node: "n1".into(),
            incarnation: 42,
            nonce: ours.to_vec(),
            mac: tag,
        };
        let f = hello(&h);
        assert_eq!(decode_hello(payload(&f)).unwrap(), h);
        let short = Hello {
            nonce: vec![1; 31],
            ..h
        };
        assert!(decode_hello(payload(&hello(&short))).is_err());
    }
}
