//! The socketmap and tcp tables against the real Postfix client and a
//! real server. Each key is asked of `postmap -q KEY socketmap:…|tcp:…`
//! (exit 0 and stdout: found; exit 1 and a `fatal:` line: a lookup
//! error, Postfix's "try again later"; exit 1 otherwise: not found) and
//! of Sluice's table, and the answers must be the same.
//!
//! - tcp: a real postsrsd (Debian's 1.x speaks tcp_table), forward and
//!   reverse rewriting; plus a scripted line server for the replies
//!   postsrsd never gives.
//! - socketmap: Debian has no socketmap server, so the reference is
//!   Postfix's own socketmap client: a scripted netstring server here
//!   answers both clients, and records the bytes each sent.
//!
//! postmap runs with `-c` on a temp dir holding an empty main.cf, so it
//! never reads /etc/postfix. Needs `postfix` and `postsrsd` (scripts/test
//! installs them).

mod fake;
mod socketmap;
mod tcp;

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use sluice::tables::socketmap::RemoteError;

/// What a lookup answered, for comparing the two clients.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Found(String),
    NotFound,
    /// Try again later (Postfix: a lookup error, 451).
    Error,
}

fn ours(r: Result<Option<String>, RemoteError>) -> Answer {
    match r {
        Ok(Some(v)) => Answer::Found(v),
        Ok(None) => Answer::NotFound,
        Err(_) => Answer::Error,
    }
}

/// postmap with an empty configuration of its own.
struct Postmap {
    dir: tempfile::TempDir,
}

impl Postmap {
    fn new() -> Postmap {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("main.cf"), "").unwrap();
        Postmap { dir }
    }

    /// postmap's answer for `key` in `map` (e.g. "tcp:127.0.0.1:10001"),
    /// run off the runtime (the servers it asks may be tasks of this
    /// test).
    async fn ask(&self, map: &str, key: &str) -> Answer {
        let (conf, map, key) = (self.dir.path().to_owned(), map.to_owned(), key.to_owned());
        tokio::task::spawn_blocking(move || {
            let out = Command::new("postmap")
                .arg("-c")
                .arg(&conf)
                .arg("-q")
                .arg(&key)
                .arg(&map)
                .output()
                .expect("postmap runs (apt-get install postfix)");
            let stderr = String::from_utf8_lossy(&out.stderr);
            match out.status.code() {
                Some(0) => {
                    let mut v = String::from_utf8(out.stdout).expect("utf-8 answer");
                    assert_eq!(
                        v.pop(),
                        Some('\n'),
                        "postmap ends its answer with a newline"
                    );
                    Answer::Found(v)
                }
                Some(1) if stderr.contains("fatal:") => Answer::Error,
                // Killed by SIGPIPE: the server hung up while postmap was
                // still writing (postsrsd closes on an over-long line; who
                // wins that race is timing). A failure, as a fatal is.
                None if out.status.signal() == Some(libc::SIGPIPE) => Answer::Error,
                Some(1) => Answer::NotFound,
                other => panic!("postmap -q {key:?} {map}: exit {other:?}: {stderr}"),
            }
        })
        .await
        .unwrap()
    }
}

/// Every kind of answer occurs in `answers`: the comparison was not
/// vacuous.
fn assert_all_kinds(answers: &[Answer]) {
    assert!(answers.iter().any(|a| matches!(a, Answer::Found(_))));
    assert!(answers.contains(&Answer::NotFound));
    assert!(answers.contains(&Answer::Error));
}
