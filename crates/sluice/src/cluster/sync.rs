//! The task that keeps a [`Cluster`] in step with Redis: every heartbeat
//! (or at once when demand grows) it says this node is alive, learns who
//! else is, and claims this node's connection leases.
//!
//! Both steps are Lua scripts, so each is atomic in Redis, and both take
//! the time from Redis (`TIME`), so the nodes' clocks need not agree. The
//! scripts are files (`lua/`), run by `redis::Script`: by their SHA1
//! (`EVALSHA`), sent again only when Redis does not know them.
//!
//! Trusts: Redis's answers (a grant above the cap is cut to the cap).
//! Invariants: Redis unreachable never stops this task, and never stops
//! delivery (the queue falls back to shares, `mod.rs`); it is logged once
//! when it happens and once when Redis is back.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::Cluster;
use crate::log::Event;
use crate::log::Logger;

/// Marks this node alive and returns the nodes alive (seen within
/// ARGV[2] ms), sorted by name. KEYS[1]: the node set (name -> last seen).
const HEARTBEAT: &str = include_str!("lua/heartbeat.lua");

/// Sets this node's holding of one destination's connections to what it
/// wants, as far as the cap allows, and returns the grant. KEYS[1]: node
/// -> connections held (a hash); KEYS[2]: node -> lease expiry (a sorted
/// set). ARGV: node, want, held, cap, lease ms. A holding is dropped
/// first if its lease lapsed, or it has none, or it does not make sense
/// (not a count, or a lease longer than two of ours): what is left in
/// Redis by hand or by a node of another build cannot hold a cap forever.
/// The node is recorded with at least what it holds (so others see its
/// real connections) even if that is over the grant.
const CLAIM: &str = include_str!("lua/lease.lua");

/// Redis keys of a destination's leases: one hash tag, so that both are
/// in one slot of a Redis Cluster (a script may touch only one).
fn lease_keys(dest: &str) -> (String, String) {
    let tag = dest.replace(['{', '}'], "");
    (
        format!("sluice:lease:{{{tag}}}:held"),
        format!("sluice:lease:{{{tag}}}:exp"),
    )
}

/// Starts the task; it runs as long as the runtime.
pub fn start(cluster: Arc<Cluster>, logger: Logger) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(cluster, logger))
}

