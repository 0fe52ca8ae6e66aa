//! The SQL tables (pgsql, mysql, sqlite) against Postfix itself: a real
//! PostgreSQL, a real MariaDB and an SQLite file, started and filled by
//! the test; the same `.cf` files and keys asked of `postmap -q KEY
//! pgsql:|mysql:|sqlite:FILE` (with `-c` on an empty main.cf) and of
//! `SqlTable::query` (values joined with ","), and the answers must be
//! equal: found with the same text, not found, or failed (postmap's
//! "fatal", Sluice's Err). Needs postfix-pgsql, postfix-mysql,
//! postfix-sqlite and mariadb-server (scripts/test installs them).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sluice::tables::sql::{Flavour, SqlTable};

use crate::common::mariadb::Mariadb;
use crate::common::postgres::Postgres;

#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Found(String),
    NotFound,
    Failed,
}

fn postmap(conf: &Path, map: &str, key: &str) -> Answer {
    let out = Command::new("postmap")
        .arg("-c")
        .arg(conf)
        .arg("-q")
        .arg(key)
        .arg(map)
        .output()
        .expect("postmap runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => {
            let mut v = String::from_utf8(out.stdout).expect("utf-8 answer");
            assert_eq!(v.pop(), Some('\n'));
            Answer::Found(v)
        }
        Some(1) if stderr.contains("fatal:") => Answer::Failed,
        Some(1) => Answer::NotFound,
        other => panic!("postmap -q {key:?} {map}: exit {other:?}: {stderr}"),
    }
}

async fn ours(table: &SqlTable, key: &str) -> Answer {
    // The caller folds keys to lower case, as postmap does.
    let key = key.to_ascii_lowercase();
    let asked = table.query(&key);
    match tokio::time::timeout(Duration::from_secs(30), asked)
        .await
        .expect("a lookup ends")
    {
        Ok(Some(values)) => Answer::Found(values.join(",")),
        Ok(None) => Answer::NotFound,
        Err(_) => Answer::Failed,
    }
}

/// The rows every flavour holds (the SQL is common to all three).
const SETUP: &[&str] = &[
    "CREATE TABLE aliases (address VARCHAR(200), goto VARCHAR(200))",
    "INSERT INTO aliases VALUES ('alice@example.com', 'alice@mail.example.com'), \
     ('bob@example.com', NULL), ('empty@example.com', ''), \
     ('list@example.com', 'b@y.test'), ('list@example.com', 'a@x.test'), \
     ('list@example.com', NULL), ('carol@other.test', 'carol@mail.other.test'), \
     ('plain', 'no-domain-value'), ('@example.com', 'catchall@example.com'), \
     ('dave@sub.example.com', 'dave')",
    "CREATE TABLE mailbox (local VARCHAR(100), domain VARCHAR(100), maildir VARCHAR(200), quota INTEGER)",
    "INSERT INTO mailbox VALUES ('alice', 'example.com', 'example.com/alice/', 1000), \
     ('bob', 'example.com', NULL, 2000), ('carol', 'other.test', 'other.test/carol/', NULL)",
];

