//! Local submission through the admin socket (`sendmail`): the door for
//! local users. Addresses are parsed strictly, then the message goes
//! through the same intake as SMTP mail (`intake/`): recipients resolved
//! through the same tables and aliases, the same body checks and hop
//! limit, a `Received:` naming the submitting user (from the socket's
//! peer credentials), the From:, Date: and Message-ID: it lacks added,
//! DKIM-signed like a trusted client's mail, stored with the same
//! sync-before-acknowledge promise, and queued.
//!
//! Trust: anyone local can open the submission socket; the submitting uid
//! comes from the socket's peer credentials. Root and the daemon's own
//! account may name any envelope sender (`-f`); any other user's mail has
//! their login at our hostname, whatever they asked. The content is
//! untrusted mail (it is DKIM-signed like a trusted client's, as Postfix
//! with OpenDKIM signs local mail).
// libc calls the standard library does not wrap; each block says why
// it is sound.
#![allow(unsafe_code)]

use std::sync::Arc;

use sluice_proto::address::parse_mailbox;

use crate::intake::refusal::{EX_DATAERR, EX_NOUSER};
use crate::intake::{Accepted, Intake, LocalUser, Origin, Submission};
use crate::log::Event;
use crate::log::{qid, Logger};

/// What is needed to take a submission.
pub struct Submitter {
    pub intake: Arc<Intake>,
    pub logger: Logger,
    /// The message size limit: the admin socket reads no more than this
    /// (base64) per request; the intake refuses larger messages.
    pub size_limit: usize,
}

/// Who submits: the socket's peer uid and sendmail's -F.
pub struct Local {
    uid: Option<u32>,
    full_name: Option<String>,
}

/// Who submits cannot be told.
#[derive(Debug, thiserror::Error)]
enum UnknownSubmitter {
    #[error("who is submitting is unknown (no peer credentials)")]
    NoCredentials,
    #[error("uid {0} has no account name")]
    NoAccount(u32),
}

/// The login name of `uid`, from the account database: getpwuid_r (the
/// reentrant form: two users submitting at once on two workers must not
/// share glibc's static buffer), with a buffer grown on ERANGE.
fn login_of(uid: u32) -> Option<String> {
    let mut size = 1024usize;
    loop {
        let mut buf = vec![0 as libc::c_char; size];
        // SAFETY: all-zero is a valid passwd (null pointers, zero ids).
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is to live, writable storage of the stated
        // size; on success `found` points to `pw`, whose strings point
        // into `buf`, both alive until the name is copied below.
        let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), size, &mut found) };
        if rc == libc::ERANGE && size < 1 << 20 {
            size *= 4;
            continue;
        }
        if rc != 0 || found.is_null() || pw.pw_name.is_null() {
            return None;
        }
        // SAFETY: pw_name is a NUL-terminated string inside `buf`.
        let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
        return Some(name.to_string_lossy().into_owned());
    }
}

/// Why a submission was refused, with sendmail(1)'s exit status.
fn refuse(exit_code: i32, why: String) -> Result<Submitted, Refused> {
    Err(Refused { exit_code, why })
}

/// A submission taken: its queue ID, and whether it was queued (false:
/// every recipient was an alias to "discard").
#[derive(Debug)]
pub struct Submitted {
    pub queue_id: String,
    pub queued: bool,
}

/// A submission refused, with sendmail(1)'s exit status.
#[derive(Debug, thiserror::Error)]
#[error("{why}")]
pub struct Refused {
    pub exit_code: i32,
    pub why: String,
}

impl Submitter {
    pub fn local(uid: Option<u32>, full_name: Option<String>) -> Local {
        Local { uid, full_name }
    }

    /// Whether `uid` is a trusted user (root, or the daemon's account),
    /// who may name any sender and see the whole queue.
    pub fn trusted_uid(uid: u32) -> bool {
        // SAFETY: geteuid has no preconditions.
        uid == 0 || uid == unsafe { libc::geteuid() }
    }

