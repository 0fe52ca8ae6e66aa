//! What a pipe command reads on its standard input: the message with
//! UNIX line ends (`\n`, pipe(8)'s default `eol`), after the lines the
//! flags prepend, in Postfix's mail_copy order: `From ` (F),
//! `Return-Path:` (R), `X-Original-To:` (O), `Delivered-To:` (D); the
//! body lines escaped as `.` and `>` ask; a blank line at the end with B.
//! Also the `D` flag's loop check: a message that already carries
//! `Delivered-To:` for this recipient is a loop.
//!
//! Trust: the message and addresses are the sender's; addresses are
//! written as Postfix writes them (quoted local parts), never with a line
//! end (an address holding CR or LF is written with them replaced).
//! Pure: no I/O.

use crate::config::pipe::PipeFlags;

use super::expand::{quote_822_local, unquote};

/// The envelope lines the flags may prepend.
pub struct Envelope<'a> {
    /// The sender, the null sender already replaced (`null_sender`).
    pub sender: &'a str,
    /// The first recipient's address and address as given.
    pub recipient: &'a str,
    pub original: &'a str,
    /// Seconds since the epoch, for the `From ` line.
    pub now: u64,
}

/// The command's input for `body` (CRLF lines, as spooled).
pub fn input(body: &[u8], env: &Envelope<'_>, flags: PipeFlags) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 256);
    let line = |out: &mut Vec<u8>, text: String| {
        out.extend(
            text.bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        out.push(b'\n');
    };
    let sender = match env.sender {
        "" => String::new(),
        s => quote_822_local(&unquote(s)),
    };
    if flags.from_line {
        let who = if sender.is_empty() {
            "MAILER-DAEMON"
        } else {
            &sender
        };
        line(&mut out, format!("From {who}  {}", asctime(env.now)));
    }
    if flags.return_path {
        line(&mut out, format!("Return-Path: <{sender}>"));
    }
    if flags.original_to && !env.original.is_empty() {
        line(
            &mut out,
            format!("X-Original-To: {}", quote_822_local(&unquote(env.original))),
        );
    }
    if flags.delivered_to {
        line(
            &mut out,
            format!("Delivered-To: {}", quote_822_local(&unquote(env.recipient))),
        );
    }
    let mut rest = body;
    while !rest.is_empty() {
        let end = memchr::memchr(b'\n', rest).map_or(rest.len(), |i| i + 1);
        let (mut text, next) = rest.split_at(end);
        rest = next;
        text = text.strip_suffix(b"\n").unwrap_or(text);
        text = text.strip_suffix(b"\r").unwrap_or(text);
        if flags.escape_from && text.starts_with(b"From ") {
            out.push(b'>');
        }
        if flags.dot && text.starts_with(b".") {
            out.push(b'.');
        }
        out.extend_from_slice(text);
        out.push(b'\n');
    }
    if flags.blank {
        out.push(b'\n');
    }
    out
}

/// Whether the header section of `body` has `Delivered-To: recipient`
/// (case-insensitive), Postfix's delivered_hdr_find.
pub fn delivered_loop(body: &[u8], recipient: &str) -> bool {
    let headers = crate::message::body::headers(body);
    let text = String::from_utf8_lossy(headers);
    text.split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .filter(|(name, _)| name.trim().eq_ignore_ascii_case("delivered-to"))
        .any(|(_, value)| value.trim().eq_ignore_ascii_case(recipient))
}

/// `Sat Nov 28 19:51:29 2026` (asctime, in UTC).
fn asctime(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = secs / 86_400;
    let t = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{} {} {d:2} {:02}:{:02}:{:02} {y}",
        DAYS[(days % 7) as usize],
        MONTHS[(m - 1) as usize],
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_prepend_and_escape() {
        let env = Envelope {
            sender: "a b@x",
            recipient: "r@y",
            original: "o@y",
            now: 1_795_895_489,
        };
        let body = b"Subject: s\r\n\r\nFrom me\r\n.dot\r\nend";
        let got = input(body, &env, PipeFlags::parse("FRODB.>").unwrap());
        let text = String::from_utf8(got).unwrap();
        assert_eq!(
            text,
            "From \"a b\"@x  Sat Nov 28 19:51:29 2026\nReturn-Path: <\"a b\"@x>\n\
             X-Original-To: o@y\nDelivered-To: r@y\nSubject: s\n\n>From me\n..dot\nend\n\n"
        );
        assert!(delivered_loop(b"Delivered-To: R@Y\r\n\r\nx", "r@y"));
        assert!(!delivered_loop(b"X: y\r\n\r\nDelivered-To: r@y\r\n", "r@y"));
    }
}