/// Each scenario's query lines, and the keys it is asked (besides the
/// hostile ones).
fn scenarios() -> Vec<(&'static str, String, Vec<&'static str>)> {
    let basic = vec![
        "alice@example.com",
        "ALICE@Example.COM",
        "bob@example.com",
        "empty@example.com",
        "list@example.com",
        "nobody@example.com",
        "plain",
        "@example.com",
        "carol@other.test",
    ];
    vec![
        (
            "basic",
            "query = SELECT goto FROM aliases WHERE address='%s' ORDER BY goto".into(),
            basic.clone(),
        ),
        (
            "result_format",
            "query = SELECT goto FROM aliases\n  WHERE address = '%s'\n  ORDER BY goto\n\
             result_format = %d/%u: %s for %S (%U at %D, %1) 100%%"
                .into(),
            basic.clone(),
        ),
        (
            "columns",
            "query = SELECT maildir, quota, local FROM mailbox WHERE local='%u' AND domain='%d'".into(),
            vec!["alice@example.com", "bob@example.com", "carol@other.test", "alice", "@example.com", "x@"],
        ),
        (
            "labels",
            "# comment\nquery = SELECT maildir FROM mailbox WHERE domain = '%2.%1' AND local LIKE '%u%%'\n\
             result_format = [%s]"
                .into(),
            vec!["al@example.com", "alice@mx.example.com", "carol@other.test", "carol@test", "c@.test", "c@example..com"],
        ),
        (
            "domain",
            "query = SELECT goto FROM aliases WHERE address='%s' ORDER BY goto\ndomain = example.com, !sub.example.com".into(),
            vec!["alice@example.com", "carol@other.test", "plain", "@example.com", "dave@sub.example.com"],
        ),
        (
            "legacy",
            "table = aliases\nselect_field = goto\nwhere_field = address\nadditional_conditions = AND goto <> 'x'".into(),
            vec!["alice@example.com", "nobody@example.com"],
        ),
        (
            // A quoted key compared with a number: the server converts the
            // bound text as it converts Postfix's literal (an error for
            // PostgreSQL when it is not a number, in both).
            "numeric",
            "query = SELECT address FROM aliases WHERE length(address) = '%s' ORDER BY address".into(),
            vec!["17", "16", "0", "abc", "17 "],
        ),
        (
            "limit",
            "query = SELECT goto FROM aliases WHERE address='%s' ORDER BY goto\nexpansion_limit = 1".into(),
            vec!["alice@example.com", "list@example.com", "nobody@example.com"],
        ),
    ]
}

fn hostile_keys() -> Vec<String> {
    vec![
        "' OR 1=1 --".into(),
        "' OR '1'='1".into(),
        "x' UNION SELECT goto FROM aliases --".into(),
        "%".into(),
        "%s%u%d%%".into(),
        "\\".into(),
        "\\' OR 1=1 #".into(),
        "\"quoted\" 'single'".into(),
        "alice@example.com\n' OR 1=1 --".into(),
        "alice@example.com'".into(),
        "x".repeat(10_240),
        format!("{}@example.com", "y".repeat(10_240)),
    ]
}

/// Writes each scenario's .cf (`head` holds the flavour's connection
/// lines) and compares postmap's answers with ours.
async fn compare(kind: &str, flavour: Flavour, dir: &Path, head: &str) {
    let conf = dir.join("postfix");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(conf.join("main.cf"), "").unwrap();
    let mut compared = 0;
    let mut found = 0;
    for (name, lines, keys) in scenarios() {
        let cf = conf.join(format!("{name}.cf"));
        std::fs::write(&cf, format!("{head}\n{lines}\n")).unwrap();
        let table = SqlTable::open(name, flavour, &cf).unwrap();
        let map = format!("{kind}:{}", cf.display());
        let keys: Vec<String> = keys
            .into_iter()
            .map(String::from)
            .chain(hostile_keys())
            .collect();
        for key in &keys {
            let theirs = postmap(&conf, &map, key);
            let mine = ours(&table, key).await;
            assert_eq!(mine, theirs, "{kind} {name}: key {key:?}");
            if hostile_keys().contains(key) && !["labels", "numeric"].contains(&name) {
                assert_eq!(mine, Answer::NotFound, "{kind} {name}: hostile key {key:?}");
            }
            compared += 1;
            found += usize::from(matches!(mine, Answer::Found(_)));
        }
        // A NUL cannot be given to postmap; Postfix keys cannot hold one.
        assert_eq!(ours(&table, "alice@example.com\0x").await, Answer::NotFound);
    }
    // Not vacuous: several answers of each kind.
    assert!(found >= 15, "{kind}: only {found} of {compared} found");
}

fn sqlite_db(dir: &Path) -> PathBuf {
    let path = dir.join("mail.sqlite");
    let db = rusqlite_free_setup(&path);
    assert!(db, "sqlite3 set-up failed");
    path
}

/// Fills the SQLite file with the sqlite3 shell (the tests do not link
/// rusqlite themselves).
fn rusqlite_free_setup(path: &Path) -> bool {
    let sql = SETUP.join(";\n") + ";\n";
    let (code, _, err) = crate::common::output_of(
        {
            let mut c = Command::new("sqlite3");
            c.arg(path);
            c
        },
        sql.as_bytes(),
    );
    code == 0 && err.is_empty()
}

