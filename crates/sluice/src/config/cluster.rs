//! `[cluster]`: Sluice as one of several identical nodes sharing a small
//! state in Redis (issue 23): node heartbeats and cluster-wide connection
//! caps per destination (leases). Without the section a node is alone and
//! behaves as it always did.
//!
//! Trust: the Redis URL is the administrator's; Redis itself is trusted
//! with the shared counts (anyone who can write to it can change the
//! caps' bookkeeping, so it belongs on a private network, with a
//! password in the URL).
//! Invariant: a setting that cannot work (no URL, a lease too short to be
//! renewed between heartbeats) fails when the file is read, named.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// This node's name, unique in the cluster; default: `hostname`.
    #[serde(default)]
    pub node: Option<String>,
    /// Where the shared state lives, e.g. `redis://:password@10.0.0.5/`.
    pub redis_url: String,
    /// How often a node says it is alive (and renews its leases).
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_ms: u64,
    /// A node not heard from for this long is counted out.
    #[serde(default = "default_node_dead_secs")]
    pub node_dead_secs: u64,
    /// A node's connection leases lapse this long after its last renewal
    /// (so a dead node's connections are given back).
    #[serde(default = "default_lease_secs")]
    pub lease_secs: u64,
    /// Connections to one destination across the whole cluster, at most
    /// (0: no cluster-wide cap; each node keeps its own `[delivery]`
    /// limits, which apply as well) ...
    #[serde(default)]
    pub default_concurrency: usize,
    /// ... and per destination, keyed like `[delivery]
    /// destination_concurrency`.
    #[serde(default)]
    pub destination_concurrency: BTreeMap<String, usize>,
    /// Messages per minute to one destination from the whole cluster
    /// (0: no cluster-wide rate; `[delivery]` rates apply as well) ...
    #[serde(default)]
    pub default_rate_limit: u32,
    /// ... and per destination, keyed like `destination_concurrency`.
    #[serde(default)]
    pub destination_rate_limit: BTreeMap<String, u32>,
    /// The other nodes (`host:port`). Until Redis has been reached once,
    /// the node count for dividing caps is this list's length plus one.
    #[serde(default)]
    pub peers: Vec<String>,
    /// Shadow copies (issue 23): before answering `250`, hand a copy of
    /// each message to a peer (the first of `peers` that answers, each
    /// naming that peer's `shadow_listen`), which keeps it on disk until
    /// this node reports the message done, and delivers it itself if this
    /// node dies with its disk.
    #[serde(default)]
    pub shadow: bool,
    /// Where this node takes its peers' shadow copies (a private address).
    #[serde(default)]
    pub shadow_listen: Option<std::net::SocketAddr>,
    /// Shared by all nodes; proves a peer's identity (HMAC of a challenge,
    /// never sent itself). At least 16 characters.
    #[serde(default)]
    pub shadow_secret: String,
    /// The shadow link is TLS, both ends authenticated by the cluster's
    /// own CA: its certificate (PEM, from `sluice cluster-ca`), ...
    #[serde(default)]
    pub shadow_ca: Option<std::path::PathBuf>,
    /// ... this node's certificate, which names it (`sluice cluster-cert
    /// --node <node>`), ...
    #[serde(default)]
    pub shadow_cert: Option<std::path::PathBuf>,
    /// ... and its key.
    #[serde(default)]
    pub shadow_key: Option<std::path::PathBuf>,
    /// How long to wait for a peer's copy to be on its disk before trying
    /// the next peer.
    #[serde(default = "default_shadow_timeout_ms")]
    pub shadow_timeout_ms: u64,
    /// No peer holds a copy: `true` answers `451` (the client retries),
    /// `false` (the default, like Exchange) accepts with the local copy
    /// alone and logs it.
    #[serde(default)]
    pub shadow_required: bool,
    /// A node counted dead (`node_dead_secs`) for this much longer has its
    /// shadow copies claimed and delivered by the peer holding them.
    #[serde(default = "default_shadow_claim_secs")]
    pub shadow_claim_secs: u64,
    /// A node stopped cleanly (its spool kept) is waited for this long
    /// before its copies are claimed: a planned restart or upgrade
    /// delivers nothing twice.
    #[serde(default = "default_shadow_away_secs")]
    pub shadow_away_secs: u64,
}

fn default_shadow_away_secs() -> u64 {
    3600
}

fn default_shadow_timeout_ms() -> u64 {
    2000
}

fn default_shadow_claim_secs() -> u64 {
    30
}

fn default_heartbeat_ms() -> u64 {
    1000
}

fn default_node_dead_secs() -> u64 {
    10
}

fn default_lease_secs() -> u64 {
    15
}

/// A node name as it may appear in Redis keys, directory names and the
/// shadow hello: 1-64 of A-Z a-z 0-9 - . _
pub fn node_name_ok(name: &str) -> bool {
    let fine = |c: char| c.is_ascii_alphanumeric() || "-._".contains(c);
    !name.is_empty() && name.len() <= 64 && name.chars().all(fine)
}