    /// The address of local user `uid`: their login at our hostname.
    pub fn own_address(&self, uid: u32) -> Option<String> {
        login_of(uid).map(|login| format!("{login}@{}", self.intake.config.hostname))
    }

    /// The envelope sender: as given for a trusted user (root, or the
    /// daemon's own account), else the user's login at our hostname,
    /// whatever `-f` said (sendmail's trusted-user rule).
    fn sender_for(&self, who: &Local, asked: &str) -> Result<String, UnknownSubmitter> {
        let uid = who.uid.ok_or(UnknownSubmitter::NoCredentials)?;
        if Self::trusted_uid(uid) {
            return Ok(asked.to_string());
        }
        let own = self
            .own_address(uid)
            .ok_or(UnknownSubmitter::NoAccount(uid))?;
        if !asked.eq_ignore_ascii_case(&own) {
            self.logger.emit(&Event::SenderReplaced {
                uid,
                asked: asked.into(),
                sender: own.as_str().into(),
            });
        }
        Ok(own)
    }

    /// A bare name (no `@`) at our hostname, as Postfix's
    /// append_at_myorigin: the client reads no configuration, so the
    /// daemon qualifies. The null sender stays null.
    fn qualify(&self, address: &str) -> String {
        match address.is_empty() || address.contains('@') {
            true => address.to_string(),
            false => format!("{address}@{}", self.intake.config.hostname),
        }
    }

    pub async fn submit(
        &self,
        who: Local,
        sender: &str,
        recipients: &[String],
        message: Vec<u8>,
    ) -> Result<Submitted, Refused> {
        if recipients.is_empty() {
            return refuse(EX_DATAERR, "no recipients".into());
        }
        let sender = self.qualify(sender);
        let sender = match self.sender_for(&who, &sender) {
            Ok(s) => s,
            Err(e) => return refuse(EX_NOUSER, e.to_string()),
        };
        // (sender_for refused a submitter without credentials or account.)
        let user = match who.uid.filter(|&u| !Self::trusted_uid(u)) {
            None => LocalUser::Trusted,
            Some(_) => LocalUser::Account(sender.clone()),
        };
        let sender = match sender.as_str() {
            "" => String::new(),
            s => match parse_mailbox(s) {
                Ok(m) => m.address(),
                Err(e) => {
                    return refuse(
                        EX_DATAERR,
                        format!("<{s}>: bad sender address: {}", e.text()),
                    )
                }
            },
        };
        let mut parsed = Vec::with_capacity(recipients.len());
        for r in recipients.iter().map(|r| self.qualify(r)) {
            let r = r.as_str();
            match parse_mailbox(r) {
                Ok(m) => parsed.push(m.address()),
                Err(e) => {
                    return refuse(
                        EX_DATAERR,
                        format!("<{r}>: bad recipient address: {}", e.text()),
                    )
                }
            }
        }
        let targets = match self.intake.resolve(&parsed).await {
            Ok(t) => t,
            Err(e) => return refuse(e.exit_code(), e.to_string()),
        };
        let flags = match message.is_ascii() {
            true => 0,
            false => crate::message::flags::EIGHTBITMIME,
        };
        let submission = Submission {
            id: self.intake.new_id(),
            origin: Origin::Local {
                uid: who.uid,
                full_name: who.full_name,
                user,
            },
            sender,
            recipients: targets.recipients,
            orig_rcpt: targets.orig_rcpt,
            flags,
            dsn: None,
            body: message,
            flaws: None,
            hold: None,
            redirect: None,
            bcc: Vec::new(),
            filter: self.intake.config.content_checks.content_filter.clone(), // as pickup's
        };
        match self.intake.accept(submission).await {
            Ok(Accepted::Queued(id)) => Ok(Submitted {
                queue_id: qid(id),
                queued: true,
            }),
            Ok(Accepted::Discarded(id)) => Ok(Submitted {
                queue_id: qid(id),
                queued: false,
            }),
            Err(refusal) => refuse(refusal.exit_code(), refusal.to_string()),
        }
    }
}
