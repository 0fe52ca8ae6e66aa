//! Runs one command as Postfix's pipe_command does: directly (no shell),
//! as the configured account (its uid and gid, no supplementary groups),
//! in a new process group, with an environment of `PATH=/usr/bin:/bin`
//! and the exported `TZ` and `LANG` only (plus what the caller adds), the
//! message on standard input, standard output and error captured together
//! (the first [`OUTPUT_LIMIT`] bytes, made printable), and the whole
//! process group killed at the time limit.
//!
//! The result is mapped as Postfix maps it: exit 0 is sent; output that
//! begins with an enhanced status (`4.x.x text`, `5.x.x text`) decides;
//! else a <sysexits.h> code by Postfix's sys_exits table; any other code
//! bounces (5.3.0); a signal defers (4.3.0); the time limit bounces
//! (5.3.0, "Command time limit exceeded").
//!
//! A daemon that gave root up cannot become another account: when the
//! process is not root and the command's account (uid and gid) is not its
//! own, the command is run by the launcher (`deliver::launch`), which
//! applies the same time limit and answers with the exit status; the
//! input and output go through pipes passed to it, and the result is
//! judged by the same code. Without a launcher (none was started) the
//! spawn fails as before (4.3.0, `Operation not permitted`).
//!
//! Trust: the command and account are the administrator's; the output is
//! the command's (it may hold anything: cut and made printable); the
//! launcher's answer is parsed, never trusted to be well-formed.
// libc calls the standard library does not wrap (kill of a process
// group, the process's ids); each block says why it is sound.
#![allow(unsafe_code)]

use std::os::fd::OwnedFd;
use std::process::{ExitStatus, Stdio};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{PipeCommand, PipeOutcome};
use crate::deliver::launch::{Answer, Call, ExecRequest, Launcher};
use crate::message::reply::{Enhanced, Reply};

/// How failures name the command: its label (local(8)'s command line),
/// else the program.
fn program_of(command: &PipeCommand) -> String {
    match &command.label {
        Some(label) => label.clone(),
        None => command.argv.first().cloned().unwrap_or_default(),
    }
}

/// How much of the command's output is kept for the log and DSN.
pub const OUTPUT_LIMIT: usize = 2048;

/// Runs `command` with `input` on its standard input.
pub async fn run(command: &PipeCommand, input: &[u8]) -> PipeOutcome {
    if let Some(launcher) = launcher_for(command) {
        return launched(launcher, command, input).await;
    }
    let program = program_of(command);
    let (mut child, output) = match spawn(command) {
        Ok(started) => started,
        Err(e) => {
            let text = format!("Delivery failed: cannot run \"{program}\": {e}");
            return PipeOutcome::Deferred(own(451, (4, 3, 0), text));
        }
    };
    let pid = child.id();
    let stdin = child.stdin.take();
    let talk = async {
        let write = async {
            if let Some(mut stdin) = stdin {
                let written = stdin.write_all(input).await;
                drop(stdin);
                return written;
            }
            Ok(())
        };
        let (written, out) = tokio::join!(write, read_output(output));
        let status = child.wait().await;
        (written, out, status)
    };
    let finished = tokio::time::timeout(command.time_limit, talk).await;
    match finished {
        Ok((written, out, status)) => judge(&program, written, &out, status),
        Err(_) => {
            kill_group(pid);
            let _ = child.wait().await;
            time_limit(&program)
        }
    }
}

fn time_limit(program: &str) -> PipeOutcome {
    let text = format!("Command time limit exceeded: \"{program}\"");
    PipeOutcome::Bounced(own(550, (5, 3, 0), text))
}

/// The launcher, when this process cannot become the command's account
/// itself (it is not root, and the account is not its own).
fn launcher_for(command: &PipeCommand) -> Option<&'static Launcher> {
    // SAFETY: geteuid and getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if uid == 0 || (command.uid == uid && command.gid == gid) {
        return None;
    }
    crate::deliver::launch::installed()
}

