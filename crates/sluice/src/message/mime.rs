//! 8-bit to 7-bit MIME downgrade (RFC 6152 §3, as Postfix does it): for a
//! next hop that does not offer 8BITMIME, every MIME leaf whose body has
//! 8-bit octets is re-encoded — quoted-printable for `text/*`, base64 for
//! anything else — and gets a new `Content-Transfer-Encoding`; multiparts
//! and `message/rfc822` are walked into. Everything else is kept octet for
//! octet.
//!
//! Hand-written: mail-parser reads MIME but does not write it back
//! unchanged, and a downgrade must not touch what it does not convert.
//!
//! Trust: the message is the client's and may be malformed; a multipart
//! without delimiters is treated as one text leaf. Invariant: the result
//! has no octet above 127, or the call fails (8-bit headers cannot be
//! converted: RFC 2047 would change what the sender wrote).

use base64::Engine;

/// Why a message cannot be sent to a 7-bit hop.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DowngradeError {
    #[error("5.6.3 {}", self.text())]
    EightBitHeader,
}

impl DowngradeError {
    /// The enhanced status it bounces with (`5.6.3`).
    pub fn status(&self) -> Option<super::reply::Enhanced> {
        super::reply::Enhanced::new(5, 6, 3)
    }

    /// What it says after its status.
    pub fn text(&self) -> &'static str {
        match self {
            DowngradeError::EightBitHeader => {
                "conversion to 7bit required but not possible: 8-bit octets in a header"
            }
        }
    }
}

/// True if the message has octets above 127 anywhere.
pub fn is_8bit(msg: &[u8]) -> bool {
    !msg.is_ascii()
}

/// True if the header section has octets above 127 (UTF-8 headers).
pub fn has_8bit_headers(msg: &[u8]) -> bool {
    let (head, _) = split_entity(msg);
    !head.is_ascii()
}

/// The message in 7 bits; `msg` itself if it already is.
pub fn downgrade(msg: &[u8]) -> Result<Vec<u8>, DowngradeError> {
    let mut out = Vec::with_capacity(msg.len() + msg.len() / 3);
    entity(msg, true, &mut out)?;
    Ok(out)
}

/// Splits an entity into its header section (with the blank line's first
/// CRLF) and its body.
fn split_entity(e: &[u8]) -> (&[u8], &[u8]) {
    if e.starts_with(b"\r\n") {
        return (&e[..0], &e[2..]);
    }
    match memchr::memmem::find(e, b"\r\n\r\n") {
        Some(i) => (&e[..i + 2], &e[i + 4..]),
        None => (e, &e[e.len()..]),
    }
}

/// One entity (the message, a part, an encapsulated message).
fn entity(e: &[u8], top: bool, out: &mut Vec<u8>) -> Result<(), DowngradeError> {
    if e.is_ascii() {
        out.extend_from_slice(e);
        return Ok(());
    }
    let (head, body) = split_entity(e);
    if !head.is_ascii() {
        return Err(DowngradeError::EightBitHeader);
    }
    let ctype = header(head, b"content-type").unwrap_or_default();
    let mime_type = ctype
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if mime_type.starts_with("multipart/") {
        if let Some(boundary) = param(&ctype, "boundary") {
            let delims = delimiters(body, boundary.as_bytes());
            if !delims.is_empty() {
                out.extend_from_slice(head);
                out.extend_from_slice(b"\r\n");
                return multipart(body, &delims, out);
            }
        }
    } else if mime_type == "message/rfc822" || mime_type == "message/global" {
        out.extend_from_slice(head);
        out.extend_from_slice(b"\r\n");
        return entity(body, false, out);
    }
    // A leaf: text as quoted-printable, anything else as base64.
    let text = mime_type.is_empty()
        || mime_type.starts_with("text/")
        || mime_type.starts_with("multipart/");
    for line in header_fields(head) {
        if !field_named(line, b"content-transfer-encoding") {
            out.extend_from_slice(line);
        }
    }
    if top && header(head, b"mime-version").is_none() {
        out.extend_from_slice(b"MIME-Version: 1.0\r\n");
    }
    if text {
        out.extend_from_slice(b"Content-Transfer-Encoding: quoted-printable\r\n");
    } else {
        out.extend_from_slice(b"Content-Transfer-Encoding: base64\r\n");
    }
    // (The head is ASCII and the entity is not, so there is a body.)
    out.extend_from_slice(b"\r\n");
    if text {
        quoted_printable(body, out);
    } else {
        base64_lines(body, out);
    }
    Ok(())
}

