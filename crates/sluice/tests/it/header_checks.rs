//! Header and body checks (`[content_checks]`: Postfix's `header_checks`,
//! `mime_header_checks`, `nested_header_checks`, `body_checks`; issue 39)
//! held to a real Postfix 3.7: the same pcre/regexp tables, the same
//! messages; compared are the reply at the end of data (code and enhanced
//! code), whether the message was delivered, to whom, and the delivered
//! message (its headers and body, less each server's own `Received:`).
//! Both deliver to a recording sink. Then what only Sluice has: a
//! listener's own lists, sendmail submissions, hostile patterns and
//! messages, a table that fails.

use std::collections::BTreeSet;

use crate::common;
use common::postfix::{Postfix, Reply};
use common::*;
use sluice_bench::sink::Sink;

const HEADER: &str = r#"/^Subject:.*cheap pills/ REJECT Spam not wanted here
/^Subject: later please/ REJECT 4.7.1 Try later
/^Received: from laptop\.strip\.test/ IGNORE
/^X-Mailer: (.*)/ REPLACE X-Mailer: hidden (was $1)
/^Subject: prepend me/ PREPEND X-Tag: prepended
/^Subject: just warn/ WARN watch this
/^Subject: discard me/ DISCARD
/^Subject: hold me/ HOLD held for review
/^Subject: redirect me/ REDIRECT elsewhere@far.test
/^Subject: copy me/ BCC copy@far.test
/^Subject: folded\n line here$/ REJECT 5.7.0 folded matched
/^Subject: strip me/ STRIP
/^Subject: pass me/ PASS trusted
/^Subject: info me/ INFO noted
/^Subject: plain reject/ REJECT
/^Subject: bad prepend/ PREPEND not a header
"#;
const MIME: &str = r#"/^Content-(Disposition|Type).*name\s*=\s*"?.*\.(exe|bat|scr)"?/ REJECT Executable attachments not allowed
"#;
const NESTED: &str = "/^Subject: nested bad/ REJECT Nested rejected\n";
const BODY: &str = "\
/^this line is forbidden/ REJECT Bad body
/^replace this body line/ REPLACE the body line was replaced
/^drop this body line/ IGNORE
";

/// Each case: (its number in `X-Case:`, extra headers, body).
fn cases() -> Vec<(usize, String, String)> {
    let plain = "Hello.\r\n".to_string();
    let mime = |subject: &str, boundary: &str| {
        format!(
            "Subject: {subject}\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"{boundary}\"\r\n"
        )
    };
    let attach = |name: &str| {
        format!(
            "--b1\r\nContent-Type: text/plain\r\n\r\nsee attached\r\n--b1\r\nContent-Type: application/octet-stream;\r\n name=\"{name}\"\r\n\r\nAAAA\r\n--b1--\r\n"
        )
    };
    let nested = |subject: &str| {
        format!(
            "--b2\r\nContent-Type: message/rfc822\r\n\r\nFrom: x@inner.test\r\nSubject: {subject}\r\n\r\ninner\r\n--b2--\r\n"
        )
    };
    let list: Vec<(String, String)> = vec![
        ("Subject: buy cheap pills\r\n".into(), plain.clone()),
        ("Subject: later please\r\n".into(), plain.clone()),
        (
            "Received: from laptop.strip.test ([10.0.0.5])\r\n\tby submit.test; Fri, 27 Nov 2026 10:00:00 +0000\r\nSubject: strip\r\n".into(),
            plain.clone(),
        ),
        ("Subject: r\r\nX-Mailer: Acme 1.0\r\n".into(), plain.clone()),
        ("Subject: prepend me\r\n".into(), plain.clone()),
        ("Subject: just warn\r\n".into(), plain.clone()),
        ("Subject: discard me\r\n".into(), plain.clone()),
        ("Subject: hold me\r\n".into(), plain.clone()),
        // A REDIRECT turns the checks off: the body line after is not seen.
        ("Subject: redirect me\r\n".into(), "this line is forbidden\r\n".into()),
        ("Subject: copy me\r\n".into(), plain.clone()),
        (mime("exe", "b1"), attach("setup.exe")),
        (mime("pdf", "b1"), attach("paper.pdf")),
        ("Subject: body\r\n".into(), "ok\r\nthis line is forbidden\r\n".into()),
        (
            "Subject: body edits\r\n".into(),
            "keep\r\nreplace this body line\r\ndrop this body line\r\nkeep too\r\n".into(),
        ),
        (mime("nested", "b2"), nested("nested bad")),
        (mime("nested ok", "b2"), nested("nested fine")),
        ("Subject: folded\r\n line here\r\n".into(), plain.clone()),
        ("Subject: folded\r\n line here too\r\n".into(), plain.clone()),
        ("Subject: strip me\r\nX-Keep: 1\r\n".into(), plain.clone()),
        // PASS: no more checks, the forbidden line passes.
        ("Subject: pass me\r\n".into(), "this line is forbidden\r\n".into()),
        ("Subject: info me\r\n".into(), plain.clone()),
        ("Subject: plain reject\r\n".into(), plain.clone()),
        ("Subject: bad prepend\r\n".into(), plain.clone()),
        ("Subject: nothing matches\r\n".into(), plain),
    ];
    list.into_iter()
        .enumerate()
        .map(|(i, (h, b))| (i, h, b))
        .collect()
}