/// Runs `command` through the launcher: as [`run`], the launcher doing
/// the spawn, the wait and the kill at the time limit.
async fn launched(launcher: &Launcher, command: &PipeCommand, input: &[u8]) -> PipeOutcome {
    use std::os::unix::process::ExitStatusExt;
    let program = program_of(command);
    let cannot = |e: String| {
        let text = format!("Delivery failed: cannot run \"{program}\": {e}");
        PipeOutcome::Deferred(own(451, (4, 3, 0), text))
    };
    let (call, mut stdin, output) = match start(launcher, command).await {
        Ok(started) => started,
        Err(e) => return cannot(format!("launcher: {e}")),
    };
    let talk = async {
        let write = async {
            let written = stdin.write_all(input).await;
            drop(stdin);
            written
        };
        tokio::join!(write, read_output(output), call.answer())
    };
    let finished = tokio::time::timeout(command.time_limit, talk).await;
    let (written, out, answer) = match finished {
        Ok(done) => done,
        Err(_) => {
            call.give_up();
            return time_limit(&program);
        }
    };
    let status = match answer {
        Ok(Answer::Exited(code)) => Ok(ExitStatus::from_raw((code & 0xff) << 8)),
        Ok(Answer::Signaled(signal)) => Ok(ExitStatus::from_raw(signal & 0x7f)),
        Ok(Answer::TimedOut) => return time_limit(&program),
        Ok(Answer::Refused(why) | Answer::Failed(why)) => return cannot(why),
        Err(e) => Err(e),
    };
    judge(&program, written, &out, status)
}

type Launched = (
    Call,
    tokio::net::unix::pipe::Sender,
    tokio::net::unix::pipe::Receiver,
);

/// Sends the launcher `command` with its input and output pipes.
async fn start(launcher: &Launcher, command: &PipeCommand) -> std::io::Result<Launched> {
    let (in_r, in_w) = std::io::pipe()?;
    let (out_r, out_w) = std::io::pipe()?;
    let cwd = command.cwd.as_deref().unwrap_or("/".as_ref());
    let req = ExecRequest {
        argv: command.argv.clone(),
        uid: command.uid,
        gid: command.gid,
        env: environment(command),
        cwd: cwd
            .to_str()
            .ok_or_else(|| std::io::Error::other("directory is not UTF-8"))?
            .to_string(),
        time_limit_ms: command.time_limit.as_millis().clamp(1, u64::MAX as u128) as u64,
    };
    let call = launcher.exec(&req, in_r.into(), out_w.into()).await?;
    let stdin = tokio::net::unix::pipe::Sender::from_owned_fd(OwnedFd::from(in_w))?;
    let output = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(out_r))?;
    Ok((call, stdin, output))
}

/// The command's whole environment, as [`spawn`] gives it: `PATH`, the
/// daemon's `TZ` and `LANG`, then the caller's (a later name replaces an
/// earlier one).
fn environment(command: &PipeCommand) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![("PATH".into(), "/usr/bin:/bin".into())];
    for name in ["TZ", "LANG"] {
        if let Ok(value) = std::env::var(name) {
            env.push((name.into(), value));
        }
    }
    for (name, value) in &command.env {
        env.retain(|(n, _)| n != name);
        env.push((name.clone(), value.clone()));
    }
    env
}

type Started = (tokio::process::Child, tokio::net::unix::pipe::Receiver);

fn spawn(command: &PipeCommand) -> std::io::Result<Started> {
    let (reader, writer) = std::io::pipe()?;
    let mut cmd = tokio::process::Command::new(command.argv.first().map_or("", String::as_str));
    cmd.args(command.argv.iter().skip(1))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .current_dir(command.cwd.as_deref().unwrap_or("/".as_ref()))
        .stdin(Stdio::piped())
        .stdout(writer.try_clone()?)
        .stderr(writer)
        .uid(command.uid)
        .gid(command.gid)
        .process_group(0)
        .kill_on_drop(true);
    for name in ["TZ", "LANG"] {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    for (name, value) in &command.env {
        cmd.env(name, value);
    }
    let child = cmd.spawn()?;
    // The command's copies of the write end are in the child alone once
    // `cmd` (which holds ours) is gone: the reader sees the end.
    drop(cmd);
    let reader = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(reader))?;
    Ok((child, reader))
}

/// The first [`OUTPUT_LIMIT`] bytes of output; the rest read and dropped
/// until every holder of the pipe has closed it.
async fn read_output(mut from: tokio::net::unix::pipe::Receiver) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = OUTPUT_LIMIT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

/// Kills the command's process group (it leads it: `process_group(0)`).
fn kill_group(pid: Option<u32>) {
    let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()).filter(|&p| p > 0) else {
        return;
    };
    // SAFETY: kill takes plain integers; a negative pid names the group
    // the child leads, which holds only the command and its offspring.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
}

