//! `|command` targets of aliases, `:include:` files and `.forward`s, as
//! Postfix's local(8) runs them (its command.c over pipe_command.c and
//! exec_command.c), on pipe(8)'s runner ([`crate::deliver::pipe::run`]).
//!
//! The switch (`expand.rs`, blocking) decides and describes each command
//! as a [`CommandTarget`]; the agent (`mod.rs`, async) runs them after the
//! switch: no blocking-pool thread waits on a command, and the runner's
//! process handling stays async.
//!
//! As local(8): a command made of `SAFE_CHARS`, spaces and tabs only is
//! split on white space and exec'd (its program found in `PATH`, else it
//! goes to the shell as a built-in would); any other goes to `/bin/sh -c`.
//! It runs as the account whose rights the expansion carries: a
//! `.forward`'s user, an include file's owner, the aliases file's owner;
//! root's files (and root itself) give `default_privs`. Its environment:
//! HOME, LOGNAME, USER, SENDER, RECIPIENT, LOCAL, SHELL, DOMAIN,
//! EXTENSION, ORIGINAL_RECIPIENT, ENVID, every value with characters
//! outside `command_expansion_filter` made `_`, besides pipe's PATH, TZ,
//! LANG. Its input: `From `, `Return-Path:`, `X-Original-To:`,
//! `Delivered-To:` then the message (mail_copy's FROM, RETURN_PATH,
//! ORIG_RCPT, DELIVERED). Its exit status is mapped by the runner
//! (sysexits, a leading `D.S.N text`, the time limit).
//!
//! Trust: the command text is its file's owner's (the account it runs
//! as); the addresses and message are the sender's and reach the command
//! only through the filtered environment and standard input, never its
//! command line. Invariant: never root (the runner refuses uid or gid 0).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::rights;
use super::status::Status;
use crate::config::pipe::PipeFlags;
use crate::config::system::{SystemConfig, SAFE_CHARS};
use crate::deliver::pipe::{self, content, PipeCommand, PipeOutcome};
use crate::routing::system::passwd::Account;

/// A command the switch allowed, with all it runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandTarget {
    /// The command line, as written after the `|`.
    pub command: String,
    pub uid: u32,
    pub gid: u32,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// The input's `From ` and `Return-Path:` (an owner- list's address).
    pub sender: String,
    /// `X-Original-To:` (none when empty: under an owner- list).
    pub original: String,
    /// `Delivered-To:`.
    pub delivered: String,
}

/// The recipient a command is run for (local(8)'s message attributes).
pub struct For<'a> {
    /// The recipient being delivered (lower case), `local@domain`.
    pub address: &'a str,
    /// Its user part (the local part without its extension).
    pub user: &'a str,
    pub extension: Option<&'a str>,
    pub sender: &'a str,
    pub original: &'a str,
    pub delivered: &'a str,
    /// The RFC 3461 envelope ID, empty when none.
    pub envid: &'a str,
    pub delimiter: &'a str,
}

