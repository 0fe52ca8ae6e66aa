//! Starting a cluster node's parts (`[cluster]`): the Redis task, and with
//! `shadow = true` the shadow copies' client, holder and claims.
//!
//! Trusts: the configuration (validated). Invariant: everything here is
//! made once per start and kept across reloads (a changed `[cluster]`
//! takes effect at the next restart, `reload.rs`).

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use sluice_spool::{Spool, SpoolConfig};

use super::StartError;
use crate::cluster::shadow::{self, Holder, Shadow};
use crate::cluster::Cluster;
use crate::config::Config;
use crate::log::Logger;
use crate::receive::local::Submitter;

/// What a node runs for its cluster.
pub struct Node {
    pub cluster: Arc<Cluster>,
    pub shadow: Option<Arc<Shadow>>,
    pub holder: Option<Arc<Holder>>,
}

/// Starts the node's Redis task and, with shadow copies, its client (an
/// observer of the spool's outcomes) and its holder's listener.
pub async fn start(
    config: &Config,
    spool: &Spool,
    spool_config: &SpoolConfig,
    logger: &Logger,
) -> Result<Option<Node>, StartError> {
    let Some(settings) = &config.cluster else {
        return Ok(None);
    };
    let dead_ttl = Duration::from_secs(config.delivery.dead_host_secs);
    let cluster = Cluster::new(settings.clone(), &config.hostname.to_string(), dead_ttl);
    crate::cluster::start(cluster.clone(), logger.clone());
    if !settings.shadow {
        return Ok(Some(Node {
            cluster,
            shadow: None,
            holder: None,
        }));
    }
    // The name (the hostname unless set) goes into every hello: one a
    // peer would refuse must stop the start, not shadowing silently.
    let name = cluster.node();
    if !crate::config::cluster::node_name_ok(name) {
        let why = format!("cluster.node: {name:?} (the hostname) cannot name a shadowing node: set node = \"...\" (1-64 of A-Z a-z 0-9 - . _)");
        return Err(StartError::Config(crate::config::ConfigError::Invalid(why)));
    }
    let io = |e: std::io::Error| StartError::Spool(sluice_spool::SpoolError::Io(e));
    let incarnation = shadow::incarnation(&spool_config.dir).map_err(io)?;
    let client = Shadow::new(settings, cluster.node(), incarnation, logger.clone());
    let observer = client.clone();
    spool.observe_outcomes(Arc::new(move |id, recipients, complete| {
        observer.outcome(id, recipients, complete)
    }));
    let holder = match settings.shadow_listen {
        None => None,
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| StartError::Listen(addr, e))?;
            let (node, secret) = (cluster.node().to_string(), settings.shadow_secret.clone());
            let dir = config.data_dir.join("shadow");
            let (sc, limit, log) = (
                spool_config.clone(),
                config.smtpd.message_size_limit,
                logger.clone(),
            );
            let holder = tokio::task::spawn_blocking(move || {
                Holder::open(&node, &secret, dir, sc, limit, log)
            })
            .await
            .map_err(StartError::Recovery)?
            .map_err(io)?;
            holder.serve(listener);
            Some(holder)
        }
    };
    Ok(Some(Node {
        cluster,
        shadow: Some(client),
        holder,
    }))
}

/// Once the intake exists: the holder's claims.
pub fn start_claims(node: &Node, submitter: &Arc<ArcSwap<Submitter>>) {
    if let Some(holder) = &node.holder {
        shadow::start_claims(holder.clone(), node.cluster.clone(), submitter.clone());
    }
}
