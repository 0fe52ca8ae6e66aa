//! The sender limits counted for the whole cluster (issue 38, item 6):
//! the intake's [`Counter`] over Redis, so a login that sends through
//! three nodes is counted once, and a containment set by one node holds
//! on all.
//!
//! One script (`lua/limits.lua`, `COUNT`) counts a message for each of
//! its subjects, sums the hour and sets the containment mark, atomically
//! and by Redis's clock. Every key has the one hash tag
//! `{sluice-limits}`, so a script may touch a login's and a sender's keys
//! together on a Redis Cluster.
//!
//! Redis unreachable (or slower than [`ANSWER`]): the node counts alone
//! ([`LocalCounts`]) for [`ALONE`] before it tries again, logged once
//! each way (`limits_alone`). Every containment Redis reports is kept
//! locally too, so a contained account stays contained through an
//! outage; counts made alone are not added to Redis's afterwards (the
//! limit is per node while Redis is away).
//!
//! Trusts: Redis (see `config/cluster.rs`); answers of the wrong shape
//! count as an outage. Invariant: a message is never delayed more than
//! [`ANSWER`] by the counting, and never refused because of it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::time::Instant;

use crate::intake::limits::{
    key, BoxFuture, Counter, Kind, LocalCounts, Standing, Subject, BUCKETS, BUCKET_SECS,
};
use crate::log::{Event, Logger};

/// Counts one message for each subject. KEYS: per subject, its counts (a
/// hash: `<bucket>m` and `<bucket>r`) and its containment mark (the Unix
/// second it ends, 0: until released). ARGV: recipients, bucket seconds,
/// buckets, containment seconds (0: until released), then per subject
/// its message and recipient limits. Returns per subject: contained
/// (0/1), contained by this message (0/1), messages and recipients in
/// the hour, and the mark's end.
const COUNT: &str = include_str!("lua/limits.lua");

/// Longest wait for Redis's answer before counting alone.
pub const ANSWER: Duration = Duration::from_millis(500);
/// How long a node counts alone after Redis failed it.
pub const ALONE: Duration = Duration::from_secs(5);

/// A subject's keys in Redis: (counts, mark).
fn keys(kind: Kind, who: &str) -> (String, String) {
    let k = key(kind, who);
    (
        format!("sluice:limits:{{sluice-limits}}:{k}:n"),
        format!("sluice:limits:{{sluice-limits}}:{k}:c"),
    )
}

/// The cluster's counter.
pub struct SharedCounts {
    client: redis::Client,
    conn: tokio::sync::Mutex<Option<ConnectionManager>>,
    script: redis::Script,
    local: Arc<LocalCounts>,
    /// Counting alone until then.
    alone_until: Mutex<Option<Instant>>,
    /// Logged that Redis failed (and not yet that it is back).
    alone: AtomicBool,
    logger: Logger,
}

impl SharedCounts {
    /// A counter over Redis at `url`, falling back to `local`; `None`
    /// (logged) when the URL does not parse.
    pub fn new(url: &str, local: Arc<LocalCounts>, logger: &Logger) -> Option<SharedCounts> {
        let client = match redis::Client::open(url) {
            Ok(c) => c,
            Err(e) => {
                logger.emit(&Event::LimitsAlone {
                    error: Some(e.to_string().into()),
                });
                return None;
            }
        };
        Some(SharedCounts {
            client,
            conn: tokio::sync::Mutex::new(None),
            script: redis::Script::new(COUNT),
            local,
            alone_until: Mutex::new(None),
            alone: AtomicBool::new(false),
            logger: logger.clone(),
        })
    }

