//! One recipient of a `mydestination` domain through Postfix's local(8)
//! delivery switch: loop check (a `Delivered-To:` already naming it is
//! `5.4.6 mail forwarding loop`), aliases (an `owner-NAME` alias becomes
//! the envelope sender of NAME's expansion, whose addresses are then
//! forwarded as new mail), the user's `.forward` (`forward_path`), and
//! the mailbox (`home_mailbox`, `mail_spool_directory`). `/file` targets
//! are appended as mbox (`allow_mail_to_files`), `|command` targets are
//! checked (`allow_mail_to_commands`) and then deferred (the seam for
//! pipe(8)), `:include:` files are read as their owner and their
//! addresses always forwarded.
//!
//! Addresses that leave this delivery (another domain, an owner- list, an
//! include, another user's `.forward` entry) are collected as
//! [`Forward`]s, re-submitted by the agent with a `Delivered-To:` added.
//!
//! Trust: the aliases files are root's; `.forward` and include files are
//! their owners' and are read with the owner's rights (`rights.rs`), and
//! the files they name are written with those rights, so a user can make
//! the daemon do nothing they could not do themselves. Blocking.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::mbox::{self, Envelope, MboxOptions, WriteError};
use super::rights::AsUser;
use crate::config::system::SystemConfig;
use crate::routing::system::aliases::{targets, Target};
use crate::routing::system::passwd::{self, Account};
use crate::routing::system::SystemUsers;

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