/// Describes `command` for `rcpt`, run with `who`'s rights (`None`: no
/// account, root's aliases or include file), root replaced by `privs`
/// (default_privs' uid and gid). Err: the execution directory does not
/// expand (a configuration error, 4.3.5).
pub fn target(
    cfg: &SystemConfig,
    command: &str,
    rcpt: &For<'_>,
    who: Option<&Account>,
    privs: (u32, u32),
) -> Result<CommandTarget, Status> {
    let nonzero = |id: u32, default: u32| if id == 0 { default } else { id };
    let uid = nonzero(who.map_or(0, |a| a.uid), privs.0);
    let gid = nonzero(who.map_or(0, |a| a.gid), privs.1);
    let (local, domain) = crate::message::address::split(rcpt.address);
    let mut env: Vec<(&str, &str)> = Vec::new();
    if let Some(a) = who {
        env.push(("HOME", a.home.to_str().unwrap_or("")));
    }
    env.extend([
        ("LOGNAME", rcpt.user),
        ("USER", rcpt.user),
        ("SENDER", rcpt.sender),
        ("RECIPIENT", rcpt.address),
        ("LOCAL", local),
    ]);
    if let Some(a) = who {
        env.push(("SHELL", a.shell.as_str()));
    }
    if !domain.is_empty() {
        env.push(("DOMAIN", domain));
    }
    if let Some(ext) = rcpt.extension {
        env.push(("EXTENSION", ext));
    }
    if !rcpt.original.is_empty() {
        env.push(("ORIGINAL_RECIPIENT", rcpt.original));
    }
    if !rcpt.envid.is_empty() {
        env.push(("ENVID", rcpt.envid));
    }
    let filter = &cfg.command_expansion_filter;
    let env = env
        .into_iter()
        .map(|(name, value)| (name.to_string(), censor(value, filter)))
        .collect();
    let cwd = execution_directory(cfg, rcpt, who).map_err(|e| {
        let text = format!("mail system configuration error: command_execution_directory: {e}");
        Status::Deferred("4.3.5", text)
    })?;
    Ok(CommandTarget {
        command: command.to_string(),
        uid,
        gid,
        env,
        cwd,
        sender: rcpt.sender.to_string(),
        original: rcpt.original.to_string(),
        delivered: rcpt.delivered.to_string(),
    })
}

/// Runs `t` with the message `body` (as spooled) on its input.
pub async fn run(t: &CommandTarget, body: &[u8], time_limit: Duration) -> Status {
    if !rights::can_act_as(t.uid) {
        let text = format!(
            "cannot run \"{}\" as uid {}: the daemon is not root (run_as_root)",
            t.command, t.uid
        );
        return Status::Deferred("4.3.0", text);
    }
    let command = PipeCommand {
        argv: argv(&t.command),
        uid: t.uid,
        gid: t.gid,
        env: t.env.clone(),
        cwd: Some(t.cwd.clone()),
        time_limit,
        label: Some(t.command.clone()),
    };
    let envelope = content::Envelope {
        sender: &t.sender,
        recipient: &t.delivered,
        original: &t.original,
        now: crate::timefmt::now_millis() / 1000,
    };
    let input = content::input(body, &envelope, flags());
    match pipe::run(&command, &input).await {
        PipeOutcome::Sent { .. } => {
            Status::Delivered(format!("delivered to command: {}", t.command))
        }
        PipeOutcome::Deferred(reply) | PipeOutcome::Bounced(reply) => Status::Replied(reply),
    }
}

/// What local(8) puts before the message (its MAIL_COPY_* flags).
fn flags() -> PipeFlags {
    PipeFlags {
        from_line: true,
        return_path: true,
        original_to: true,
        delivered_to: true,
        ..PipeFlags::default()
    }
}

/// exec_command's choice: words exec'd directly when the command holds
/// no shell magic (and its program exists), else `/bin/sh -c COMMAND`.
pub fn argv(command: &str) -> Vec<String> {
    let plain = command
        .chars()
        .all(|c| c == ' ' || c == '\t' || SAFE_CHARS.contains(c));
    let words: Vec<String> = command
        .split([' ', '\t'])
        .filter(|w| !w.is_empty())
        .map(String::from)
        .collect();
    if let (true, Some(program)) = (plain, words.first()) {
        // execvp's ENOENT for a bare name falls back to the shell.
        if program.contains('/') || on_path(program) {
            return words;
        }
    }
    vec!["/bin/sh".into(), "-c".into(), command.to_string()]
}

/// Whether `name` is a file in pipe's `PATH` (`/usr/bin:/bin`).
fn on_path(name: &str) -> bool {
    ["/usr/bin", "/bin"]
        .iter()
        .any(|dir| Path::new(dir).join(name).is_file())
}

/// `value` with every character outside `allowed` made `_`.
pub fn censor(value: &str, allowed: &str) -> String {
    value
        .chars()
        .map(|c| if allowed.contains(c) { c } else { '_' })
        .collect()
}

