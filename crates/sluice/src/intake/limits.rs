//! Sender limits (issue 38, item 6): our own users' mail counted per
//! login and per envelope sender, over the last hour; a login or sender
//! that crosses a limit is *contained*: its new mail is accepted and held
//! (not bounced, not delivered) until an operator releases it
//! (`sluice queue release --login L`) or `contain_hours` pass, and the
//! crossing is an event (`limit_crossed`).
//!
//! What counts: a message from a login (SMTP AUTH or a local account) is
//! counted for that login, and a message from a login or from mynetworks
//! for its envelope sender (not the null sender); strangers' mail (ours
//! to receive) and our notices never are. A message counts once, with
//! its recipients, whether or not it is held, so a contained account
//! that keeps sending stays over.
//!
//! Where counts live: a [`Counter`]. Alone, [`LocalCounts`] (this file):
//! in memory, with the containments kept in `<data_dir>/contained.list`
//! so a restart does not lift them. In a cluster, Redis
//! (`cluster/limits.rs`), so the limit is the cluster's, falling back to
//! these local counts while Redis cannot be reached.
//!
//! The hour is six ten-minute buckets: a count covers between 50 and 60
//! minutes.
//!
//! Trust: logins are what the door established (AUTH or the socket's
//! peer credentials), senders the client's; both are only keys here (a
//! sender rotating addresses escapes a per-sender limit: the per-login
//! limit is the one that holds an account). Invariants: memory is
//! bounded ([`MAX_SUBJECTS`] counted at once; beyond, a new subject is
//! not counted until old ones lapse); a containment is lifted only by its
//! time, a release, or the list file being removed by hand.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use super::{Intake, Origin, Submission};
use crate::config::limits::SenderLimits;
use crate::log::{Event, Logger, Qid};

/// Seconds in one bucket of the hour.
pub const BUCKET_SECS: u64 = 600;
/// Buckets in the hour.
pub const BUCKETS: usize = 6;
/// Subjects counted at once by [`LocalCounts`].
pub const MAX_SUBJECTS: usize = 100_000;
/// The containment list's file name in `data_dir`.
pub const CONTAINED_LIST: &str = "contained.list";

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Login,
    Sender,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Login => "login",
            Kind::Sender => "sender",
        }
    }
}

/// One login or sender to count a message for, with its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub kind: Kind,
    /// The login or address, lower-cased.
    pub who: String,
    /// Messages and recipients an hour, at most (0: no limit).
    pub messages: u64,
    pub recipients: u64,
}

impl Subject {
    /// Its key in the counters: `login:alice`, `sender:bob@example.org`.
    pub fn key(&self) -> String {
        key(self.kind, &self.who)
    }

    /// Which limit `standing` is over, if any: (what, count, limit).
    pub fn over(&self, s: &Standing) -> Option<(&'static str, u64, u64)> {
        if self.messages > 0 && s.messages > self.messages {
            return Some(("messages", s.messages, self.messages));
        }
        if self.recipients > 0 && s.recipients > self.recipients {
            return Some(("recipients", s.recipients, self.recipients));
        }
        None
    }
}

/// A counter key.
pub fn key(kind: Kind, who: &str) -> String {
    format!("{}:{}", kind.as_str(), who.to_ascii_lowercase())
}

/// A subject's hour after counting one more message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Standing {
    pub messages: u64,
    pub recipients: u64,
    /// Contained: the message is to be held.
    pub held: bool,
    /// This message made it contained (the crossing).
    pub newly: bool,
}

/// Where the counts are kept.
pub trait Counter: Send + Sync {
    /// Counts one message with `recipients` recipients for each subject;
    /// one standing per subject, in order. A subject over a limit is
    /// contained for `contain_secs` (0: until released).
    fn count<'a>(
        &'a self,
        subjects: &'a [Subject],
        recipients: u64,
        contain_secs: u64,
    ) -> BoxFuture<'a, Vec<Standing>>;

    /// Lifts a containment and forgets the hour's counts; whether it was
    /// contained.
    fn release<'a>(&'a self, kind: Kind, who: &'a str) -> BoxFuture<'a, bool>;
}

