//! Claiming a dead origin's copies: when a node has been counted dead (no
//! heartbeat in Redis) for `shadow_claim_secs`, or came back as a new
//! incarnation (it lost its spool), the peer holding its copies queues
//! them as its own mail and delivers them.
//!
//! A claimed copy enters this node's queue through the intake's door for
//! them, `Intake::adopt` (stored and queued under a new ID, its own event),
//! not through a door for new mail.
//!
//! Each copy is claimed once in Redis (`SET NX`) before it is queued, so
//! that if two peers hold a copy (a copy whose acknowledgement was late,
//! then sent to the next peer) only one delivers it.
//!
//! Trusts: Redis's answer to the claim, and the cluster's view of who is
//! alive (taken only while Redis answers: with Redis away nothing is
//! claimed, since death cannot be told from a partition).
//! Invariants: a copy is dropped from the holder's spool only once it is
//! queued here (synced) or claimed by another peer; a claim cut short
//! (Redis or the spool failing) resumes at the next tick.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use redis::aio::ConnectionManager;
use sluice_spool::{Envelope, Recovered, Spool, SpoolConfig};
use tokio::time::Instant;

use super::holder::{Copies, Holder};
use super::lock;
use crate::cluster::Cluster;
use crate::intake::{ClaimedCopy, Intake};
use crate::log::{Event, Qid};

/// A claim key lives this long (longer than any queue lifetime).
const CLAIM_TTL_SECS: u64 = 30 * 86_400;

/// Claims one copy: 1 if it is this node's (now, or already from a claim
/// cut short), 0 if another peer has it. KEYS[1]: the copy's claim key;
/// ARGV: this node, the key's lifetime. Run by its SHA1 (`EVALSHA`,
/// pipelined), sent again when Redis does not know it (`NOSCRIPT`).
const CLAIM: &str = include_str!("../lua/claim_copy.lua");
/// Copies claimed per Redis round trip.
const CHUNK: usize = 256;

#[derive(Debug, thiserror::Error)]
enum ClaimError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("shadow spool: {0}")]
    Spool(#[from] sluice_spool::SpoolError),
    #[error("reading a copy: {0}")]
    Read(#[from] std::io::Error),
    #[error("queueing a copy: {0}")]
    Queue(String),
}

/// The intake of the running configuration (a reload replaces it).
pub type CurrentIntake = Arc<ArcSwap<Intake>>;

/// Every heartbeat: claims what is due. Runs as long as the runtime.
pub fn start(
    holder: Arc<Holder>,
    cluster: Arc<Cluster>,
    intake: CurrentIntake,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let script = redis::Script::new(CLAIM);
        let config = cluster.config().clone();
        let beat = Duration::from_millis(config.heartbeat_ms);
        let after = Duration::from_secs(config.shadow_claim_secs);
        let client = redis::Client::open(config.redis_url.as_str()).ok();
        let mut conn: Option<ConnectionManager> = None;
        loop {
            tokio::time::sleep(beat).await;
            let due = due(&holder, &cluster, after);
            if due.is_empty() {
                continue;
            }
            let Some(client) = &client else { continue };
            if conn.is_none() {
                conn = ConnectionManager::new(client.clone()).await.ok();
            }
            let Some(con) = conn.as_mut() else { continue };
            for (copies, superseded) in due {
                // A node stopped cleanly keeps its spool: wait for it.
                let away = crate::cluster::away_key(&copies.origin);
                let mut exists = redis::cmd("EXISTS");
                exists.arg(away);
                let stopped = exists.query_async::<bool>(&mut *con).await;
                // Its mark gone, it may be back: its restart heartbeats
                // before it removes the mark, and our view of who is alive
                // is a heartbeat old (claimed then, its copies would be
                // delivered twice, by it and by us).
                if !superseded && stopped.as_ref().is_ok_and(|s| !s) {
                    let dead_ms = config.node_dead_secs * 1000;
                    if seen_within(con, &copies.origin, dead_ms).await != Ok(false) {
                        continue;
                    }
                }
                if !superseded && stopped.unwrap_or(true) {
                    if !copies.waiting.swap(true, Ordering::Relaxed) {
                        holder.logger.emit(&Event::ShadowWaiting {
                            origin: copies.origin.as_str().into(),
                        });
                    }
                    continue;
                }
                let intake = intake.load_full();
                let to = Claimer {
                    con: &mut *con,
                    script: &script,
                    intake: &intake,
                };
                if let Err(e) = claim(&holder, &copies, to).await {
                    holder.logger.emit(&Event::ShadowClaimCutShort {
                        origin: copies.origin.as_str().into(),
                        error: e.to_string().into(),
                    });
                }
            }
        }
    })
}

