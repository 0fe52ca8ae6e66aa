//! Record encoding. Every record is self-checking (length + CRC32 keyed
//! with the spool's [`Salt`]), so a torn or corrupt record is recognised
//! and never mistaken for mail, and bytes a client put in a body cannot
//! pass for a record.
//!
//! Trusts: nothing it decodes; every field is bounds-checked and the
//! checksum covers the salt and the whole payload.
//!
//! Invariants: encoding never truncates or wraps. A message with more than
//! [`MAX_RECIPIENTS`] recipients, an address over 65,535 bytes or a payload
//! over 4 GiB is refused (and `out` left as it was), so what is decoded is
//! always exactly what was encoded.

pub(crate) const MAGIC: u32 = 0x5343_4C53; // "SLCS"
pub(crate) const HEADER_LEN: usize = 13;
pub(crate) const KIND_MESSAGE: u8 = 1;
pub(crate) const KIND_OUTCOME: u8 = 2;
pub(crate) const KIND_MARKS: u8 = 3;
pub(crate) const KIND_ATTEMPT: u8 = 4;

/// The key of a spool's record checksums; empty for a legacy spool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Salt(Vec<u8>);

impl Salt {
    /// The salt of a legacy spool: checksums are plain CRC32.
    pub fn legacy() -> Salt {
        Salt(Vec::new())
    }

    /// A salt of the given bytes (read from the salt file or made at
    /// random there, `salt.rs`; any bytes in tests).
    pub fn from_bytes(bytes: Vec<u8>) -> Salt {
        Salt(bytes)
    }

    pub fn is_legacy(&self) -> bool {
        self.0.is_empty()
    }

    /// `crc32(salt ‖ payload)`.
    pub fn checksum(&self, payload: &[u8]) -> u32 {
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&self.0);
        hasher.update(payload);
        hasher.finalize()
    }
}

/// Payload length of an attempt record before its reason: queue ID,
/// count, time of the attempt and of the next one, the reason's length.
pub(crate) const ATTEMPT_FIXED: usize = 8 + 4 + 8 + 8 + 2;

/// Longest deferral reason an attempt record keeps (longer ones are cut
/// at a character boundary: it is for people, never compared).
pub const MAX_REASON: usize = 1000;

/// Payload length of a marks record: queue ID and the mark bits.
pub(crate) const MARKS_PAYLOAD: usize = 8 + 4;

/// Most recipients one message may have: outcome records name recipients
/// by a `u16` index.
pub const MAX_RECIPIENTS: usize = 65_535;

/// A flag bit the spool keeps for itself: the record carries a DSN block
/// after the recipients. Never set by the daemon; cleared when decoded.
const FLAG_DSN_BLOCK: u32 = 1 << 31;

/// Another of the spool's own bits: the record carries, after the DSN
/// block, each recipient's address as given (before alias expansion).
/// Records without it (all those written before it existed) read as
/// before, with no original addresses.
const FLAG_ORIG_BLOCK: u32 = 1 << 30;

/// Another of the spool's own bits: the record carries, after the
/// original addresses, the login that submitted the message (an SMTP AUTH
/// identity or a local account; Postfix's `sasl_username`). Records
/// without it read with no login.
const FLAG_LOGIN_BLOCK: u32 = 1 << 29;

/// Another of the spool's own bits: the record carries, after the login,
/// the after-queue content filter the message goes to (Postfix's
/// `content_filter`, its queue file's `REC_TYPE_FILT`). Records without
/// it read with no filter: routed as before.
const FLAG_FILTER_BLOCK: u32 = 1 << 28;

/// Another of the spool's own bits: the record carries, after the
/// filter, the XFORWARD attributes of the client the message came from
/// (for the filter). Records without it read with none.
const FLAG_XFORWARD_BLOCK: u32 = 1 << 27;

/// The bits the spool keeps for itself (never the daemon's).
pub const SPOOL_FLAGS: u32 =
    FLAG_DSN_BLOCK | FLAG_ORIG_BLOCK | FLAG_LOGIN_BLOCK | FLAG_FILTER_BLOCK | FLAG_XFORWARD_BLOCK;