/// The subjects a message is counted for under `limits` (none when no
/// limit applies to its origin).
pub fn subjects(limits: &SenderLimits, sub: &Submission) -> Vec<Subject> {
    let mut out = Vec::new();
    let login = sub.origin.login();
    let ours = match &sub.origin {
        Origin::Smtp(c) => c.trusted || c.authenticated,
        Origin::Local { .. } => login.is_some(),
        Origin::Notice => false,
    };
    if let Some(login) = login.filter(|l| limits.logins() && !limits.exempt(l)) {
        out.push(Subject {
            kind: Kind::Login,
            who: login.to_ascii_lowercase(),
            messages: limits.login_messages_per_hour,
            recipients: limits.login_recipients_per_hour,
        });
    }
    let sender = sub.sender.as_str();
    if ours && limits.senders() && !sender.is_empty() && !limits.exempt(sender) {
        out.push(Subject {
            kind: Kind::Sender,
            who: sender.to_ascii_lowercase(),
            messages: limits.sender_messages_per_hour,
            recipients: limits.sender_recipients_per_hour,
        });
    }
    out
}

/// Counts `sub` (when a limit applies to it) and says why it is to be
/// held, if its login or sender is contained; the crossing is logged.
pub async fn check(intake: &Intake, counter: &dyn Counter, sub: &Submission) -> Option<String> {
    let limits = &intake.config.sender_limits;
    let subjects = subjects(limits, sub);
    if subjects.is_empty() {
        return None;
    }
    let contain_secs = limits.contain_hours * 3600;
    let rcpts = sub.recipients.len() as u64;
    let standings = counter.count(&subjects, rcpts, contain_secs).await;
    let mut reason = None;
    for (s, st) in subjects.iter().zip(&standings) {
        if let (true, Some((what, count, limit))) = (st.newly, s.over(st)) {
            intake.logger.emit(&Event::LimitCrossed {
                queue_id: Qid(sub.id),
                kind: s.kind.as_str().into(),
                who: s.who.as_str().into(),
                what: what.into(),
                count,
                limit,
            });
        }
        if st.held && reason.is_none() {
            reason = Some(format!(
                "{} {} is contained by the sender limits ({} messages, {} recipients in the last hour)",
                s.kind.as_str(),
                s.who,
                st.messages,
                st.recipients
            ));
        }
    }
    reason
}

/// One subject's last hour, bucket by bucket.
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    /// Per slot: its bucket (Unix time / [`BUCKET_SECS`]) and counts.
    bucket: [u64; BUCKETS],
    messages: [u64; BUCKETS],
    recipients: [u64; BUCKETS],
}

impl Window {
    fn add(&mut self, now_bucket: u64, recipients: u64) -> (u64, u64) {
        let slot = (now_bucket % BUCKETS as u64) as usize;
        if self.bucket[slot] != now_bucket {
            self.bucket[slot] = now_bucket;
            self.messages[slot] = 0;
            self.recipients[slot] = 0;
        }
        self.messages[slot] += 1;
        self.recipients[slot] = self.recipients[slot].saturating_add(recipients);
        self.sum(now_bucket)
    }

    fn sum(&self, now_bucket: u64) -> (u64, u64) {
        let live = |i: usize| self.bucket[i] + BUCKETS as u64 > now_bucket;
        (0..BUCKETS).filter(|&i| live(i)).fold((0, 0), |(m, r), i| {
            (m + self.messages[i], r + self.recipients[i])
        })
    }

    fn lapsed(&self, now_bucket: u64) -> bool {
        self.sum(now_bucket) == (0, 0)
    }
}

/// A containment as the list file keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Contained {
    kind: Kind,
    who: String,
    /// Unix seconds it ends; 0: until released.
    until: u64,
}

#[derive(Default)]
struct LocalState {
    windows: HashMap<String, Window>,
    /// Key -> its containment.
    contained: HashMap<String, Contained>,
}

/// Counts kept by this process (see the module's head).
pub struct LocalCounts {
    state: Mutex<LocalState>,
    /// The directory of `contained.list` (`data_dir`); `None` in tests
    /// that keep nothing.
    dir: Option<PathBuf>,
    logger: Logger,
}

impl LocalCounts {
    /// Counts that keep their containments in `dir`'s `contained.list`
    /// (read now: a line that does not parse is skipped).
    pub fn open(dir: Option<PathBuf>, logger: Logger) -> LocalCounts {
        let mut state = LocalState::default();
        let file = dir.as_ref().map(|d| d.join(CONTAINED_LIST));
        if let Some(text) = file.and_then(|f| std::fs::read_to_string(f).ok()) {
            for c in text
                .lines()
                .filter_map(|l| serde_json::from_str::<Contained>(l).ok())
            {
                state.contained.insert(key(c.kind, &c.who), c);
            }
        }
        LocalCounts {
            state: Mutex::new(state),
            dir,
            logger,
        }
    }

