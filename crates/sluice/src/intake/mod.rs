//! The intake: the one way into the queue, what Postfix's cleanup(8) is to
//! Postfix. Every message — from an SMTP session, from sendmail(1), and
//! the notices we write ourselves (bounces, delay warnings, success
//! reports) — becomes a queue file only through [`Intake::accept`].
//!
//! It owns, for every door alike, one ordered pipeline of stages in
//! Postfix cleanup's order, each in its own file and called in order from
//! one function (`accept.rs`, which lists them): body checks, trace and
//! hop limit (`checks.rs`, with `headers.rs`); forged
//! Authentication-Results removed (`authenticate.rs`); Postfix's header
//! and body checks (`content_checks.rs`, `content_checks/`); content
//! filters (`filters.rs`, `milter/`); sender limits (`limits.rs`); the access
//! tables' REDIRECT and BCC (`divert.rs`); sender authentication for
//! strangers (`authenticate.rs`, `sender_auth.rs`) or DKIM signing for
//! trusted origins (`sign.rs`, `dkim.rs`, `local_sign.rs`: never a
//! message that already passed through us unless its submitter
//! authenticated, an ordinary local account's only for a From: it owns);
//! and the spool write (synced before `Ok`) through the [`store::Store`]
//! the daemon chose, the log line with the queue ID and the hand-off to
//! the queue ([`Handoff`], `store.rs`).
//!
//! A copy claimed from a dead cluster peer comes in by its own door,
//! [`Intake::adopt`]: stored and queued under a new ID, without the checks
//! its origin already made (`adopt.rs`).
//!
//! Recipient checks stay at the door that must answer them (RCPT), through
//! the same tables (`routing::mailboxes`); a local submission's
//! recipients are resolved by [`Intake::resolve`] with the same rules.
//!
//! Trust: the body and envelope are the sender's, whatever the door;
//! `Origin` is what the door established (peer address, AUTH, uid).
//! Invariant: `Ok` means the message is on disk and queued; every refusal
//! is a [`Refusal`] with its SMTP reply and sendmail exit status.

pub mod arc;
pub mod content_checks;
pub mod dkim;
pub mod flow;
pub mod headers;
pub mod limits;
pub mod milter;
pub mod refusal;
pub mod rewrite;
pub mod sender_auth;
pub mod store;
pub mod xforward;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use sluice_proto::data::DataFlaws;
use sluice_spool::{BodyRef, Dsn, Envelope, Spool};

use crate::config::content_filter::ContentFilter;
use crate::config::Config;
use crate::log::Logger;
use crate::message::address::Target;
use crate::routing::mailboxes::{Resolution, VirtualMailboxes};
pub use refusal::Refusal;
use rewrite::virtual_alias::RcptLookup;

/// Where the queue takes stored messages (the queue implements it; the
/// intake does not depend on the queue).
pub trait Handoff: Send + Sync {
    fn hand_off(&self, msg: Stored) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// A message on disk, for the queue.
pub struct Stored {
    pub envelope: Envelope,
    pub body_ref: BodyRef,
    pub body: Arc<Vec<u8>>,
}

/// A local submitter (sendmail): root or the daemon's own account, or an
/// ordinary account with its own address (login@hostname).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalUser {
    Trusted,
    Account(String),
}

/// The door a message came in by, as that door established it.
pub enum Origin {
    /// An SMTP client; its body starts with [`headers::smtp_trace`].
    Smtp(SmtpClient),
    /// A local user through sendmail(1).
    Local {
        uid: Option<u32>,
        /// sendmail's -F, for a From: that has to be made.
        full_name: Option<String>,
        /// Who submits, as the socket's peer credentials say.
        user: LocalUser,
    },
    /// A notice we wrote (its body is complete).
    Notice,
}

impl Origin {
    /// Who submitted the message, if anyone logged in: the SMTP AUTH
    /// identity, or the local account (root and the daemon's own account
    /// are not logins). Kept with the message (`Envelope::login`) and
    /// counted by the sender limits (`limits.rs`).
    pub fn login(&self) -> Option<&str> {
        match self {
            Origin::Smtp(c) if c.authenticated => c.auth_user.as_deref(),
            Origin::Local {
                user: LocalUser::Account(name),
                ..
            } => Some(name),
            _ => None,
        }
    }
}

