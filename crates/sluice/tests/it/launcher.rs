//! The privileged launcher (issue 40): a daemon started as root that
//! gives root up to its account still runs pipe(8) commands as the
//! transport's `user`, through the small root process it started before
//! the drop (`deliver::launch`). The launcher is attacked directly as a
//! compromised daemon would: uid 0, a relative program, malformed
//! requests; and it is gone once the daemon is (SIGKILL).
#![allow(unsafe_code, clippy::undocumented_unsafe_blocks)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::common;
use common::users::TestUser;
use common::*;

fn require_root() {
    if unsafe { libc::geteuid() } != 0 {
        panic!("this test starts the daemon as root, as CI does: run the suite as root");
    }
}

/// A script writing `uid=`, `gid=`, `groups=` and its input under `out`
/// (then, for a recipient `slow…`, sleeping 100 s).
fn recorder(out: &Path) -> PathBuf {
    let path = out.join("record.sh");
    let script = format!(
        "#!/bin/sh\n{{ echo \"uid=$(id -u)\"; echo \"gid=$(id -g)\"; echo \"groups=$(id -G)\"; \
         echo \"arg=$1\"; }} > {out}/run.$$.meta\ncat > {out}/run.$$.stdin\n\
         case \"$1\" in slow*) exec sleep 100;; esac\nexit 0\n",
        out = out.display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The metadata files the recorder wrote.
fn recorded(out: &Path) -> Vec<String> {
    let mut runs: Vec<String> = std::fs::read_dir(out)
        .unwrap()
        .filter_map(|e| {
            let path = e.unwrap().path();
            let meta = path.to_string_lossy().ends_with(".meta");
            meta.then(|| std::fs::read_to_string(path).unwrap())
        })
        .collect();
    runs.sort();
    runs
}

/// `sluice serve` as root, dropping to `daemon`, with `mypipe` running
/// `script` as `piper` for `pipe.test`; logging JSON to `dir/maillog`.
fn serve(dir: &Path, daemon: &TestUser, piper: &TestUser, script: &Path) -> Child {
    let config = dir.join("sluice.toml");
    let text = format!(
        "hostname = \"mx.test\"\ndata_dir = \"{data}\"\nlog_file = \"{log}\"\nlog_format = \"json\"\n\
         user = \"{daemon}\"\n\
         [smtpd]\nlisten = [\"127.0.0.1:0\"]\n\
         [transports.mypipe]\nservice = \"pipe\"\nargv = [\"{script}\", \"${{recipient}}\"]\n\
         user = \"{piper}\"\ntime_limit_secs = 3\n\
         [transport]\n\"pipe.test\" = \"mypipe:\"\n",
        data = dir.join("var").display(),
        log = dir.join("maillog").display(),
        daemon = daemon.name,
        piper = piper.name,
        script = script.display(),
    );
    std::fs::write(&config, text).unwrap();
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--config", &config.display().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// A daemon running as one test account delivers through a pipe whose
/// `user` is another: the command runs as that account (before the
/// launcher: deferred 4.3.0, `Operation not permitted`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipe_runs_as_its_user_under_a_daemon_that_gave_root_up() {
    require_root();
    let daemon = TestUser::create("ld");
    let piper = TestUser::create("lp");
    let dir = temp_dir("launcher");
    std::fs::set_permissions(&*dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = dir.join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    let script = recorder(&out);
    let mut server = serve(&dir, &daemon, &piper, &script);
    let listen = listening_in(&dir.join("maillog"), 0, "smtp").await;
    let mut c = Client::ready(listen).await;
    let r = c
        .message("s@sender.test", &["alice@pipe.test"], &body("launched"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let r = c
        .message("s@sender.test", &["slow@pipe.test"], &body("slow"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let done =
        |to: &'static str| move |e: &Event| matches!(e, Event::Delivery { to: t, .. } if t == to);
    let finished = wait_logged(20, &dir, done("alice@pipe.test")).await
        && wait_logged(20, &dir, done("slow@pipe.test")).await;
    let daemon_uid = std::fs::read_to_string(format!("/proc/{}/status", server.id())).unwrap();
    let launcher = logged_events(&dir).into_iter().find_map(|e| match e {
        Event::LauncherStarted { pid } => Some(pid),
        _ => None,
    });
    let launcher_uid =
        launcher.and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok());
    let _ = server.kill(); // SIGKILL: no shutdown, no goodbye to the launcher
    let _ = server.wait();
    assert!(finished, "{}", read_log(&dir));
    let sent = |e: &Event| matches!(e, Event::Delivery { to, status, .. } if to == "alice@pipe.test" && status == "sent");
    assert!(any_logged(&dir, sent), "{}", read_log(&dir));
    // At the time limit the command's group is killed: bounced as
    // Postfix does, nothing of the account left running.
    let timed_out = |e: &Event| {
        matches!(e, Event::Delivery { to, status, reason, .. }
            if to == "slow@pipe.test" && status == "bounced" && reason.text().contains("time limit exceeded"))
    };
    assert!(any_logged(&dir, timed_out), "{}", read_log(&dir));
    let sleeping = Command::new("pgrep")
        .args(["-u", &piper.name, "sleep"])
        .output()
        .unwrap();
    let pids: Vec<u32> = String::from_utf8_lossy(&sleeping.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    assert!(
        wait_until(5, || pids.iter().all(|&p| !alive(p))).await,
        "{pids:?}"
    );
    assert!(
        daemon_uid.contains(&format!("Uid:\t{0}\t{0}\t{0}\t{0}", daemon.uid)),
        "the daemon gave root up: {daemon_uid}"
    );
    let runs = recorded(&out);
    assert_eq!(runs.len(), 2, "{runs:?}");
    let gid = piper.gid();
    let alice = runs.iter().find(|r| r.contains("arg=alice")).unwrap();
    assert_eq!(
        *alice,
        format!(
            "uid={}\ngid={gid}\ngroups={gid}\narg=alice@pipe.test\n",
            piper.uid
        )
    );
    let launcher = launcher.expect("a launcher_started event");
    assert!(
        launcher_uid
            .unwrap_or_default()
            .contains("Uid:\t0\t0\t0\t0"),
        "the launcher is root"
    );
    let gone = wait_until(10, || !alive(launcher)).await;
    assert!(gone, "the launcher outlived the daemon's SIGKILL");
}

/// Whether `pid` is a live process (not gone, not a zombie).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// Runs `req` through `launcher` with empty input: its answer and output.
async fn launch(
    launcher: &sluice::deliver::launch::Launcher,
    req: &sluice::deliver::launch::ExecRequest,
) -> (sluice::deliver::launch::Answer, String) {
    let (in_r, in_w) = std::io::pipe().unwrap();
    let (mut out_r, out_w) = std::io::pipe().unwrap();
    drop(in_w);
    let call = launcher.exec(req, in_r.into(), out_w.into()).await.unwrap();
    let answer = call.answer().await.unwrap();
    drop(call);
    let mut out = String::new();
    std::io::Read::read_to_string(&mut out_r, &mut out).unwrap();
    (answer, out)
}

/// The launcher attacked as a compromised daemon would: root, a relative
/// program, an account that does not exist, malformed JSON, a request
/// short of descriptors are each refused with an answer, and it goes on
/// serving; the command gets exactly the environment asked, is killed at
/// its time limit, and the launcher exits when its channel closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_launcher_refuses_root_and_nonsense_and_keeps_serving() {
    use sluice::deliver::launch::{Answer, ExecRequest, Launcher};
    require_root();
    let piper = TestUser::create("lq");
    let gid = piper.gid();
    // Only the account the configuration would name (with its group).
    let policy = sluice::deliver::launch::Policy {
        allow: vec![(piper.uid, gid)],
        people_from: None,
    };
    let launcher = Launcher::start(Path::new(env!("CARGO_BIN_EXE_sluice")), &policy).unwrap();
    let req = |argv: &[&str], uid: u32, gid: u32| ExecRequest {
        argv: argv.iter().map(|a| a.to_string()).collect(),
        uid,
        gid,
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: "/".into(),
        time_limit_ms: 10_000,
    };
    let (answer, out) = launch(&launcher, &req(&["/usr/bin/id"], piper.uid, gid)).await;
    assert_eq!(answer, Answer::Exited(0));
    assert_eq!(
        out,
        format!(
            "uid={0}({1}) gid={gid}({1}) groups={gid}({1})\n",
            piper.uid, piper.name
        )
    );
    let refused = |a: &Answer, want: &str| match a {
        Answer::Refused(why) => assert!(why.contains(want), "{why}"),
        other => panic!("{want}: {other:?}"),
    };
    for (argv, uid, g, want) in [
        (&["/usr/bin/id"][..], 0, gid, "as root"),
        (&["/usr/bin/id"][..], piper.uid, 0, "as root"),
        (&["id"][..], piper.uid, gid, "absolute"),
        (
            &["/usr/bin/id"][..],
            3_999_999_999,
            gid,
            "not an account the configuration",
        ),
        // Another account, or the right one with a privileged group
        // (shadow's 42): what a compromised daemon would ask for.
        (
            &["/usr/bin/id"][..],
            1,
            1,
            "not an account the configuration",
        ),
        (
            &["/usr/bin/id"][..],
            piper.uid,
            42,
            "not an account the configuration",
        ),
    ] {
        let (answer, out) = launch(&launcher, &req(argv, uid, g)).await;
        refused(&answer, want);
        assert_eq!(out, "", "nothing ran");
    }
    for (bytes, want) in [
        (&b"{not json"[..], "malformed"),
        (
            &b"{\"exec\":{\"argv\":[\"/bin/sh\"],\"uid\":0}}"[..],
            "malformed",
        ),
        (&[0xff, 0, 0x7b][..], "malformed"),
    ] {
        let call = launcher.request(bytes, Vec::new()).await.unwrap();
        refused(&call.answer().await.unwrap(), want);
    }
    let short = serde_json::to_vec(&sluice::deliver::launch::proto::Request::Exec(req(
        &["/usr/bin/id"],
        piper.uid,
        gid,
    )))
    .unwrap();
    let call = launcher.request(&short, Vec::new()).await.unwrap();
    refused(&call.answer().await.unwrap(), "three descriptors");
    // Still serving; the environment is exactly what was asked.
    let mut env_req = req(&["/usr/bin/env"], piper.uid, gid);
    env_req.env.push(("RECIPIENT".into(), "a@b".into()));
    let (answer, out) = launch(&launcher, &env_req).await;
    assert_eq!(
        (answer, out.as_str()),
        (Answer::Exited(0), "PATH=/usr/bin:/bin\nRECIPIENT=a@b\n")
    );
    let (answer, _) = launch(&launcher, &req(&["/no/such/program"], piper.uid, gid)).await;
    assert!(
        matches!(&answer, Answer::Failed(why) if why.contains("No such file")),
        "{answer:?}"
    );
    let started = std::time::Instant::now();
    let mut slow = req(&["/bin/sleep", "30"], piper.uid, gid);
    slow.time_limit_ms = 300;
    let (answer, _) = launch(&launcher, &slow).await;
    assert_eq!(answer, Answer::TimedOut);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // A command that exits leaving a child holding its output: answered
    // at once; while the caller still reads, the child is killed with its
    // group at the time limit (the output then ends).
    let mut orphan = req(
        &["/bin/sh", "-c", "sleep 100 & echo started"],
        piper.uid,
        gid,
    );
    orphan.time_limit_ms = 1000;
    let started = std::time::Instant::now();
    let (in_r, in_w) = std::io::pipe().unwrap();
    let (mut out_r, out_w) = std::io::pipe().unwrap();
    drop(in_w);
    let call = launcher
        .exec(&orphan, in_r.into(), out_w.into())
        .await
        .unwrap();
    assert_eq!(call.answer().await.unwrap(), Answer::Exited(0));
    let out = tokio::task::spawn_blocking(move || {
        let mut out = String::new();
        std::io::Read::read_to_string(&mut out_r, &mut out).unwrap();
        out
    })
    .await
    .unwrap();
    assert_eq!(out, "started\n");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    drop(call);
    let left = Command::new("pgrep")
        .args(["-u", &piper.name, "sleep"])
        .output()
        .unwrap();
    let pids: Vec<u32> = String::from_utf8_lossy(&left.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    let gone = wait_until(5, || pids.iter().all(|&p| !alive(p))).await;
    assert!(gone, "left running: {pids:?}");
    // Too many descriptors: refused, not kept.
    let many: Vec<std::os::fd::OwnedFd> = (0..4)
        .map(|_| std::fs::File::open("/dev/null").unwrap().into())
        .collect();
    let call = launcher.request(&short, many).await.unwrap();
    refused(&call.answer().await.unwrap(), "descriptors");
    // A daemon that goes away (its answer socket closed) mid-command:
    // the command's group is killed.
    let mut long = req(&["/bin/sleep", "60"], piper.uid, gid);
    long.time_limit_ms = 120_000;
    let (in_r, _in_w) = std::io::pipe().unwrap();
    let (_out_r, out_w) = std::io::pipe().unwrap();
    let call = launcher
        .exec(&long, in_r.into(), out_w.into())
        .await
        .unwrap();
    let sleeping = || {
        let out = Command::new("pgrep")
            .args(["-u", &piper.name, "sleep"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .filter(|&p| alive(p))
            .count()
    };
    assert!(wait_until(5, || sleeping() == 1).await, "the command runs");
    drop(call);
    assert!(
        wait_until(5, || sleeping() == 0).await,
        "killed when its caller left"
    );
    let pid = launcher.pid();
    assert!(alive(pid));
    let status = tokio::task::spawn_blocking(move || launcher.stop())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
}
