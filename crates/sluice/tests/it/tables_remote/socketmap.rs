//! socketmap tables against Postfix's own socketmap client (postmap),
//! both asking the scripted netstring server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::tables::socketmap::{RemoteError, ServerClass, SocketmapTable, MAX_CONNECTIONS};

use super::fake::{Fake, MAP};
use super::{assert_all_kinds, ours, Answer, Postmap};
use crate::common;

const LIMIT: Duration = Duration::from_secs(20);

fn table(endpoint: &str, limit: Duration) -> SocketmapTable {
    SocketmapTable::new("t", &format!("{endpoint}:{MAP}"), limit).unwrap()
}

/// Keys both clients are asked; the server answers the first ones, then
/// fails in every way Postfix's client reports without waiting out its
/// 100 s time limit.
fn keys() -> Vec<String> {
    let mut keys: Vec<String> = [
        "found@example.com",
        "spaced key",
        "comma,colon:key",
        "user@example.com",
        "User@Example.COM",
        "line\nbreak",
        "percent%41",
        "josé@example.com",
        "empty",
        "missing",
        " ",
        "temp",
        "timeout",
        "perm",
        "weird",
        "lowercase",
        "max",
        "over",
        "giant",
        "badlen",
        "noterm",
        "closemid",
    ]
    .map(String::from)
    .to_vec();
    // Longer than Postfix 3.12's query limit: 3.7 asks and the server
    // does not know it; 3.12 and Sluice do not ask.
    keys.push("x".repeat(10_240));
    keys
}

async fn compare(endpoint: &str, keys: &[String]) -> Vec<Answer> {
    let postmap = Postmap::new();
    let sluice = table(endpoint, LIMIT);
    let map = format!("socketmap:{endpoint}:{MAP}");
    let mut answers = Vec::new();
    for key in keys {
        let theirs = postmap.ask(&map, key).await;
        let mine = ours(sluice.query(key).await);
        assert_eq!(mine, theirs, "key {key:.40?}");
        answers.push(mine);
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_as_postfix_socketmap_client() {
    let server = Fake::socketmap().await;
    let answers = compare(&server.endpoint, &keys()).await;
    assert_all_kinds(&answers);
    assert_eq!(answers[0], Answer::Found("value one".into()));
    let max = answers.iter().find_map(|a| match a {
        Answer::Found(v) if v.len() > 1000 => Some(v.len()),
        _ => None,
    });
    assert_eq!(
        max,
        Some(100_000 - 3),
        "the largest reply Postfix takes is taken"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_as_postfix_over_a_unix_socket() {
    let server = Fake::socketmap_unix().await;
    assert!(server.endpoint.starts_with("unix:/"));
    // postmap takes a second to report each error: one is enough here.
    let keys: Vec<String> = keys().into_iter().take_while(|k| k != "timeout").collect();
    assert_all_kinds(&compare(&server.endpoint, &keys).await);
}

/// The server receives the same bytes from both clients: Sluice's
/// requests are Postfix's, framing and all, whatever the key holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_byte_for_byte_postfix_s() {
    let server = Fake::socketmap().await;
    let postmap = Postmap::new();
    let map = format!("socketmap:{}:{MAP}", server.endpoint);
    for key in [
        "found@example.com",
        "a b,c:%\n3:x,",
        "josé",
        &"k".repeat(9_000),
    ] {
        postmap.ask(&map, key).await;
        let theirs = server.requests();
        table(&server.endpoint, LIMIT).query(key).await.unwrap();
        let mine = server.requests();
        assert_eq!(mine.len(), 1, "one request for {key:.20?}");
        assert_eq!(mine, theirs, "key {key:.20?}");
    }
    table(&server.endpoint, LIMIT)
        .query("found@example.com")
        .await
        .unwrap();
    assert_eq!(server.requests(), ["23:mymap found@example.com,"]);
}

/// A hostile or broken server: each failure is a typed error, within the
/// time limit, after at most a bounded read; the table answers again
/// afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_server_gives_errors_never_answers() {
    let server = Fake::socketmap().await;
    let limit = Duration::from_secs(2);
    let t = table(&server.endpoint, limit);
    let started = Instant::now();
    let hung = t.query("hang").await;
    assert!(
        matches!(hung, Err(RemoteError::TimedOut { .. })),
        "{hung:?}"
    );
    assert!(started.elapsed() < limit * 5, "gave up within the limit");
    let giant = t.query("giant").await;
    assert!(
        matches!(giant, Err(RemoteError::TooLong { limit: 100_000, .. })),
        "{giant:?}"
    );
    let over = t.query("over").await;
    assert!(matches!(over, Err(RemoteError::TooLong { .. })), "{over:?}");
    for key in ["badlen", "noterm", "weird", "lowercase"] {
        let r = t.query(key).await;
        assert!(
            matches!(r, Err(RemoteError::Malformed { .. })),
            "{key}: {r:?}"
        );
    }
    // Closed mid-reply twice: once on the first connection, once on the
    // fresh one it is retried on.
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
    for (key, class) in [
        ("temp", ServerClass::Temporary),
        ("timeout", ServerClass::Timeout),
        ("perm", ServerClass::Permanent),
    ] {
        match t.query(key).await {
            Err(RemoteError::Server { class: c, .. }) => assert_eq!(c, class, "{key}"),
            other => panic!("{key}: {other:?}"),
        }
    }
    assert_eq!(
        t.query("found@example.com").await.unwrap().as_deref(),
        Some("value one")
    );
}

/// The key cannot add a request: a NUL is refused, a key over Postfix's
/// query limit is not sent, and one at the limit is sent whole, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_keys_send_one_request_or_none() {
    let server = Fake::socketmap().await;
    let t = table(&server.endpoint, LIMIT);
    assert!(matches!(
        t.query("found@example.com\0x").await,
        Err(RemoteError::NulInKey)
    ));
    assert_eq!(t.query(&"x".repeat(10_001)).await.unwrap(), None);
    assert!(server.take().requests.is_empty(), "neither was sent");
    assert_eq!(t.query(&"x".repeat(10_000)).await.unwrap(), None);
    assert_eq!(
        t.query("found@example.com, 9:mymap temp,").await.unwrap(),
        None
    );
    let got = server.take().requests;
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].len(), "10006:mymap ,".len() + 10_000);
}

