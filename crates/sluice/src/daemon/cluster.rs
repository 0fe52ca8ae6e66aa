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
use crate::cluster::shadow::{self, Holder, Mirrored, Shadow};
use crate::cluster::Cluster;
use rustls::pki_types::pem::PemObject;

use crate::config::cluster::ClusterConfig;
use crate::config::Config;
use crate::intake::store::{LocalSpool, Storage};
use crate::intake::Intake;
use crate::log::Logger;

/// The sender limits' counter of a node: in Redis, alone while Redis
/// cannot be used (or its URL does not parse, logged).
pub fn limits(
    url: &str,
    data_dir: &std::path::Path,
    logger: &Logger,
) -> Arc<dyn crate::intake::limits::Counter> {
    use crate::intake::limits::LocalCounts;
    let local = Arc::new(LocalCounts::open(
        Some(data_dir.to_path_buf()),
        logger.clone(),
    ));
    match crate::cluster::limits::SharedCounts::new(url, local.clone(), logger) {
        Some(shared) => Arc::new(shared),
        None => local,
    }
}

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
    crate::cluster::owner::register(&cluster, logger)
        .await
        .map_err(|e| StartError::Config(crate::config::ConfigError::Invalid(e.to_string())))?;
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
    let tls = link_tls(settings)?;
    let client = Shadow::new(
        settings,
        cluster.node(),
        incarnation,
        tls.clone(),
        logger.clone(),
    );
    let observer = client.clone();
    spool.observe_outcomes(Arc::new(move |id, recipients, complete, marks| {
        observer.outcome(id, recipients, complete, marks)
    }));
    let holder = match settings.shadow_listen {
        None => None,
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| StartError::Listen(addr, e))?;
            let (node, secret) = (cluster.node().to_string(), settings.shadow_secret.clone());
            let door = shadow::Door {
                tls,
                peers: peer_addresses(&settings.peers, logger).await,
            };
            let dir = config.data_dir.join("shadow");
            let (sc, limit, log) = (
                spool_config.clone(),
                config.smtpd.message_size_limit,
                logger.clone(),
            );
            let holder = tokio::task::spawn_blocking(move || {
                Holder::open(&node, &secret, door, dir, sc, limit, log)
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

/// The shadow link's TLS from `shadow_ca`, `shadow_cert`, `shadow_key`;
/// the certificate must name this node.
fn link_tls(settings: &ClusterConfig) -> Result<Arc<shadow::LinkTls>, StartError> {
    let invalid = |why: String| StartError::Config(crate::config::ConfigError::Invalid(why));
    let (Some(ca), Some(cert), Some(key)) = (
        &settings.shadow_ca,
        &settings.shadow_cert,
        &settings.shadow_key,
    ) else {
        return Err(invalid(
            "cluster: shadow_ca, shadow_cert, shadow_key: required".into(),
        ));
    };
    let tls = shadow::LinkTls::load(ca, cert, key)
        .map_err(|e| invalid(format!("cluster.shadow_cert: {e}")))?;
    let chain = std::fs::read(cert).unwrap_or_default();
    let named = rustls::pki_types::CertificateDer::pem_slice_iter(&chain)
        .next()
        .and_then(Result::ok)
        .and_then(|c| shadow::node_name(Some(&[c])));
    let node = settings.node.as_deref().unwrap_or_default();
    if named.as_deref() != Some(node) {
        return Err(invalid(format!(
            "cluster.shadow_cert {} names node {:?}, but this node is {node:?} (`sluice cluster-cert --node {node}`)",
            cert.display(),
            named.unwrap_or_default()
        )));
    }
    Ok(Arc::new(tls))
}

/// The addresses of `peers` (`host:port`, names resolved once at start):
/// the only ones a holder takes links from.
async fn peer_addresses(peers: &[String], logger: &Logger) -> Vec<std::net::IpAddr> {
    let mut out = Vec::new();
    for peer in peers {
        match tokio::net::lookup_host(peer.as_str()).await {
            Ok(addrs) => out.extend(addrs.map(|a| a.ip().to_canonical())),
            Err(e) => logger.emit(&crate::log::Event::ShadowPeerUnresolved {
                peer: peer.to_string().into(),
                error: e.to_string().into(),
            }),
        }
    }
    out
}

/// Once the intake exists: the holder's claims, into the intake of the
/// running configuration.
pub fn start_claims(node: &Node, intake: &Arc<ArcSwap<Intake>>) {
    if let Some(holder) = &node.holder {
        shadow::start_claims(holder.clone(), node.cluster.clone(), intake.clone());
    }
}

/// The store an intake writes to: the local spool, mirrored on a peer
/// when the node makes shadow copies (the daemon chooses; the intake does
/// not know the cluster).
pub fn storage(spool: &Spool, shadow: Option<&Arc<Shadow>>, logger: &Logger) -> Storage {
    let local = LocalSpool::new(spool.clone());
    match shadow {
        None => Storage::Local(local),
        Some(shadow) => Storage::Layered(Arc::new(Mirrored::new(
            local,
            shadow.clone(),
            logger.clone(),
        ))),
    }
}
