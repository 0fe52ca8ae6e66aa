//! Pipe delivery (issue 40 item 6), Postfix's pipe(8): a
//! `[transports.mypipe]` with `service = "pipe"` runs a real program
//! (a shell script that records its argv, environment, uid and input;
//! procmail) as a test account, never through a shell. Held to a real
//! Postfix 3.7 with the same master.cf transport (`mypipe unix - n n - -
//! pipe flags=DRO user=nobody argv=script ${sender} ${recipient} …`):
//! the arguments and prepended headers the script saw, and the DSN of
//! exit codes 67 and 75.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::common;
use common::postfix::Postfix;
use common::users::TestUser;
use common::*;
use sluice::config::hop::NextHop;
use sluice::config::pipe::{PipeFlags, PipeUser};
use sluice::config::pipe_argv::PipeArg;
use sluice::config::transports::{Service, TransportConfig};

/// A script that writes, per run, `run.N.meta` (uid, each argument, the
/// environment) and `run.N.stdin` under `dir`; when its first argument is
/// a status text (`4.7.1 later`) prints it and exits 1;
/// else exits with the number in its first argument (after an `e`; 100:
/// sleeps 100 s), or 0.
fn recorder(dir: &Path) -> PathBuf {
    let path = dir.join("record.sh");
    let script = format!(
        "#!/bin/sh\nout={dir}/run.$$\n\
         {{ echo \"uid=$(id -u)\"; for a in \"$@\"; do printf 'arg=%s\\n' \"$a\"; done; \
         env | sort | sed 's/^/env=/'; }} > \"$out.meta\"\n\
         cat > \"$out.stdin\"\n\
         case \"$1\" in [45].*' '*) echo \"$1\"; exit 1;; esac\n\
         code=$(echo \"$1\" | sed -n 's/^e\\([0-9]*\\).*/\\1/p')\n\
         [ \"$code\" = 100 ] && exec sleep 100\n\
         exit ${{code:-0}}\n",
        dir = dir.display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A directory everyone may write (the script runs as another account).
fn open_dir(name: &str) -> TestDir {
    let dir = temp_dir(name);
    std::fs::set_permissions(&*dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// What one run recorded: (uid, arguments, environment, input).
type Run = (u32, Vec<String>, Vec<String>, String);

fn runs(dir: &Path) -> Vec<Run> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let Some(stem) = name.strip_suffix(".meta") else {
            continue;
        };
        let meta = std::fs::read_to_string(&path).unwrap();
        let stdin = std::fs::read_to_string(dir.join(format!("{stem}.stdin"))).unwrap_or_default();
        let field = |p: &str| -> Vec<String> {
            meta.lines()
                .filter_map(|l| l.strip_prefix(p))
                .map(str::to_string)
                .collect()
        };
        let uid = field("uid=")[0].parse().unwrap();
        out.push((uid, field("arg="), field("env="), stdin));
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    out
}

fn args(list: &[&str]) -> Vec<PipeArg> {
    list.iter().map(|a| PipeArg::parse(a).unwrap()).collect()
}

/// A config routing `pipe.test` to `mypipe` (the script as `user`).
fn pipe_config(
    dir: &Path,
    relay: std::net::SocketAddr,
    pipe: TransportConfig,
) -> sluice::config::Config {
    let mut cfg = config(dir, Some(relay));
    cfg.recipient_delimiter = "+".into();
    cfg.transports.insert("mypipe".into(), pipe);
    cfg.transport
        .insert("pipe.test".into(), NextHop::parse("mypipe:").unwrap());
    cfg
}

fn pipe(argv: &[&str], user: &str, flags: &str) -> TransportConfig {
    TransportConfig {
        service: Service::Pipe,
        argv: args(argv),
        user: Some(PipeUser::parse(user).unwrap()),
        flags: PipeFlags::parse(flags).unwrap(),
        ..Default::default()
    }
}

/// Waits for the delivery event of `to` with `status`; its (dsn, reason).
async fn outcome(dir: &Path, to: &str, status: &str) -> (String, String) {
    let found = |e: &Event| {
        matches!(e, Event::Delivery { to: t, status: s, relay, .. }
        if t == to && s == status && relay == "mypipe")
    };
    assert!(
        wait_logged(20, dir, found).await,
        "{to} {status}: {}",
        read_log(dir)
    );
    logged_events(dir)
        .into_iter()
        .find_map(|e| match e {
            Event::Delivery {
                to: t,
                status: s,
                dsn,
                reason,
                ..
            } if t == to && s == status => Some((dsn.to_string(), reason.to_string())),
            _ => None,
        })
        .unwrap()
}

const HOSTILE: [&str; 3] = [
    "\"$(touch PWNED)\"@pipe.test",
    "\"a b\"@pipe.test",
    "-flag@pipe.test",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argv_macros_env_user_and_headers() {
    let dir = open_dir("pipe-argv");
    let script = recorder(&dir);
    let user = TestUser::create("pipe");
    let sink = recording_sink().await;
    let argv = [
        script.to_str().unwrap(),
        "${user}",
        "-f",
        "${sender}",
        "${recipient}",
        "r=$recipient",
        "x=${extension}",
        "d=${domain}",
        "m=${mailbox}",
        "n=${nexthop}",
        "q=${queue_id}",
        "s=${size}",
        "$$",
    ];
    let cfg = pipe_config(&dir, sink.addr, pipe(&argv, &user.name, "DRO"));
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let mut rcpts = vec!["alice+ext@pipe.test"];
    rcpts.extend(HOSTILE);
    let r = c.message("s@sender.test", &rcpts, &body("piped")).await;
    assert!(r.starts_with("250"), "{r}");
    let qid = qid_of(&r);
    for to in &rcpts {
        outcome(&dir, to, "sent").await;
    }
    let runs = runs(&dir);
    assert_eq!(runs.len(), rcpts.len(), "flag D: one command per recipient");
    let alice = runs
        .iter()
        .find(|r| r.1[0] == "alice")
        .expect("alice's run");
    let size = alice.1[10].clone();
    assert_eq!(
        alice.1,
        [
            "alice",
            "-f",
            "s@sender.test",
            "alice+ext@pipe.test",
            "r=alice+ext@pipe.test",
            "x=ext",
            "d=pipe.test",
            "m=alice+ext",
            "n=pipe.test",
            &format!("q={qid}"),
            &size,
            "$",
        ]
    );
    assert!(size.starts_with("s=") && size.len() > 3);
    for (uid, _, env, stdin) in &runs {
        assert_eq!(*uid, user.uid, "runs as the configured user");
        let env: Vec<&String> = env
            .iter()
            .filter(|e| !e.starts_with("PWD=") && !e.starts_with("TZ=") && !e.starts_with("LANG="))
            .collect();
        assert_eq!(env, ["PATH=/usr/bin:/bin"], "{env:?}");
        assert!(
            stdin.starts_with("Return-Path: <s@sender.test>\nX-Original-To: "),
            "{stdin}"
        );
        assert!(!stdin.contains('\r'), "UNIX line ends");
    }
    // Hostile addresses: each one argument, in Postfix's internal form
    // (the local part unquoted), no shell ran.
    for to in [
        "$(touch PWNED)@pipe.test",
        "a b@pipe.test",
        "-flag@pipe.test",
    ] {
        assert!(runs.iter().any(|r| r.1[3] == to), "{to}: {runs:?}");
    }
    assert!(!dir.join("PWNED").exists() && !Path::new("PWNED").exists());
    let dt = runs.iter().find(|r| r.1[3] == "a b@pipe.test").unwrap();
    assert!(
        dt.3.contains("Delivered-To: \"a b\"@pipe.test\n"),
        "{}",
        dt.3
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recipients_share_a_command_up_to_the_limit() {
    let dir = open_dir("pipe-many");
    let script = recorder(&dir);
    let user = TestUser::create("pipm");
    let sink = recording_sink().await;
    let mut t = pipe(
        &[script.to_str().unwrap(), "x", "${recipient}"],
        &user.name,
        "",
    );
    t.max_recipients = Some(2);
    let (server, addr) = start(pipe_config(&dir, sink.addr, t)).await;
    let mut c = Client::ready(addr).await;
    let rcpts = ["a@pipe.test", "b@pipe.test", "c@pipe.test"];
    let r = c.message("s@sender.test", &rcpts, &body("many")).await;
    assert!(r.starts_with("250"), "{r}");
    for to in rcpts {
        outcome(&dir, to, "sent").await;
    }
    let argvs: Vec<Vec<String>> = runs(&dir).into_iter().map(|r| r.1).collect();
    assert_eq!(
        argvs,
        [
            vec!["x", "a@pipe.test", "b@pipe.test"],
            vec!["x", "c@pipe.test"]
        ]
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_map_as_sysexits_and_the_time_limit_kills() {
    let dir = open_dir("pipe-exit");
    let script = recorder(&dir);
    let user = TestUser::create("pipx");
    let sink = recording_sink().await;
    let mut t = pipe(&[script.to_str().unwrap(), "${user}"], &user.name, "");
    t.max_recipients = Some(1);
    t.time_limit_secs = 2;
    let (server, addr) = start(pipe_config(&dir, sink.addr, t)).await;
    let mut c = Client::ready(addr).await;
    let cases = [
        ("e67@pipe.test", "bounced", "5.1.1", "user unknown"),
        ("e75@pipe.test", "deferred", "4.3.0", "temporary failure"),
        ("e74@pipe.test", "bounced", "5.3.0", "input/output error"),
        (
            "e1@pipe.test",
            "bounced",
            "5.3.0",
            "Command died with status 1",
        ),
        ("\"4.7.1 later\"@pipe.test", "deferred", "4.7.1", "later"),
        (
            "e100@pipe.test",
            "bounced",
            "5.3.0",
            "Command time limit exceeded",
        ),
    ];
    let rcpts: Vec<&str> = cases.iter().map(|c| c.0).collect();
    let r = c.message("s@sender.test", &rcpts, &body("codes")).await;
    assert!(r.starts_with("250"), "{r}");
    for (to, status, dsn, text) in cases {
        let (got, reason) = outcome(&dir, to, status).await;
        assert_eq!(got, dsn, "{to}: {reason}");
        assert!(reason.contains(text), "{to}: {reason}");
    }
    // The time limit killed the command's process group.
    let left = std::process::Command::new("pgrep")
        .args(["-u", &user.name])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&left.stdout)
    );
    // The bounce went back to the sender, naming the transport's reason.
    assert!(
        wait_until(20, || sink.count() >= 1).await,
        "{}",
        read_log(&dir)
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn procmail_delivers_as_the_user() {
    ensure_package("/usr/bin/procmail", "procmail");
    let dir = open_dir("pipe-procmail");
    let user = TestUser::create("pipp");
    let mbox = dir.join("mbox");
    // procmail refuses an rcfile in a directory others may write.
    let etc = dir.join("etc");
    std::fs::create_dir(&etc).unwrap();
    let rc = etc.join("procmailrc");
    std::fs::write(&rc, format!(":0\n{}\n", mbox.display())).unwrap();
    let sink = recording_sink().await;
    let t = pipe(
        &["/usr/bin/procmail", "-m", rc.to_str().unwrap()],
        &user.name,
        "DRO",
    );
    let (server, addr) = start(pipe_config(&dir, sink.addr, t)).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("s@sender.test", &["bob@pipe.test"], &body("procmail"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    outcome(&dir, "bob@pipe.test", "sent").await;
    let text = std::fs::read_to_string(&mbox).unwrap();
    assert!(
        text.contains("Delivered-To: bob@pipe.test\n") && text.contains("Subject: procmail"),
        "{text}"
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(&mbox).unwrap().uid(),
        user.uid,
        "written by the user"
    );
    server.shutdown().await;
}

/// Postfix and Sluice, same transport and messages: what the script saw
/// (arguments, the flags' headers) and the DSNs of exit codes 67 and 75.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipe_matches_postfix() {
    let argv_tail = "${user} ${sender} ${recipient} ${extension} ${domain} ${nexthop} ${mailbox} ${original_recipient}";
    let rcpts = ["alice+ext@pipe.test", "e67@pipe.test", "e75@pipe.test"];
    // Postfix.
    let pdir = open_dir("pipe-postfix");
    let script = recorder(&pdir);
    let postfix = Postfix::start_with(
        &[("transport", "pipe.test mypipe:\n")],
        &[
            ("transport_maps", "texthash:$config_directory/transport"),
            ("recipient_delimiter", "+"),
            ("mypipe_destination_recipient_limit", "1"),
        ],
        &format!(
            "mypipe unix - n n - - pipe flags=DRO user=nobody argv={} {argv_tail}",
            script.display()
        ),
    );
    let mut s = postfix.session().await;
    let rs: Vec<String> = rcpts.iter().map(|r| r.to_string()).collect();
    let sent = s.send("s@sender.test", &rs).await;
    let pqid = sent.queue_id.clone().expect("queued");
    let deliveries = loop {
        let d = postfix.deliveries();
        if d.iter()
            .filter(|d| d.queue_id == pqid && d.status != "deferred")
            .count()
            >= 2
            && d.iter().any(|d| d.to == "e75@pipe.test")
        {
            break d;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let prun = runs(&pdir);
    // Sluice.
    let dir = open_dir("pipe-vs-postfix");
    let script = recorder(&dir);
    let sink = recording_sink().await;
    let mut list = vec![script.to_str().unwrap().to_string()];
    list.extend(argv_tail.split(' ').map(str::to_string));
    let list: Vec<&str> = list.iter().map(String::as_str).collect();
    let (server, addr) = start(pipe_config(&dir, sink.addr, pipe(&list, "nobody", "DRO"))).await;
    let mut c = Client::ready(addr).await;
    let r = c.message("s@sender.test", &rcpts, &body("same")).await;
    assert!(r.starts_with("250"), "{r}");
    for (to, status) in [
        (rcpts[0], "sent"),
        (rcpts[1], "bounced"),
        (rcpts[2], "deferred"),
    ] {
        let (dsn, _) = outcome(&dir, to, status).await;
        let p = deliveries.iter().find(|d| d.to == to).unwrap();
        assert_eq!(
            (p.status.as_str(), p.dsn.as_str()),
            (status, dsn.as_str()),
            "{to}"
        );
    }
    let srun = runs(&dir);
    let seen = |runs: &[Run]| -> Vec<(Vec<String>, Vec<String>)> {
        runs.iter()
            .map(|r| {
                (
                    r.1.clone(),
                    r.3.lines().take(3).map(str::to_string).collect(),
                )
            })
            .collect()
    };
    assert_eq!(seen(&srun), seen(&prun), "{}", postfix.maillog());
    server.shutdown().await;
}

/// `deliver::pipe::run`, the runner local(8)'s `|command` aliases use,
/// attacked directly: a command that floods its output and never ends
/// is cut to 2 KiB and killed at the time limit; a command that leaves a
/// child holding its output behind is killed with it; root is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_bounds_output_time_and_privilege() {
    use sluice::deliver::pipe::{run, PipeCommand, PipeOutcome};
    let nobody = PipeUser::parse("nobody").unwrap();
    let command = |argv: &[&str], uid: u32| PipeCommand {
        argv: argv.iter().map(|a| a.to_string()).collect(),
        uid,
        gid: nobody.gid,
        env: vec![("RECIPIENT".into(), "r@x".into())],
        cwd: None,
        time_limit: std::time::Duration::from_secs(1),
        label: None,
    };
    let flood = run(&command(&["/usr/bin/yes", "spam"], nobody.uid), b"").await;
    let PipeOutcome::Bounced(reply) = flood else {
        panic!("{flood:?}")
    };
    assert!(
        reply.text.starts_with("Command time limit exceeded"),
        "{reply:?}"
    );
    let started = std::time::Instant::now();
    let script = ["/bin/sh", "-c", "sleep 100 & echo \"$RECIPIENT\"; exit 0"];
    let orphan = run(&command(&script, nobody.uid), b"").await;
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert!(matches!(orphan, PipeOutcome::Bounced(_)), "{orphan:?}");
    let quick = run(
        &command(&["/bin/sh", "-c", "echo \"$RECIPIENT\""], nobody.uid),
        b"",
    )
    .await;
    assert_eq!(
        quick,
        PipeOutcome::Sent {
            output: "r@x".into()
        }
    );
    let root = run(&command(&["/usr/bin/id"], 0), b"").await;
    assert!(matches!(root, PipeOutcome::Deferred(_)), "{root:?}");
}

/// FILTER_README's simple content filter: `content_filter =
/// mypipe:dummy` naming a pipe transport runs the filter command once per
/// message with every recipient (`-f ${sender} -- ${recipient}`), as
/// Postfix's pipe(8) runs it; nothing goes around the filter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_content_filter_may_be_a_pipe_transport() {
    let dir = open_dir("pipe-filter");
    let script = recorder(&dir);
    let user = TestUser::create("pipefilt");
    let sink = recording_sink().await;
    let argv = [
        script.to_str().unwrap(),
        "-f",
        "${sender}",
        "n=${nexthop}",
        "--",
        "${recipient}",
    ];
    let mut cfg = pipe_config(&dir, sink.addr, pipe(&argv, &user.name, "Rq"));
    cfg.content_checks.content_filter =
        sluice::config::content_filter::ContentFilter::parse("mypipe:dummy").unwrap();
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let to = ["x@far.test", "y@far.test"];
    let r = c.message("s@sender.test", &to, &body("filtered")).await;
    assert!(r.starts_with("250"), "{r}");
    for t in to {
        outcome(&dir, t, "sent").await;
    }
    let got = runs(&dir);
    assert_eq!(got.len(), 1, "{got:?}");
    let want = [
        "-f",
        "s@sender.test",
        "n=dummy",
        "--",
        "x@far.test",
        "y@far.test",
    ];
    assert_eq!(
        (got[0].0, got[0].1.clone()),
        (user.uid, want.map(String::from).to_vec())
    );
    assert!(
        got[0].3.starts_with("Return-Path: <s@sender.test>"),
        "{}",
        got[0].3
    );
    assert_eq!(sink.count(), 0);
    server.shutdown().await;
}
