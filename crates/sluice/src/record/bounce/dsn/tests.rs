use sluice_proto::data::{BareLinePolicy, DataDecoder, DataLimits};
use sluice_proto::dotstuff;

use super::*;
use crate::message::status::{Relay, Reply};

fn envelope(sender: &str, rcpts: &[&str], flags: u32) -> Envelope {
    Envelope {
        id: 0xABC,
        arrival: 0,
        sender: sender.into(),
        recipients: rcpts.iter().map(|r| r.to_string()).collect(),
        flags,
        dsn: None,
        orig_rcpt: Vec::new(),
        login: String::new(),
        filter: String::new(),
        xforward: String::new(),
    }
}

/// What Sluice's own server says to `message` with its default limits.
fn accepted_by_our_server(message: &[u8]) -> Result<(), String> {
    let mut wire = Vec::new();
    dotstuff::stuff_into(message, &mut wire);
    let mut decoder = DataDecoder::new(DataLimits {
        max_size: 10_240_000,
        max_line: 1000,
        bare_line: BareLinePolicy::Reject,
    });
    let mut out = Vec::new();
    match decoder.feed(&wire, &mut out) {
        Some(used) if used == wire.len() => {}
        other => return Err(format!("decoder stopped at {other:?} of {}", wire.len())),
    }
    let flaws = decoder.flaws();
    if flaws.any() {
        return Err(format!("refused: {flaws:?}"));
    }
    if out != message {
        return Err("body changed in transit".into());
    }
    for line in message.split(|&b| b == b'\n') {
        if line
            .iter()
            .any(|&b| b != b'\t' && b != b'\r' && (b < 0x20 || b == 0x7f))
        {
            return Err(format!(
                "control character in {:?}",
                String::from_utf8_lossy(line)
            ));
        }
    }
    Ok(())
}

/// An SMTP server that answered, `host[addr]`.
fn smtp(host: &str, addr: &str) -> Relay {
    let addr = addr.parse().expect("an address");
    let host = host.to_string();
    Relay::Smtp { host, addr }
}

/// A bounce with a reply given as text.
fn bounce(relay: Relay, reply: &str) -> Failure {
    Failure::from_bounce(&relay, &Reply::parse(reply, 550))
}

fn text(report: &Report) -> String {
    String::from_utf8(report.message.clone()).unwrap()
}

#[test]
fn a_remote_refusal_has_the_rfc3464_parts() {
    let env = envelope("s@a.example", &["ok@b.example", "gone@b.example"], 0);
    let failed = [(
        1,
        bounce(
            smtp("mx.b.example", "127.0.0.1:25"),
            "550 5.1.1 User unknown",
        ),
    )];
    let r = build(
        "mx.example",
        &env,
        &failed,
        b"Subject: hi\r\nMessage-ID: <1@a>\r\n",
        0xDEF,
    );
    let t = text(&r);
    assert!(t.contains("Content-Type: multipart/report; report-type=delivery-status;"));
    assert!(t.contains(
        "Final-Recipient: rfc822; gone@b.example\r\nAction: failed\r\nStatus: 5.1.1\r\n"
    ));
    assert!(t.contains(
        "Remote-MTA: dns; mx.b.example\r\nDiagnostic-Code: smtp; 550 5.1.1 User unknown\r\n"
    ));
    assert!(t.contains("Subject: hi\r\n"));
    assert!(!t.contains("ok@b.example"));
    assert!(!r.utf8 && !r.eight_bit);
    accepted_by_our_server(&r.message).unwrap();
}

#[test]
fn expired_mail_names_no_bogus_remote_mta() {
    let env = envelope("s@a.example", &["late@c.example"], 0);
    let failed = [(
        0,
        Failure::expired(
            432_000,
            &Relay::None,
            &Reply::parse("4.4.1 connect to c: refused", 451),
        ),
    )];
    let t = text(&build("mx.example", &env, &failed, b"Subject: x\r\n", 1));
    assert!(!t.contains("Remote-MTA"), "{t}");
    assert!(t.contains("Status: 5.4.7\r\n"), "{t}");
    assert!(t.contains(
        "Diagnostic-Code: X-Sluice; message expired after 432000s in queue; last error: 4.4.1 connect to c: refused\r\n"
    ));
    // With a remote server as the last error, that server is named.
    let failed = [(
        0,
        Failure::expired(
            9,
            &smtp("mx.c", "10.0.0.3:25"),
            &Reply::parse("451 4.3.0 try later", 451),
        ),
    )];
    let t = text(&build("mx.example", &env, &failed, b"", 1));
    assert!(t.contains("Remote-MTA: dns; mx.c\r\n"), "{t}");
}

#[test]
fn hostile_remote_text_still_gives_a_well_formed_bounce() {
    let env = envelope("s@a.example", &["v@b.example"], 0);
    let mut nasty = String::from("550 5.7.1 ");
    nasty.push_str("\r\n.\r\nMAIL FROM:<x>\r\n\0\x1b[2J\x7f caf\u{e9} ");
    nasty.push_str(&"x".repeat(64 << 10));
    // A long relay name on top of a long diagnostic.
    let relay = smtp(&"mx".repeat(200), "10.0.0.1:25");
    let failed = [(0, bounce(relay, &nasty))];
    let headers = format!(
        "Subject: {}\r\nX-Bad: a\rb\0c\x1b[2J\r\nX-Utf8: {}\r\n",
        "y".repeat(3000),
        "\u{e9}".repeat(700)
    );
    let r = build("mx.example", &env, &failed, headers.as_bytes(), 2);
    accepted_by_our_server(&r.message).unwrap();
    assert!(
        String::from_utf8(r.message.clone()).is_ok(),
        "no character cut in half"
    );
    let t = String::from_utf8_lossy(&r.message);
    assert!(t.contains("Status: 5.7.1"));
    assert!(!t.contains("\r\n.\r\n"));
    assert!(t.len() < 8000, "diagnostics are cut, not copied whole");
}

#[test]
fn smtputf8_mail_gets_a_global_dsn() {
    let env = envelope("s\u{e9}@a.example", &["r\u{fc}@b.example"], flags::SMTPUTF8);
    let failed = [(0, bounce(smtp("mx", "10.0.0.1:25"), "550 5.1.1 unknown"))];
    let r = build(
        "mx.example",
        &env,
        &failed,
        "Subject: caf\u{e9}\r\n".as_bytes(),
        3,
    );
    assert!(r.utf8 && r.eight_bit);
    let t = text(&r);
    assert!(t.contains("report-type=global-delivery-status"));
    assert!(t.contains("Final-Recipient: utf-8; r\u{fc}@b.example"));
    assert!(t.contains("Content-Type: message/global-headers"));
    accepted_by_our_server(&r.message).unwrap();
}

#[test]
fn cleaning_cuts_at_character_boundaries() {
    assert_eq!(clean("a\r\nb\tc", 100, false), "a b c");
    assert_eq!(clean("\u{e9}\u{e9}\u{e9}", 4, true), "\u{e9}\u{e9}...");
    assert_eq!(clean("\u{e9}", 10, false), "?");
}