impl ClusterConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |why: String| Err(ConfigError::Invalid(format!("cluster.{why}")));
        let scheme_ok = ["redis://", "rediss://", "redis+unix://", "unix://"]
            .iter()
            .any(|s| self.redis_url.starts_with(s));
        if !scheme_ok {
            return invalid("redis_url: want redis://host[:port][/db]".into());
        }
        if self.heartbeat_ms == 0 {
            return invalid("heartbeat_ms: 0 (want at least 1)".into());
        }
        // Leases are renewed with every heartbeat: a lease must outlive a
        // few missed ones, or a busy node would lose its connections.
        if self.lease_secs * 1000 < 3 * self.heartbeat_ms {
            return invalid(format!(
                "lease_secs: {} is under three heartbeats ({} ms each)",
                self.lease_secs, self.heartbeat_ms
            ));
        }
        if self.node_dead_secs * 1000 < 2 * self.heartbeat_ms {
            return invalid(format!(
                "node_dead_secs: {} is under two heartbeats ({} ms each)",
                self.node_dead_secs, self.heartbeat_ms
            ));
        }
        let limited = self.default_concurrency > 0
            || self.default_rate_limit > 0
            || self.destination_concurrency.values().any(|c| *c > 0)
            || self.destination_rate_limit.values().any(|r| *r > 0);
        if limited && self.peers.is_empty() {
            // Without Redis a node divides each limit among itself and its
            // peers: with none listed it would take the whole of it.
            let why = "peers: empty while cluster-wide limits are set (list the other nodes)";
            return invalid(why.into());
        }
        if self.shadow {
            if self.shadow_secret.chars().count() < 16 {
                return invalid(
                    "shadow_secret: under 16 characters (shadow copies need it)".into(),
                );
            }
            if self.peers.is_empty() {
                return invalid(
                    "peers: empty while shadow = true (list the peers' shadow_listen)".into(),
                );
            }
            if self.shadow_ca.is_none() || self.shadow_cert.is_none() || self.shadow_key.is_none() {
                return invalid(
                    "shadow_ca, shadow_cert, shadow_key: required with shadow = true (the link is \
                     TLS with the cluster's CA: `sluice cluster-ca`, `sluice cluster-cert`)"
                        .into(),
                );
            }
            if self.node.is_none() {
                return invalid(
                    "node: required with shadow = true (the name in this node's certificate; \
                     the SMTP hostname, which identical nodes share, cannot tell them apart)"
                        .into(),
                );
            }
            if self.shadow_timeout_ms == 0 {
                return invalid("shadow_timeout_ms: 0 (want at least 1)".into());
            }
        }
        if let Some(node) = &self.node {
            if !node_name_ok(node) {
                return invalid(format!("node: {node:?} (want 1-64 of A-Z a-z 0-9 - . _)"));
            }
        }
        Ok(())
    }

    /// The cluster-wide rate for a destination key, per minute (0: none).
    pub fn rate_for(&self, key: &str) -> u32 {
        (self.destination_rate_limit.get(key).copied()).unwrap_or(self.default_rate_limit)
    }

    /// The cluster-wide connection cap for a destination key (0: none).
    pub fn concurrency_for(&self, key: &str) -> usize {
        (self.destination_concurrency.get(key).copied()).unwrap_or(self.default_concurrency)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(toml_text: &str) -> Result<ClusterConfig, ConfigError> {
        let c: ClusterConfig = toml::from_str(toml_text).expect("parses");
        c.validate().map(|_| c)
    }

    #[test]
    fn settings_that_cannot_work_are_refused_by_name() {
        let ok = cluster("redis_url = \"redis://127.0.0.1:6379/\"").unwrap();
        assert_eq!(ok.lease_secs, 15);
        assert_eq!(ok.concurrency_for("mx:example.net:25"), 0);
        for (bad, named) in [
            ("redis_url = \"http://x/\"", "cluster.redis_url"),
            (
                "redis_url = \"redis://x/\"\nlease_secs = 2\nheartbeat_ms = 1000",
                "cluster.lease_secs",
            ),
            (
                "redis_url = \"redis://x/\"\nnode_dead_secs = 1",
                "cluster.node_dead_secs",
            ),
            ("redis_url = \"redis://x/\"\nnode = \"a b\"", "cluster.node"),
            (
                "redis_url = \"redis://x/\"\nheartbeat_ms = 0",
                "cluster.heartbeat",
            ),
            (
                "redis_url = \"redis://x/\"\ndefault_rate_limit = 60",
                "cluster.peers",
            ),
            (
                "redis_url = \"redis://x/\"\nshadow = true\npeers = [\"10.0.0.2:2526\"]\nshadow_secret = \"short\"",
                "cluster.shadow_secret",
            ),
            (
                "redis_url = \"redis://x/\"\nshadow = true\nshadow_secret = \"0123456789abcdef\"",
                "cluster.peers",
            ),
            (
                "redis_url = \"redis://x/\"\nshadow = true\npeers = [\"10.0.0.2:2526\"]\nshadow_secret = \"0123456789abcdef\"",
                "cluster.shadow_ca",
            ),
            (
                "redis_url = \"redis://x/\"\nshadow = true\npeers = [\"10.0.0.2:2526\"]\nshadow_secret = \"0123456789abcdef\"\n\
                 shadow_ca = \"ca.pem\"\nshadow_cert = \"n.pem\"\nshadow_key = \"n.key\"",
                "cluster.node",
            ),
        ] {
            let err = cluster(bad).unwrap_err().to_string();
            assert!(err.starts_with(named), "{bad}: {err}");
        }
    }

    #[test]
    fn a_destination_cap_overrides_the_default() {
        let c = cluster(
            "redis_url = \"redis://x/\"\ndefault_concurrency = 4\npeers = [\"10.0.0.2:25\"]\n\
             [destination_concurrency]\n\"mx:big.example:25\" = 40",
        )
        .unwrap();
        assert_eq!(c.concurrency_for("mx:big.example:25"), 40);
        assert_eq!(c.concurrency_for("other.example"), 4);
    }
}
