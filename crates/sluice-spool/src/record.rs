//! Record encoding. Every record is self-checking (length + CRC32), so a
//! torn or corrupt record is recognised and never mistaken for mail.

pub(crate) const MAGIC: u32 = 0x5343_4C53; // "SLCS"
pub(crate) const HEADER_LEN: usize = 13;
pub(crate) const KIND_MESSAGE: u8 = 1;
pub(crate) const KIND_OUTCOME: u8 = 2;

/// The envelope of a spooled message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// Queue ID (shown in hex in logs and replies).
    pub id: u64,
    /// Arrival time, seconds since the Unix epoch.
    pub arrival: u64,
    /// Reverse path; empty for the null sender (bounces).
    pub sender: String,
    pub recipients: Vec<String>,
    /// Free bits for the daemon (body type, SMTPUTF8, "is a bounce", …).
    pub flags: u32,
}

/// Appends a message record to `out`; returns the body's offset within the
/// record, so the caller can compute where the body lands in the segment.
pub(crate) fn encode_message(env: &Envelope, body: &[u8], out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER_LEN]);
    out.extend_from_slice(&env.id.to_le_bytes());
    out.extend_from_slice(&env.arrival.to_le_bytes());
    out.extend_from_slice(&env.flags.to_le_bytes());
    put_str(out, &env.sender);
    out.extend_from_slice(&(env.recipients.len() as u32).to_le_bytes());
    for rcpt in &env.recipients {
        put_str(out, rcpt);
    }
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    let body_at = out.len() - start;
    out.extend_from_slice(body);
    finish(out, start, KIND_MESSAGE);
    body_at
}

pub(crate) fn encode_outcome(id: u64, recipients: &[u16], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER_LEN]);
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&(recipients.len() as u32).to_le_bytes());
    for r in recipients {
        out.extend_from_slice(&r.to_le_bytes());
    }
    finish(out, start, KIND_OUTCOME);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Addresses are limited far below 64 KiB by the SMTP layer.
    let bytes = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn finish(out: &mut [u8], start: usize, kind: u8) {
    let payload_len = (out.len() - start - HEADER_LEN) as u32;
    let crc = crc32fast::hash(&out[start + HEADER_LEN..]);
    let header = &mut out[start..start + HEADER_LEN];
    header[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    header[4] = kind;
    header[5..9].copy_from_slice(&payload_len.to_le_bytes());
    header[9..13].copy_from_slice(&crc.to_le_bytes());
}

/// A decoded record.
pub(crate) enum Record {
    Message {
        envelope: Envelope,
        body_at: usize,
        body_len: u64,
    },
    Outcome {
        id: u64,
        recipients: Vec<u16>,
    },
}

/// Why decoding stopped.
#[derive(Debug)]
pub(crate) enum Damage {
    /// Fewer bytes than the record claims: a write cut short.
    Torn,
    /// Bad magic, CRC or structure.
    Corrupt(&'static str),
}

/// Decodes the record at the front of `buf`; returns it and its total length.
pub(crate) fn decode(buf: &[u8]) -> Result<(Record, usize), Damage> {
    if buf.len() < HEADER_LEN {
        return Err(Damage::Torn);
    }
    if u32::from_le_bytes(buf[0..4].try_into().unwrap_or_default()) != MAGIC {
        return Err(Damage::Corrupt("bad magic"));
    }
    let kind = buf[4];
    let len = u32::from_le_bytes(buf[5..9].try_into().unwrap_or_default()) as usize;
    let crc = u32::from_le_bytes(buf[9..13].try_into().unwrap_or_default());
    let Some(payload) = buf.get(HEADER_LEN..HEADER_LEN + len) else {
        return Err(Damage::Torn);
    };
    if crc32fast::hash(payload) != crc {
        return Err(Damage::Corrupt("bad checksum"));
    }
    let mut r = Reader {
        buf: payload,
        pos: 0,
    };
    let record = match kind {
        KIND_MESSAGE => {
            let id = r.u64()?;
            let arrival = r.u64()?;
            let flags = r.u32()?;
            let sender = r.string()?;
            let n = r.u32()? as usize;
            let mut recipients = Vec::with_capacity(n.min(4096));
            for _ in 0..n {
                recipients.push(r.string()?);
            }
            let body_len = r.u64()?;
            let body_at = HEADER_LEN + r.pos;
            if (r.buf.len() - r.pos) as u64 != body_len {
                return Err(Damage::Corrupt("body length mismatch"));
            }
            Record::Message {
                envelope: Envelope {
                    id,
                    arrival,
                    sender,
                    recipients,
                    flags,
                },
                body_at,
                body_len,
            }
        }
        KIND_OUTCOME => {
            let id = r.u64()?;
            let n = r.u32()? as usize;
            let mut recipients = Vec::with_capacity(n.min(4096));
            for _ in 0..n {
                recipients.push(r.u16()?);
            }
            Record::Outcome { id, recipients }
        }
        _ => return Err(Damage::Corrupt("unknown record kind")),
    };
    Ok((record, HEADER_LEN + len))
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], Damage> {
        let bytes = self
            .buf
            .get(self.pos..self.pos + n)
            .ok_or(Damage::Corrupt("record too short"))?;
        self.pos += n;
        Ok(bytes)
    }
    fn u16(&mut self) -> Result<u16, Damage> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().unwrap_or_default(),
        ))
    }
    fn u32(&mut self) -> Result<u32, Damage> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }
    fn u64(&mut self) -> Result<u64, Damage> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or_default(),
        ))
    }
    fn string(&mut self) -> Result<String, Damage> {
        let len = self.u16()? as usize;
        String::from_utf8(self.take(len)?.to_vec())
            .map_err(|_| Damage::Corrupt("address not UTF-8"))
    }
}