fn message(case: usize, headers: &str, body: &str) -> String {
    format!(
        "From: <a@client.test>\r\nTo: <b@far.test>\r\nDate: Fri, 27 Nov 2026 10:00:00 +0000\r\nMessage-ID: <case{case}@client.test>\r\nX-Case: {case}\r\n{headers}\r\n{body}"
    )
}

/// What became of one case.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Outcome {
    code: u16,
    enhanced: Option<String>,
    /// A refusal's text (an acceptance's names the queue ID: not kept).
    reply: String,
    /// The recipients it was delivered to (none: not delivered).
    to: BTreeSet<String>,
    /// The delivered message, without the receiving server's trace.
    text: String,
}

/// The delivered message of `case` with the server's own `Received:`
/// (`by postfix.test`, `by mx.test`) taken out.
fn delivered(sink: &Sink, case: usize) -> (BTreeSet<String>, String) {
    let tag = format!("X-Case: {case}\r\n");
    let mut to = BTreeSet::new();
    let mut text = String::new();
    for m in sink.messages() {
        let body = String::from_utf8_lossy(&m.body).to_string();
        if !body.contains(&tag) {
            continue;
        }
        to.extend(m.recipients.iter().map(|r| r.to_ascii_lowercase()));
        text = without_own_trace(&body);
    }
    (to, text)
}

fn without_own_trace(msg: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    let mut lines = msg.split_inclusive("\r\n").peekable();
    let mut in_header = true;
    while let Some(line) = lines.next() {
        if in_header && line == "\r\n" {
            in_header = false;
        }
        let continued = line.starts_with([' ', '\t']);
        if in_header && !continued {
            let mut whole = line.to_string();
            let mut more = lines.clone();
            while let Some(next) = more.next().filter(|l| l.starts_with([' ', '\t'])) {
                whole.push_str(next);
            }
            skipping = line.starts_with("Received:")
                && (whole.contains("by postfix.test") || whole.contains("by mx.test"));
        }
        if !(in_header && skipping) {
            out.push_str(line);
        }
    }
    out
}

const TABLES: [(&str, &str); 4] = [("hc", HEADER), ("mc", MIME), ("nc", NESTED), ("bc", BODY)];

async fn postfix_outcomes(sink: &Sink) -> (Vec<Outcome>, String) {
    let params = [
        ("header_checks", "pcre:$config_directory/hc"),
        ("mime_header_checks", "pcre:$config_directory/mc"),
        ("nested_header_checks", "regexp:$config_directory/nc"),
        ("body_checks", "regexp:$config_directory/bc"),
        ("default_transport", "smtp"),
        ("relay_transport", "smtp"),
    ];
    let relayhost = format!("[127.0.0.1]:{}", sink.addr.port());
    let mut all: Vec<(&str, &str)> = params.to_vec();
    all.push(("relayhost", &relayhost));
    let postfix = Postfix::start_with(&TABLES, &all, "");
    let mut session = postfix.session().await;
    let mut replies = Vec::new();
    for (case, headers, body) in cases() {
        let raw = session
            .client
            .message(
                "a@client.test",
                &["b@far.test"],
                &message(case, &headers, &body),
            )
            .await;
        replies.push(Reply::parse(&raw));
    }
    let queued: Vec<String> = replies
        .iter()
        .filter(|r| r.code == 250)
        .map(|r| qid_of(&r.text))
        .collect();
    let settled = |log: &str, q: &String| {
        [": removed\n", ": hold: ", ": discard: "]
            .iter()
            .any(|end| log.contains(&format!(" {q}{end}")))
    };
    let done = wait_until(30, || {
        let log = postfix.maillog();
        queued.iter().all(|q| settled(&log, q))
    })
    .await;
    assert!(done, "postfix: not done\n{}", postfix.maillog());
    let outcomes = outcomes(replies, sink);
    (outcomes, postfix.maillog())
}