pub struct SmtpClient {
    pub peer: SocketAddr,
    /// The listener it came in on (its own header and body checks).
    pub listener: SocketAddr,
    pub helo: String,
    /// In mynetworks.
    pub trusted: bool,
    pub authenticated: bool,
    /// The AUTH identity, for filters (`{auth_authen}`).
    pub auth_user: Option<String>,
    /// The listener checks SPF/DKIM/DMARC of strangers' mail ...
    pub sender_auth: bool,
    /// ... and refuses DMARC failures under p=reject.
    pub dmarc_reject: bool,
}

/// One message at the intake.
pub struct Submission {
    pub id: u64,
    pub origin: Origin,
    pub sender: String,
    pub recipients: Vec<String>,
    /// (recipient, the address it was given as) for each recipient an
    /// alias expanded to: the log's `orig_to` (a filter may still add or
    /// drop recipients, so they are paired, not lined up).
    pub orig_rcpt: Vec<(String, String)>,
    pub flags: u32,
    pub dsn: Option<Box<Dsn>>,
    pub body: Vec<u8>,
    /// What the door found reading the body (SMTP DATA); `None`: the
    /// intake scans it.
    pub flaws: Option<DataFlaws>,
    /// The door's restrictions asked to hold the message (an access
    /// table's `HOLD`): queued on hold, with this reason.
    pub hold: Option<String>,
    /// An access table's `REDIRECT` (the last): every recipient replaced
    /// by this one (`divert.rs`).
    pub redirect: Option<Target>,
    /// An access table's `BCC` addresses, added as recipients.
    pub bcc: Vec<Target>,
    /// The after-queue content filter it goes to, as the door chose
    /// (its listener's `content_filter`, else the main one; none for our
    /// notices) or an access table's FILTER; a header check's FILTER
    /// replaces it. Kept with the message (`Envelope::filter`).
    pub filter: ContentFilter,
}

/// A message taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    Queued(u64),
    /// Every recipient was an alias to "discard": nothing kept.
    Discarded(u64),
}

/// What the intake works with; rebuilt at each reload.
pub struct Intake {
    pub config: Arc<Config>,
    pub spool: Spool,
    pub mailboxes: Arc<VirtualMailboxes>,
    pub dkim: Arc<dkim::Signers>,
    pub sender_auth: Option<Arc<sender_auth::SenderAuth>>,
    pub handoff: Arc<dyn Handoff>,
    pub logger: Logger,
    /// Content filters (`smtpd.milters`, `smtpd.non_smtpd_milters`).
    pub milters: milter::Filters,
    /// How far local delivery is behind (`flow.rs`); shared by every
    /// intake the process builds, and by the queue.
    pub flow: Arc<flow::InFlow>,
    /// Where accepted messages are written: `spool` alone, or mirrored on
    /// a cluster peer too (`[cluster] shadow`), as the daemon chose.
    pub store: store::Storage,
    /// Where the sender limits count (`limits.rs`); shared by every
    /// intake the process builds, so a reload keeps the hour's counts.
    pub limits: Arc<dyn limits::Counter>,
    /// `[restrictions] sender_login_maps`, as the restriction lists built
    /// them: which local accounts' From: we sign (`local_sign.rs`).
    pub sender_login: Vec<Arc<crate::tables::Table>>,
    /// `[rewrite]`'s tables (`rewrite.rs`).
    pub rewrite: Arc<rewrite::RewriteMaps>,
    /// What forwarding is, and the SRS codec (`[srs]`, `[arc]`; None:
    /// both off): for ARC sealing here (`arc.rs`) and the SRS recipients
    /// of the SMTP door.
    pub forwarding: Option<Arc<crate::routing::forward::Forwarding>>,
    /// The key that ARC-seals forwarded mail (`[arc] enabled` with a
    /// `[[dkim.keys]]` key).
    pub arc: Option<Arc<arc::Sealer>>,
    /// `[content_checks]`'s tables, and the listeners' own
    /// (`content_checks.rs`).
    pub content_checks: Arc<content_checks::CheckTables>,
}

