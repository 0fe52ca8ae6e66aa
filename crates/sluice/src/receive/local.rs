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

use std::sync::Arc;

use sluice_proto::address::parse_mailbox;

use crate::event;
use crate::intake::refusal::{EX_DATAERR, EX_NOUSER};
use crate::intake::{Accepted, Intake, Origin, Submission};
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

/// The login name of `uid`, from the account database.
fn login_of(uid: u32) -> Option<String> {
    // SAFETY: getpwuid returns NULL or a pointer to static storage whose
    // name is a NUL-terminated string; it is copied before any other call
    // could overwrite that storage.
    unsafe {
        let pw = libc::getpwuid(uid);
        if pw.is_null() || (*pw).pw_name.is_null() {
            return None;
        }
        let name = std::ffi::CStr::from_ptr((*pw).pw_name);
        Some(name.to_string_lossy().into_owned())
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

    /// The envelope sender: as given for a trusted user (root, or the
    /// daemon's own account), else the user's login at our hostname,
    /// whatever `-f` said (sendmail's trusted-user rule).
    fn sender_for(&self, who: &Local, asked: &str) -> Result<String, UnknownSubmitter> {
        // SAFETY: geteuid has no preconditions.
        let daemon = unsafe { libc::geteuid() };
        let uid = who.uid.ok_or(UnknownSubmitter::NoCredentials)?;
        if uid == 0 || uid == daemon {
            return Ok(asked.to_string());
        }
        let login = login_of(uid).ok_or(UnknownSubmitter::NoAccount(uid))?;
        let own = format!("{login}@{}", self.intake.config.hostname);
        if !asked.eq_ignore_ascii_case(&own) {
            event!(
                self.logger,
                "sendmail",
                "sender_replaced",
                { uid: uid, asked: asked, sender: own },
                "uid={uid}: sender <{asked}> replaced by <{own}> (not a trusted user)"
            );
        }
        Ok(own)
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
        let sender = match self.sender_for(&who, sender) {
            Ok(s) => s,
            Err(e) => return refuse(EX_NOUSER, e.to_string()),
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
        for r in recipients {
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
            },
            sender,
            recipients: targets,
            flags,
            dsn: None,
            body: message,
            flaws: None,
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