/// `command_execution_directory` expanded for `rcpt`; `/` when empty.
fn execution_directory(
    cfg: &SystemConfig,
    rcpt: &For<'_>,
    who: Option<&Account>,
) -> Result<PathBuf, String> {
    let pattern = cfg.command_execution_directory.as_str();
    if pattern.is_empty() {
        return Ok(PathBuf::from("/"));
    }
    let (local, domain) = crate::message::address::split(rcpt.address);
    let home = who.map(|a| a.home.display().to_string());
    let lookup = |name: &str| -> Result<String, String> {
        Ok(match name {
            "user" => rcpt.user.to_string(),
            "home" => home.clone().unwrap_or_default(),
            "shell" => who.map(|a| a.shell.clone()).unwrap_or_default(),
            "recipient" => rcpt.address.to_string(),
            "extension" => rcpt.extension.unwrap_or("").to_string(),
            "domain" => domain.to_string(),
            "local" => local.to_string(),
            "recipient_delimiter" => rcpt.delimiter.to_string(),
            other => return Err(format!("unknown or unsupported ${other}")),
        })
    };
    let filter = &cfg.execution_directory_expansion_filter;
    let mut out = String::new();
    let mut rest = pattern;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, next) = match after.strip_prefix('{') {
            Some(inner) => {
                let end = inner.find('}').ok_or("a ${ without its }")?;
                (&inner[..end], &inner[end + 1..])
            }
            None => {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], &after[end..])
            }
        };
        out.push_str(&censor(&lookup(name)?, filter));
        rest = next;
    }
    out.push_str(rest);
    Ok(PathBuf::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_only_for_magic_characters() {
        assert_eq!(
            argv("/usr/bin/procmail -d x"),
            ["/usr/bin/procmail", "-d", "x"]
        );
        assert_eq!(argv("cat\t-u"), ["cat", "-u"]);
        assert_eq!(argv("cat > /tmp/x"), ["/bin/sh", "-c", "cat > /tmp/x"]);
        assert_eq!(argv("exit 75"), ["/bin/sh", "-c", "exit 75"], "a built-in");
        assert_eq!(argv("  "), ["/bin/sh", "-c", "  "]);
        let filter = crate::config::system::SAFE_CHARS;
        assert_eq!(
            censor("\"$(touch x)\"@y;`z` a", filter),
            "___touch_x__@y__z__a"
        );
    }

    #[test]
    fn the_execution_directory_expands_and_is_censored() {
        let mut cfg = SystemConfig {
            command_execution_directory: "$home/${user}+$extension".into(),
            ..SystemConfig::default()
        };
        let who = Account {
            name: "u".into(),
            uid: 1000,
            gid: 1000,
            home: "/home/u".into(),
            shell: "/bin/sh".into(),
        };
        let rcpt = For {
            address: "u+a;b@x.test",
            user: "u",
            extension: Some("a;b"),
            sender: "$(x)@y",
            original: "",
            delivered: "u+a;b@x.test",
            envid: "",
            delimiter: "+",
        };
        let t = target(&cfg, "cat", &rcpt, Some(&who), (65534, 65534)).unwrap();
        assert_eq!(t.cwd, PathBuf::from("/home/u/u+a_b"));
        assert_eq!((t.uid, t.gid), (1000, 1000));
        let sender = t.env.iter().find(|(k, _)| k == "SENDER").unwrap();
        assert_eq!(sender.1, "__x_@y");
        cfg.command_execution_directory = "${home?x}".into();
        assert!(matches!(
            target(&cfg, "cat", &rcpt, Some(&who), (65534, 65534)),
            Err(Status::Deferred("4.3.5", _))
        ));
        let nobody = target(&SystemConfig::default(), "cat", &rcpt, None, (65534, 65533)).unwrap();
        assert_eq!((nobody.uid, nobody.gid), (65534, 65533));
        assert!(!nobody.env.iter().any(|(k, _)| k == "HOME" || k == "SHELL"));
    }
}
