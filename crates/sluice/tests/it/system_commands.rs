//! `|command` targets of aliases and `.forward`s (`[system]`, local(8)'s
//! command delivery on pipe(8)'s runner): real accounts made with
//! useradd, a real shell script as the command, which writes its uid,
//! working directory, argv, environment and standard input to files;
//! the typed delivery events and those files are checked. Hostile cases:
//! a sender built to run code in a careless `.forward` command, a
//! command that never exits, a command in an alias where
//! `allow_mail_to_commands` forbids it. The same commands against a real
//! Postfix in `system_commands_diff.rs`.

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use common::users::TestUser;
use common::*;

use super::system_users::{home, send, site};

/// The command: `script TAG [STATUS]` writes `OUT/$DOMAIN-TAG.id` (uid,
/// gid, groups, directory, argv), `.env` and `.in` (its standard input),
/// then exits with STATUS (0).
const SCRIPT: &str = r#"#!/bin/sh
out="OUTDIR/$DOMAIN-$1"
{ echo "uid=$(id -u)"; echo "gid=$(id -g)"; echo "groups=$(id -G)"; echo "pwd=$(pwd)"; echo "argv=$0 $*"; } > "$out.id.tmp"
env > "$out.env.tmp"
cat > "$out.in.tmp"
mv "$out.env.tmp" "$out.env"; mv "$out.in.tmp" "$out.in"; mv "$out.id.tmp" "$out.id"
exit ${2:-0}
"#;

/// Writes the script into `dir` (0755) and its output directory
/// `dir/out` (0777: the commands run as other accounts).
pub(crate) fn script(dir: &Path) -> (PathBuf, PathBuf) {
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::set_permissions(&out, PermissionsExt::from_mode(0o777)).unwrap();
    let path = dir.join("record.sh");
    std::fs::write(&path, SCRIPT.replace("OUTDIR", &out.display().to_string())).unwrap();
    std::fs::set_permissions(&path, PermissionsExt::from_mode(0o755)).unwrap();
    (path, out)
}

/// What the script recorded for `domain` and `tag`, once it is there:
/// (`.id` lines as a map, the environment, the input).
pub(crate) async fn recorded(
    out: &Path,
    domain: &str,
    tag: &str,
) -> (BTreeMap<String, String>, BTreeMap<String, String>, String) {
    let file = |ext: &str| out.join(format!("{domain}-{tag}.{ext}"));
    let id = file("id");
    let there = wait_until(30, || id.exists()).await;
    assert!(there, "{} was not written", id.display());
    let pairs = |text: String| {
        text.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>()
    };
    let read = |ext: &str| std::fs::read_to_string(file(ext)).unwrap();
    (pairs(read("id")), pairs(read("env")), read("in"))
}

/// Writes `text` as `user`'s `.forward` in `home`.
pub(crate) fn forward(home: &Path, user: &TestUser, text: &str) {
    let path = home.join(".forward");
    std::fs::write(&path, text).unwrap();
    std::os::unix::fs::chown(&path, Some(user.uid), None).unwrap();
}

