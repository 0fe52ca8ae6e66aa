//! Building a delivery status notification (RFC 3464; RFC 6533 when the
//! original was SMTPUTF8 mail). Pure: no I/O, so every input can be tested.
//!
//! Trust: diagnostics are remote servers' reply texts and may hold control
//! characters, bare CRs, 8-bit bytes or 64 KiB of text; addresses are the
//! client's. Invariant: the result is a message Sluice's own SMTP server
//! would accept with its default limits — CRLF line ends only, no line over
//! 998 octets, no control characters but TAB — so a bounce is never refused
//! (and then lost) for being malformed.

use std::fmt::Write;

use sluice_spool::Envelope;

use crate::log::qid;
use crate::message::flags;
use crate::message::status::Failure;
use crate::timefmt;

/// Longest diagnostic text kept, in octets (the rest is cut, marked `...`).
const MAX_DIAGNOSTIC: usize = 900;
/// Longest physical line (RFC 5322 §2.1.1), CRLF not counted.
const MAX_LINE: usize = 998;

/// A built DSN and what its transport needs to know about it.
pub struct Report {
    pub message: Vec<u8>,
    /// The message holds 8-bit octets (send with BODY=8BITMIME).
    pub eight_bit: bool,
    /// Addresses may be UTF-8 (send with SMTPUTF8).
    pub utf8: bool,
}

/// What a notification reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// Undeliverable: the recipients are returned (Action: failed).
    Failed,
    /// Still being retried (Action: delayed): a warning only.
    Delayed,
    /// Delivered here (Action: delivered), as NOTIFY=SUCCESS asked.
    Delivered,
    /// Handed to a next hop that does not offer DSN (Action: relayed): no
    /// further notice will come.
    Relayed,
}