/// The parts between delimiters, each converted; preamble and epilogue
/// kept, with any 8-bit octet in them made `?` (they carry no content).
fn multipart(body: &[u8], delims: &[Delim], out: &mut Vec<u8>) -> Result<(), DowngradeError> {
    seven_bit(&body[..delims[0].start], out);
    for (k, d) in delims.iter().enumerate() {
        out.extend_from_slice(&body[d.start..d.end]);
        if d.close {
            seven_bit(&body[d.end..], out);
            return Ok(());
        }
        let next = delims.get(k + 1).map_or(body.len(), |n| n.start);
        // The CRLF before a delimiter belongs to the delimiter.
        let part_end = if next >= d.end + 2 && &body[next - 2..next] == b"\r\n" {
            next - 2
        } else {
            next
        };
        entity(&body[d.end..part_end], false, out)?;
        out.extend_from_slice(&body[part_end..next]);
    }
    Ok(())
}

fn seven_bit(bytes: &[u8], out: &mut Vec<u8>) {
    out.extend(bytes.iter().map(|&b| if b > 127 { b'?' } else { b }));
}

/// A boundary delimiter line: where it starts and ends (after its CRLF),
/// and whether it is the closing one.
struct Delim {
    start: usize,
    end: usize,
    close: bool,
}

fn delimiters(body: &[u8], boundary: &[u8]) -> Vec<Delim> {
    let mut found = Vec::new();
    let mut pos = 0;
    while pos < body.len() {
        let end = memchr::memchr(b'\n', &body[pos..]).map_or(body.len(), |i| pos + i + 1);
        let line = &body[pos..end];
        if line.starts_with(b"--") && line[2..].starts_with(boundary) {
            let rest = &line[2 + boundary.len()..];
            let close = rest.starts_with(b"--");
            let tail = if close { &rest[2..] } else { rest };
            if tail.iter().all(|b| b.is_ascii_whitespace()) {
                found.push(Delim {
                    start: pos,
                    end,
                    close,
                });
                if close {
                    break;
                }
            }
        }
        pos = end;
    }
    found
}

/// Header fields, each with its continuation lines and final CRLF.
pub(crate) fn header_fields(head: &[u8]) -> Vec<&[u8]> {
    let mut fields = Vec::new();
    let mut start = 0;
    let mut pos = 0;
    while pos < head.len() {
        let end = memchr::memchr(b'\n', &head[pos..]).map_or(head.len(), |i| pos + i + 1);
        if pos > start && !matches!(head[pos], b' ' | b'\t') {
            fields.push(&head[start..pos]);
            start = pos;
        }
        pos = end;
    }
    if start < head.len() {
        fields.push(&head[start..]);
    }
    fields
}

pub(crate) fn field_named(field: &[u8], name: &[u8]) -> bool {
    field.len() > name.len()
        && field[..name.len()].eq_ignore_ascii_case(name)
        && field[name.len()..].trim_ascii_start().starts_with(b":")
}

/// A header's unfolded value.
fn header(head: &[u8], name: &[u8]) -> Option<String> {
    let field = header_fields(head)
        .into_iter()
        .find(|f| field_named(f, name))?;
    let colon = memchr::memchr(b':', field)?;
    let value: Vec<u8> = field[colon + 1..]
        .iter()
        .copied()
        .filter(|&b| b != b'\r' && b != b'\n')
        .collect();
    Some(String::from_utf8_lossy(&value).trim().to_string())
}

/// A parameter of a structured header value (`boundary="x"`).
fn param(value: &str, name: &str) -> Option<String> {
    for piece in value.split(';').skip(1) {
        let (k, v) = piece.split_once('=')?;
        if k.trim().eq_ignore_ascii_case(name) {
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(v);
            return Some(v.to_string());
        }
    }
    None
}

/// RFC 2045 §6.7 quoted-printable, CRLF line ends kept as line ends, lines
/// at most 76 characters (soft breaks `=`).
fn quoted_printable(body: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut lines = body.split(|&b| b == b'\n').peekable();
    while let Some(raw) = lines.next() {
        let last = lines.peek().is_none();
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        let mut col = 0;
        for (i, &b) in line.iter().enumerate() {
            let at_end = i + 1 == line.len();
            let literal = matches!(b, 33..=60 | 62..=126) || (matches!(b, b' ' | b'\t') && !at_end);
            let width = if literal { 1 } else { 3 };
            if col + width > 75 {
                out.extend_from_slice(b"=\r\n");
                col = 0;
            }
            if literal {
                out.push(b);
            } else {
                out.extend_from_slice(&[b'=', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
            }
            col += width;
        }
        if !last {
            out.extend_from_slice(b"\r\n");
        }
    }
}

fn base64_lines(body: &[u8], out: &mut Vec<u8>) {
    let encoded = base64::engine::general_purpose::STANDARD.encode(body);
    for chunk in encoded.as_bytes().chunks(76) {
        out.extend_from_slice(chunk);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests;