/// The result for the top-level recipient: the worst of its targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Delivered(String),
    Bounced(&'static str, String),
    Deferred(&'static str, String),
}

/// One top-level recipient's delivery.
pub struct Delivery<'a> {
    pub sys: &'a SystemUsers,
    pub cfg: &'a SystemConfig,
    pub hostname: &'a str,
    pub sender: &'a str,
    pub original: &'a str,
    pub body: &'a [u8],
    /// `Delivered-To:` of this delivery (the recipient, lower case).
    delivered: String,
    /// The `Delivered-To:` headers the message already has.
    loops: HashSet<String>,
    seen: HashSet<String>,
    count: usize,
    pub forwards: Vec<Forward>,
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
            delivered: recipient.to_ascii_lowercase(),
            loops: delivered_headers(body),
            seen: HashSet::new(),
            count: 0,
            forwards: Vec::new(),
            status: None,
        }
    }

    /// Delivers to `recipient`; the worst outcome of its targets.
    pub fn run(mut self, recipient: &str) -> (Status, Vec<Forward>) {
        self.recipient(recipient, 0, None, Kind::Top, false);
        let status = match (self.status, self.forwards.is_empty()) {
            (Some(s), _) => s,
            (None, false) => Status::Delivered("forwarded as new mail".into()),
            (None, true) => Status::Delivered("delivered to nothing".into()),
        };
        (status, self.forwards)
    }

    fn note(&mut self, s: Status) {
        let rank = |s: &Status| match s {
            Status::Delivered(_) => 0,
            Status::Bounced(..) => 1,
            Status::Deferred(..) => 2,
        };
        if self.status.as_ref().is_none_or(|old| rank(&s) > rank(old)) {
            self.status = Some(s);
        }
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
        if !literal && (self.alias(&local, level) || (user != local && self.alias(&user, level))) {
            return;
        }
        let _ = (owner, kind);
        let account = match passwd::account(&user) {
            Ok(Some(a)) => a,
            Ok(None) => {
                let text = format!("unknown user: \"{user}\"");
                return self.note(Status::Bounced("5.1.1", text));
            }
            Err(_) => return self.note(Status::Deferred("4.0.0", "user lookup error".into())),
        };
        if !literal && self.dotforward(&account, &local, level) {
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
        let rights = match default_rights(self.cfg) {
            Ok(r) => r,
            Err(s) => {
                self.note(s);
                return true;
            }
        };
        self.targets(list, level, owner.as_deref(), Kind::Alias, rights, None);
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
        rights: Rights,
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
                return self.note(Status::Bounced("5.4.6", text));
            }
            match t {
                Target::Address { address, literal } => {
                    self.address(&address, literal, level, owner, kind, myself)
                }
                Target::File(path) => self.file(&path, kind, rights),
                Target::Include(path) => self.include(&path, level, owner, kind, rights),
                Target::Command(cmd) => self.command(&cmd, kind),
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
            let read = read_as(&path, (account.uid, account.gid), Some(account.uid));
            match read {
                Ok(None) => continue,
                Ok(Some(text)) => {
                    let list = targets(&text);
                    let rights = (account.uid, account.gid);
                    self.targets(list, level, None, Kind::Forward, rights, Some(account));
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

    fn include(
        &mut self,
        path: &Path,
        level: usize,
        owner: Option<&str>,
        kind: Kind,
        rights: Rights,
    ) {
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
        // Read, and its files written, as its owner (root's: as before).
        let rights = match meta.uid() {
            0 => rights,
            uid => (uid, meta.gid()),
        };
        match read_as(path, rights, None) {
            Ok(Some(text)) => self.targets(
                targets(&text),
                level + 1,
                owner,
                Kind::Include,
                rights,
                None,
            ),
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

    fn command(&mut self, command: &str, kind: Kind) {
        if !allowed(&self.cfg.allow_mail_to_commands, kind) {
            return self.note(Status::Bounced(
                "5.7.1",
                "mail to command is restricted".into(),
            ));
        }
        self.note(super::command::deliver(self.cfg, command))
    }

    fn file(&mut self, path: &Path, kind: Kind, rights: Rights) {
        if !allowed(&self.cfg.allow_mail_to_files, kind) {
            return self.note(Status::Bounced(
                "5.7.1",
                "mail to file is restricted".into(),
            ));
        }
        if !self.seen.insert(format!("file {}", path.display())) {
            return;
        }
        let opts = MboxOptions {
            chown: None,
            owner: None,
            fcntl: self.lock("fcntl"),
            dotlock: false,
        };
        let env = self.envelope();
        let done = as_user(rights, || mbox::append(path, &env, self.body, &opts));
        match done {
            Ok(()) => self.note(Status::Delivered(format!(
                "delivered to file: {}",
                path.display()
            ))),
            Err(e) => self.failed(e),
        }
    }

    fn lock(&self, kind: &str) -> bool {
        self.cfg.mailbox_delivery_lock.iter().any(|l| l == kind)
    }

    fn envelope(&self) -> Envelope<'_> {
        Envelope {
            sender: self.sender,
            original: self.original,
            delivered: &self.delivered,
        }
    }

    /// The account's mailbox: a Maildir or an mbox in the home directory
    /// (`home_mailbox`), else the mbox in `mail_spool_directory`.
    fn mailbox(&mut self, a: &Account) {
        if !self.seen.insert(format!("mailbox {}", a.name)) {
            return;
        }
        let home_mailbox = self.cfg.home_mailbox.as_str();
        let env = self.envelope();
        let strict = self.cfg.strict_mailbox_ownership.then_some(a.uid);
        let (done, where_) = if home_mailbox.ends_with('/') {
            let dir = a.home.join(home_mailbox);
            let done = as_user((a.uid, a.gid), || {
                mbox::maildir(&dir, self.hostname, &env, self.body)
            });
            (done, "maildir")
        } else if !home_mailbox.is_empty() {
            let path = a.home.join(home_mailbox);
            let opts = self.mbox_options(None, strict);
            let done = as_user((a.uid, a.gid), || {
                mbox::append(&path, &env, self.body, &opts)
            });
            (done, "mailbox")
        } else {
            (self.spool(a, &env, strict), "mailbox")
        };
        match done {
            Ok(()) => self.note(Status::Delivered(format!("delivered to {where_}"))),
            Err(e) => self.failed(e),
        }
    }

    /// The mbox `mail_spool_directory/USER`, with Postfix's rights: the
    /// user's when the directory is world-writable, the user's with the
    /// directory's group when group-writable, else root's and chowned.
    fn spool(&self, a: &Account, env: &Envelope, strict: Option<u32>) -> Result<(), WriteError> {
        let dir = &self.cfg.mail_spool_directory;
        let path = dir.join(&a.name);
        let meta = std::fs::metadata(dir).map_err(|e| WriteError {
            permanent: false,
            status: "4.2.0",
            text: format!("cannot access mail spool {}: {e}", dir.display()),
        })?;
        let (rights, chown) = if meta.mode() & 0o002 != 0 {
            (Some((a.uid, a.gid)), None)
        } else if meta.mode() & 0o020 != 0 {
            (Some((a.uid, meta.gid())), None)
        } else {
            (None, Some((a.uid, a.gid)))
        };
        let opts = self.mbox_options(chown, strict);
        match rights {
            Some(r) => as_user(r, || mbox::append(&path, env, self.body, &opts)),
            None => mbox::append(&path, env, self.body, &opts),
        }
    }

    fn mbox_options(&self, chown: Option<(u32, u32)>, owner: Option<u32>) -> MboxOptions {
        MboxOptions {
            chown,
            owner,
            fcntl: self.lock("fcntl"),
            dotlock: self.lock("dotlock"),
        }
    }
}

/// Runs `f` with the thread acting as `rights`.
fn as_user(rights: Rights, f: impl FnOnce() -> Result<(), WriteError>) -> Result<(), WriteError> {
    match AsUser::become_user(rights.0, rights.1) {
        Ok(_as) => f(),
        Err(e) => Err(WriteError {
            permanent: false,
            status: "4.3.0",
            text: format!("cannot deliver as uid {}: {e}", rights.0),
        }),
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

/// The file's text, read with `rights`; `Ok(None)` when it is not there.
/// A file that is not regular, or owned by neither `owner` nor root, is
/// ignored as not there (Postfix warns and skips it).
fn read_as(path: &Path, rights: Rights, owner: Option<u32>) -> std::io::Result<Option<String>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let _as = AsUser::become_user(rights.0, rights.1)?;
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
