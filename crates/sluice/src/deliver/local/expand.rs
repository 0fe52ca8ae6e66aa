//! One recipient of a `mydestination` domain through Postfix's local(8)
//! delivery switch: loop check (a `Delivered-To:` already naming it is
//! `5.4.6 mail forwarding loop`), aliases (an `owner-NAME` alias becomes
//! the envelope sender of NAME's expansion, whose addresses are then
//! forwarded as new mail), the user's `.forward` (`forward_path`), and
//! the mailbox (`home_mailbox`, `mail_spool_directory`). `/file` targets
//! are appended as mbox (`allow_mail_to_files`), `|command` targets are
//! checked (`allow_mail_to_commands`) and described for the agent to run
//! (`command.rs`), `:include:` files are read as their owner and their
//! addresses always forwarded.
//!
//! Addresses that leave this delivery (another domain, an owner- list, an
//! include, another user's `.forward` entry) are collected as
//! [`Forward`]s, re-submitted by the agent with a `Delivered-To:` added;
//! commands as [`CommandTarget`]s, run by the agent after the switch.
//!
//! Whose rights (local(8)'s USER_ATTR, [`Who`]): a `.forward`'s user; an
//! aliases file's owner, none when root owns it; an include file's owner
//! when there was none yet (else unchanged: a user cannot borrow the
//! rights of whoever owns a file they include). None means
//! `default_privs` for `/file` and `|command` targets.
//!
//! Trust: the aliases files are their owners' (root's, normally);
//! `.forward` and include files are their owners' and are read with the
//! owner's rights (`rights.rs`), and the files and commands they name
//! are written and run with those rights, so a user can make the daemon
//! do nothing they could not do themselves. Blocking.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::command::{CommandTarget, For};
use super::mbox::WriteError;
use super::rights::AsUser;
use super::status::{note, Status};
use crate::config::system::SystemConfig;
use crate::routing::system::aliases::{targets, Target};
use crate::routing::system::passwd::{self, Account};
use crate::routing::system::SystemUsers;

mod write;

/// Deepest nesting of aliases, includes and forwards (Postfix: 100).
const MAX_LEVEL: usize = 100;

/// Where an expansion came from (which `allow_mail_to_*` class applies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Top,
    Alias,
    Forward,
    Include,
}

impl Kind {
    fn class(self) -> &'static str {
        match self {
            Kind::Top | Kind::Alias => "alias",
            Kind::Forward => "forward",
            Kind::Include => "include",
        }
    }
}

/// An address to send the message on to, as new mail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forward {
    pub sender: String,
    pub to: String,
}

/// Whose rights a `/file` or `|command` target gets: an account, or none
/// (root's aliases or include file: `default_privs`).
type Who = Option<Account>;

/// The recipient being delivered (local(8)'s rcpt.address, user,
/// extension), for commands.
#[derive(Debug, Clone, Default)]
struct Current {
    address: String,
    user: String,
    extension: Option<String>,
}

/// What the switch did for one top-level recipient.
#[derive(Debug, Default)]
pub struct Switched {
    /// The worst outcome of the targets delivered here; `None`: none was.
    pub status: Option<Status>,
    pub forwards: Vec<Forward>,
    pub commands: Vec<CommandTarget>,
}

/// One top-level recipient's delivery.
pub struct Delivery<'a> {
    pub sys: &'a SystemUsers,
    pub cfg: &'a SystemConfig,
    pub hostname: &'a str,
    pub sender: &'a str,
    pub original: &'a str,
    pub body: &'a [u8],
    /// The RFC 3461 ENVID (decoded), empty when none.
    pub envid: String,
    /// `Delivered-To:` of this delivery (the recipient, lower case).
    delivered: String,
    current: Current,
    /// The `Delivered-To:` headers the message already has.
    loops: HashSet<String>,
    seen: HashSet<String>,
    count: usize,
    pub forwards: Vec<Forward>,
    pub commands: Vec<CommandTarget>,
    status: Option<Status>,
}

/// Who writes: an account's uid and gid.
type Rights = (u32, u32);

