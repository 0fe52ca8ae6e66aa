//! `sluice lookup TYPE:NAME KEY` against `postmap -q KEY TYPE:NAME`: the
//! same files, the same keys, the same answers, for every file kind and
//! for Postfix's composite tables (static, unionmap, pipemap). This
//! proves the whole path a lookup takes in Sluice (spec, build, the
//! `Table` interface, folding, answer string), not only the parsers,
//! which `tables_text.rs` and `tables_postmap.rs` test one by one.
//!
//! postmap runs with `-c` on a temp dir holding an empty main.cf. Needs
//! `postfix` and `postfix-pcre` (scripts/test installs them).

use std::path::Path;
use std::process::Command;

/// (exit status, stdout) of a command.
fn answer(cmd: &mut Command) -> (i32, String) {
    let out = cmd.output().expect("the command runs");
    let code = out.status.code().unwrap_or(-1);
    (code, String::from_utf8_lossy(&out.stdout).into_owned())
}

fn postmap(conf: &Path, spec: &str, key: &str) -> (i32, String) {
    answer(
        Command::new("postmap")
            .arg("-c")
            .arg(conf)
            .args(["-q", key, spec]),
    )
}

fn sluice(config: &Path, spec: &str, key: &str) -> (i32, String) {
    answer(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["lookup", "--config"])
            .arg(config)
            .args([spec, key]),
    )
}

const TEXT: &str = "alice@example.com alice-box\n\
                    Bob@Example.com  bob-box , bob-archive\n\
                    @example.com catch-all\n\
                    multi first\n  continued\n\
                    dup one\ndup two\n\
                    novalue\n";
const REGEXP: &str = "/^(.*)@example\\.com$/ regexp-$1\n/^CASE$/ insensitive\n";
const PCRE: &str = "/^(?!bob)(\\w+)@example\\.com$/ pcre-$1\n/^pipe-(.*)$/ piped-$1\n";
const CIDR: &str = "192.0.2.0/24 net-v4\n2001:db8::/32 net-v6\n";

#[test]
fn every_kind_answers_as_postmap_does() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    std::fs::write(dir.path().join("main.cf"), "").unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, "").unwrap();
    let (text, regexp, pcre, cidr) = (
        p("text", TEXT),
        p("re", REGEXP),
        p("pcre", PCRE),
        p("cidr", CIDR),
    );
    // (Postfix's spec, ours): hash: needs a .db for Postfix, texthash:
    // reads the source as we do for hash:.
    let specs = [
        (format!("texthash:{text}"), format!("hash:{text}")),
        (format!("texthash:{text}"), format!("texthash:{text}")),
        (format!("regexp:{regexp}"), format!("regexp:{regexp}")),
        (format!("pcre:{pcre}"), format!("pcre:{pcre}")),
        (format!("cidr:{cidr}"), format!("cidr:{cidr}")),
        (
            "static:{fixed answer}".to_string(),
            "static:{fixed answer}".to_string(),
        ),
        (
            format!("unionmap:{{texthash:{text}, regexp:{regexp}, pcre:{pcre}}}"),
            format!("unionmap:{{texthash:{text}, regexp:{regexp}, pcre:{pcre}}}"),
        ),
        (
            format!("pipemap:{{regexp:{regexp}, pcre:{pcre}}}"),
            format!("pipemap:{{regexp:{regexp}, pcre:{pcre}}}"),
        ),
        (
            format!("pipemap:{{static:pipe-x, pcre:{pcre}}}"),
            format!("pipemap:{{static:pipe-x, pcre:{pcre}}}"),
        ),
    ];
    let keys = [
        "alice@example.com",
        "ALICE@EXAMPLE.COM",
        "bob@example.com",
        "@example.com",
        "carol@example.com",
        "multi",
        "dup",
        "novalue",
        "case",
        "CASE",
        "192.0.2.7",
        "2001:db8::1",
        "198.51.100.1",
        "nobody@elsewhere.test",
        "' OR 1=1 --",
    ];
    let mut differences = Vec::new();
    let mut found = 0;
    for (theirs, ours) in &specs {
        for key in keys {
            let want = postmap(dir.path(), theirs, key);
            assert!(
                want.0 == 0 || want.0 == 1,
                "postmap {theirs} {key}: {want:?}"
            );
            let got = sluice(&config, ours, key);
            found += usize::from(want.0 == 0);
            if want != got {
                differences.push(format!("{ours} {key:?}: postmap {want:?}, sluice {got:?}"));
            }
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    assert!(found >= 25, "the cases find something: {found}");
}

#[test]
fn a_file_that_is_not_there_or_a_bad_spec_is_an_error_not_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, "").unwrap();
    for spec in [
        "hash:/nonexistent/virtual",
        "nosuchtype:x",
        "unionmap:{}",
        "pipemap:x",
    ] {
        let (code, out) = sluice(&config, spec, "k");
        assert_eq!((code, out.as_str()), (2, ""), "{spec}");
    }
}

