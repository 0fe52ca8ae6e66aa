//! One live process per node name: a node registers its name in Redis
//! (`sluice:owner:<node>`, this process's random token, expiring after
//! `node_dead_secs`) before it starts, keeps it with every heartbeat, and
//! gives it back when it stops cleanly. A second process under a live
//! node's name (a cloned VM, a copied configuration) is refused at start,
//! instead of having the holder claim the live node's copies and every
//! cap counted once for two nodes (2026-11-27 review M1).
//!
//! Trusts: Redis. A crashed node's key lapses after `node_dead_secs`: its
//! restart waits that long at most. Redis unreachable at start cannot
//! tell: the start goes on, logged (as every cluster step does without
//! Redis).

use std::time::Duration;

use super::Cluster;
use crate::log::Event;
use crate::log::Logger;

/// Keeps the name if it is this process's or free; 1 if kept, 0 if
/// another process holds it. KEYS[1]: the owner key; ARGV: token, ms.
pub const KEEP: &str = include_str!("lua/keep_name.lua");

/// Gives the name back if it is this process's. KEYS[1], ARGV[1]: token.
pub const GIVE_BACK: &str = include_str!("lua/give_name.lua");

pub fn owner_key(node: &str) -> String {
    format!("sluice:owner:{node}")
}

/// Why the node may not start.
#[derive(Debug, thiserror::Error)]
#[error(
    "cluster.node {0:?} is in use by another live process (its name is kept in Redis): \
     give each node a `node` of its own"
)]
pub struct NameInUse(pub String);

/// Registers this process under its node name, waiting up to
/// `node_dead_secs` (and a heartbeat) for a crashed predecessor's key to
/// lapse; refuses if another process keeps it alive.
pub async fn register(cluster: &Cluster, logger: &Logger) -> Result<(), NameInUse> {
    let config = &cluster.config;
    let dead_ms = config.node_dead_secs * 1000;
    let wait = Duration::from_millis(dead_ms + 2 * config.heartbeat_ms);
    let deadline = tokio::time::Instant::now() + wait;
    let script = redis::Script::new(KEEP);
    let key = owner_key(cluster.node());
    let token = cluster.token.to_string();
    let mut logged = false;
    loop {
        let kept = async {
            let client = redis::Client::open(config.redis_url.as_str())?;
            let mut con = client.get_multiplexed_async_connection().await?;
            let kept: i64 = script
                .key(&key)
                .arg(&token)
                .arg(dead_ms)
                .invoke_async(&mut con)
                .await?;
            Ok::<_, redis::RedisError>(kept == 1)
        };
        match tokio::time::timeout(Duration::from_secs(2), kept).await {
            Ok(Ok(true)) => return Ok(()),
            Ok(Ok(false)) if tokio::time::Instant::now() >= deadline => {
                return Err(NameInUse(cluster.node().to_string()))
            }
            Ok(Ok(false)) => {
                if !logged {
                    logged = true;
                    logger.emit(&Event::NodeNameWait {
                        node: cluster.node().into(),
                        wait_ms: wait.as_millis() as u64,
                    });
                }
                tokio::time::sleep(Duration::from_millis(config.heartbeat_ms.max(100))).await;
            }
            Ok(Err(e)) => {
                logger.emit(&Event::NodeNameUnchecked {
                    node: cluster.node().into(),
                    error: e.to_string().into(),
                });
                return Ok(());
            }
            Err(_) => {
                logger.emit(&Event::NodeNameUnchecked {
                    node: cluster.node().into(),
                    error: "no answer in 2 s".into(),
                });
                return Ok(());
            }
        }
    }
}
