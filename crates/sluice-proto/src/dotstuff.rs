//! Dot-stuffing for sending a stored body with `DATA`.

/// Appends `body` to `out` as a DATA payload: every line that starts with
/// `.` gets one more, a missing final CRLF is added, and the `.CRLF`
/// end marker follows.
pub fn stuff_into(body: &[u8], out: &mut Vec<u8>) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{BareLinePolicy, DataDecoder, DataLimits};

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