/// A site's Postfix ldap_table files work as they are: the same files
/// asked of a real slapd by `postmap -q KEY ldap:FILE` (postfix-ldap) and
/// by `sluice lookup ldap:FILE KEY` give the same answers, multi-valued
/// results, `%u`/`%d` and filter metacharacters in keys included.
#[test]
fn postfix_ldap_table_files_answer_as_postmap_does() {
    super::common::ensure_package("/usr/lib/postfix/postfix-ldap.so", "postfix-ldap");
    let slapd = super::common::slapd::Slapd::start("ldap-cf", 3);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("main.cf"), "").unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, "").unwrap();
    let base = super::common::slapd::BASE;
    let cf = |name: &str, body: &str| {
        let path = dir.path().join(name);
        let text = format!(
            "server_host = 127.0.0.1:{}\nversion = 3\nbind = no\ntimeout = 5\n{body}",
            slapd.port
        );
        std::fs::write(&path, text).unwrap();
        format!("ldap:{}", path.display())
    };
    let tables = [
        cf("users.cf", &format!("search_base = ou=people,{base}\nquery_filter = (mail=%s)\nresult_attribute = homeDirectory\n")),
        cf("aliases.cf", &format!("search_base = ou=aliases,{base}\nquery_filter = (cn=%s)\nresult_attribute = rfc822MailMember\n")),
        cf("parts.cf", &format!("search_base = {base}\nquery_filter = (&(uid=%u)(mail=*@%d))\nresult_attribute = uid, mail\n")),
    ];
    let keys = [
        "user1@example.com",
        "USER2@Example.COM",
        "sales@example.com",
        "@catch.example.com",
        "nobody@example.com",
        "user1",
        "user3@",
        "*",
        "*@example.com",
        "user1)(uid=*",
        "' OR 1=1 --",
    ];
    let mut differences = Vec::new();
    let mut found = 0;
    for spec in &tables {
        for key in keys {
            let want = postmap(dir.path(), spec, key);
            assert!(want.0 == 0 || want.0 == 1, "postmap {spec} {key}: {want:?}");
            found += usize::from(want.0 == 0);
            let got = sluice(&config, spec, key);
            if want != got {
                differences.push(format!("{spec} {key:?}: postmap {want:?}, sluice {got:?}"));
            }
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    assert!(found >= 6, "the cases find something: {found}");
}

/// tcp tables through the whole lookup path (spec, build, cache, no case
/// folding) against postmap, with a real postsrsd: the forward answer
/// (an SRS address, whose hash depends on case) and the reverse.
#[test]
fn tcp_tables_answer_as_postmap_does_through_the_cache() {
    let srsd = super::common::postsrsd::Postsrsd::start("example.org");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("main.cf"), "").unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, "").unwrap();
    let forward = format!("tcp:127.0.0.1:{}", srsd.forward);
    let reverse = format!("tcp:127.0.0.1:{}", srsd.reverse);
    for sender in ["User@Outside.NET", "user@outside.net", "user@example.org"] {
        let want = postmap(dir.path(), &forward, sender);
        assert_eq!(sluice(&config, &forward, sender), want, "{sender}");
        if want.0 == 0 && want.1.starts_with("SRS0=") {
            let srs = want.1.trim_end();
            let back = postmap(dir.path(), &reverse, srs);
            assert_eq!(back, (0, format!("{sender}\n")), "postsrsd reverses {srs}");
            assert_eq!(sluice(&config, &reverse, srs), back, "{srs}");
        }
    }
}

/// SQL tables through the whole lookup path (spec, build, folding, the
/// cache, rows joined as Postfix joins them) against postmap: SQLite,
/// which needs no server (the servers' own differentials are in
/// `tables_sql.rs`).
#[test]
fn sqlite_tables_answer_as_postmap_does_through_the_cache() {
    super::common::ensure_package("/usr/lib/postfix/postfix-sqlite.so", "postfix-sqlite");
    super::common::ensure_package("/usr/bin/sqlite3", "sqlite3");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("main.cf"), "").unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, "").unwrap();
    let db = dir.path().join("mail.db");
    let made = Command::new("sqlite3")
        .arg(&db)
        .arg(
            "CREATE TABLE alias(address TEXT, goto TEXT);\
             INSERT INTO alias VALUES ('info@example.com','alice@example.com'),\
             ('info@example.com','bob@example.com'),('bob@example.com','bob@example.com');",
        )
        .status()
        .unwrap();
    assert!(made.success());
    let cf = dir.path().join("alias.cf");
    std::fs::write(
        &cf,
        format!(
            "dbpath = {}\nquery = SELECT goto FROM alias WHERE address='%s'\n",
            db.display()
        ),
    )
    .unwrap();
    let spec = format!("sqlite:{}", cf.display());
    let mut found = 0;
    for key in [
        "info@example.com",
        "INFO@Example.COM",
        "bob@example.com",
        "nobody@example.com",
        "' OR 1=1 --",
        "x' OR 'a'='a",
    ] {
        let want = postmap(dir.path(), &spec, key);
        found += usize::from(want.0 == 0);
        assert_eq!(sluice(&config, &spec, key), want, "{key}");
    }
    assert_eq!(found, 3, "info (twice, folded) and bob");
}