    /// A connection, unless the node counts alone for now.
    async fn connection(&self) -> Option<ConnectionManager> {
        let until = *self
            .alone_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if until.is_some_and(|t| Instant::now() < t) {
            return None;
        }
        let mut conn = self.conn.lock().await;
        if conn.is_none() {
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(ANSWER))
                .set_response_timeout(Some(ANSWER))
                .set_number_of_retries(0);
            match ConnectionManager::new_with_config(self.client.clone(), config).await {
                Ok(c) => *conn = Some(c),
                Err(e) => {
                    drop(conn);
                    self.failed(e.to_string()).await;
                    return None;
                }
            }
        }
        conn.clone()
    }

    /// Redis failed: count alone for [`ALONE`] (logged once).
    async fn failed(&self, error: String) {
        *self
            .alone_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now() + ALONE);
        *self.conn.lock().await = None;
        if !self.alone.swap(true, Ordering::Relaxed) {
            self.logger.emit(&Event::LimitsAlone {
                error: Some(error.into()),
            });
        }
    }

    fn answered(&self) {
        if self.alone.swap(false, Ordering::Relaxed) {
            self.logger.emit(&Event::LimitsAlone { error: None });
        }
    }

    /// The `COUNT` script's answer, or why there is none.
    async fn count_shared(
        &self,
        conn: &mut ConnectionManager,
        subjects: &[Subject],
        recipients: u64,
        contain_secs: u64,
    ) -> Result<Vec<(Standing, u64)>, String> {
        let mut invocation = self.script.prepare_invoke();
        for s in subjects {
            let (counts, mark) = keys(s.kind, &s.who);
            invocation.key(counts).key(mark);
        }
        invocation
            .arg(recipients)
            .arg(BUCKET_SECS)
            .arg(BUCKETS)
            .arg(contain_secs);
        for s in subjects {
            invocation.arg(s.messages).arg(s.recipients);
        }
        let answer = tokio::time::timeout(ANSWER, invocation.invoke_async::<Vec<u64>>(conn)).await;
        let numbers = match answer {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err(format!("no answer in {} ms", ANSWER.as_millis())),
        };
        if numbers.len() != subjects.len() * 5 {
            return Err(format!("an answer of {} numbers", numbers.len()));
        }
        Ok(numbers
            .chunks(5)
            .map(|c| {
                let standing = Standing {
                    held: c[0] == 1,
                    newly: c[1] == 1,
                    messages: c[2],
                    recipients: c[3],
                };
                (standing, c[4])
            })
            .collect())
    }
}

impl Counter for SharedCounts {
    fn count<'a>(
        &'a self,
        subjects: &'a [Subject],
        recipients: u64,
        contain_secs: u64,
    ) -> BoxFuture<'a, Vec<Standing>> {
        Box::pin(async move {
            let shared = match self.connection().await {
                Some(mut conn) => {
                    self.count_shared(&mut conn, subjects, recipients, contain_secs)
                        .await
                }
                None => Err(String::new()),
            };
            match shared {
                Ok(answers) => {
                    self.answered();
                    for (s, (standing, until)) in subjects.iter().zip(&answers) {
                        if standing.held {
                            let text = self.local.contain(s, *until);
                            self.local.save(text).await;
                        }
                    }
                    answers.into_iter().map(|(s, _)| s).collect()
                }
                Err(e) => {
                    if !e.is_empty() {
                        self.failed(e).await;
                    }
                    self.local.count(subjects, recipients, contain_secs).await
                }
            }
        })
    }

    fn release<'a>(&'a self, kind: Kind, who: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let here = self.local.release(kind, who).await;
            let Some(mut conn) = self.connection().await else {
                return here;
            };
            let (counts, mark) = keys(kind, who);
            let mut pipe = redis::pipe();
            pipe.del(mark).del(counts);
            let deleted = pipe.query_async::<(u64, u64)>(&mut conn);
            match tokio::time::timeout(ANSWER, deleted).await {
                Ok(Ok((marks, _))) => {
                    self.answered();
                    here || marks > 0
                }
                Ok(Err(e)) => {
                    self.failed(e.to_string()).await;
                    here
                }
                Err(_) => {
                    self.failed(format!("no answer in {} ms", ANSWER.as_millis()))
                        .await;
                    here
                }
            }
        })
    }
}