/// Whether `node`'s last heartbeat in Redis is within `dead_ms` of
/// Redis's clock (`sync.rs` keeps the node set by that clock).
async fn seen_within(
    con: &mut ConnectionManager,
    node: &str,
    dead_ms: u64,
) -> Result<bool, redis::RedisError> {
    let (seen, (secs, micros)): (Option<f64>, (u64, u64)) = redis::pipe()
        .cmd("ZSCORE")
        .arg("sluice:nodes")
        .arg(node)
        .cmd("TIME")
        .query_async(con)
        .await?;
    let now_ms = (secs * 1000 + micros / 1000) as f64;
    Ok(seen.is_some_and(|t| t + dead_ms as f64 >= now_ms))
}

/// The copies to claim now (of an origin that came back as another
/// incarnation, or counted dead for `after`), and whether their origin is
/// back as another incarnation.
fn due(holder: &Holder, cluster: &Cluster, after: Duration) -> Vec<(Arc<Copies>, bool)> {
    let all: Vec<Arc<Copies>> = lock(&holder.copies).values().cloned().collect();
    let current = lock(&holder.current).clone();
    let mut due = Vec::new();
    for copies in all {
        let superseded = current
            .get(&copies.origin)
            .is_some_and(|inc| *inc != copies.incarnation);
        // An origin with a link open to us is alive, whatever Redis says
        // (it may be cut off from Redis, or its heartbeats starved).
        if !superseded && copies.links.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            *lock(&copies.absent_since) = None;
            continue;
        }
        let dead_long = match cluster.is_live(&copies.origin) {
            None => false,
            Some(true) => {
                *lock(&copies.absent_since) = None;
                false
            }
            Some(false) => {
                let mut since = lock(&copies.absent_since);
                since.get_or_insert_with(Instant::now).elapsed() >= after
            }
        };
        if superseded || dead_long {
            due.push((copies, superseded));
        }
    }
    due
}

/// Claims one origin incarnation's copies: the spool is closed to new
/// copies and reopened to list them, each is claimed in Redis and queued,
/// then the area is removed.
/// What a claim goes through: Redis (and the claim script), the intake.
struct Claimer<'a> {
    con: &'a mut ConnectionManager,
    script: &'a redis::Script,
    intake: &'a Intake,
}

async fn claim(holder: &Holder, copies: &Arc<Copies>, to: Claimer<'_>) -> Result<(), ClaimError> {
    let Some(spool) = lock(&copies.spool).take() else {
        return Ok(());
    };
    let config = SpoolConfig {
        dir: copies.dir.clone(),
        ..holder.spool.clone()
    };
    let reopened = tokio::task::spawn_blocking(move || {
        spool.shutdown();
        drop(spool);
        Spool::open(config)
    })
    .await
    .expect("no panic");
    let (spool, recovered, _) = match reopened {
        Ok(opened) => opened,
        Err(e) => {
            // Out of the table: the next hello from its origin (or the next
            // start) opens it again from disk; nothing is dropped.
            let key = (copies.origin.clone(), copies.incarnation);
            lock(&holder.copies).remove(&key);
            return Err(e.into());
        }
    };
    let result = claim_all(holder, copies, &spool, recovered, to).await;
    if result.is_err() {
        *lock(&copies.spool) = Some(spool);
        return result;
    }
    let dir = copies.dir.clone();
    let _ = tokio::task::spawn_blocking(move || {
        spool.shutdown();
        drop(spool);
        std::fs::remove_dir_all(&dir)
    })
    .await;
    let key = (copies.origin.clone(), copies.incarnation);
    lock(&holder.copies).remove(&key);
    Ok(())
}

async fn claim_all(
    holder: &Holder,
    copies: &Copies,
    spool: &Spool,
    recovered: Vec<Recovered>,
    to: Claimer<'_>,
) -> Result<(), ClaimError> {
    let (origin, inc) = (&copies.origin, copies.incarnation);
    if !recovered.is_empty() {
        holder.logger.emit(&Event::ShadowClaiming {
            origin: origin.into(),
            incarnation: format!("{inc:016x}").into(),
            copies: recovered.len() as u64,
        });
    }
    let (mut queued, mut elsewhere) = (0usize, 0usize);
    for chunk in recovered.chunks(CHUNK) {
        let keys: Vec<String> = (chunk.iter())
            .map(|r| format!("sluice:shadow:{{{origin}@{inc:016x}}}:{:x}", r.id))
            .collect();
        let won = claim_keys(to.con, to.script, &keys, &holder.node).await?;
        for (r, won) in chunk.iter().zip(won) {
            if won == 1 {
                let new = adopt(spool, r, origin, to.intake).await?;
                holder.logger.emit(&Event::ShadowClaimed {
                    origin: origin.into(),
                    queue_id: Qid(r.id),
                    new_id: Qid(new),
                });
                queued += 1;
            } else {
                elsewhere += 1;
            }
            spool.record_outcome(r.id, Vec::new(), true);
        }
    }
    if !recovered.is_empty() {
        holder.logger.emit(&Event::ShadowClaimDone {
            origin: origin.into(),
            queued: queued as u64,
            elsewhere: elsewhere as u64,
        });
    }
    Ok(())
}