impl<'a> Delivery<'a> {
    pub fn new(
        sys: &'a SystemUsers,
        cfg: &'a SystemConfig,
        hostname: &'a str,
        (sender, original, recipient): (&'a str, &'a str, &str),
        body: &'a [u8],
    ) -> Delivery<'a> {
        Delivery {
            sys,
            cfg,
            hostname,
            sender,
            original,
            body,
            envid: String::new(),
            delivered: recipient.to_ascii_lowercase(),
            current: Current::default(),
            loops: delivered_headers(body),
            seen: HashSet::new(),
            count: 0,
            forwards: Vec::new(),
            commands: Vec::new(),
            status: None,
        }
    }

    /// Delivers to `recipient` (the commands and forwards left for the
    /// agent).
    pub fn run(mut self, recipient: &str) -> Switched {
        self.recipient(recipient, 0, None, Kind::Top, false);
        Switched {
            status: self.status,
            forwards: self.forwards,
            commands: self.commands,
        }
    }

    fn note(&mut self, s: Status) {
        note(&mut self.status, s)
    }

    fn failed(&mut self, e: WriteError) {
        let s = match e.permanent {
            true => Status::Bounced(e.status, e.text),
            false => Status::Deferred(e.status, e.text),
        };
        self.note(s);
    }

    /// local(8)'s deliver_recipient: `owner` is the owner- address of
    /// the alias being expanded (also the new envelope sender).
    fn recipient(
        &mut self,
        address: &str,
        level: usize,
        owner: Option<&str>,
        kind: Kind,
        literal: bool,
    ) {
        let address = address.to_ascii_lowercase();
        if level > MAX_LEVEL {
            return self.note(Status::Bounced(
                "5.4.6",
                "recipient nesting limit exceeded".into(),
            ));
        }
        if !self.seen.insert(format!("recipient {address}")) {
            return;
        }
        if self.loops.contains(&address) {
            let text = format!("mail forwarding loop for {address}");
            return self.note(Status::Bounced("5.4.6", text));
        }
        let local = crate::message::address::split(&address).0.to_string();
        let (user, _ext) = self.sys.split(&local);
        let user = user.to_string();
        if user.is_empty() {
            return self.note(Status::Bounced(
                "5.1.3",
                format!("null username in \"{address}\""),
            ));
        }
        let current = Current {
            address: address.clone(),
            user: user.clone(),
            extension: self.sys.split(&local).1.map(String::from),
        };
        let _ = (owner, kind);
        let outer = std::mem::replace(&mut self.current, current);
        self.switch(&local, &user, level, literal);
        self.current = outer;
    }

    /// local(8)'s deliver_switch for the current recipient: its alias,
    /// its `.forward`, its mailbox.
    fn switch(&mut self, local: &str, user: &str, level: usize, literal: bool) {
        if !literal && (self.alias(local, level) || (user != local && self.alias(user, level))) {
            return;
        }
        let account = match passwd::account(user) {
            Ok(Some(a)) => a,
            Ok(None) => {
                let text = format!("unknown user: \"{user}\"");
                return self.note(Status::Bounced("5.1.1", text));
            }
            Err(_) => return self.note(Status::Deferred("4.0.0", "user lookup error".into())),
        };
        if !literal && self.dotforward(&account, local, level) {
            return;
        }
        self.mailbox(&account)
    }

    /// Expands `name` if it is an alias; whether it was.
    fn alias(&mut self, name: &str, level: usize) -> bool {
        let Some(list) = self.sys.aliases.targets(name) else {
            return false;
        };
        let owner_name = format!("owner-{name}");
        let owner = self
            .sys
            .aliases
            .get(&owner_name)
            .map(|_| format!("{owner_name}@{}", self.hostname));
        let who = match self.sys.aliases.owner(name).unwrap_or(0) {
            0 => None,
            uid => match passwd::account_by_uid(uid) {
                Ok(Some(a)) => Some(a),
                _ => {
                    let text = "cannot find alias database owner".to_string();
                    self.note(Status::Deferred("4.3.0", text));
                    return true;
                }
            },
        };
        self.targets(list, level, owner.as_deref(), Kind::Alias, &who, None);
        true
    }

    /// Delivers to each target of an alias, `.forward` or include.
    /// `myself`: the user whose `.forward` this is (their own name means
    /// their mailbox).
    fn targets(
        &mut self,
        list: Vec<Target>,
        level: usize,
        owner: Option<&str>,
        kind: Kind,
        who: &Who,
        myself: Option<&Account>,
    ) {
        for t in list {
            self.count += 1;
            if self.count > self.cfg.expansion_limit {
                let text = format!(
                    "alias expansion limit {} exceeded",
                    self.cfg.expansion_limit
                );
                // Nothing of an exploded expansion goes out.
                self.forwards.clear();
                self.commands.clear();
                return self.note(Status::Bounced("5.4.6", text));
            }
            match t {
                Target::Address { address, literal } => {
                    self.address(&address, literal, level, owner, kind, myself)
                }
                Target::File(path) => self.file(&path, kind, who),
                Target::Include(path) => self.include(&path, level, owner, kind, who),
                Target::Command(cmd) => self.command(&cmd, kind, owner, who),
            }
        }
    }

    fn address(
        &mut self,
        address: &str,
        literal: bool,
        level: usize,
        owner: Option<&str>,
        kind: Kind,
        myself: Option<&Account>,
    ) {
        let address = match address.contains('@') {
            true => address.to_ascii_lowercase(),
            false => format!("{}@{}", address.to_ascii_lowercase(), self.hostname),
        };
        let (local, domain) = crate::message::address::split(&address);
        let user = self.sys.split(local).0.to_string();
        let ours = self.sys.is_system_domain(domain);
        if let (true, Some(me)) = (ours, myself) {
            if user == me.name && (literal || kind == Kind::Forward) {
                return self.mailbox(me);
            }
        }
        // local(8): an owner- list's, an include's and a .forward's
        // addresses go out as new mail (their own queue file and status).
        let leaves = !ours || kind == Kind::Include || kind == Kind::Forward || owner.is_some();
        if leaves {
            if self.seen.insert(format!("forward {address}")) {
                let sender = owner.unwrap_or(self.sender).to_string();
                self.forwards.push(Forward {
                    sender,
                    to: address,
                });
            }
            return;
        }
        self.recipient(&address, level + 1, owner, kind, literal)
    }

    /// The user's forwarding file, if one of `forward_path` exists.
    fn dotforward(&mut self, account: &Account, local: &str, level: usize) -> bool {
        let (_, ext) = self.sys.split(local);
        for pattern in &self.cfg.forward_path {
            let path = expand_path(pattern, account, ext, self.cfg_delimiter(ext));
            if !self.seen.insert(format!("forward-file {}", path.display())) {
                continue;
            }
            let read = read_as(&path, Some((account.uid, account.gid)), Some(account.uid));
            match read {
                Ok(None) => continue,
                Ok(Some(text)) => {
                    let list = targets(&text);
                    let who = Some(account.clone());
                    self.targets(list, level, None, Kind::Forward, &who, Some(account));
                    return true;
                }
                Err(e) => {
                    self.note(Status::Deferred(
                        "4.3.0",
                        format!("cannot read {}: {e}", path.display()),
                    ));
                    return true;
                }
            }
        }
        false
    }

    fn cfg_delimiter(&self, ext: Option<&str>) -> &'a str {
        match ext {
            Some(_) => self.sys.delimiter(),
            None => "",
        }
    }

    fn include(&mut self, path: &Path, level: usize, owner: Option<&str>, kind: Kind, who: &Who) {
        if !allowed(&self.cfg.allow_mail_to_files, kind) && kind != Kind::Alias {
            return self.note(Status::Bounced(
                "5.7.1",
                "mail to file is restricted".into(),
            ));
        }
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) => {
                return self.note(Status::Deferred(
                    "4.3.0",
                    format!("cannot open include file {}: {e}", path.display()),
                ))
            }
        };
        // Read, and its targets delivered, as its owner when no account
        // was chosen yet (root's aliases); else as before (include.c).
        let who = match (who, meta.uid()) {
            (w, uid) if uid != 0 && w.as_ref().is_none_or(|a| a.uid == 0) => {
                match passwd::account_by_uid(uid) {
                    Ok(Some(a)) => Some(a),
                    _ => {
                        let text =
                            "mail system configuration error: no account owns the include file";
                        return self.note(Status::Deferred("4.3.5", text.into()));
                    }
                }
            }
            (who, _) => who.clone(),
        };
        let rights = who.as_ref().map(|a| (a.uid, a.gid));
        match read_as(path, rights, None) {
            Ok(Some(text)) => {
                self.targets(targets(&text), level + 1, owner, Kind::Include, &who, None)
            }
            Ok(None) => self.note(Status::Deferred(
                "4.3.0",
                format!("cannot open include file {}", path.display()),
            )),
            Err(e) => self.note(Status::Deferred(
                "4.3.0",
                format!("cannot open include file {}: {e}", path.display()),
            )),
        }
    }

    /// A `|command`: checked here, run by the agent (`command.rs`);
    /// `owner` is the owner- list's address (the sender then).
    fn command(&mut self, command: &str, kind: Kind, owner: Option<&str>, who: &Who) {
        if !allowed(&self.cfg.allow_mail_to_commands, kind) {
            return self.note(Status::Bounced(
                "5.7.1",
                "mail to command is restricted".into(),
            ));
        }
        let privs = match default_rights(self.cfg) {
            Ok(r) => r,
            Err(s) => return self.note(s),
        };
        let uid = who.as_ref().map_or(0, |a| a.uid);
        let key = format!("command {}:{uid} {command}", self.current.user);
        if !self.seen.insert(key) {
            return;
        }
        let rcpt = For {
            address: &self.current.address,
            user: &self.current.user,
            extension: self.current.extension.as_deref(),
            sender: owner.unwrap_or(self.sender),
            // An owner- list's copy is new mail: no original recipient.
            original: if owner.is_some() { "" } else { self.original },
            delivered: &self.delivered,
            envid: &self.envid,
            delimiter: self.sys.delimiter(),
        };
        match super::command::target(self.cfg, command, &rcpt, who.as_ref(), privs) {
            Ok(t) => self.commands.push(t),
            Err(s) => self.note(s),
        }
    }
}

