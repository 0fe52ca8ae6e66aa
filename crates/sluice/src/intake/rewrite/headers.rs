//! The sender and recipient fields of a message's header (Postfix's
//! header_opts: which fields hold addresses that address rewriting
//! applies to), the addresses in them ([`super::address_list`]), and the
//! message with some of those addresses replaced.
//!
//! Sender fields (HDR_OPT_SENDER): From, Sender, Reply-To, Errors-To,
//! Return-Receipt-To, Disposition-Notification-To, Mail-Followup-To,
//! Return-Path, Resent-From, Resent-Sender. Recipient fields
//! (HDR_OPT_RECIP): To, Cc, Bcc, Apparently-To, Resent-To, Resent-Cc,
//! Resent-Bcc, Resent-Reply-To. Only the message's own header (up to
//! the first empty line), never a MIME part's.
//!
//! Trust: the message is the sender's, any bytes (CRLF or bare LF line
//! ends, no header at all). Invariants: [`apply`] changes only the
//! spans it is given, which [`addresses`] found inside one field's body;
//! nothing is allocated for a message none of whose fields is wanted.

use std::ops::Range;

use super::address_list;

/// The kind of address a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Sender,
    Recipient,
}

const SENDER_FIELDS: [&str; 10] = [
    "from",
    "sender",
    "reply-to",
    "errors-to",
    "return-receipt-to",
    "disposition-notification-to",
    "mail-followup-to",
    "return-path",
    "resent-from",
    "resent-sender",
];

const RECIPIENT_FIELDS: [&str; 8] = [
    "to",
    "cc",
    "bcc",
    "apparently-to",
    "resent-to",
    "resent-cc",
    "resent-bcc",
    "resent-reply-to",
];

/// The side of the field named `name`, if it holds addresses.
pub fn side(name: &[u8]) -> Option<Side> {
    let is = |list: &[&str]| list.iter().any(|n| n.as_bytes().eq_ignore_ascii_case(name));
    if is(&SENDER_FIELDS) {
        Some(Side::Sender)
    } else if is(&RECIPIENT_FIELDS) {
        Some(Side::Recipient)
    } else {
        None
    }
}

/// One address of a header field: its side, where it is in the message,
/// and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderAddress {
    pub side: Side,
    pub span: Range<usize>,
    pub address: String,
}

/// The addresses of `message`'s header fields of the sides `want` says.
pub fn addresses(message: &[u8], want: impl Fn(Side) -> bool) -> Vec<HeaderAddress> {
    let mut out = Vec::new();
    for (name, body) in fields(message) {
        let Some(side) = side(&message[name]).filter(|&s| want(s)) else {
            continue;
        };
        for found in address_list::addresses(&message[body.clone()]) {
            out.push(HeaderAddress {
                side,
                span: body.start + found.span.start..body.start + found.span.end,
                address: found.address,
            });
        }
    }
    out
}

/// Each header field of `message`: where its name is, and where its body
/// (after the colon, continuation lines included, the last line end not)
/// is. The header ends at the first empty line, or at a line that is
/// neither a field nor a continuation.
fn fields(message: &[u8]) -> impl Iterator<Item = (Range<usize>, Range<usize>)> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        let start = at;
        let line_end = |from: usize| {
            memchr::memchr(b'\n', &message[from..]).map_or(message.len(), |i| from + i + 1)
        };
        if start >= message.len() || matches!(message[start], b'\r' | b'\n' | b' ' | b'\t') {
            return None;
        }
        let first_end = line_end(start);
        let colon = memchr::memchr(b':', &message[start..first_end])? + start;
        let mut end = first_end;
        while end < message.len() && matches!(message[end], b' ' | b'\t') {
            end = line_end(end);
        }
        at = end;
        let mut name_end = colon;
        while name_end > start && matches!(message[name_end - 1], b' ' | b'\t') {
            name_end -= 1;
        }
        let mut body_end = end;
        if body_end > colon && message[body_end - 1] == b'\n' {
            body_end -= 1;
            if body_end > colon && message[body_end - 1] == b'\r' {
                body_end -= 1;
            }
        }
        Some((start..name_end, colon + 1..body_end))
    })
}

/// `message` with each span of `edits` (in order, not overlapping)
/// replaced by its text.
pub fn apply(message: &[u8], edits: &[(Range<usize>, String)]) -> Vec<u8> {
    let extra: usize = edits.iter().map(|(_, t)| t.len()).sum();
    let mut out = Vec::with_capacity(message.len() + extra);
    let mut at = 0;
    for (span, text) in edits {
        out.extend_from_slice(&message[at..span.start]);
        out.extend_from_slice(text.as_bytes());
        at = span.end;
    }
    out.extend_from_slice(&message[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MESSAGE: &[u8] = b"Received: from x\r\n\tby y; Mon\r\n\
From: \"Alice A.\" <alice@old.test> (work)\r\n\
To: bob@corp.test,\r\n Team: c@x.test, <d@x.test>;\r\n\
Subject: a@b.test\r\n\
reply-to :  r@old.test\r\n\
\r\n\
To: body@not.header\r\n";

    #[test]
    fn sender_and_recipient_fields_are_found_in_the_header_only() {
        let found = addresses(MESSAGE, |_| true);
        let got: Vec<(Side, &str, &str)> = found
            .iter()
            .map(|a| {
                let text = std::str::from_utf8(&MESSAGE[a.span.clone()]).unwrap();
                (a.side, text, a.address.as_str())
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (Side::Sender, "alice@old.test", "alice@old.test"),
                (Side::Recipient, "bob@corp.test", "bob@corp.test"),
                (Side::Recipient, "c@x.test", "c@x.test"),
                (Side::Recipient, "d@x.test", "d@x.test"),
                (Side::Sender, "r@old.test", "r@old.test"),
            ]
        );
        let senders = addresses(MESSAGE, |s| s == Side::Sender);
        assert_eq!(senders.len(), 2);
    }

    #[test]
    fn only_the_spans_change() {
        let found = addresses(MESSAGE, |s| s == Side::Sender);
        let edits: Vec<_> = found
            .iter()
            .map(|a| (a.span.clone(), "\"new one\"@new.test".to_string()))
            .collect();
        let out = apply(MESSAGE, &edits);
        let want = String::from_utf8_lossy(MESSAGE)
            .replace("alice@old.test", "\"new one\"@new.test")
            .replace("r@old.test", "\"new one\"@new.test");
        assert_eq!(String::from_utf8_lossy(&out), want);
    }

    #[test]
    fn odd_messages_end_the_header_safely() {
        for m in [
            &b""[..],
            b"\r\n",
            b"no colon here\r\nTo: a@b\r\n",
            b"To: a@b",
            b"To:\n",
        ] {
            for a in addresses(m, |_| true) {
                assert!(a.span.end <= m.len());
            }
        }
        assert_eq!(addresses(b"To: a@b", |_| true).len(), 1);
        assert_eq!(
            addresses(b"To: a@b\nCc: c@d\n\nTo: e@f\n", |_| true).len(),
            2
        );
        assert!(addresses(b"no colon here\r\nTo: a@b\r\n", |_| true).is_empty());
    }
}