    /// Counts one message now (Unix seconds `now`); the list file's new
    /// text when containments changed.
    pub fn count_at(
        &self,
        subjects: &[Subject],
        recipients: u64,
        contain_secs: u64,
        now: u64,
    ) -> (Vec<Standing>, Option<String>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut changed = state.expire(now);
        let bucket = now / BUCKET_SECS;
        let mut out = Vec::with_capacity(subjects.len());
        for s in subjects {
            let k = s.key();
            let (messages, recipients) = state.add(&k, bucket, recipients);
            let mut standing = Standing {
                messages,
                recipients,
                held: state.contained.contains_key(&k),
                newly: false,
            };
            if !standing.held && s.over(&standing).is_some() {
                let until = if contain_secs == 0 {
                    0
                } else {
                    now + contain_secs
                };
                let c = Contained {
                    kind: s.kind,
                    who: s.who.clone(),
                    until,
                };
                state.contained.insert(k, c);
                (standing.held, standing.newly, changed) = (true, true, true);
            }
            out.push(standing);
        }
        (out, changed.then(|| state.list_text()))
    }

    /// Marks a subject contained (Redis said so: kept here too, so that it
    /// stays contained if Redis is lost). The list file's new text, if
    /// it changed.
    pub fn contain(&self, s: &Subject, until: u64) -> Option<String> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let c = Contained {
            kind: s.kind,
            who: s.who.clone(),
            until,
        };
        let old = state.contained.insert(s.key(), c.clone());
        (old.as_ref() != Some(&c)).then(|| state.list_text())
    }

    /// Lifts a containment; whether there was one, and the list's new text.
    pub fn release_now(&self, kind: Kind, who: &str) -> (bool, Option<String>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let k = key(kind, who);
        state.windows.remove(&k);
        match state.contained.remove(&k) {
            Some(_) => (true, Some(state.list_text())),
            None => (false, None),
        }
    }

    /// Writes the list (durably: replaced whole), off the runtime.
    pub async fn save(&self, text: Option<String>) {
        let (Some(text), Some(dir)) = (text, self.dir.clone()) else {
            return;
        };
        let saved = tokio::task::spawn_blocking(move || {
            sluice_spool::replace_file(&dir, CONTAINED_LIST, text.as_bytes(), 0o600)
        })
        .await;
        let error = match saved {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        };
        self.logger.emit(&Event::Warning {
            kind: "contained_list".into(),
            open: None,
            line: format!("warning: cannot save {CONTAINED_LIST}: {error}").into(),
        });
    }
}

impl LocalState {
    /// Drops containments whose time is over; whether any was.
    fn expire(&mut self, now: u64) -> bool {
        let before = self.contained.len();
        self.contained.retain(|_, c| c.until == 0 || c.until > now);
        before != self.contained.len()
    }

    fn add(&mut self, k: &str, bucket: u64, recipients: u64) -> (u64, u64) {
        if !self.windows.contains_key(k) && self.windows.len() >= MAX_SUBJECTS {
            self.windows.retain(|_, w| !w.lapsed(bucket));
            if self.windows.len() >= MAX_SUBJECTS {
                return (0, 0);
            }
        }
        self.windows
            .entry(k.to_string())
            .or_default()
            .add(bucket, recipients)
    }

    fn list_text(&self) -> String {
        let mut lines: Vec<String> = self
            .contained
            .values()
            .filter_map(|c| serde_json::to_string(c).ok())
            .collect();
        lines.sort();
        lines.iter().map(|l| format!("{l}\n")).collect()
    }
}

impl Counter for LocalCounts {
    fn count<'a>(
        &'a self,
        subjects: &'a [Subject],
        recipients: u64,
        contain_secs: u64,
    ) -> BoxFuture<'a, Vec<Standing>> {
        Box::pin(async move {
            let now = crate::timefmt::now_millis() / 1000;
            let (standings, text) = self.count_at(subjects, recipients, contain_secs, now);
            self.save(text).await;
            standings
        })
    }

    fn release<'a>(&'a self, kind: Kind, who: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let (was, text) = self.release_now(kind, who);
            self.save(text).await;
            was
        })
    }
}

#[cfg(test)]
mod tests;
