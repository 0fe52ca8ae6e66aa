//! The header work of the intake: our `Received:` trace for each door a
//! message comes in by, and the From:, Date: and Message-ID: fields a
//! locally submitted message lacks (as Postfix's cleanup adds them).
//!
//! Trust: HELO names, user names and full names are the submitter's; they
//! are written into header fields only after control characters are
//! removed, so none can start a field of its own.

use std::net::IpAddr;

use crate::log::qid;
use crate::message::mime::{field_named, header_fields};
use crate::timefmt;

/// What an SMTP session knows for its `Received:` line.
pub struct SmtpTrace<'a> {
    pub helo: &'a str,
    pub ip: IpAddr,
    /// "TLSv1.3 with cipher …", when encrypted.
    pub tls: Option<&'a str>,
    /// RFC 3848 / RFC 6531 protocol name (`ESMTPSA`, `UTF8SMTPS`, …).
    pub with: String,
    /// The only recipient, named in a `for` clause.
    pub only_recipient: Option<&'a str>,
}

/// The `Received:` field (CRLF included) of a message taken by SMTP.
pub fn smtp_trace(hostname: &str, id: u64, t: &SmtpTrace<'_>) -> String {
    let helo = printable(t.helo);
    let tls = match t.tls {
        Some(t) => format!("\r\n\t(using {t})"),
        None => String::new(),
    };
    let for_clause = match t.only_recipient {
        Some(only) => format!("\r\n\tfor <{}>", printable(only)),
        None => String::new(),
    };
    format!(
        "Received: from {helo} ([{ip}]){tls}\r\n\tby {hostname} (Sluice) with {with} id {id}{for_clause};\r\n\t{date}\r\n",
        ip = t.ip,
        with = t.with,
        id = qid(id),
        date = timefmt::rfc5322(timefmt::now_millis()),
    )
}

/// The `Received:` field of a message submitted locally by `uid`.
pub fn local_trace(hostname: &str, id: u64, uid: Option<u32>) -> String {
    format!(
        "Received: by {hostname} (Sluice sendmail, from userid {}) id {};\r\n\t{}\r\n",
        uid.map_or("unknown".into(), |u| u.to_string()),
        qid(id),
        timefmt::rfc5322(timefmt::now_millis()),
    )
}

/// The From:, Date: and Message-ID: fields `message` lacks, for a
/// message from `sender` (with `full_name`, sendmail's -F) with queue ID
/// `id`; empty when it has them all.
pub fn missing_fields(
    message: &[u8],
    sender: &str,
    full_name: Option<&str>,
    hostname: &str,
    id: u64,
) -> String {
    let head_end = memchr::memmem::find(message, b"\r\n\r\n").map_or(message.len(), |i| i + 2);
    let fields = header_fields(&message[..head_end]);
    let has = |name: &str| fields.iter().any(|f| field_named(f, name.as_bytes()));
    let mut extra = String::new();
    if !has("from") {
        let from = match sender {
            "" => format!("MAILER-DAEMON@{hostname}"),
            s => s.to_string(),
        };
        match full_name.map(printable).filter(|n| !n.is_empty()) {
            Some(n) => extra.push_str(&format!("From: {n} <{from}>\r\n")),
            None => extra.push_str(&format!("From: <{from}>\r\n")),
        }
    }
    if !has("date") {
        extra.push_str(&format!(
            "Date: {}\r\n",
            timefmt::rfc5322(timefmt::now_millis())
        ));
    }
    if !has("message-id") {
        extra.push_str(&format!("Message-ID: <{}@{hostname}>\r\n", qid(id)));
    }
    if !extra.is_empty() && (head_end == message.len() && !message.is_empty()) {
        // No header/body separator: the input was all body.
        extra.push_str("\r\n");
    }
    extra
}

/// `text` without control characters (a header field stays one field).
fn printable(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_fields_are_made_and_present_ones_kept() {
        let bare = b"Subject: s\r\n\r\nbody\r\n";
        let made = missing_fields(bare, "u@h.test", Some("A\r\nBcc: x"), "mx.test", 0x1F);
        assert!(
            made.starts_with("From: ABcc: x <u@h.test>\r\nDate: "),
            "{made}"
        );
        assert!(made.ends_with("Message-ID: <1F@mx.test>\r\n"), "{made}");
        let full = b"From: a@b\r\nDate: x\r\nMessage-ID: <m@b>\r\n\r\nbody\r\n";
        assert_eq!(missing_fields(full, "u@h.test", None, "mx.test", 1), "");
        let all_body = missing_fields(b"just text\r\n", "", None, "mx.test", 1);
        assert!(all_body.starts_with("From: <MAILER-DAEMON@mx.test>\r\n"));
        assert!(all_body.ends_with(">\r\n\r\n"), "{all_body}");
    }

    #[test]
    fn a_helo_with_line_breaks_stays_in_its_field() {
        let t = SmtpTrace {
            helo: "evil\r\nX-Injected: yes",
            ip: "192.0.2.1".parse().unwrap(),
            tls: None,
            with: "ESMTP".into(),
            only_recipient: None,
        };
        let trace = smtp_trace("mx.test", 1, &t);
        assert!(trace.starts_with("Received: from evilX-Injected: yes ([192.0.2.1])"));
        assert_eq!(trace.matches("\r\n").count(), 3, "{trace}");
    }
}