fn outcomes(replies: Vec<Reply>, sink: &Sink) -> Vec<Outcome> {
    replies
        .into_iter()
        .enumerate()
        .map(|(case, r)| {
            let (to, text) = delivered(sink, case);
            Outcome {
                code: r.code,
                reply: if r.code == 250 { String::new() } else { r.text },
                enhanced: r.enhanced,
                to,
                text,
            }
        })
        .collect()
}

fn write_tables(dir: &std::path::Path, cfg: &mut sluice::config::Config) {
    for (name, text) in TABLES {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let cc = &mut cfg.content_checks;
    let path = |kind: &str, name: &str| vec![format!("{kind}:{}", dir.join(name).display())];
    cc.header_checks = path("pcre", "hc");
    cc.mime_header_checks = Some(path("pcre", "mc"));
    cc.nested_header_checks = Some(path("regexp", "nc"));
    cc.body_checks = path("regexp", "bc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_and_body_checks_act_as_postfix_s() {
    let their_sink = recording_sink().await;
    let (theirs, their_log) = postfix_outcomes(&their_sink).await;
    let dir = temp_dir("header-checks");
    std::fs::create_dir_all(&*dir).unwrap();
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    write_tables(&dir, &mut cfg);
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let mut replies = Vec::new();
    for (case, headers, body) in cases() {
        let raw = c
            .message(
                "a@client.test",
                &["b@far.test"],
                &message(case, &headers, &body),
            )
            .await;
        replies.push(Reply::parse(&raw));
    }
    let expected: usize = theirs.iter().filter(|o| !o.to.is_empty()).count();
    let cases_delivered = || {
        let msgs = sink.messages();
        (0..theirs.len())
            .filter(|c| {
                let tag = format!("X-Case: {c}\r\n");
                msgs.iter()
                    .any(|m| String::from_utf8_lossy(&m.body).contains(&tag))
            })
            .count()
    };
    assert!(
        wait_until(30, || cases_delivered() >= expected).await,
        "{} of {expected}",
        cases_delivered()
    );
    let ours = outcomes(replies, &sink);
    for (case, (o, t)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(o, t, "case {case}: {:?}", cases()[case].1);
    }
    not_vacuous(&theirs);
    // The held message: held by both, delivered by neither.
    assert!(
        their_log.contains(": hold: header Subject: hold me from "),
        "{their_log}"
    );
    let held = events_named(&dir, "hold");
    assert!(
        held.iter()
            .any(|e| e["cause"] == "header_checks" && e["reason"] == "held for review"),
        "{held:?}"
    );
    // The log lines read as Postfix's.
    let line = "reject: header Subject: buy cheap pills from ";
    assert!(their_log.contains(line), "{their_log}");
    let checks = events_named(&dir, "header_check");
    let reject = checks.iter().find(|e| e["action"] == "reject").unwrap();
    let text = reject["text"].as_str().unwrap();
    assert!(
        text.contains(line) && text.ends_with(": 5.7.1 Spam not wanted here"),
        "{text}"
    );
    assert!(their_log.contains(": 5.7.1 Spam not wanted here\n"));
    let warned = checks.iter().find(|e| e["action"] == "warning").unwrap();
    assert!(
        warned["text"].as_str().unwrap().ends_with(": watch this"),
        "{warned}"
    );
    server.shutdown().await;
}

/// Each kind of outcome happened (Postfix's, which ours equal).
fn not_vacuous(theirs: &[Outcome]) {
    let codes: BTreeSet<u16> = theirs.iter().map(|o| o.code).collect();
    assert_eq!(codes, BTreeSet::from([250, 451, 550]));
    assert!(theirs.iter().any(|o| o.to.contains("copy@far.test")));
    assert!(theirs.iter().any(|o| o.to.contains("elsewhere@far.test")));
    let code = |case: usize| (theirs[case].code, theirs[case].enhanced.as_deref());
    assert_eq!(code(0), (550, Some("5.7.1")));
    assert_eq!(code(1), (451, Some("4.7.1")));
    assert!(!theirs[2].text.contains("laptop.strip.test"));
    assert!(theirs[3].text.contains("X-Mailer: hidden (was Acme 1.0)"));
    assert!(theirs[4]
        .text
        .contains("X-Tag: prepended\r\nSubject: prepend me"));
    assert!(theirs[5].text.contains("Subject: just warn"));
    // DISCARD and HOLD: taken, not delivered.
    assert!(code(6).0 == 250 && theirs[6].to.is_empty());
    assert!(code(7).0 == 250 && theirs[7].to.is_empty());
    // REDIRECT, then no more checks: the forbidden body line passes.
    assert_eq!(
        theirs[8].to,
        BTreeSet::from(["elsewhere@far.test".to_string()])
    );
    assert_eq!(theirs[9].to.len(), 2);
    // The executable attachment (its name on a folded line), not the pdf.
    assert_eq!((code(10).0, code(11).0), (550, 250));
    assert_eq!(code(12).0, 550);
    let edited = &theirs[13].text;
    assert!(
        edited.contains("keep\r\nthe body line was replaced\r\nkeep too\r\n"),
        "{edited}"
    );
    assert_eq!((code(14).0, code(15).0), (550, 250));
    // A folded header is looked up with its line break as `\n`.
    assert_eq!((code(16), code(17).0), ((550, Some("5.7.0")), 250));
    assert!(theirs[18].text.contains("X-Case: 18\r\nX-Keep: 1\r\n"));
    assert_eq!(theirs[19].to.len(), 1);
    assert_eq!(code(21), (550, Some("5.7.1")));
    assert!(theirs[22]
        .text
        .contains("X-Case: 22\r\nSubject: bad prepend"));
}

/// A listener's own lists: the submission listener strips our own trace
/// (the client's address), port 25 keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_may_strip_the_clients_received() {
    let dir = temp_dir("header-checks-listener");
    std::fs::create_dir_all(&*dir).unwrap();
    std::fs::write(
        dir.join("strip"),
        "/^Received: from .*\\(Sluice\\)/ IGNORE\n",
    )
    .unwrap();
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    let submission: std::net::SocketAddr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut listener = proxy_listener();
    (listener.listen, listener.proxy_protocol) = (submission, false);
    listener.proxy_protocol_from = Vec::new();
    listener.content_checks.header_checks =
        Some(vec![format!("regexp:{}", dir.join("strip").display())]);
    // Only the message's own headers: the walk ends with them.
    (
        listener.content_checks.mime_header_checks,
        listener.content_checks.nested_header_checks,
    ) = (Some(Vec::new()), Some(Vec::new()));
    cfg.smtpd.listeners.push(listener);
    let (server, addr) = start(cfg).await;
    for (port, subject) in [(addr, "port 25"), (submission, "submission")] {
        let mut c = Client::ready(port).await;
        let r = c
            .message("a@client.test", &["b@far.test"], &body(subject))
            .await;
        assert!(r.starts_with("250"), "{r}");
    }
    assert!(wait_until(15, || sink.count() >= 2).await);
    for m in sink.messages() {
        let text = String::from_utf8_lossy(&m.body);
        let traced = text.contains("(Sluice) with ESMTP");
        match text.contains("Subject: submission") {
            true => assert!(!traced, "stripped on submission: {text}"),
            false => assert!(traced, "kept on port 25: {text}"),
        }
    }
    server.shutdown().await;
}

/// A sendmail submission is checked with the main lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sendmail_submission_is_checked() {
    let dir = temp_dir("header-checks-sendmail");
    std::fs::create_dir_all(&*dir).unwrap();
    std::fs::write(dir.join("hc"), "/^Subject: no way/ REJECT Not from here\n").unwrap();
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.content_checks.header_checks = vec![format!("regexp:{}", dir.join("hc").display())];
    let conf = client_config(&dir, &cfg.data_dir);
    let (server, _) = start(cfg).await;
    let sendmail = dir.join("sendmail");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sluice"), &sendmail).unwrap();
    let run = |msg: &'static [u8]| {
        let (sendmail, conf) = (sendmail.clone(), conf.clone());
        tokio::task::spawn_blocking(move || {
            let mut cmd = std::process::Command::new(sendmail);
            cmd.arg("-C").arg(conf).arg("c@far.test");
            output_of(cmd, msg)
        })
    };
    let (code, _, err) = run(b"Subject: no way\n\nbody\n").await.unwrap();
    assert_eq!(code, 65, "{err}");
    assert!(err.contains("Not from here"), "{err}");
    let (code, _, err) = run(b"Subject: fine\n\nbody\n").await.unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(wait_until(15, || sink.count() == 1).await);
    server.shutdown().await;
}

