//! `[system]` held to a real Postfix 3.7 (local_transport = local,
//! Postfix's default local_recipient_maps over passwd and its aliases,
//! a mail_spool_directory of the test's): the same account, the same
//! aliases file (postalias-built for Postfix), the same RCPTs and
//! messages; the RCPT replies and the head of what lands in the mbox
//! (the `From ` line's sender, `Return-Path:`, `X-Original-To:`,
//! `Delivered-To:`, in order) must be the same, the domain aside.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::postfix::{Postfix, Reply};
use common::users::TestUser;
use common::*;

/// The lines local(8) put before the first `Received:` of each message
/// of the mbox, the date cut from the `From ` line, `domain` as `D`.
fn heads(text: &str, domain: &str) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("From ") {
            let sender = rest.split("  ").next().unwrap_or("");
            out.push(vec![format!("From {sender}")]);
            inside = true;
        } else if line.starts_with("Received:") || line.is_empty() {
            inside = false;
        } else if inside {
            out.last_mut().unwrap().push(line.replace(domain, "D"));
        }
    }
    out
}

fn same(reply: &Reply, domain: &str) -> (u16, Option<String>, String) {
    (
        reply.code,
        reply.enhanced.clone(),
        reply.text.replace(domain, "D"),
    )
}

async fn mbox_with(path: &Path, n: usize) -> String {
    let ok = wait_until(20, || {
        std::fs::read_to_string(path).is_ok_and(|t| t.matches("Return-Path:").count() >= n)
    })
    .await;
    assert!(ok, "{} has no {n} messages", path.display());
    std::fs::read_to_string(path).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rcpt_replies_and_mbox_headers_match_postfix_local() {
    let dir = temp_dir("sys-diff");
    std::fs::set_permissions(&*dir, PermissionsExt::from_mode(0o755)).unwrap();
    let user = TestUser::with_home("dx", &dir.join("home"));
    for spool in ["mail", "pf-mail"] {
        std::fs::create_dir_all(dir.join(spool)).unwrap();
        std::fs::set_permissions(dir.join(spool), PermissionsExt::from_mode(0o755)).unwrap();
    }
    let aliases = format!("team: {u}\nteam2: {u}, \\{u}\n", u = user.name);
    std::fs::write(dir.join("aliases"), &aliases).unwrap();
    std::fs::write(dir.join("pf-aliases"), &aliases).unwrap();
    let pf_aliases = format!("hash:{}", dir.join("pf-aliases").display());
    let spool = dir.join("pf-mail").display().to_string();
    let postfix = Postfix::start(
        &[
            ("local_transport", "local"),
            ("alias_maps", &pf_aliases),
            ("alias_database", &pf_aliases),
            (
                "local_recipient_maps",
                "proxy:unix:passwd.byname $alias_maps",
            ),
            ("mail_spool_directory", &spool),
            ("recipient_delimiter", "+"),
        ],
        "",
    );
    // local(8) and proxymap open the aliases when first asked.
    let built = Command::new("postalias")
        .arg("-c")
        .arg(postfix.dir())
        .arg(&pf_aliases)
        .status()
        .expect("postalias (postfix package)");
    assert!(built.success());
    let mut cfg = config(&dir, None);
    cfg.recipient_delimiter = "+".into();
    cfg.system.mydestination = vec!["mx.test".parse().unwrap()];
    cfg.system.mail_spool_directory = dir.join("mail");
    cfg.system.alias_maps = vec![format!("hash:{}", dir.join("aliases").display())];
    let (_server, addr) = start(cfg).await;

    let locals = |d: &str| {
        ["USER", "USER+ext", "team", "team+x", "no-such-user-dq"]
            .iter()
            .map(|l| format!("{}@{d}", l.replace("USER", &user.name)))
            .collect::<Vec<_>>()
    };
    let mut pf = postfix.session().await;
    let theirs = pf
        .rcpt_replies("s@remote.test", &locals("postfix.test"))
        .await;
    let mut ours_session = postfix::Session {
        client: Client::ready(addr).await,
    };
    let ours = ours_session
        .rcpt_replies("s@remote.test", &locals("mx.test"))
        .await;
    for (t, o) in theirs.iter().zip(&ours) {
        assert_eq!(
            same(o, "mx.test"),
            same(t, "postfix.test"),
            "RCPT replies differ"
        );
    }

    // Three messages, one at a time: USER+ext, the alias, the alias to
    // the user twice (once as \user).
    let rcpts = [format!("{}+ext", user.name), "team".into(), "team2".into()];
    for (i, local) in rcpts.iter().enumerate() {
        let sent = pf
            .send("s@remote.test", &[format!("{local}@postfix.test")])
            .await;
        assert!(sent.queue_id.is_some(), "{sent:?}");
        let sent = ours_session
            .send("s@remote.test", &[format!("{local}@mx.test")])
            .await;
        assert!(sent.queue_id.is_some(), "{sent:?}");
        mbox_with(&dir.join("pf-mail").join(&user.name), i + 1).await;
        mbox_with(&dir.join("mail").join(&user.name), i + 1).await;
    }
    let theirs = std::fs::read_to_string(dir.join("pf-mail").join(&user.name)).unwrap();
    let ours = std::fs::read_to_string(dir.join("mail").join(&user.name)).unwrap();
    assert_eq!(
        heads(&ours, "mx.test"),
        heads(&theirs, "postfix.test"),
        "\nours:\n{ours}\ntheirs:\n{theirs}"
    );
}

use common::postfix;