/// One connection serves many queries; a connection the server dropped
/// while idle is replaced without an error (Postfix's one retry); many
/// queries at once hold a bounded number of connections open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_reused_and_bounded() {
    let server = Fake::socketmap().await;
    let t = Arc::new(table(&server.endpoint, LIMIT));
    for _ in 0..20 {
        assert_eq!(
            t.query("found@example.com").await.unwrap().as_deref(),
            Some("value one")
        );
    }
    assert_eq!(server.take().accepted, 1);
    assert_eq!(t.query("dropme").await.unwrap().as_deref(), Some("dropped"));
    assert_eq!(
        t.query("found@example.com").await.unwrap().as_deref(),
        Some("value one")
    );
    assert_eq!(
        server.take().accepted,
        1,
        "the dropped connection was replaced once"
    );
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let t = t.clone();
        set.spawn(async move { t.query("spaced key").await.unwrap() });
    }
    while let Some(r) = set.join_next().await {
        assert_eq!(r.unwrap().as_deref(), Some("a value  with spaces"));
    }
    // Open at once, not opened in all: a connection the idle list has no
    // room for is closed, and a later query may open another.
    let peak = server.take().peak_open;
    assert!(peak <= MAX_CONNECTIONS, "{peak} connections at once");
}

/// Nothing listening: both clients fail (try again later), neither says
/// "not found".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_down_is_an_error() {
    let down = common::reserve();
    let endpoint = format!("inet:{}", down.addr);
    let theirs = Postmap::new()
        .ask(&format!("socketmap:{endpoint}:{MAP}"), "found@example.com")
        .await;
    assert_eq!(theirs, Answer::Error);
    let mine = table(&endpoint, LIMIT).query("found@example.com").await;
    assert!(matches!(mine, Err(RemoteError::Connect { .. })), "{mine:?}");
}