pub(crate) fn id_of(args: &[&str]) -> u32 {
    let out = std::process::Command::new("id")
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alias_and_forward_commands_run_as_local_8_runs_them() {
    let (dir, cfg) = site("cmd-run", "");
    let a = TestUser::with_home("ca", &home(&dir, "a"));
    let (script, out) = script(&dir);
    let aliases = format!("run: \"|{} alias\"\n", script.display());
    std::fs::write(dir.join("aliases"), aliases).unwrap();
    forward(
        &home(&dir, "a"),
        &a,
        &format!("\"|{} fwd\"\n", script.display()),
    );
    let (_server, addr) = start(cfg).await;
    send(addr, &["run@mx.test"], "alias").await;
    let to_a = format!("{}+ext@mx.test", a.name);
    send(addr, &[&to_a], "forward").await;

    check_alias_run(&out, &script).await;
    let (id, env, input) = recorded(&out, "mx.test", "fwd").await;
    assert_eq!(id["uid"], a.uid.to_string(), "a .forward: its user");
    assert_eq!(id["gid"], a.gid().to_string());
    let home_a = home(&dir, "a").display().to_string();
    let local_a = format!("{}+ext", a.name);
    for (k, v) in [
        ("HOME", home_a.as_str()),
        ("SHELL", "/usr/sbin/nologin"),
        ("USER", a.name.as_str()),
        ("LOGNAME", a.name.as_str()),
        ("RECIPIENT", to_a.as_str()),
        ("LOCAL", local_a.as_str()),
        ("EXTENSION", "ext"),
        ("ORIGINAL_RECIPIENT", to_a.as_str()),
    ] {
        assert_eq!(env.get(k).map(String::as_str), Some(v), "{k} in {env:?}");
    }
    assert!(
        input.contains(&format!("\nDelivered-To: {to_a}\n")),
        "{input}"
    );

    for to in ["run@mx.test", to_a.as_str()] {
        let sent = wait_event(15, &dir, "delivery", |e| {
            e["to"] == to && e["status"] == "sent"
        })
        .await;
        assert!(sent, "{:?}", deliveries(&dir, ""));
    }
    let line = deliveries(&dir, "")
        .into_iter()
        .find(|e| e["to"] == "run@mx.test")
        .unwrap();
    assert!(
        line.to_string()
            .contains(&format!("delivered to command: {} alias", script.display())),
        "{line}"
    );
    assert!(
        !dir.join("mail").join(&a.name).exists(),
        "the .forward took it all"
    );
    assert_eq!(
        std::fs::metadata(out.join("mx.test-fwd.in")).unwrap().uid(),
        a.uid
    );
}

/// What the alias `run: "|SCRIPT alias"` recorded: run as nobody (root's
/// aliases file), no HOME or SHELL, local(8)'s input head.
async fn check_alias_run(out: &Path, script: &Path) {
    let (id, env, input) = recorded(out, "mx.test", "alias").await;
    let nobody = id_of(&["-u", "nobody"]);
    let nogroup = id_of(&["-g", "nobody"]);
    assert_eq!(
        id["uid"],
        nobody.to_string(),
        "root's aliases: default_privs"
    );
    assert_eq!(id["gid"], nogroup.to_string());
    assert_eq!(id["groups"], nogroup.to_string(), "no supplementary groups");
    assert_eq!(id["pwd"], "/");
    assert_eq!(id["argv"], format!("{} alias", script.display()));
    let want: BTreeMap<String, String> = [
        ("LOGNAME", "run"),
        ("USER", "run"),
        ("SENDER", "s@remote.test"),
        ("RECIPIENT", "run@mx.test"),
        ("LOCAL", "run"),
        ("DOMAIN", "mx.test"),
        ("ORIGINAL_RECIPIENT", "run@mx.test"),
        ("PATH", "/usr/bin:/bin"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in &want {
        assert_eq!(env.get(k), Some(v), "{k} in {env:?}");
    }
    for absent in ["HOME", "SHELL", "EXTENSION"] {
        assert!(!env.contains_key(absent), "{absent} in {env:?}");
    }
    let head: Vec<&str> = input.lines().take(5).collect();
    assert!(head[0].starts_with("From s@remote.test  "), "{input}");
    assert_eq!(
        &head[1..4],
        [
            "Return-Path: <s@remote.test>",
            "X-Original-To: run@mx.test",
            "Delivered-To: run@mx.test"
        ]
    );
    assert!(head[4].starts_with("Received: "), "{input}");
    assert!(
        input.ends_with("\nHello.\n") && !input.contains('\r'),
        "{input:?}"
    );
}

/// Hostile: a sender made to run code in a careless `.forward` command
/// (`eval`): its `$`, `(`, spaces and quotes reach the command as `_`
/// (command_expansion_filter), nothing runs, and the command runs as the
/// user anyway; a command that never exits is killed at
/// `command_time_limit_secs` and bounced 5.3.0, nothing of it left; a
/// command in an alias where `allow_mail_to_commands` names only
/// `forward` is bounced 5.7.1 and never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_senders_and_commands_gain_nothing() {
    let (dir, mut cfg) = site("cmd-hostile", "");
    cfg.system.command_time_limit_secs = 2;
    cfg.system.allow_mail_to_commands = vec!["forward".into()];
    let e = TestUser::with_home("ce", &home(&dir, "e"));
    let z = TestUser::with_home("cz", &home(&dir, "z"));
    let (script, out) = script(&dir);
    let aliases = format!("blocked: \"|{} blocked\"\n", script.display());
    std::fs::write(dir.join("aliases"), aliases).unwrap();
    let o = out.display();
    forward(
        &home(&dir, "e"),
        &e,
        &format!("\"|eval echo $SENDER > {o}/e-sender; id -u > {o}/e-uid\"\n"),
    );
    forward(&home(&dir, "z"), &z, "\"|sleep 100\"\n");
    let (_server, addr) = start(cfg).await;
    let pwned = out.join("PWNED"); // writable by the user: an attack that ran would leave it
    let evil = format!("\"$(touch {})\"@x.test", pwned.display());
    let mut c = Client::ready(addr).await;
    let r = c
        .message(&evil, &[&format!("{}@mx.test", e.name)], &body("evil"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let to_z = format!("{}@mx.test", z.name);
    send(addr, &[to_z.as_str(), "blocked@mx.test"], "slow").await;

    let sender = out.join("e-sender");
    assert!(wait_until(15, || out.join("e-uid").exists()).await);
    let written = std::fs::read_to_string(&sender).unwrap();
    let written = written.trim();
    assert!(
        written.contains(&format!("touch_{}_", pwned.display()))
            && written.ends_with("@x.test")
            && !written.contains(['$', '(', ')', '"', ' ']),
        "the filter made the sender inert: {written:?}"
    );
    assert!(!pwned.exists(), "the sender's code ran");
    let uid = std::fs::read_to_string(out.join("e-uid")).unwrap();
    assert_eq!(uid.trim(), e.uid.to_string());

    let blocked = wait_event(15, &dir, "delivery", |d| {
        d["to"] == "blocked@mx.test" && d["status"] == "bounced" && d["dsn"] == "5.7.1"
    })
    .await;
    assert!(blocked, "{:?}", deliveries(&dir, ""));
    assert!(!out.join("mx.test-blocked.id").exists(), "it ran");
    let started = std::time::Instant::now();
    let killed = wait_event(20, &dir, "delivery", |d| {
        d["to"] == to_z.as_str() && d["status"] == "bounced" && d["dsn"] == "5.3.0"
    })
    .await;
    assert!(killed, "{:?}", deliveries(&dir, ""));
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    let line = deliveries(&dir, "")
        .into_iter()
        .find(|d| d["to"] == to_z.as_str())
        .unwrap();
    assert!(
        line.to_string()
            .contains("Command time limit exceeded: \\\"sleep 100\\\""),
        "{line}"
    );
    assert!(processes_of(z.uid).is_empty(), "{:?}", processes_of(z.uid));
}

/// The pids of the processes running as `uid` (from /proc).
fn processes_of(uid: u32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|p| p.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|p| std::fs::metadata(p.path()).is_ok_and(|m| m.uid() == uid))
        .map(|p| p.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Whose rights, as local(8) decides: an aliases file owned by a user
/// runs its commands as that user (HOME and SHELL theirs); an include
/// file reached from root's aliases runs as its owner; the same file
/// included from another user's `.forward` runs as that `.forward`'s
/// user, never as the file's owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_run_as_the_owner_local_8_picks() {
    let (dir, mut cfg) = site("cmd-owner", "");
    cfg.system.allow_mail_to_commands = ["alias", "forward", "include"].map(String::from).into();
    let o = TestUser::with_home("co", &home(&dir, "o"));
    let b = TestUser::with_home("cb", &home(&dir, "b"));
    let c = TestUser::with_home("cc", &home(&dir, "c"));
    let (script, out) = script(&dir);
    let s = script.display();
    let list = dir.join("b.list");
    std::fs::write(&list, format!("\"|{s} include\"\n")).unwrap();
    std::os::unix::fs::chown(&list, Some(b.uid), None).unwrap();
    // A second aliases file, the user o's (not writable by others).
    let owned = dir.join("o-aliases");
    std::fs::write(&owned, format!("owned: \"|{s} owned\"\n")).unwrap();
    std::os::unix::fs::chown(&owned, Some(o.uid), None).unwrap();
    let inc = format!("inc: :include:{}\n", list.display());
    std::fs::write(dir.join("aliases"), inc).unwrap();
    cfg.system
        .alias_maps
        .push(format!("hash:{}", owned.display()));
    let fwd = format!(":include:{}\n", list.display());
    forward(&home(&dir, "c"), &c, &fwd);
    let (_server, addr) = start(cfg).await;
    send(addr, &["owned@mx.test"], "owned").await;
    let (id, env, _) = recorded(&out, "mx.test", "owned").await;
    assert_eq!(id["uid"], o.uid.to_string(), "the aliases file's owner");
    let home_o = home(&dir, "o").display().to_string();
    assert_eq!(env.get("HOME"), Some(&home_o));
    assert_eq!(env.get("USER").map(String::as_str), Some("owned"));
    send(addr, &["inc@mx.test"], "inc").await;
    let (id, _, _) = recorded(&out, "mx.test", "include").await;
    assert_eq!(id["uid"], b.uid.to_string(), "the include file's owner");
    std::fs::remove_file(out.join("mx.test-include.id")).unwrap();
    send(addr, &[&format!("{}@mx.test", c.name)], "c").await;
    let (id, env, _) = recorded(&out, "mx.test", "include").await;
    assert_eq!(id["uid"], c.uid.to_string(), "the .forward's user, not b");
    assert_eq!(env.get("USER"), Some(&c.name));
}
