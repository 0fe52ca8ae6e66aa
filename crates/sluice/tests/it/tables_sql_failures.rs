//! The SQL tables when servers fail: fail-over to the next host, every
//! host down, a server stopped between lookups, a server that accepts
//! and never answers: each an error (Postfix's "fatal" from postmap,
//! Sluice's Err), never "not found"; and no error text holds a password.

use std::time::Duration;

use sluice::tables::sql::{Flavour, SqlTable};

use super::{my_head, my_setup, ours, pg_head, pg_setup, postmap, Answer};
use crate::common::mariadb::Mariadb;
use crate::common::postgres::Postgres;

const QUERY: &str = "query = SELECT goto FROM aliases WHERE address='%s'";
const ALICE: &str = "alice@mail.example.com";

fn table(dir: &std::path::Path, name: &str, flavour: Flavour, head: &str) -> (SqlTable, String) {
    let cf = dir.join(format!("{name}.cf"));
    std::fs::write(&cf, format!("{head}\n{QUERY}\n")).unwrap();
    let kind = match flavour {
        Flavour::Pgsql => "pgsql",
        Flavour::Mysql => "mysql",
        Flavour::Sqlite => "sqlite",
    };
    let map = format!("{kind}:{}", cf.display());
    (SqlTable::open(name, flavour, &cf).unwrap(), map)
}

/// First host refusing → the second answers; both refusing → failed;
/// the live one stopped between lookups → failed; each as postmap.
async fn fail_over(
    flavour: Flavour,
    dir: &std::path::Path,
    port: u16,
    head: fn(&str) -> String,
    stop: &mut dyn FnMut(),
) {
    let conf = dir.join("postfix");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(conf.join("main.cf"), "").unwrap();
    let (a, b) = (crate::common::reserve(), crate::common::reserve());
    let live = format!("inet:127.0.0.1:{port}");
    let dead = |r: &crate::common::Reserved| format!("inet:127.0.0.1:{}", r.addr.port());

    let (second, map) = table(
        &conf,
        "second",
        flavour,
        &head(&format!("{} {live}", dead(&a))),
    );
    assert_eq!(
        ours(&second, "alice@example.com").await,
        Answer::Found(ALICE.into())
    );
    assert_eq!(
        postmap(&conf, &map, "alice@example.com"),
        Answer::Found(ALICE.into())
    );

    let (none, map) = table(
        &conf,
        "none",
        flavour,
        &head(&format!("{}, {}", dead(&a), dead(&b))),
    );
    assert_eq!(ours(&none, "alice@example.com").await, Answer::Failed);
    assert_eq!(postmap(&conf, &map, "alice@example.com"), Answer::Failed);
    let err = none
        .query("alice@example.com")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&a.addr.port().to_string()),
        "the error names the hosts: {err}"
    );

    let (one, map) = table(&conf, "one", flavour, &head(&live));
    assert_eq!(
        ours(&one, "alice@example.com").await,
        Answer::Found(ALICE.into())
    );
    stop();
    assert_eq!(ours(&one, "alice@example.com").await, Answer::Failed);
    assert_eq!(ours(&one, "nobody@example.com").await, Answer::Failed);
    assert_eq!(postmap(&conf, &map, "alice@example.com"), Answer::Failed);
    drop((a, b));
}

#[tokio::test]
async fn pgsql_fails_over_and_never_mistakes_failure_for_not_found() {
    let dir = crate::common::temp_dir("sql-pgsql-down");
    let mut pg = Postgres::start(&dir);
    pg_setup(&pg);
    let port = pg.port;
    fail_over(Flavour::Pgsql, &dir, port, pg_head, &mut || pg.stop()).await;
}

#[tokio::test]
async fn mysql_fails_over_and_never_mistakes_failure_for_not_found() {
    let dir = crate::common::temp_dir("sql-mysql-down");
    let mut db = Mariadb::start(&dir);
    my_setup(&db);
    let port = db.port;
    fail_over(Flavour::Mysql, &dir, port, my_head, &mut || db.stop()).await;
}

