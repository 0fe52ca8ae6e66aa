//! `|command` targets held to a real Postfix 3.7 local(8): the same
//! account, the same aliases (postalias-built for Postfix, root-owned)
//! and `.forward`, the same script as the command (`system_commands.rs`),
//! the same messages. Compared: the uid and groups each command ran
//! with, the values of the variables local(8) sets, the first lines of
//! its input (the `From ` line's sender, `Return-Path:`,
//! `X-Original-To:`, `Delivered-To:`), and the delivery status and DSN
//! for exit 0 (sent), 67 (bounced 5.1.1) and 75 (deferred 4.3.0); the
//! domain aside. Not compared: the working directory (Postfix: its queue
//! directory; Sluice: `/`) and the client variables Sluice does not set.

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::postfix::Postfix;
use common::users::TestUser;
use common::*;

use super::system_commands::{forward, recorded, script};

/// The variables local(8) sets that both set, as the script saw them.
const COMPARED: [&str; 11] = [
    "HOME",
    "LOGNAME",
    "USER",
    "SHELL",
    "SENDER",
    "RECIPIENT",
    "LOCAL",
    "DOMAIN",
    "EXTENSION",
    "ORIGINAL_RECIPIENT",
    "PATH",
];

/// What a test compares of one command's run.
type Seen = (
    BTreeMap<String, String>,
    Vec<(String, Option<String>)>,
    Vec<String>,
);

async fn seen(out: &std::path::Path, domain: &str, tag: &str) -> Seen {
    let (id, env, input) = recorded(out, domain, tag).await;
    let id = id
        .into_iter()
        .filter(|(k, _)| k == "uid" || k == "gid" || k == "groups")
        .collect();
    let env = COMPARED
        .iter()
        .map(|k| (k.to_string(), env.get(*k).map(|v| v.replace(domain, "D"))))
        .collect();
    let head = input
        .lines()
        .take(4)
        .map(|l| match l.strip_prefix("From ") {
            Some(rest) => format!("From {}", rest.split("  ").next().unwrap_or("")),
            None => l.replace(domain, "D"),
        })
        .collect();
    (id, env, head)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_match_postfix_local() {
    super::system_users::need_root();
    let dir = temp_dir("cmd-diff");
    std::fs::set_permissions(&*dir, PermissionsExt::from_mode(0o755)).unwrap();
    let home = dir.join("home");
    let user = TestUser::with_home("cx", &home);
    let (script, out) = script(&dir);
    let s = script.display();
    let aliases = format!("c0: \"|{s} c0 0\"\nc67: \"|{s} c67 67\"\nc75: \"|{s} c75 75\"\n");
    std::fs::write(dir.join("aliases"), &aliases).unwrap();
    std::fs::write(dir.join("pf-aliases"), &aliases).unwrap();
    forward(&home, &user, &format!("\"|{s} fwd\"\n"));
    let postfix = postfix_with_aliases(&dir.join("pf-aliases"));
    let mut cfg = config(&dir, None);
    cfg.recipient_delimiter = "+".into();
    cfg.system.mydestination = vec!["mx.test".parse().unwrap()];
    cfg.system.alias_maps = vec![format!("hash:{}", dir.join("aliases").display())];
    let (_server, addr) = start(cfg).await;

    let with_ext = format!("{}+ext", user.name);
    let locals = ["c0", "c67", "c75", with_ext.as_str()].map(String::from);
    let mut pf = postfix.session().await;
    let mut ours = common::postfix::Session {
        client: Client::ready(addr).await,
    };
    for local in &locals {
        let sent = pf
            .send("s@remote.test", &[format!("{local}@postfix.test")])
            .await;
        assert!(sent.queue_id.is_some(), "{sent:?}");
        let sent = ours
            .send("s@remote.test", &[format!("{local}@mx.test")])
            .await;
        assert!(sent.queue_id.is_some(), "{sent:?}");
    }
    for tag in ["c0", "c67", "c75", "fwd"] {
        let theirs = seen(&out, "postfix.test", tag).await;
        let mine = seen(&out, "mx.test", tag).await;
        assert_eq!(mine, theirs, "{tag}: ours, then Postfix's");
    }
    assert_eq!(
        seen(&out, "mx.test", "fwd").await.0["uid"],
        user.uid.to_string()
    );

    same_outcomes(&postfix, &dir, &locals).await;
}

/// A Postfix whose local(8) delivers to its accounts and to `aliases`
/// (built with postalias).
fn postfix_with_aliases(aliases: &std::path::Path) -> Postfix {
    let pf_aliases = format!("hash:{}", aliases.display());
    let postfix = Postfix::start(
        &[
            ("local_transport", "local"),
            ("alias_maps", &pf_aliases),
            ("alias_database", &pf_aliases),
            (
                "local_recipient_maps",
                "proxy:unix:passwd.byname $alias_maps",
            ),
            ("recipient_delimiter", "+"),
        ],
        "",
    );
    let built = Command::new("postalias")
        .arg("-c")
        .arg(postfix.dir())
        .arg(&pf_aliases)
        .status()
        .expect("postalias (postfix package)");
    assert!(built.success());
    postfix
}

/// The status and DSN of each of `locals` are Postfix's.
async fn same_outcomes(postfix: &Postfix, dir: &std::path::Path, locals: &[String]) {
    let pf_done = wait_until(30, || {
        let d = postfix.deliveries();
        locals.iter().all(|l| {
            let to = format!("{l}@postfix.test");
            d.iter().any(|d| d.to == to)
        })
    })
    .await;
    assert!(pf_done, "{}", postfix.maillog());
    for local in locals {
        let to = format!("{local}@mx.test");
        let ok = wait_event(30, dir, "delivery", |e| e["to"] == to.as_str()).await;
        assert!(ok, "{to}: {:?}", deliveries(dir, ""));
        let to_pf = format!("{local}@postfix.test");
        let theirs = postfix.deliveries();
        let theirs = theirs.iter().find(|d| d.to == to_pf).unwrap();
        let mine = deliveries(dir, "");
        let mine = mine.iter().find(|e| e["to"] == to.as_str()).unwrap();
        assert_eq!(
            (
                mine["status"].as_str().unwrap(),
                mine["dsn"].as_str().unwrap()
            ),
            (theirs.status.as_str(), theirs.dsn.as_str()),
            "{local}: {mine} / {theirs:?}"
        );
    }
}