/// Runs the claim script on each key, in one pipeline: 1 for each key
/// this node holds now. The script is run by its SHA1; a Redis that lost
/// it (restarted, failed over) is sent it and the chunk tried again (the
/// script is idempotent: a key already this node's answers 1 again).
async fn claim_keys(
    con: &mut ConnectionManager,
    script: &redis::Script,
    keys: &[String],
    node: &str,
) -> Result<Vec<i64>, redis::RedisError> {
    let pipe = || {
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("EVALSHA")
                .arg(script.get_hash())
                .arg(1)
                .arg(key)
                .arg(node)
                .arg(CLAIM_TTL_SECS);
        }
        pipe
    };
    match pipe().query_async(con).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.load_async(con).await?;
            pipe().query_async(con).await
        }
        answered => answered,
    }
}

/// Queues one copy here through the intake's door for claimed copies,
/// without the recipients its origin had finished.
async fn adopt(
    spool: &Spool,
    r: &Recovered,
    origin: &str,
    intake: &Intake,
) -> Result<u64, ClaimError> {
    let (s, body_ref) = (spool.clone(), r.body);
    let (env, body) = tokio::task::spawn_blocking(move || {
        Ok::<_, std::io::Error>((s.read_envelope(body_ref)?, s.read_body(body_ref)?))
    })
    .await
    .expect("no panic")?;
    let mut env = without_done(env, &r.done);
    // Held on the origin (`sluice queue hold`, or a filter's quarantine
    // not released there): held here too; released there: not held here.
    use crate::message::flags::{MARK_HELD, MARK_RELEASED, QUARANTINE};
    match (r.marks & MARK_HELD != 0, r.marks & MARK_RELEASED != 0) {
        (_, true) => env.flags &= !QUARANTINE,
        (true, false) => env.flags |= QUARANTINE,
        (false, false) => {}
    }
    let copy = ClaimedCopy {
        origin: origin.to_string(),
        origin_id: r.id,
        envelope: env,
        body,
    };
    intake
        .adopt(copy)
        .await
        .map_err(|e| ClaimError::Queue(e.to_string()))
}

fn without_done(mut env: Envelope, done: &sluice_spool::DoneSet) -> Envelope {
    let keep = |i: &usize| !done.get(*i);
    let pick = |v: Vec<String>| -> Vec<String> {
        v.into_iter()
            .enumerate()
            .filter(|(i, _)| keep(i))
            .map(|(_, x)| x)
            .collect()
    };
    env.recipients = pick(std::mem::take(&mut env.recipients));
    if !env.orig_rcpt.is_empty() {
        env.orig_rcpt = pick(std::mem::take(&mut env.orig_rcpt));
    }
    if let Some(dsn) = env.dsn.as_mut() {
        let notify = std::mem::take(&mut dsn.notify);
        dsn.notify = notify
            .into_iter()
            .enumerate()
            .filter(|(i, _)| keep(i))
            .map(|(_, x)| x)
            .collect();
        dsn.orcpt = pick(std::mem::take(&mut dsn.orcpt));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipients_already_done_are_not_queued_again() {
        let env = Envelope {
            recipients: vec!["a@x".into(), "b@x".into(), "c@x".into()],
            dsn: Some(Box::new(sluice_spool::Dsn {
                notify: vec![1, 2, 3],
                orcpt: vec!["o-a".into(), "o-b".into(), "o-c".into()],
                ..Default::default()
            })),
            ..Envelope::default()
        };
        let mut done = sluice_spool::DoneSet::none(3);
        done.set(1);
        let left = without_done(env, &done);
        assert_eq!(left.recipients, vec!["a@x", "c@x"]);
        let dsn = left.dsn.unwrap();
        assert_eq!(
            (dsn.notify, dsn.orcpt),
            (vec![1, 3], vec!["o-a".to_string(), "o-c".into()])
        );
    }
}