/// A listener that accepts and never says a word.
async fn hung_server() -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    (port, task)
}

#[tokio::test]
async fn a_hung_server_is_an_error_within_the_timeout() {
    let dir = crate::common::temp_dir("sql-hung");
    let (port, task) = hung_server().await;
    for flavour in [Flavour::Pgsql, Flavour::Mysql] {
        let head = format!(
            "hosts = inet:127.0.0.1:{port}\nuser = u\npassword = p\ndbname = d\nconnect_timeout = 1\nquery_timeout = 1"
        );
        let (t, _) = table(&dir, "hung", flavour, &head);
        let answer = tokio::time::timeout(Duration::from_secs(10), t.query("alice@example.com"))
            .await
            .expect("the timeout ends the lookup");
        let err = answer.unwrap_err().to_string();
        assert!(err.contains("timed out"), "{flavour:?}: {err}");
    }
    task.abort();
}

#[tokio::test]
async fn errors_never_show_the_password() {
    let dir = crate::common::temp_dir("sql-password");
    let mut pg = Postgres::start(&dir);
    pg_setup(&pg);
    let head = pg_head(&format!("inet:127.0.0.1:{}", pg.port)).replace("pg-s3cret", "wrong-pw-1");
    let (t, _) = table(&dir, "wrong", Flavour::Pgsql, &head);
    let err = t.query("alice@example.com").await.unwrap_err().to_string();
    assert!(
        err.contains("password") && !err.contains("wrong-pw-1"),
        "{err}"
    );
    let refused = crate::common::reserve();
    let uri = format!(
        "hosts = postgresql://sluice:uri-pw-2@127.0.0.1:{}/mail?password=uri-pw-3",
        refused.addr.port()
    );
    let (t, _) = table(&dir, "uri", Flavour::Pgsql, &uri);
    let err = t.query("alice@example.com").await.unwrap_err().to_string();
    assert!(
        !err.contains("uri-pw-2") && !err.contains("uri-pw-3"),
        "{err}"
    );
    pg.stop();

    let mut db = Mariadb::start(&dir);
    my_setup(&db);
    let head = my_head(&format!("inet:127.0.0.1:{}", db.port)).replace("my-s3cret", "wrong-pw-4");
    let (t, _) = table(&dir, "wrong-my", Flavour::Mysql, &head);
    let err = t.query("alice@example.com").await.unwrap_err().to_string();
    assert!(
        err.contains("denied") && !err.contains("wrong-pw-4"),
        "{err}"
    );
    db.stop();
}

#[tokio::test]
async fn a_slow_sqlite_query_is_interrupted_at_the_timeout() {
    let dir = crate::common::temp_dir("sql-sqlite-slow");
    let db = super::sqlite_db(&dir);
    let head = format!("dbpath = {}\nquery_timeout = 500ms", db.display());
    let cf = dir.join("slow.cf");
    std::fs::write(
        &cf,
        format!(
            "{head}\nquery = SELECT goto FROM aliases WHERE address = '%s' AND \
             (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000000000) \
             SELECT count(*) FROM c) > 0\n"
        ),
    )
    .unwrap();
    let slow = SqlTable::open("slow", Flavour::Sqlite, &cf).unwrap();
    for _ in 0..2 {
        let answer = tokio::time::timeout(Duration::from_secs(10), slow.query("alice@example.com"))
            .await
            .expect("the timeout ends the lookup");
        let err = answer.unwrap_err().to_string();
        assert!(err.contains("timed out"), "{err}");
    }
    // The interrupted connection answers the next, quick, query.
    let (quick, _) = table(
        &dir,
        "quick",
        Flavour::Sqlite,
        &format!("dbpath = {}", db.display()),
    );
    assert_eq!(
        ours(&quick, "alice@example.com").await,
        Answer::Found(ALICE.into())
    );
}
