//! Dot-stuffing for sending a stored body with `DATA`, and the line limit
//! on output: no line of more than 998 octets (plus CRLF) ever leaves,
//! whatever was accepted (RFC 5321 §4.5.3.1.6, RFC 5322 §2.1.1).

use std::borrow::Cow;

/// Longest text line sent, CRLF excluded.
pub const MAX_TEXT: usize = 998;

/// Appends `body` to `out` as a DATA payload: lines longer than
/// [`MAX_TEXT`] are broken (see [`wrap_long_lines`]), every line that
/// starts with `.` gets one more, a missing final CRLF is added, and the
/// `.CRLF` end marker follows.
pub fn stuff_into(body: &[u8], out: &mut Vec<u8>) {
    let body = wrap_long_lines(body);
    let body: &[u8] = &body;
    out.reserve(body.len() + body.len() / 512 + 5);
    let mut start = 0;
    if body.first() == Some(&b'.') {
        out.push(b'.');
    }
    // Each "\n." in the body marks a line that starts with a dot.
    for pos in memchr::memmem::find_iter(body, b"\n.") {
        out.extend_from_slice(&body[start..=pos]);
        out.push(b'.');
        start = pos + 1;
    }
    out.extend_from_slice(&body[start..]);
    if !body.is_empty() && !body.ends_with(b"\r\n") {
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b".\r\n");
}

/// `body` with every line over [`MAX_TEXT`] octets broken, as Postfix's
/// `smtp_line_length_limit` does: in the header section the break is a
/// fold (CRLF SP), so the header stays one header; in the body a CRLF.
/// Borrowed (no copy) when no line is too long, the usual case.
pub fn wrap_long_lines(body: &[u8]) -> Cow<'_, [u8]> {
    let mut start = 0;
    let too_long = memchr::memchr_iter(b'\n', body)
        .chain(std::iter::once(body.len()))
        .any(|end| {
            // An LF-ended line counts its CR; the last line, if it has no
            // LF, gets a CRLF added by `stuff_into`.
            let long = end - start > MAX_TEXT + usize::from(end < body.len());
            start = end + 1;
            long
        });
    if !too_long {
        return Cow::Borrowed(body);
    }
    let mut out = Vec::with_capacity(body.len() + body.len() / MAX_TEXT * 3 + 3);
    let mut in_header = true;
    for line in body.split_inclusive(|&b| b == b'\n') {
        let text = line.strip_suffix(b"\r\n").unwrap_or(line);
        let ending = &line[text.len()..];
        if text.is_empty() {
            in_header = false;
        }
        let mut pieces = text.chunks(MAX_TEXT - 1).peekable();
        while let Some(piece) = pieces.next() {
            out.extend_from_slice(piece);
            if pieces.peek().is_some() {
                out.extend_from_slice(if in_header { b"\r\n " } else { b"\r\n" });
            }
        }
        out.extend_from_slice(ending);
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{BareLinePolicy, DataDecoder, DataLimits};

    #[test]
    fn no_line_over_the_limit_leaves() {
        let body = format!(
            "Subject: {}\r\n\r\n{}\r\nshort\r\n.{}",
            "s".repeat(2500),
            "q".repeat(5000),
            "d".repeat(1500)
        );
        let mut wire = Vec::new();
        stuff_into(body.as_bytes(), &mut wire);
        for line in wire.split(|&b| b == b'\n') {
            assert!(line.len() <= MAX_TEXT + 2, "line of {}", line.len());
        }
        let text = String::from_utf8(wire).unwrap();
        assert!(text.starts_with("Subject: sss") && text.contains("\r\n sss"));
        assert_eq!(
            text.matches('q').count(),
            5000,
            "nothing lost from the body"
        );
        assert!(text.contains("\r\n..ddd"), "a dot-led piece is stuffed");
        let plain = "a\r\n".repeat(3);
        assert!(matches!(
            wrap_long_lines(plain.as_bytes()),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn stuffing_round_trips_through_the_decoder() {
        let bodies: &[&[u8]] = &[
            b"",
            b"plain\r\n",
            b".\r\n",
            b"..x\r\n.\r\n\r\n.y\r\n",
            b"no final newline",
            b"a\r\n.",
        ];
        for body in bodies {
            let mut wire = Vec::new();
            stuff_into(body, &mut wire);
            let mut dec = DataDecoder::new(DataLimits {
                max_size: 1 << 20,
                max_line: 1000,
                bare_line: BareLinePolicy::Reject,
            });
            let mut out = Vec::new();
            assert_eq!(dec.feed(&wire, &mut out), Some(wire.len()));
            let mut want = body.to_vec();
            if !want.is_empty() && !want.ends_with(b"\r\n") {
                want.extend_from_slice(b"\r\n");
            }
            assert_eq!(out, want, "{:?}", String::from_utf8_lossy(body));
        }
    }
}