#[tokio::test]
async fn sqlite_answers_as_postmap_does() {
    crate::common::ensure_package("/usr/lib/postfix/postfix-sqlite.so", "postfix-sqlite");
    let dir = crate::common::temp_dir("sql-sqlite");
    let db = sqlite_db(&dir);
    let head = format!("dbpath = {}", db.display());
    compare("sqlite", Flavour::Sqlite, &dir, &head).await;
}

fn pg_setup(pg: &Postgres) {
    pg.psql("postgres", "CREATE ROLE sluice LOGIN PASSWORD 'pg-s3cret'");
    pg.psql("postgres", "CREATE DATABASE mail OWNER sluice");
    for sql in SETUP {
        pg.psql("mail", sql);
    }
    pg.psql("mail", "GRANT SELECT ON aliases, mailbox TO sluice");
}

fn pg_head(hosts: &str) -> String {
    format!("hosts = {hosts}\nuser = sluice\npassword = pg-s3cret\ndbname = mail\nconnect_timeout = 2\nquery_timeout = 2")
}

#[tokio::test]
async fn pgsql_answers_as_postmap_does() {
    crate::common::ensure_package("/usr/lib/postfix/postfix-pgsql.so", "postfix-pgsql");
    let dir = crate::common::temp_dir("sql-pgsql");
    let pg = Postgres::start(&dir);
    pg_setup(&pg);
    let tcp = format!("inet:127.0.0.1:{}", pg.port);
    compare("pgsql", Flavour::Pgsql, &dir, &pg_head(&tcp)).await;
    // A column Sluice cannot render as PostgreSQL's text would: an error
    // naming its type, not a guess.
    let cf = dir.join("timestamp.cf");
    let query = "query = SELECT now() FROM aliases WHERE address = '%s'";
    std::fs::write(&cf, format!("{}\n{query}\n", pg_head(&tcp))).unwrap();
    let table = SqlTable::open("timestamp", Flavour::Pgsql, &cf).unwrap();
    let err = table
        .query("alice@example.com")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("timestamp"), "{err}");
}

fn my_setup(db: &Mariadb) {
    db.sql(
        "CREATE DATABASE mail; \
         CREATE USER 'sluice'@'localhost' IDENTIFIED BY 'my-s3cret'; \
         CREATE USER 'sluice'@'127.0.0.1' IDENTIFIED BY 'my-s3cret'; \
         GRANT SELECT ON mail.* TO 'sluice'@'localhost'; \
         GRANT SELECT ON mail.* TO 'sluice'@'127.0.0.1'",
    );
    let sql = format!("USE mail; {};", SETUP.join("; "));
    db.sql(&sql);
}

fn my_head(hosts: &str) -> String {
    format!("hosts = {hosts}\nuser = sluice\npassword = my-s3cret\ndbname = mail\nconnect_timeout = 2\nquery_timeout = 2")
}

#[tokio::test]
async fn mysql_answers_as_postmap_does() {
    crate::common::ensure_package("/usr/lib/postfix/postfix-mysql.so", "postfix-mysql");
    let dir = crate::common::temp_dir("sql-mysql");
    let db = Mariadb::start(&dir);
    my_setup(&db);
    let tcp = format!("inet:127.0.0.1:{}", db.port);
    compare("mysql", Flavour::Mysql, &dir, &my_head(&tcp)).await;
    let unix = format!("unix:{}", db.socket.display());
    let cf = dir.join("unix.cf");
    std::fs::write(
        &cf,
        format!(
            "{}\nquery = SELECT goto FROM aliases WHERE address='%s'\n",
            my_head(&unix)
        ),
    )
    .unwrap();
    let table = SqlTable::open("unix", Flavour::Mysql, &cf).unwrap();
    assert_eq!(
        ours(&table, "alice@example.com").await,
        Answer::Found("alice@mail.example.com".into())
    );
}

#[path = "tables_sql_failures.rs"]
mod failures;
