//! Port 25 strictness as an outside client sees it: addresses (SMTP audit
//! §A), command syntax (§B), message text (§C) and backscatter (§F4).
//!
//! Checks of replies alone talk to an in-memory session
//! ([`ScriptedSession`]); what needs delivery, and one test per area,
//! go through a real socket to a whole server: §A
//! `quoted_local_parts_are_forwarded_quoted_never_raw` (and
//! `postmaster_and_address_literals`), §B
//! `pipelining_violations_are_not_executed`, §C
//! `text_lines_nul_and_bdat_limits` (and
//! `no_line_over_1000_octets_is_sent_on`), §F4
//! `unknown_users_in_relay_domains_are_refused_at_rcpt`.

use crate::common;

use common::scripted::ScriptedSession;
use common::*;
use tokio::io::{AsyncRead, AsyncWrite};

/// MAIL then each RCPT; returns the RCPT replies.
async fn rcpts<S: AsyncRead + AsyncWrite + Unpin>(c: &mut Client<S>, to: &[&str]) -> Vec<String> {
    let r = c.cmd("MAIL FROM:<a@sender.test>").await;
    assert!(r.starts_with("250"), "{r}");
    let mut out = Vec::new();
    for t in to {
        out.push(c.cmd(&format!("RCPT TO:{t}")).await);
    }
    assert!(c.cmd("RSET").await.starts_with("250"));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quoted_local_parts_are_forwarded_quoted_never_raw() {
    let dir = temp_dir("strict-quoted");
    let sink = recording_sink().await;
    let (server, addr) = start(config(&dir, Some(sink.addr))).await;
    let mut c = Client::ready(addr).await;
    let injected = "\"v@evil.test> ORCPT=rfc822;x\"@ours.test";
    let to = [injected, "\"john smith\"@dest.test", "\"abc\"@dest.test"];
    let r = c.message("a@sender.test", &to, &body("quoted")).await;
    assert!(r.starts_with("250 2.0.0"), "{r}");
    assert!(wait_until(10, || sink.count() == 1).await);
    let got = &sink.messages()[0].recipients;
    assert_eq!(
        got,
        &[injected, "\"john smith\"@dest.test", "abc@dest.test"],
        "the next hop sees the quoted local parts, not an injected recipient"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn untrusted_clients_may_not_use_sender_specified_routing() {
    let dir = temp_dir("strict-routing");
    // No next hop: sessions do not route (the transport is not theirs).
    let mut c = ScriptedSession::ready(untrusted_config(&dir, None)).await;
    let replies = rcpts(
        &mut *c,
        &[
            "<v%evil.test@ours.test>",
            "<evil.test!v@ours.test>",
            "<\"v@evil.test\"@ours.test>",
            "<@relay.test:v@ours.test>",
            "<v@ours.test>",
            "<v@ours.test.>",
        ],
    )
    .await;
    for r in &replies[..4] {
        assert!(r.starts_with("554 5.7.1"), "{r}");
    }
    assert!(replies[4].starts_with("250 2.1.5"), "{}", replies[4]);
    assert!(
        replies[5].starts_with("250 2.1.5"),
        "a trailing dot is the same domain: {}",
        replies[5]
    );
    c.finish().await;
}

#[tokio::test]
async fn control_octets_bad_utf8_and_bad_names_get_501() {
    let dir = temp_dir("strict-octets");
    let (mut c, _) = ScriptedSession::connect(config(&dir, None)).await;
    for helo in [&b"EHLO a;b(\r\n"[..], b"EHLO a\x1bb\r\n", b"HELO a b\r\n"] {
        c.send(helo).await;
        let r = c.reply().await;
        assert!(r.starts_with("501"), "{helo:?}: {r}");
    }
    assert!(c.cmd("EHLO client.test").await.starts_with("250"));
    assert!(c
        .cmd("MAIL FROM:<a@sender.test> SMTPUTF8")
        .await
        .starts_with("250"));
    let bad: [&[u8]; 5] = [
        b"RCPT TO:<\"\x1b[2J\"@dest.test>\r\n",
        b"RCPT TO:<a\x7fb@dest.test>\r\n",
        b"RCPT TO:<us\rer@dest.test>\r\n",
        b"RCPT TO:<\xffx@dest.test>\r\n",
        b"RCPT TO:<a\tb@dest.test>\r\n",
    ];
    for line in bad {
        c.send(line).await;
        let r = c.reply().await;
        assert!(r.starts_with("501"), "{line:?}: {r}");
    }
    let long_local = format!("RCPT TO:<{}@dest.test>", "a".repeat(65));
    let long_label = format!("RCPT TO:<a@{}.test>", "b".repeat(64));
    let general_literal = "RCPT TO:<a@[tag:stuff]>".to_string();
    for line in [long_local, long_label, general_literal] {
        let r = c.cmd(&line).await;
        assert!(r.starts_with("501 5.1.3"), "{line}: {r}");
    }
    c.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postmaster_and_address_literals() {
    let dir = temp_dir("strict-postmaster");
    let sink = recording_sink().await;
    let mut cfg = untrusted_config(&dir, Some(sink.addr));
    cfg.postmaster = "admin@ours.test".parse().ok();
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("a@sender.test", &["Postmaster"], &body("pm"))
        .await;
    assert!(r.starts_with("250 2.0.0"), "{r}");
    assert!(wait_until(10, || sink.count() == 1).await);
    assert_eq!(sink.messages()[0].recipients, ["admin@ours.test"]);
    let r = c.cmd("MAIL FROM:<postmaster>").await;
    assert!(r.starts_with("501 5.1.7"), "a sender needs a domain: {r}");
    // An address literal is an address: relay policy, not a syntax error.
    let replies = rcpts(&mut c, &["<u@[192.0.2.1]>", "<u@[IPv6:2001:db8::1]>"]).await;
    for r in replies {
        assert!(r.starts_with("554 5.7.1"), "{r}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn commands_take_no_arguments_and_unadvertised_parameters_get_555() {
    let dir = temp_dir("strict-args");
    let mut c = ScriptedSession::ready(config(&dir, None)).await;
    for line in ["RSET x", "QUIT now", "STARTTLS please", "NOOP"] {
        let r = c.cmd(line).await;
        let want = if line == "NOOP" { "250" } else { "501 5.5.4" };
        assert!(r.starts_with(want), "{line}: {r}");
    }
    for line in [
        "MAIL FROM:<a@b.test> REQUIRETLS",
        "MAIL FROM:<a@b.test> BODY=BINARYMIME",
        "MAIL FROM:<a@b.test> HOLDUNTIL=20261122",
    ] {
        let r = c.cmd(line).await;
        assert!(r.starts_with("555"), "{line}: {r}");
    }
    assert!(c.cmd("MAIL FROM:<a@b.test>").await.starts_with("250"));
    let r = c.cmd("RCPT TO:<c@d.test> XFORWARD=1").await;
    assert!(r.starts_with("555"), "not offered: {r}");
    assert!(c.cmd("RCPT TO:<c@d.test>").await.starts_with("250"));
    let r = c.cmd("DATA foo").await;
    assert!(r.starts_with("501 5.5.4"), "{r}");
    // Parameters need EHLO.
    assert!(c.cmd("HELO client.test").await.starts_with("250"));
    let r = c.cmd("MAIL FROM:<a@b.test> SIZE=10").await;
    assert!(r.starts_with("555"), "{r}");
    c.finish().await;
}

#[tokio::test]
async fn relay_denials_count_as_errors() {
    let dir = temp_dir("strict-relay-errors");
    let mut cfg = untrusted_config(&dir, None);
    cfg.smtpd.max_errors = 3;
    let mut c = ScriptedSession::ready(cfg).await;
    assert!(c.cmd("MAIL FROM:<a@b.test>").await.starts_with("250"));
    let mut all = String::new();
    for i in 0..5 {
        let r = c.cmd(&format!("RCPT TO:<x{i}@evil.test>")).await;
        all.push_str(&r);
        if r.is_empty() || r.contains("421") {
            break;
        }
    }
    assert!(all.contains("421 4.7.0"), "{all}");
    c.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelining_violations_are_not_executed() {
    let dir = temp_dir("strict-sync");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.smtpd.greet_pause_ms = 300;
    let (server, addr) = start(cfg).await;
    // Talking before the greeting.
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(b"EHLO early.test\r\n").await.unwrap();
    let mut all = Vec::new();
    stream.read_to_end(&mut all).await.unwrap();
    let text = String::from_utf8_lossy(&all);
    assert!(text.starts_with("554 5.5.1"), "{text}");
    assert!(!text.contains("250"), "{text}");
    // A message pipelined behind a refused DATA is not run as commands.
    let mut c = Client::ready(addr).await;
    assert!(c.cmd("MAIL FROM:<a@b.test>").await.starts_with("250"));
    c.send(b"DATA\r\nRSET\r\nMAIL FROM:<evil@x.test>\r\nRCPT TO:<v@dest.test>\r\nDATA\r\nevil\r\n.\r\n")
        .await;
    let replies = c.replies_until_closed().await;
    assert!(replies.starts_with("554 5.5.1"), "{replies}");
    assert!(!replies.contains("250"), "{replies}");
    server.shutdown().await;
    assert_eq!(sink.count(), 0);
}

#[tokio::test]
async fn bdat_syntax_error_closes_the_session() {
    let dir = temp_dir("strict-bdat-syntax");
    let mut c = ScriptedSession::ready(config(&dir, None)).await;
    c.send(b"BDAT 99999999999999999999999 LAST\r\nRSET\r\n")
        .await;
    let replies = c.replies_until_closed().await;
    assert!(replies.starts_with("501"), "{replies}");
    assert!(
        !replies.contains("250"),
        "the chunk is not read as commands: {replies}"
    );
    c.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_lines_nul_and_bdat_limits() {
    let dir = temp_dir("strict-text");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.smtpd.message_size_limit = 10_000;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    // A 998-octet line that starts with a dot travels as 999 + CRLF.
    let dotted = format!("Subject: d\r\n\r\n..{}\r\n", "x".repeat(997));
    let r = c.message("a@b.test", &["x@dest.test"], &dotted).await;
    assert!(r.starts_with("250 2.0.0"), "{r}");
    let r = c
        .message("a@b.test", &["x@dest.test"], "Subject: n\r\n\r\na\0b\r\n")
        .await;
    assert!(r.starts_with("554 5.6.0"), "NUL in DATA: {r}");
    // BDAT: the same line limit and NUL rule as DATA.
    for body in [
        format!("Subject: l\r\n\r\n{}\r\n", "y".repeat(5000)),
        "Subject: n\r\n\r\na\0b\r\n".into(),
    ] {
        assert!(c.cmd("MAIL FROM:<a@b.test>").await.starts_with("250"));
        assert!(c.cmd("RCPT TO:<x@dest.test>").await.starts_with("250"));
        c.send(format!("BDAT {} LAST\r\n{body}", body.len()).as_bytes())
            .await;
        let r = c.reply().await;
        assert!(r.starts_with("554 5.6.0"), "{r}");
    }
    // BDAT over the size limit is refused on the chunk that overflows.
    assert!(c.cmd("MAIL FROM:<a@b.test>").await.starts_with("250"));
    assert!(c.cmd("RCPT TO:<x@dest.test>").await.starts_with("250"));
    c.send(format!("BDAT 20000\r\n{}", "z".repeat(20000)).as_bytes())
        .await;
    let r = c.reply().await;
    assert!(r.starts_with("552 5.3.4"), "{r}");
    assert!(wait_until(10, || sink.count() == 1).await);
    server.shutdown().await;
    assert_eq!(sink.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_line_over_1000_octets_is_sent_on() {
    let dir = temp_dir("strict-wrap");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.smtpd.text_line_limit = 0;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let long = format!("Subject: w\r\n\r\n{}\r\n", "#".repeat(5000));
    let r = c.message("a@b.test", &["x@dest.test"], &long).await;
    assert!(r.starts_with("250 2.0.0"), "{r}");
    assert!(wait_until(10, || sink.count() == 1).await);
    let got = sink.messages()[0].body.clone();
    for line in got.split(|&b| b == b'\n') {
        assert!(
            line.len() <= 1000,
            "a line of {} octets was sent",
            line.len()
        );
    }
    assert_eq!(got.iter().filter(|&&b| b == b'#').count(), 5000);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_users_in_relay_domains_are_refused_at_rcpt() {
    let dir = temp_dir("strict-relay-rcpt");
    let sink = recording_sink().await;
    let mut cfg = untrusted_config(&dir, Some(sink.addr));
    let table = dir.join("relay_recipients");
    std::fs::write(&table, "known@ours.test ok\n@open.ours.test ok\n").unwrap();
    cfg.tables.insert(
        "relay".into(),
        toml::from_str(&format!("kind = \"static\"\npath = {:?}", table)).unwrap(),
    );
    cfg.smtpd.relay_domains.push(".ours.test".parse().unwrap());
    cfg.smtpd.relay_recipient_table = Some("relay".into());
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let replies = rcpts(
        &mut c,
        &[
            "<nosuch@ours.test>",
            "<known@ours.test>",
            "<any@open.ours.test>",
        ],
    )
    .await;
    assert!(replies[0].starts_with("550 5.1.1"), "{}", replies[0]);
    assert!(replies[1].starts_with("250"), "{}", replies[1]);
    assert!(replies[2].starts_with("250"), "{}", replies[2]);
    server.shutdown().await;
    assert!(any_logged(&dir, |e| matches!(
        e,
        Event::Reject(Reject::UnknownUser { cause, table, .. })
            if cause == "unknown_user" && table == "relay recipient table"
    )));
}