/// `allow_mail_to_*` lists name classes: `alias`, `forward`, `include`.
fn allowed(list: &[String], kind: Kind) -> bool {
    list.iter().any(|c| c == kind.class())
}

/// The rights `/file` targets of root's aliases are written with.
fn default_rights(cfg: &SystemConfig) -> Result<Rights, Status> {
    match passwd::account(&cfg.default_privs) {
        Ok(Some(a)) => Ok((a.uid, a.gid)),
        _ => Err(Status::Deferred(
            "4.3.0",
            format!("default_privs: no account {:?}", cfg.default_privs),
        )),
    }
}

/// `$home`, `$user`, `${extension}`, `${recipient_delimiter}` in a
/// `forward_path` entry.
fn expand_path(pattern: &str, a: &Account, ext: Option<&str>, delim: &str) -> PathBuf {
    let ext = ext.filter(|e| !e.contains('/')).unwrap_or("");
    PathBuf::from(
        pattern
            .replace("${recipient_delimiter}", delim)
            .replace("${extension}", ext)
            .replace("${home}", &a.home.display().to_string())
            .replace("$home", &a.home.display().to_string())
            .replace("${user}", &a.name)
            .replace("$user", &a.name),
    )
}

/// The file's text, read with `rights` (none: the daemon's own);
/// `Ok(None)` when it is not there.
/// A file that is not regular, or owned by neither `owner` nor root, is
/// ignored as not there (Postfix warns and skips it).
fn read_as(
    path: &Path,
    rights: Option<Rights>,
    owner: Option<u32>,
) -> std::io::Result<Option<String>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let _as = match rights {
        Some((uid, gid)) => Some(AsUser::become_user(uid, gid)?),
        None => None,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path);
    let mut file = match file {
        Ok(f) => f,
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound) => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() || owner.is_some_and(|o| meta.uid() != o && meta.uid() != 0) {
        return Ok(None);
    }
    let mut text = String::new();
    file.by_ref().take(1 << 20).read_to_string(&mut text)?;
    Ok(Some(text))
}

/// The `Delivered-To:` values in the message's header, lower case.
pub fn delivered_headers(body: &[u8]) -> HashSet<String> {
    let mut out = HashSet::new();
    for line in body.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            break;
        }
        if line.len() > 13 && line[..13].eq_ignore_ascii_case(b"delivered-to:") {
            let v = String::from_utf8_lossy(&line[13..])
                .trim()
                .to_ascii_lowercase();
            out.insert(v);
        }
    }
    out
}