async fn run(cluster: Arc<Cluster>, logger: Logger) {
    let beat = Duration::from_millis(cluster.config.heartbeat_ms);
    let client = match redis::Client::open(cluster.config.redis_url.as_str()) {
        Ok(c) => Some(c),
        Err(e) => {
            logger.emit(&Event::RedisUnusable {
                error: e.to_string().into(),
            });
            None
        }
    };
    let scripts = Scripts {
        heartbeat: redis::Script::new(HEARTBEAT),
        keep_name: redis::Script::new(super::owner::KEEP),
        give_name: redis::Script::new(super::owner::GIVE_BACK),
        claim: redis::Script::new(CLAIM),
        reserve: redis::Script::new(super::rate::RESERVE),
        dead: redis::Script::new(super::dead::SYNC_DEAD),
    };
    let mut conn: Option<ConnectionManager> = None;
    let mut down = false;
    loop {
        if let Some(client) = &client {
            match round(client, &mut conn, &cluster, &scripts, beat, &logger).await {
                Ok(()) if down => {
                    down = false;
                    logger.emit(&Event::RedisBack {
                        node: cluster.node().into(),
                        live_nodes: cluster.live_nodes() as u64,
                    });
                }
                Ok(()) => {}
                Err(e) => {
                    if !down {
                        down = true;
                        logger.emit(&Event::RedisLost {
                            node: cluster.node().into(),
                            error: e.to_string().into(),
                        });
                    }
                    conn = None;
                    cluster.round_failed();
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(beat) => {}
            _ = cluster.wake.notified() => {
                // Gather the demand of one burst into one claim.
                tokio::time::sleep(Duration::from_millis(20).min(beat)).await;
            }
            _ = cluster.stop.notified() => {
                if let Some(con) = conn.as_mut() {
                    if let Err(e) = leave(con, &cluster, &scripts).await {
                        let lapse = cluster.config.lease_secs;
                        logger.emit(&Event::LeasesNotReturned {
            error: e.to_string().into(),
            lapse_secs: lapse,
        });
                    }
                }
                cluster.released.notify_one();
                return;
            }
        }
    }
}

/// Sets this node's holding of `dest` (the `CLAIM` script); the grant.
async fn claim(
    con: &mut ConnectionManager,
    cluster: &Cluster,
    scripts: &Scripts,
    dest: &str,
    want: usize,
    held: usize,
    cap: usize,
) -> redis::RedisResult<usize> {
    let (held_key, exp_key) = lease_keys(dest);
    (scripts.claim)
        .key(held_key)
        .key(exp_key)
        .arg(cluster.node())
        .arg(want)
        .arg(held)
        .arg(cap)
        .arg(cluster.config.lease_secs * 1000)
        .invoke_async(con)
        .await
}

/// At stop: every lease of this node back to nothing, and out of the
/// node set.
async fn leave(
    con: &mut ConnectionManager,
    cluster: &Cluster,
    scripts: &Scripts,
) -> redis::RedisResult<()> {
    if cluster.config.shadow {
        // First (the rest may not finish): stopped cleanly, spool kept: peers hold off claiming its copies
        // for `shadow_away_secs` (they would be delivered twice).
        redis::cmd("SET")
            .arg(away_key(cluster.node()))
            .arg(1)
            .arg("EX")
            .arg(cluster.config.shadow_away_secs.max(1))
            .query_async::<()>(&mut *con)
            .await?;
    }
    for (dest, lease) in cluster.claims() {
        claim(con, cluster, scripts, &dest, 0, 0, lease.cap).await?;
    }
    (scripts.give_name)
        .key(super::owner::owner_key(cluster.node()))
        .arg(cluster.token.to_string())
        .invoke_async::<i64>(&mut *con)
        .await?;
    redis::cmd("ZREM")
        .arg("sluice:nodes")
        .arg(cluster.node())
        .query_async(con)
        .await
}

/// Set while a node is stopped cleanly (`leave`), gone when it is back.
pub fn away_key(node: &str) -> String {
    format!("sluice:away:{node}")
}

struct Scripts {
    heartbeat: redis::Script,
    keep_name: redis::Script,
    give_name: redis::Script,
    claim: redis::Script,
    reserve: redis::Script,
    dead: redis::Script,
}

/// One heartbeat, one claim per destination in use, and the sending slots
/// wanted under cluster-wide rates.
async fn round(
    client: &redis::Client,
    conn: &mut Option<ConnectionManager>,
    cluster: &Cluster,
    scripts: &Scripts,
    beat: Duration,
    logger: &Logger,
) -> redis::RedisResult<()> {
    if conn.is_none() {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(beat))
            .set_response_timeout(Some(beat))
            .set_number_of_retries(0);
        *conn = Some(ConnectionManager::new_with_config(client.clone(), config).await?);
    }
    let Some(con) = conn.as_mut() else {
        return Ok(());
    };
    let dead_ms = cluster.config.node_dead_secs * 1000;
    let live: Vec<String> = (scripts.heartbeat)
        .key("sluice:nodes")
        .arg(cluster.node())
        .arg(dead_ms)
        .invoke_async(con)
        .await?;
    let kept: i64 = (scripts.keep_name)
        .key(super::owner::owner_key(cluster.node()))
        .arg(cluster.token.to_string())
        .arg(dead_ms)
        .invoke_async(con)
        .await?;
    let taken = kept == 0;
    if taken
        != cluster
            .name_taken
            .swap(taken, std::sync::atomic::Ordering::Relaxed)
    {
        match taken {
            true => logger.emit(&Event::NodeNameTaken {
                node: cluster.node().into(),
            }),
            false => logger.emit(&Event::NodeNameBack {
                node: cluster.node().into(),
            }),
        }
    }
    if cluster.config.shadow {
        // Back (or never away): peers may claim this node's copies if it
        // dies from now on.
        let mut away = redis::cmd("DEL");
        away.arg(away_key(cluster.node()));
        away.query_async::<()>(&mut *con).await?;
    }
    let mut grants = Vec::new();
    for (dest, lease) in cluster.claims() {
        let granted = claim(
            con, cluster, scripts, &dest, lease.want, lease.held, lease.cap,
        )
        .await?;
        grants.push((dest, granted.min(lease.cap)));
    }
    let mut blocks = Vec::new();
    for (dest, n, interval) in cluster.reservations() {
        let sent = Instant::now();
        let (offset_us, slots): (i64, usize) = (scripts.reserve)
            .key(format!("sluice:rate:{dest}"))
            .arg(n)
            .arg(interval.as_micros() as u64)
            .arg(super::rate::AHEAD.as_micros() as u64)
            .invoke_async(con)
            .await?;
        // Refused (others reserved a second ahead): again next round.
        if offset_us >= 0 && slots > 0 {
            // As late as Redis's moment can have been: when it answered.
            let start = Instant::now() + Duration::from_micros(offset_us as u64);
            blocks.push((dest, start, slots, sent.elapsed()));
        }
    }
    sync_dead(con, cluster, &scripts.dead, logger).await?;
    // Only a round that went through entirely counts as Redis answering:
    // any error above leaves the node on its shares (and logs it once).
    cluster.round_ok(live.into_iter().map(Arc::from).collect(), grants);
    for (dest, start, slots, rtt) in blocks {
        cluster.reserved(&dest, start, slots, rtt);
    }
    Ok(())
}

/// Sends this node's dead-host marks and clears, learns everyone's.
async fn sync_dead(
    con: &mut ConnectionManager,
    cluster: &Cluster,
    script: &redis::Script,
    logger: &Logger,
) -> redis::RedisResult<()> {
    let (marks, clears) = cluster.dead_outbox();
    let mut call = script.key("sluice:dead");
    call.arg(marks.len());
    for (addr, ttl) in &marks {
        call.arg(addr.to_string()).arg(ttl.as_millis() as u64);
    }
    for addr in &clears {
        call.arg(addr.to_string());
    }
    let flat: Vec<String> = call.invoke_async(con).await?;
    let pairs = flat.chunks_exact(2);
    let known = pairs
        .map(|p| (p[0].clone(), p[1].parse().unwrap_or(0)))
        .collect();
    for (addr, left) in cluster.dead_learned(known) {
        logger.emit(&Event::DeadMarkShared {
            addr: addr.to_string().into(),
            secs: left.as_secs(),
        });
    }
    Ok(())
}