/// What of the original a notice carries: its header section, or (RET=FULL)
/// the whole message.
#[derive(Debug, Clone, Copy)]
pub enum Returned<'a> {
    Headers(&'a [u8]),
    Full(&'a [u8]),
}

/// Builds the DSN for `failed` recipients (index into the original's
/// recipients, and why) of `original`, quoting `headers` (its header section).
pub fn build(
    hostname: &str,
    original: &Envelope,
    failed: &[(u16, Failure)],
    headers: &[u8],
    id: u64,
) -> Report {
    let returned = Returned::Headers(headers);
    build_notice(Notice::Failed, hostname, original, failed, returned, id)
}

/// Subject and the opening paragraph, per kind of notice.
fn wording(kind: Notice) -> (&'static str, &'static str) {
    match kind {
        Notice::Failed => (
            "Undelivered Mail Returned to Sender",
            "I'm sorry to have to inform you that your message could not\r\n\
             be delivered to one or more recipients. It's attached below.\r\n\r\n",
        ),
        Notice::Delayed => (
            "Delayed Mail (still being retried)",
            "THIS IS A WARNING ONLY. YOU DO NOT NEED TO RESEND YOUR MESSAGE.\r\n\r\n\
             Your message could not be delivered yet to one or more\r\n\
             recipients. It will be retried until it is delivered or\r\n\
             expires; you will be told if it fails.\r\n\r\n",
        ),
        Notice::Delivered => (
            "Successful Mail Delivery Report",
            "Your message was successfully delivered to the destination(s)\r\n\
             listed below, as you asked to be told.\r\n\r\n",
        ),
        Notice::Relayed => (
            "Successful Mail Delivery Report",
            "Your message was relayed to the destination(s) listed below.\r\n\
             Those systems do not report delivery, so this is the last\r\n\
             notice you will get about it.\r\n\r\n",
        ),
    }
}

/// [`build`] for either kind of notice.
pub fn build_notice(
    kind: Notice,
    hostname: &str,
    original: &Envelope,
    failed: &[(u16, Failure)],
    returned: Returned<'_>,
    id: u64,
) -> Report {
    let (subject, opening) = wording(kind);
    let utf8 = original.flags & flags::SMTPUTF8 != 0
        || !original.sender.is_ascii()
        || failed.iter().any(|(i, _)| !rcpt(original, *i).is_ascii());
    let addr = |a: &str| clean(a, 256, utf8);
    let boundary = format!("{}.{}/{}", qid(id), timefmt::now_millis(), hostname);
    let mut m = String::with_capacity(4096);
    let _ = write!(
        m,
        "From: MAILER-DAEMON@{hostname} (Mail Delivery System)\r\n\
         To: <{to}>\r\n\
         Subject: {subject}\r\n\
         Date: {date}\r\n\
         Message-ID: <{id}.bounce@{hostname}>\r\n\
         Auto-Submitted: auto-replied\r\n\
         MIME-Version: 1.0\r\n\
         Content-Type: multipart/report; report-type={rt};\r\n\tboundary=\"{boundary}\"\r\n\
         \r\nThis is a MIME-encapsulated message.\r\n\r\n\
         --{boundary}\r\nContent-Description: Notification\r\n\
         Content-Type: text/plain; charset={cs}\r\n\r\n\
         This is the mail system at host {hostname}.\r\n\r\n{opening}",
        to = addr(&original.sender),
        date = timefmt::rfc5322(timefmt::now_millis()),
        id = qid(id),
        rt = if utf8 {
            "global-delivery-status"
        } else {
            "delivery-status"
        },
        cs = if utf8 { "utf-8" } else { "us-ascii" },
    );
    human_part(&mut m, original, failed, utf8);
    status_part(&mut m, hostname, &boundary, original, failed, utf8, kind);
    let (description, content_type, content) = match (returned, utf8) {
        (Returned::Headers(h), false) => ("Message Headers", "text/rfc822-headers", h),
        (Returned::Headers(h), true) => ("Message Headers", "message/global-headers", h),
        (Returned::Full(b), false) => ("Message", "message/rfc822", b),
        (Returned::Full(b), true) => ("Message", "message/global", b),
    };
    let _ = write!(
        m,
        "\r\n--{boundary}\r\nContent-Description: {description}\r\n\
         Content-Type: {content_type}\r\n\r\n"
    );
    let mut out = m.into_bytes();
    quote_headers(content, &mut out);
    out.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let eight_bit = !out.is_ascii();
    Report {
        message: out,
        eight_bit,
        utf8,
    }
}

/// One paragraph per failed recipient, for people.
fn human_part(m: &mut String, original: &Envelope, failed: &[(u16, Failure)], utf8: bool) {
    let addr = |a: &str| clean(a, 256, utf8);
    for (i, f) in failed {
        let _ = write!(m, "<{}>:\r\n", addr(rcpt(original, *i)));
        if let Some(relay) = f.remote() {
            let relay = relay.to_string();
            let _ = write!(m, "    host {} said:\r\n", clean(&relay, 300, false));
        }
        let diagnostic = f.reply.to_string();
        let _ = write!(
            m,
            "    {}\r\n\r\n",
            clean(&diagnostic, MAX_DIAGNOSTIC, utf8)
        );
    }
}

/// The machine-readable delivery-status part (RFC 3464 / RFC 6533).
fn status_part(
    m: &mut String,
    hostname: &str,
    boundary: &str,
    original: &Envelope,
    failed: &[(u16, Failure)],
    utf8: bool,
    kind: Notice,
) {
    let addr = |a: &str| clean(a, 256, utf8);
    let _ = write!(
        m,
        "--{boundary}\r\nContent-Description: Delivery report\r\n\
         Content-Type: message/{rt}\r\n\r\n\
         Reporting-MTA: dns; {hostname}\r\n\
         X-Sluice-Queue-ID: {qid}\r\n\
         X-Sluice-Sender: rfc822; {sender}\r\n\
         Arrival-Date: {arrival}\r\n",
        rt = if utf8 {
            "global-delivery-status"
        } else {
            "delivery-status"
        },
        qid = qid(original.id),
        sender = addr(&original.sender),
        arrival = timefmt::rfc5322(original.arrival),
    );
    let dsn = original.dsn.as_deref();
    if let Some(envid) = dsn.map(|d| &d.envid).filter(|e| !e.is_empty()) {
        let _ = write!(m, "Original-Envelope-Id: {}\r\n", clean(envid, 100, false));
    }
    for (i, f) in failed {
        let orcpt = dsn
            .and_then(|d| d.orcpt.get(*i as usize))
            .filter(|o| !o.is_empty());
        if let Some(o) = orcpt {
            let _ = write!(m, "\r\nOriginal-Recipient: {}", clean(o, 500, false));
        }
        recipient_fields(m, rcpt(original, *i), f, utf8, kind);
    }
}

fn rcpt(original: &Envelope, i: u16) -> &str {
    original
        .recipients
        .get(i as usize)
        .map(String::as_str)
        .unwrap_or("")
}

/// The per-recipient block of the delivery-status part.
fn recipient_fields(m: &mut String, to: &str, f: &Failure, utf8: bool, notice: Notice) {
    let kind = if utf8 && !to.is_ascii() {
        "utf-8"
    } else {
        "rfc822"
    };
    let action = match notice {
        Notice::Failed => "failed",
        Notice::Delayed => "delayed",
        Notice::Delivered => "delivered",
        Notice::Relayed => "relayed",
    };
    let status = f.status;
    let _ = write!(
        m,
        "\r\nFinal-Recipient: {kind}; {}\r\nAction: {action}\r\nStatus: {status}\r\n",
        clean(to, 256, utf8)
    );
    if let Some(relay) = f.remote() {
        // The name as the log shows it, up to its `[address]`.
        let shown = relay.to_string();
        let host = shown.split('[').next().unwrap_or(&shown);
        let _ = write!(m, "Remote-MTA: dns; {}\r\n", clean(host, 255, false));
    }
    let kind = if f.remote_reply() { "smtp" } else { "X-Sluice" };
    // The status part is ASCII (RFC 3464) even when addresses are not.
    let _ = write!(
        m,
        "Diagnostic-Code: {kind}; {}\r\n",
        clean(&f.reply.to_string(), MAX_DIAGNOSTIC, false)
    );
}

/// `text` made safe for one header or text line: control characters (CR,
/// LF, NUL, ESC, DEL, …) become spaces, runs of spaces collapse, non-ASCII
/// becomes `?` unless `utf8`, and more than `max` octets are cut at a
/// character boundary and marked `...`.
pub fn clean(text: &str, max: usize, utf8: bool) -> String {
    let mut out = String::with_capacity(text.len().min(max + 3));
    for c in text.chars() {
        let c = match c {
            c if c.is_control() => ' ',
            c if !c.is_ascii() && !utf8 => '?',
            c => c,
        };
        if c == ' ' && (out.is_empty() || out.ends_with(' ')) {
            continue;
        }
        if out.len() + c.len_utf8() > max {
            out.push_str("...");
            break;
        }
        out.push(c);
    }
    out.trim_end().to_string()
}

/// Copies a header section, CRLF-terminated: stray CR or LF octets become
/// line ends, control characters but TAB become spaces, and each line is
/// cut to 998 octets (at a UTF-8 character boundary).
fn quote_headers(headers: &[u8], out: &mut Vec<u8>) {
    for line in headers.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        for piece in line.split(|&b| b == b'\r') {
            if piece.is_empty() {
                continue;
            }
            let mut cut = piece.len().min(MAX_LINE);
            while cut < piece.len() && cut > 0 && piece[cut] & 0xC0 == 0x80 {
                cut -= 1;
            }
            let control = |b: u8| (b < 0x20 && b != b'\t') || b == 0x7f;
            out.extend(
                piece[..cut]
                    .iter()
                    .map(|&b| if control(b) { b' ' } else { b }),
            );
            out.extend_from_slice(b"\r\n");
        }
    }
}

#[cfg(test)]
mod tests;
