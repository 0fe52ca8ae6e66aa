//! tcp tables against Postfix's tcp_table client (postmap): with a real
//! postsrsd, and with the scripted line server for the replies postsrsd
//! never gives.

use std::time::{Duration, Instant};

use sluice::tables::socketmap::{RemoteError, ServerClass};
use sluice::tables::tcp::TcpTable;

use super::fake::Fake;
use super::{assert_all_kinds, ours, Answer, Postmap};
use crate::common::postsrsd::Postsrsd;

const LIMIT: Duration = Duration::from_secs(20);
const DOMAIN: &str = "example.org";

/// Both clients' answer for `key`: postmap asked before and, if Sluice's
/// answer differs, after (an SRS address holds the day: a comparison that
/// straddles midnight UTC matches one of the two).
async fn same(postmap: &Postmap, t: &TcpTable, map: &str, key: &str) -> Answer {
    let before = postmap.ask(map, key).await;
    let mine = ours(t.query(key).await);
    if mine != before {
        let after = postmap.ask(map, key).await;
        assert_eq!(
            mine, after,
            "key {key:.60?} of {map} (postmap before: {before:?})"
        );
    }
    mine
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_as_postfix_with_a_real_postsrsd() {
    let srsd = Postsrsd::start(DOMAIN);
    let postmap = Postmap::new();
    let forward = format!("127.0.0.1:{}", srsd.forward);
    let reverse = format!("127.0.0.1:{}", srsd.reverse);
    let fwd = TcpTable::new("srs_forward", &forward, LIMIT).unwrap();
    let rev = TcpTable::new("srs_reverse", &reverse, LIMIT).unwrap();
    let (fmap, rmap) = (format!("tcp:{forward}"), format!("tcp:{reverse}"));
    let senders = [
        "user@outside.net".to_string(),
        "a b%c@outside.net".into(),
        "%41%zz@outside.net".into(),
        "line\nbreak@outside.net".into(),
        "tab\there@outside.net".into(),
        "josé@outside.net".into(),
        "quote\"d'@outside.net".into(),
        format!("{}@outside.net", "x".repeat(600)),
        "user@example.org".into(),
        "noatsign".into(),
        " ".into(),
    ];
    // A request far over postsrsd's line buffer: it answers `500` and
    // closes with the rest unread, so a client reads the answer or the
    // reset, whichever comes first (Postfix's postmap and Sluice alike:
    // seen both ways). Either means "not this key"; neither may be an
    // SRS address.
    let long = format!("{}@outside.net", "x".repeat(10_240));
    for answer in [
        ours(fwd.query(&long).await),
        postmap.ask(&fmap, &long).await,
    ] {
        assert!(
            matches!(answer, Answer::NotFound | Answer::Error),
            "{answer:?}"
        );
    }
    let mut rewritten = Vec::new();
    for sender in &senders {
        let srs = same(&postmap, &fwd, &fmap, sender).await;
        if let Answer::Found(srs) = &srs {
            if srs.starts_with("SRS0=") {
                rewritten.push((sender.clone(), srs.clone()));
            }
        }
    }
    assert!(
        rewritten.len() >= 7,
        "outside senders were rewritten: {rewritten:?}"
    );
    for (sender, srs) in &rewritten {
        assert!(srs.ends_with("@example.org"), "{srs}");
        // The original back, as both clients read it.
        assert_eq!(
            same(&postmap, &rev, &rmap, srs).await,
            Answer::Found(sender.clone())
        );
    }
    let forged = rewritten[0].1.replacen("SRS0=", "SRS0=AAAA", 1);
    for key in [
        forged.as_str(),
        "nobody@example.org",
        "SRS0=bad=XX=outside.net=user@example.org",
    ] {
        assert_eq!(
            same(&postmap, &rev, &rmap, key).await,
            Answer::NotFound,
            "{key}"
        );
    }
}

/// Replies postsrsd never gives, from the scripted server: every kind of
/// answer, and the bytes each client sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_and_requests_as_postfix_with_a_scripted_server() {
    let server = Fake::tcp().await;
    let postmap = Postmap::new();
    let map = format!("tcp:{}", server.host_port());
    let t = TcpTable::new("t", server.host_port(), LIMIT).unwrap();
    let mut answers = Vec::new();
    for key in [
        "found",
        "a b%c\nd",
        "josé",
        "twofifty",
        "tab",
        "missing",
        "temp",
        "weird",
        "badhex",
        "nospace",
        "max",
        "unknown key",
    ] {
        let theirs = postmap.ask(&map, key).await;
        let sent = server.requests();
        let mine = ours(t.query(key).await);
        assert_eq!(mine, theirs, "key {key:?}");
        assert_eq!(server.requests(), sent, "the bytes sent for {key:?}");
        answers.push(mine);
    }
    assert_all_kinds(&answers);
    assert_eq!(answers[0], Answer::Found("a value%".into()));
    assert_eq!(answers[1], Answer::Found("found it".into()));
    assert_eq!(answers[2], Answer::Found("ünïcode".into()));
    t.query("a b%c\nd").await.unwrap();
    assert_eq!(server.requests(), ["get a%20b%25c%0Ad\n"]);
}

/// A hostile or broken server: typed errors within the time limit, reads
/// bounded by Postfix's line limit; the table answers again afterwards.
/// (postmap retries these ten times a second apart, so it is not asked.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_server_gives_errors_never_answers() {
    let server = Fake::tcp().await;
    let limit = Duration::from_secs(2);
    let t = TcpTable::new("t", server.host_port(), limit).unwrap();
    let started = Instant::now();
    let hung = t.query("hang").await;
    assert!(
        matches!(hung, Err(RemoteError::TimedOut { .. })),
        "{hung:?}"
    );
    assert!(started.elapsed() < limit * 5, "gave up within the limit");
    for key in ["over", "endless"] {
        let r = t.query(key).await;
        assert!(
            matches!(r, Err(RemoteError::TooLong { limit: 4096, .. })),
            "{key}: {r:?}"
        );
    }
    server.take();
    let closed = t.query("closemid").await;
    assert!(
        matches!(closed, Err(RemoteError::Closed { .. })),
        "{closed:?}"
    );
    assert_eq!(
        server.take().requests.len(),
        2,
        "one retry on a fresh connection"
    );
    let temp = t.query("temp").await;
    assert!(
        matches!(
            temp,
            Err(RemoteError::Server {
                class: ServerClass::Temporary,
                ..
            })
        ),
        "{temp:?}"
    );
    assert!(matches!(t.query("x\0y").await, Err(RemoteError::NulInKey)));
    assert_eq!(t.query("found").await.unwrap().as_deref(), Some("a value%"));
}