/// DSN parameters (RFC 3461) kept with a message: what the client asked
/// to be told. Stored only when a parameter was given, so the records of
/// mail without them are as before.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dsn {
    /// RET: 0 not given, 1 FULL, 2 HDRS.
    pub ret: u8,
    /// ENVID as given (xtext); empty when not given.
    pub envid: String,
    /// NOTIFY bits per recipient (`sluice_proto::dsn`), in recipient order.
    pub notify: Vec<u8>,
    /// ORCPT per recipient as given (`rfc822;…`); empty when not given.
    pub orcpt: Vec<String>,
}

/// The envelope of a spooled message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Envelope {
    /// Queue ID (shown in hex in logs and replies).
    pub id: u64,
    /// Arrival time, seconds since the Unix epoch.
    pub arrival: u64,
    /// Reverse path; empty for the null sender (bounces).
    pub sender: String,
    pub recipients: Vec<String>,
    /// Free bits for the daemon (body type, SMTPUTF8, "is a bounce", …);
    /// bits 29 to 31 are the spool's own ([`SPOOL_FLAGS`]).
    pub flags: u32,
    /// DSN parameters, when the client gave any.
    pub dsn: Option<Box<Dsn>>,
    /// The address each recipient was given as, in recipient order, when
    /// an alias expanded to it (Postfix's `orig_to`); an empty entry is a
    /// recipient as given, and an empty list means none was expanded.
    pub orig_rcpt: Vec<String>,
    /// Who submitted it: the SMTP AUTH identity or the local account;
    /// empty when neither (a stranger, mynetworks, our own notices).
    pub login: String,
    /// The after-queue content filter every recipient goes to
    /// (`transport:nexthop`, e.g. `smtp:[127.0.0.1]:10024`); empty: none,
    /// the recipients are routed as usual.
    pub filter: String,
    /// With a filter: the client the message came from, as the
    /// attributes of an XFORWARD command (`NAME=… ADDR=… HELO=…`,
    /// xtext), which the filter is sent when it offers XFORWARD
    /// (Postfix's `smtp_send_xforward_command`); empty: none.
    pub xforward: String,
}

/// Appends a message record to `out`; returns the body's offset within the
/// record, so the caller can compute where the body lands in the segment.
/// A message the format cannot hold (see [`check`]) leaves `out` as it was
/// and returns the reason.
pub(crate) fn encode_message(
    salt: &Salt,
    env: &Envelope,
    body: &[u8],
    out: &mut Vec<u8>,
) -> Result<usize, Unfit> {
    check(env, body.len())?;
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER_LEN]);
    out.extend_from_slice(&env.id.to_le_bytes());
    out.extend_from_slice(&env.arrival.to_le_bytes());
    let mut flags = env.flags & !SPOOL_FLAGS;
    if env.dsn.is_some() {
        flags |= FLAG_DSN_BLOCK;
    }
    if !env.orig_rcpt.is_empty() {
        flags |= FLAG_ORIG_BLOCK;
    }
    if !env.login.is_empty() {
        flags |= FLAG_LOGIN_BLOCK;
    }
    if !env.filter.is_empty() {
        flags |= FLAG_FILTER_BLOCK;
    }
    if !env.xforward.is_empty() {
        flags |= FLAG_XFORWARD_BLOCK;
    }
    out.extend_from_slice(&flags.to_le_bytes());
    let mut fields = put_str(out, &env.sender);
    out.extend_from_slice(&(env.recipients.len() as u32).to_le_bytes());
    for rcpt in &env.recipients {
        fields = fields.and_then(|()| put_str(out, rcpt));
    }
    if let Some(dsn) = &env.dsn {
        out.push(dsn.ret);
        fields = fields.and_then(|()| put_str(out, &dsn.envid));
        for (notify, orcpt) in dsn.notify.iter().zip(&dsn.orcpt) {
            out.push(*notify);
            fields = fields.and_then(|()| put_str(out, orcpt));
        }
    }
    for orig in &env.orig_rcpt {
        fields = fields.and_then(|()| put_str(out, orig));
    }
    if !env.login.is_empty() {
        fields = fields.and_then(|()| put_str(out, &env.login));
    }
    if !env.filter.is_empty() {
        fields = fields.and_then(|()| put_str(out, &env.filter));
    }
    if !env.xforward.is_empty() {
        fields = fields.and_then(|()| put_str(out, &env.xforward));
    }
    if let Err(why) = fields {
        out.truncate(start);
        return Err(why);
    }
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    let body_at = out.len() - start;
    out.extend_from_slice(body);
    finish(salt, out, start, KIND_MESSAGE);
    Ok(body_at)
}