/// Hostile input: a catastrophic pcre pattern against a long line stops
/// the checks (a typed warning; the message is answered at once, and
/// deferred: never taken unchecked);
/// a table that cannot answer defers (`451 4.3.0`); a 1 MB header and
/// 10,000 headers are checked without harm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_patterns_and_messages_are_bounded() {
    let dir = temp_dir("header-checks-hostile");
    std::fs::create_dir_all(&*dir).unwrap();
    std::fs::write(
        dir.join("evil"),
        "/^X-Evil: (a+)+\\1$/ REJECT matched\n/^Subject: stop/ REJECT too late\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("hc"),
        "/^X-Big: a{10}/ WARN big\n/^X-N-9999:/ REJECT ten thousand\n",
    )
    .unwrap();
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.smtpd.text_line_limit = 0;
    cfg.content_checks.header_checks = vec![format!("pcre:{}", dir.join("evil").display())];
    let mut listener = proxy_listener();
    let other: std::net::SocketAddr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    (listener.listen, listener.proxy_protocol) = (other, false);
    listener.proxy_protocol_from = Vec::new();
    listener.content_checks.header_checks =
        Some(vec![format!("regexp:{}", dir.join("hc").display())]);
    listener.content_checks.body_checks = Some(Vec::new());
    cfg.smtpd.listeners.push(listener);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    cfg.content_checks.body_checks = vec![format!("socketmap:inet:127.0.0.1:{port}:body")];
    let (server, addr) = start(cfg).await;

    // The catastrophic pattern: the checks stop and the message is
    // deferred, never taken unchecked.
    let evil = format!("X-Evil: {}!\r\nSubject: stop\r\n\r\n", "a".repeat(5000));
    let mut c = Client::ready(addr).await;
    let r = c.message("a@client.test", &["b@far.test"], &evil).await;
    assert!(r.starts_with("451 4.3.0"), "{r}");
    let stopped = || {
        events_named(&dir, "warning").iter().any(|e| {
            e["kind"] == "content_checks" && e["text"].as_str().unwrap().contains("checks stopped")
        })
    };
    assert!(wait_until(10, stopped).await, "no content_checks warning");
    // The body table is down: deferred (headers pass, a body line is asked).
    let r = c
        .message("a@client.test", &["b@far.test"], &body("plain"))
        .await;
    assert!(r.starts_with("451 4.3.0"), "{r}");

    // The other listener: no body checks; a huge header, many headers.
    let mut c = Client::ready(other).await;
    let big = format!(
        "X-Big: {}\r\nSubject: big\r\n\r\nbody\r\n",
        "a".repeat(1 << 20)
    );
    let r = c.message("a@client.test", &["b@far.test"], &big).await;
    assert!(r.starts_with("250"), "{r}");
    let mut many: String = (0..10_000).map(|i| format!("X-N-{i}: v\r\n")).collect();
    many.push_str("\r\nbody\r\n");
    let r = c.message("a@client.test", &["b@far.test"], &many).await;
    assert!(r.starts_with("550 5.7.1 ten thousand"), "{r}");
    let warned = || {
        let checks = events_named(&dir, "header_check");
        checks.iter().any(|e| {
            e["action"] == "warning" && e["content"].as_str().unwrap().chars().count() <= 200
        })
    };
    assert!(
        wait_until(10, warned).await,
        "the big header's WARN, cut to 200"
    );
    server.shutdown().await;
}
