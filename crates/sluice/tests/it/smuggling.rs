//! SMTP smuggling: only CRLF.CRLF ends DATA; every other line ending is
//! content, so no second message can be slipped in.
//!
//! Through a real socket to a whole server, as the rest need delivery or
//! the log: `every_vector_is_rejected_by_default_and_nothing_is_smuggled`
//! for DATA; BDAT's reply alone on an in-memory session
//! (`bare_lf_in_bdat_is_rejected`, [`ScriptedSession`]).

use crate::common;

use common::scripted::ScriptedSession;
use common::*;

/// End-of-data look-alikes that must never end a message.
const VECTORS: &[(&str, &[u8])] = &[
    ("LF.LF", b"\n.\n"),
    ("CR.LF", b"\r.\n"),
    ("LF.CRLF", b"\n.\r\n"),
    ("CR.CR", b"\r.\r"),
    ("CRLF.LF", b"\r\n.\n"),
    ("CRLF.CR", b"\r\n.\r"),
    ("CR CR LF . CR CR LF", b"\r\r\n.\r\r\n"),
];

fn attack(vector: &[u8]) -> Vec<u8> {
    let mut m = b"Subject: first\r\n\r\nfirst body".to_vec();
    m.extend_from_slice(vector);
    m.extend_from_slice(b"MAIL FROM:<evil@smuggler.test>\r\nRCPT TO:<victim@dest.test>\r\nDATA\r\nSubject: smuggled\r\n\r\nevil\r\n.\r\n");
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_vector_is_rejected_by_default_and_nothing_is_smuggled() {
    let dir = temp_dir("smuggle-reject");
    let sink = recording_sink().await;
    let (server, addr) = start(config(&dir, Some(sink.addr))).await;
    for (name, vector) in VECTORS {
        let mut c = Client::ready(addr).await;
        c.begin_data("a@sender.test", "b@dest.test").await;
        c.send(&attack(vector)).await;
        let r = c.reply().await;
        assert!(
            r.starts_with("554 5.6.0"),
            "{name}: the whole thing is one message and it is refused: {r}"
        );
        // The session is still in sync: the next command is a command.
        assert!(c.cmd("NOOP").await.starts_with("250"), "{name}");
    }
    // The drain on shutdown waits for any delivery still in flight.
    server.shutdown().await;
    assert_eq!(sink.count(), 0, "nothing was relayed");
    // (This once looked for "queued as", which no log line says: it could
    // not fail. A queued message is a `received` event.)
    assert!(
        !any_logged(&dir, |e| matches!(e, Event::Received { .. })),
        "nothing was queued: {}",
        read_log(&dir)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn normalize_mode_accepts_one_message_never_two() {
    let dir = temp_dir("smuggle-normalize");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.smtpd.bare_line_ends = sluice::config::BareLineEnds::Normalize;
    let (server, addr) = start(cfg).await;
    for (name, vector) in VECTORS {
        let mut c = Client::ready(addr).await;
        c.begin_data("a@sender.test", "b@dest.test").await;
        c.send(&attack(vector)).await;
        let r = c.reply().await;
        assert!(r.starts_with("250 2.0.0"), "{name}: {r}");
        assert!(c.cmd("NOOP").await.starts_with("250"), "{name}");
    }
    assert!(wait_until(10, || sink.count() == VECTORS.len() as u64).await);
    // Everything accepted was delivered; nothing more can arrive after the
    // drained shutdown, so this count is final.
    server.shutdown().await;
    assert_eq!(
        sink.count(),
        VECTORS.len() as u64,
        "exactly one message per attempt"
    );
    for m in sink.messages() {
        assert_eq!(m.recipients, vec!["b@dest.test"], "no smuggled envelope");
        let body = String::from_utf8_lossy(&m.body);
        assert!(
            body.contains("MAIL FROM:<evil@smuggler.test>"),
            "smuggled text stays content"
        );
        assert!(
            !sluice_proto::data::has_bare_cr_or_lf(&m.body),
            "relayed with CRLF only"
        );
    }
}

#[tokio::test]
async fn bare_lf_in_bdat_is_rejected() {
    let dir = temp_dir("smuggle-bdat");
    let mut c = ScriptedSession::ready(config(&dir, None)).await;
    assert!(c.cmd("MAIL FROM:<a@sender.test>").await.starts_with("250"));
    assert!(c.cmd("RCPT TO:<b@dest.test>").await.starts_with("250"));
    let chunk = b"Subject: x\r\n\r\nline\n.\nmore\r\n";
    c.send(format!("BDAT {} LAST\r\n", chunk.len()).as_bytes())
        .await;
    c.send(chunk).await;
    assert!(c.reply().await.starts_with("554 5.6.0"));
    c.finish().await;
}

/// Postfix ≥ 3.9's `smtpd_forbid_unauth_pipelining`, on by default: a
/// stranger (not in mynetworks, not authenticated) that sends smtpsmug's
/// sequences gets nothing through. The look-alikes are content (554
/// 5.6.0, as above); the real end of data with a second transaction
/// behind it, sent before our reply, is `554 5.5.0` and a closed
/// connection, the first message not taken either (before: 250 for it,
/// then the pipelined one ran); so is a command behind EHLO. Clients in
/// mynetworks may pipeline as RFC 2920 lets them, and the setting can be
/// turned off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_that_does_not_wait_for_our_reply_is_disconnected() {
    let dir = temp_dir("smuggle-pipelining");
    let sink = recording_sink().await;
    let mut cfg = untrusted_config(&dir, Some(sink.addr));
    let (server, addr) = start(cfg.clone()).await;
    let stranger_attack = |end: &[u8]| {
        let mut m = b"Subject: first\r\n\r\nfirst body".to_vec();
        m.extend_from_slice(end);
        m.extend_from_slice(b"MAIL FROM:<evil@smuggler.test>\r\nRCPT TO:<victim@ours.test>\r\nDATA\r\nSubject: smuggled\r\n\r\nevil\r\n.\r\n");
        m
    };
    for (name, vector) in VECTORS {
        let mut c = Client::ready(addr).await;
        c.begin_data("a@sender.test", "x@ours.test").await;
        c.send(&stranger_attack(vector)).await;
        let r = c.reply().await;
        assert!(r.starts_with("554 5.6.0"), "{name}: {r}");
    }
    let mut c = Client::ready(addr).await;
    c.begin_data("a@sender.test", "x@ours.test").await;
    c.send(&stranger_attack(b"\r\n.\r\n")).await;
    let r = c.reply().await;
    assert_eq!(
        r.trim_end(),
        "554 5.5.0 Error: SMTP protocol synchronization"
    );
    assert_eq!(c.replies_until_closed().await, "", "then closed");
    let (mut c, greeting) = Client::connect(addr).await;
    assert!(greeting.starts_with("220"), "{greeting}");
    c.send(b"EHLO client.test\r\nMAIL FROM:<a@sender.test>\r\n")
        .await;
    let r = c.reply().await;
    assert!(r.starts_with("554 5.5.0"), "{r}");
    server.shutdown().await;
    assert_eq!(sink.count(), 0, "nothing was relayed");
    assert!(
        !any_logged(&dir, |e| matches!(e, Event::Received { .. })),
        "{}",
        read_log(&dir)
    );
    for after in ["end of DATA", "EHLO"] {
        assert!(
            any_logged(&dir, |e| matches!(
                e,
                Event::PipeliningViolation { after: a, client_ip }
                    if a == after && client_ip.to_string() == "127.0.0.1"
            )),
            "{after}: {}",
            read_log(&dir)
        );
    }

    // Turned off: the stranger's pipelined second transaction runs.
    let dir = temp_dir("smuggle-pipelining-off");
    cfg.data_dir = dir.join("var");
    cfg.log_file = Some(dir.join("maillog"));
    cfg.smtpd.forbid_unauth_pipelining = false;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    c.begin_data("a@sender.test", "x@ours.test").await;
    c.send(&stranger_attack(b"\r\n.\r\n")).await;
    let r = c.reply().await;
    assert!(r.starts_with("250 2.0.0"), "{r}");
    assert!(
        wait_until(15, || sink.count() == 2).await,
        "both transactions ran: {}",
        read_log(&dir)
    );
    server.shutdown().await;
}