/// Checks that a message fits the format: at most [`MAX_RECIPIENTS`]
/// recipients (outcomes name them by `u16` index), addresses of at most
/// 65,535 bytes, and a record payload of at most 4 GiB (`u32` length).
pub(crate) fn check(env: &Envelope, body_len: usize) -> Result<(), Unfit> {
    if env.recipients.len() > MAX_RECIPIENTS {
        return Err(Unfit::Recipients(env.recipients.len()));
    }
    let mut payload = 8 + 8 + 4 + 4 + 8 + body_len as u64;
    if let Some(dsn) = &env.dsn {
        let n = env.recipients.len();
        if dsn.notify.len() != n || dsn.orcpt.len() != n {
            return Err(Unfit::DsnMismatch);
        }
        payload += 1 + n as u64;
    }
    if !env.orig_rcpt.is_empty() && env.orig_rcpt.len() != env.recipients.len() {
        return Err(Unfit::OrigMismatch);
    }
    let dsn_strings = env
        .dsn
        .iter()
        .flat_map(|d| std::iter::once(&d.envid).chain(&d.orcpt));
    let strings = std::iter::once(&env.sender)
        .chain(&env.recipients)
        .chain(dsn_strings)
        .chain(&env.orig_rcpt)
        .chain(Some(&env.login).filter(|l| !l.is_empty()))
        .chain(Some(&env.filter).filter(|f| !f.is_empty()))
        .chain(Some(&env.xforward).filter(|x| !x.is_empty()));
    for addr in strings {
        if addr.len() > u16::MAX as usize {
            return Err(Unfit::Address(addr.len()));
        }
        payload += 2 + addr.len() as u64;
    }
    // A record, header included, fits 32 bits: the index keeps a body's
    // offset within its record in a u32.
    if payload > (u32::MAX as usize - HEADER_LEN) as u64 {
        return Err(Unfit::Record(payload));
    }
    Ok(())
}

/// Why a message does not fit the spool's format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unfit {
    #[error("{0} recipients, more than the {MAX_RECIPIENTS} the spool can track")]
    Recipients(usize),
    #[error("DSN parameters do not match the recipients")]
    DsnMismatch,
    #[error("original addresses do not match the recipients")]
    OrigMismatch,
    #[error("an address of {0} bytes, over 65,535")]
    Address(usize),
    #[error("a message record of {0} bytes, over 4 GiB")]
    Record(u64),
}

/// The most bytes an outcome record naming up to `recipients` takes.
pub(crate) fn outcome_len(recipients: usize) -> u64 {
    (HEADER_LEN + 8 + 4 + 2 * recipients) as u64
}

pub(crate) fn encode_outcome(salt: &Salt, id: u64, recipients: &[u16], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER_LEN]);
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&(recipients.len() as u32).to_le_bytes());
    for r in recipients {
        out.extend_from_slice(&r.to_le_bytes());
    }
    finish(salt, out, start, KIND_OUTCOME);
}

/// The bytes a marks record takes.
pub(crate) const fn marks_len() -> u64 {
    (HEADER_LEN + MARKS_PAYLOAD) as u64
}

/// Appends a marks record: bits the daemon set on message `id` after it
/// was stored (united with any recorded before, never cleared).
pub(crate) fn encode_marks(salt: &Salt, id: u64, marks: u32, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER_LEN]);
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&marks.to_le_bytes());
    finish(salt, out, start, KIND_MARKS);
}

/// What the daemon notes about a message after a delivery attempt that
/// left work to do: how many attempts so far, when the last one was and
/// when the next is due (Unix seconds; 0: unknown), and why it was
/// deferred (empty: unknown). The newest one recorded for a message is
/// what recovery hands back ([`crate::Recovered::attempt`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attempt {
    pub count: u32,
    pub at: u64,
    pub next: u64,
    pub reason: String,
}

/// The bytes an attempt record with `reason_len` bytes of reason takes.
pub(crate) fn attempt_len(reason_len: usize) -> u64 {
    (HEADER_LEN + ATTEMPT_FIXED + reason_len.min(MAX_REASON)) as u64
}