mod accept;
mod adopt;
mod authenticate;
mod checks;
mod divert;
mod filters;
mod local_sign;
mod sign;
pub use adopt::ClaimedCopy;

impl Intake {
    /// This intake for a listener with its own configuration (master.cf
    /// `-o`, `daemon/services.rs`): its milters, the rest shared.
    pub fn for_listener(&self, config: Arc<Config>) -> Intake {
        Intake {
            milters: milter::Filters::from_config(&config),
            config,
            spool: self.spool.clone(),
            mailboxes: self.mailboxes.clone(),
            dkim: self.dkim.clone(),
            sender_auth: self.sender_auth.clone(),
            handoff: self.handoff.clone(),
            logger: self.logger.clone(),
            flow: self.flow.clone(),
            store: self.store.clone(),
            limits: self.limits.clone(),
            sender_login: self.sender_login.clone(),
            rewrite: self.rewrite.clone(),
            forwarding: self.forwarding.clone(),
            arc: self.arc.clone(),
            content_checks: self.content_checks.clone(),
        }
    }

    /// A new queue ID (for the door's own log lines and trace).
    pub fn new_id(&self) -> u64 {
        self.spool.new_id()
    }

    /// The final recipients of a locally submitted message: aliases
    /// expanded, unknown local users refused, duplicates dropped; with
    /// (recipient, address given) for those an alias expanded to.
    pub async fn resolve(&self, recipients: &[String]) -> Result<Resolved, ResolveError> {
        let mut targets: Vec<(String, &String)> = Vec::new();
        let delimiters = self.config.recipient_delimiter.as_str();
        for r in recipients {
            let found = self
                .rewrite
                .rcpt_lookup(&self.mailboxes, delimiters, r)
                .await;
            let resolution = match found {
                // A rewriting map has it: the intake rewrites it.
                Ok(RcptLookup::Mapped) => Ok(Resolution::NotLocal),
                Ok(RcptLookup::UnknownAlias) => Ok(Resolution::Unknown),
                Ok(RcptLookup::Local(r)) => Ok(r),
                Err(e) => Err(e),
            };
            match resolution {
                Ok(Resolution::NotLocal) => targets.push((r.clone(), r)),
                Ok(Resolution::Accept(list)) => targets.extend(list.into_iter().map(|t| (t, r))),
                Ok(Resolution::Discard) => {}
                Ok(Resolution::Unknown) => return Err(ResolveError::NoSuchUser(r.clone())),
                Err(e) => return Err(ResolveError::Lookup(r.clone(), e.to_string())),
            }
        }
        let mut seen = std::collections::HashSet::new();
        targets.retain(|(t, _)| seen.insert(t.clone()));
        if targets.len() > self.config.smtpd.max_recipients {
            return Err(ResolveError::TooMany(self.config.smtpd.max_recipients));
        }
        let orig_rcpt = targets
            .iter()
            .filter(|(t, given)| !t.eq_ignore_ascii_case(given))
            .map(|(t, given)| (t.clone(), given.to_string()))
            .collect();
        let recipients = targets.into_iter().map(|(t, _)| t).collect();
        Ok(Resolved {
            recipients,
            orig_rcpt,
        })
    }

    /// Checks, completes, signs, stores and queues `sub`.
    pub async fn accept(&self, sub: Submission) -> Result<Accepted, Refusal> {
        accept::run(self, sub).await
    }
}

/// A local submission's final recipients ([`Intake::resolve`]).
pub struct Resolved {
    pub recipients: Vec<String>,
    /// As [`Submission::orig_rcpt`].
    pub orig_rcpt: Vec<(String, String)>,
}

/// Why a local submission's recipients could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("<{0}>: no such user")]
    NoSuchUser(String),
    #[error("<{0}>: lookup failed: {1}")]
    Lookup(String, String),
    #[error("more than {0} recipients")]
    TooMany(usize),
}

impl ResolveError {
    pub fn exit_code(&self) -> i32 {
        match self {
            ResolveError::NoSuchUser(_) => refusal::EX_NOUSER,
            ResolveError::Lookup(..) => refusal::EX_TEMPFAIL,
            ResolveError::TooMany(_) => refusal::EX_DATAERR,
        }
    }
}