/// The outcome of a command that finished.
fn judge(
    program: &str,
    written: std::io::Result<()>,
    output: &[u8],
    status: std::io::Result<ExitStatus>,
) -> PipeOutcome {
    use std::os::unix::process::ExitStatusExt;
    let out = printable(output);
    let with_output = |text: String| match out.is_empty() {
        true => text,
        false => format!("{text}. Command output: {out}"),
    };
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            let text = format!("Delivery failed: waiting for \"{program}\": {e}");
            return PipeOutcome::Deferred(own(451, (4, 3, 0), text));
        }
    };
    if let Some(signal) = status.signal() {
        let text = with_output(format!("Command died with signal {signal}: \"{program}\""));
        return PipeOutcome::Deferred(own(451, (4, 3, 0), text));
    }
    let code = status.code().unwrap_or(-1);
    if code == 0 {
        return match written {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                let text = format!("Command failed: {e}: \"{program}\"");
                PipeOutcome::Bounced(own(550, (5, 3, 0), text))
            }
            _ => PipeOutcome::Sent { output: out },
        };
    }
    if let Some((status, text)) = leading_status(&out) {
        let code = if status.class() == 4 { 451 } else { 550 };
        return outcome(Reply::own(code, Some(status), text));
    }
    match sys_exit(code) {
        Some((dsn, text)) => {
            let code = if dsn.0 == 4 { 451 } else { 550 };
            outcome(own(code, dsn, with_output(text.into())))
        }
        None => {
            let text = with_output(format!("Command died with status {code}: \"{program}\""));
            PipeOutcome::Bounced(own(550, (5, 3, 0), text))
        }
    }
}

fn outcome(reply: Reply) -> PipeOutcome {
    match reply.code {
        400..=499 => PipeOutcome::Deferred(reply),
        _ => PipeOutcome::Bounced(reply),
    }
}

/// Postfix's sys_exits table (EX_USAGE 64 to EX_CONFIG 78).
pub fn sys_exit(code: i32) -> Option<((u8, u8, u8), &'static str)> {
    Some(match code {
        64 => ((5, 3, 0), "command line usage error"),
        65 => ((5, 6, 0), "data format error"),
        66 => ((5, 3, 0), "cannot open input"),
        67 => ((5, 1, 1), "user unknown"),
        68 => ((5, 1, 2), "host name unknown"),
        69 => ((5, 3, 0), "service unavailable"),
        70 => ((5, 3, 0), "internal software error"),
        71 => ((4, 3, 0), "system resource problem"),
        72 => ((5, 3, 0), "critical OS file missing"),
        73 => ((5, 2, 0), "can't create user output file"),
        74 => ((5, 3, 0), "input/output error"),
        75 => ((4, 3, 0), "temporary failure"),
        76 => ((5, 5, 0), "remote error in protocol"),
        77 => ((5, 7, 0), "permission denied"),
        78 => ((5, 3, 5), "local configuration error"),
        _ => return None,
    })
}

/// Output that begins with `4.x.x` or `5.x.x` and a space: that status
/// and the text after it (Postfix's dsn_valid and dsn_split).
fn leading_status(out: &str) -> Option<(Enhanced, String)> {
    let (word, rest) = out.split_once(' ').unwrap_or((out, ""));
    let status = Enhanced::parse(word).filter(|s| s.class() != 2)?;
    Some((status, rest.trim_start().to_string()))
}

/// Tabs and line ends become spaces, other unprintable bytes `_`
/// (Postfix's translit and printable); trailing spaces dropped.
pub fn printable(out: &[u8]) -> String {
    let text: String = String::from_utf8_lossy(out)
        .chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' => ' ',
            c if c.is_control() || c == char::REPLACEMENT_CHARACTER => '_',
            c => c,
        })
        .collect();
    text.trim_end().to_string()
}

fn own(code: u16, (c, s, d): (u8, u8, u8), text: String) -> Reply {
    Reply::own(code, Enhanced::new(c, s, d), text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_statuses_and_sysexits() {
        let (s, t) = leading_status("5.7.1 go away now").unwrap();
        assert_eq!((s.to_string(), t.as_str()), ("5.7.1".into(), "go away now"));
        assert!(leading_status("2.0.0 fine").is_none());
        assert!(leading_status("hello").is_none());
        assert_eq!(sys_exit(67).unwrap().0, (5, 1, 1));
        assert_eq!(sys_exit(75).unwrap().0, (4, 3, 0));
        assert_eq!(sys_exit(1), None);
        assert_eq!(printable(b"a\tb\nc\x01\n"), "a b c_");
    }
}