/// Appends an attempt record for message `id` (its reason cut to
/// [`MAX_REASON`] bytes at a character boundary).
pub(crate) fn encode_attempt(salt: &Salt, id: u64, attempt: &Attempt, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER_LEN]);
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&attempt.count.to_le_bytes());
    out.extend_from_slice(&attempt.at.to_le_bytes());
    out.extend_from_slice(&attempt.next.to_le_bytes());
    let mut end = attempt.reason.len().min(MAX_REASON);
    while !attempt.reason.is_char_boundary(end) {
        end -= 1;
    }
    // Cannot fail: at most MAX_REASON bytes.
    let _ = put_str(out, &attempt.reason[..end]);
    finish(salt, out, start, KIND_ATTEMPT);
}

/// Appends a length-prefixed string; refuses one over 65,535 bytes rather
/// than cutting it (possibly inside a UTF-8 character).
fn put_str(out: &mut Vec<u8>, s: &str) -> Result<(), Unfit> {
    let len = u16::try_from(s.len()).map_err(|_| Unfit::Address(s.len()))?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

fn finish(salt: &Salt, out: &mut [u8], start: usize, kind: u8) {
    let payload_len = (out.len() - start - HEADER_LEN) as u32;
    let crc = salt.checksum(&out[start + HEADER_LEN..]);
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
    Marks {
        id: u64,
        marks: u32,
    },
    Attempt {
        id: u64,
        attempt: Attempt,
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

/// Decodes the record at the front of `buf`, checking its checksum with
/// `salt`; returns it and its total length.
pub(crate) fn decode(salt: &Salt, buf: &[u8]) -> Result<(Record, usize), Damage> {
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
    if salt.checksum(payload) != crc {
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
            let dsn = match flags & FLAG_DSN_BLOCK {
                0 => None,
                _ => Some(Box::new(r.dsn(n)?)),
            };
            let mut orig_rcpt = Vec::new();
            if flags & FLAG_ORIG_BLOCK != 0 {
                orig_rcpt.reserve(n.min(4096));
                for _ in 0..n {
                    orig_rcpt.push(r.string()?);
                }
            }
            let login = match flags & FLAG_LOGIN_BLOCK {
                0 => String::new(),
                _ => r.string()?,
            };
            let filter = match flags & FLAG_FILTER_BLOCK {
                0 => String::new(),
                _ => r.string()?,
            };
            let xforward = match flags & FLAG_XFORWARD_BLOCK {
                0 => String::new(),
                _ => r.string()?,
            };
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
                    flags: flags & !SPOOL_FLAGS,
                    dsn,
                    orig_rcpt,
                    login,
                    filter,
                    xforward,
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
            if r.pos != r.buf.len() {
                return Err(Damage::Corrupt("outcome length mismatch"));
            }
            Record::Outcome { id, recipients }
        }
        KIND_MARKS => {
            let id = r.u64()?;
            let marks = r.u32()?;
            if r.pos != r.buf.len() {
                return Err(Damage::Corrupt("marks length mismatch"));
            }
            Record::Marks { id, marks }
        }
        KIND_ATTEMPT => {
            let id = r.u64()?;
            let count = r.u32()?;
            let at = r.u64()?;
            let next = r.u64()?;
            let reason = r.string()?;
            if r.pos != r.buf.len() || reason.len() > MAX_REASON {
                return Err(Damage::Corrupt("attempt length mismatch"));
            }
            let attempt = Attempt {
                count,
                at,
                next,
                reason,
            };
            Record::Attempt { id, attempt }
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
    /// The DSN block of a message with `n` recipients.
    fn dsn(&mut self, n: usize) -> Result<Dsn, Damage> {
        let ret = self.take(1)?[0];
        let envid = self.string()?;
        let mut dsn = Dsn {
            ret,
            envid,
            notify: Vec::with_capacity(n.min(4096)),
            orcpt: Vec::with_capacity(n.min(4096)),
        };
        for _ in 0..n {
            dsn.notify.push(self.take(1)?[0]);
            dsn.orcpt.push(self.string()?);
        }
        Ok(dsn)
    }

    fn string(&mut self) -> Result<String, Damage> {
        let len = self.u16()? as usize;
        String::from_utf8(self.take(len)?.to_vec())
            .map_err(|_| Damage::Corrupt("address not UTF-8"))
    }
}
