//! `[delivery]`: how mail leaves — relayhost, concurrency and rate limits
//! per destination, timeouts, TLS levels, DANE, MTA-STS, MX rollup, the
//! networks a next hop from DNS may be in, and the MX host caps.
//!
//! Values only: parsed and defaulted here, checked by `Config::validate`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::hop::Cidr;

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeliveryConfig {
    /// Default next hop for domains without a transport entry.
    pub relayhost: Option<super::hop::NextHop>,
    /// Connections per destination unless overridden.
    pub default_concurrency: usize,
    /// A destination starts with this window and grows by one per success.
    pub initial_concurrency: usize,
    /// Per-destination overrides, keyed by next hop (`smtp:[host]:port`).
    pub destination_concurrency: BTreeMap<String, usize>,
    /// Recipients per SMTP transaction.
    pub recipients_per_transaction: usize,
    pub connect_timeout_secs: u64,
    /// An address that could not be connected to (or refused to talk) is
    /// skipped for this long; 0 = always try.
    pub dead_host_secs: u64,
    /// Limit for each reply and for each 64 KiB written.
    pub command_timeout_secs: u64,
    /// Limit for the reply to the final dot (RFC 5321: at least 10 minutes).
    pub data_done_timeout_secs: u64,
    /// Keep an idle outbound connection this long for reuse.
    pub connection_idle_secs: u64,
    /// Messages sent over one connection before it is closed.
    pub messages_per_connection: usize,
    /// Outbound TLS: `none`, `may` (STARTTLS when offered; the default),
    /// `encrypt` (required) or `verify` (required, certificate checked).
    pub tls_security_level: Level,
    /// Per-next-hop levels, keyed like `destination_concurrency`.
    pub tls_policy: BTreeMap<String, Level>,
    /// CA certificates (PEM) for `verify`; default: the system's.
    pub tls_ca_file: Option<PathBuf>,
    /// Postfix's smtp_tls_cert_file and smtp_tls_key_file: the PEM
    /// certificate chain and key the SMTP client presents when a next hop
    /// asks for one (both or neither; see [`ClientCert`]).
    pub smtp_tls_cert_file: Option<PathBuf>,
    pub smtp_tls_key_file: Option<PathBuf>,
    /// DANE (RFC 7672): DNSSEC-validated TLSA records of MX hosts require
    /// TLS with a matching certificate. Off by default (extra DNSSEC
    /// queries), as Postfix's `dane` level is opt-in.
    pub dane: bool,
    /// Honour MTA-STS policies (RFC 8461) of MX-routed domains.
    pub mta_sts: bool,
    /// Port the MTA-STS policy is fetched from (443; another for tests).
    pub mta_sts_port: u16,
    /// Group MX-routed domains by their best MX host (`mx:<host>:<port>`)
    /// so a provider's domains share one window, rate and connections.
    pub mx_rollup: bool,
    /// Networks a next hop found in DNS may be in although they are
    /// loopback, link-local or private (e.g. an internal mail network).
    /// Our own listening addresses are never allowed.
    pub allow_mx_networks: Vec<Cidr>,
    /// The port next hops found in DNS are reached on (25).
    pub mx_port: u16,
    /// Addresses of MX hosts one delivery attempt looks up and tries at
    /// most, best first (Postfix's smtp_mx_address_limit); 0: no limit.
    pub mx_address_limit: usize,
    /// SMTP sessions one delivery attempt holds at most while MX hosts
    /// defer the whole transaction (Postfix's smtp_mx_session_limit); 0:
    /// no limit.
    pub mx_session_limit: usize,
    /// Messages per minute to one destination (0: no limit) ...
    pub default_rate_limit: u32,
    /// ... and per destination, keyed like `destination_concurrency` or
    /// by MX group (`mx:mx.provider.example:25`).
    pub destination_rate_limit: BTreeMap<String, u32>,
    /// Postfix's smtp_sasl_auth_enable: AUTH to the next hop when the
    /// password tables have credentials for it (`deliver/smtp/auth.rs`).
    pub smtp_sasl_auth_enable: bool,
    /// Postfix's smtp_sasl_password_maps: `[tables]` names or `type:name`;
    /// keys the sender (see below), the next hop, the host; value
    /// `username:password`.
    pub smtp_sasl_password_maps: Vec<String>,
    /// Postfix's smtp_sasl_security_options without TLS (default
    /// `noplaintext, noanonymous`: no password in clear).
    pub smtp_sasl_security_options: String,
    /// ... and once TLS is up (None: Postfix's default,
    /// `$smtp_sasl_security_options`).
    pub smtp_sasl_tls_security_options: Option<String>,
    /// Postfix's smtp_sasl_mechanism_filter: mechanisms we may use (empty: all).
    pub smtp_sasl_mechanism_filter: Vec<String>,
    /// Postfix's smtp_sender_dependent_authentication: ask the tables
    /// with the sender and `@domain` first.
    pub smtp_sender_dependent_authentication: bool,
    /// Postfix's sender_dependent_relayhost_maps: text-file tables (read
    /// without I/O when mail is routed) keyed by the envelope sender, its
    /// forms without the extension, and `@domain`; the value replaces
    /// `relayhost` for that sender's mail (`DUNNO`: no override).
    pub sender_dependent_relayhost_maps: Vec<String>,
    /// Postfix's sender_dependent_default_transport_maps: the same keys;
    /// the value is a next hop (`out2:`, `smtp:[host]:port`) for that
    /// sender's mail to domains the transport tables do not route.
    pub sender_dependent_default_transport_maps: Vec<String>,
    /// Postfix's empty_address_relayhost_maps_lookup_key: the key the
    /// null sender is looked up under in both (default `<>`).
    pub empty_address_relayhost_maps_lookup_key: String,
    /// Postfix's smtp_bind_address: the IPv4 source address of outbound
    /// SMTP connections (default: the system's choice).
    pub smtp_bind_address: Option<std::net::Ipv4Addr>,
    /// Postfix's smtp_bind_address6, for IPv6 next hops.
    pub smtp_bind_address6: Option<std::net::Ipv6Addr>,
    /// Postfix's smtp_helo_name (default: `hostname`).
    pub smtp_helo_name: Option<String>,
    /// A weighted pool of sources (`config/transports.rs`); replaces the
    /// three settings above.
    pub egress_pool: Vec<super::transports::EgressSource>,
    /// Postfix's smtp_bind_address_enforce: when the source address
    /// cannot be bound, defer (yes) or connect from the system's choice
    /// with a warning (no, Postfix's default).
    pub smtp_bind_address_enforce: bool,
}

impl DeliveryConfig {
    /// `[delivery]`'s egress settings, the default of every transport.
    pub fn egress(&self) -> super::transports::EgressSettings<'_> {
        super::transports::EgressSettings {
            bind4: self.smtp_bind_address,
            bind6: self.smtp_bind_address6,
            helo: self.smtp_helo_name.as_deref(),
            pool: &self.egress_pool,
        }
    }
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        DeliveryConfig {
            relayhost: None,
            default_concurrency: 20,
            initial_concurrency: 5,
            destination_concurrency: BTreeMap::new(),
            recipients_per_transaction: 50,
            connect_timeout_secs: 30,
            dead_host_secs: 60,
            command_timeout_secs: 300,
            data_done_timeout_secs: 600,
            connection_idle_secs: 5,
            messages_per_connection: 10_000,
            tls_security_level: Level::May,
            tls_policy: BTreeMap::new(),
            tls_ca_file: None,
            smtp_tls_cert_file: None,
            smtp_tls_key_file: None,
            mx_rollup: true,
            allow_mx_networks: Vec::new(),
            mx_port: 25,
            mx_address_limit: 5,
            mx_session_limit: 2,
            dane: false,
            mta_sts: true,
            mta_sts_port: 443,
            default_rate_limit: 0,
            destination_rate_limit: BTreeMap::new(),
            smtp_sasl_auth_enable: false,
            smtp_sasl_password_maps: Vec::new(),
            smtp_sasl_security_options: "noplaintext, noanonymous".into(),
            smtp_sasl_tls_security_options: None,
            smtp_sasl_mechanism_filter: Vec::new(),
            smtp_sender_dependent_authentication: false,
            sender_dependent_relayhost_maps: Vec::new(),
            sender_dependent_default_transport_maps: Vec::new(),
            empty_address_relayhost_maps_lookup_key: "<>".into(),
            smtp_bind_address: None,
            smtp_bind_address6: None,
            smtp_helo_name: None,
            egress_pool: Vec::new(),
            smtp_bind_address_enforce: false,
        }
    }
}

/// A client certificate and its key (PEM files), presented to servers
/// that ask for one: `[delivery]`'s for every next hop, and the value a
/// per-transport setting would carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// Only one of the two files was named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("set both smtp_tls_cert_file and smtp_tls_key_file, or neither")]
pub struct HalfClientCert;

impl ClientCert {
    /// The pair two optional settings name: None when neither is set.
    pub fn of(
        cert_file: Option<&PathBuf>,
        key_file: Option<&PathBuf>,
    ) -> Result<Option<ClientCert>, HalfClientCert> {
        match (cert_file, key_file) {
            (Some(c), Some(k)) => Ok(Some(ClientCert {
                cert_file: c.clone(),
                key_file: k.clone(),
            })),
            (None, None) => Ok(None),
            _ => Err(HalfClientCert),
        }
    }
}

impl DeliveryConfig {
    /// `smtp_tls_cert_file` with `smtp_tls_key_file`.
    pub fn client_cert(&self) -> Result<Option<ClientCert>, HalfClientCert> {
        ClientCert::of(
            self.smtp_tls_cert_file.as_ref(),
            self.smtp_tls_key_file.as_ref(),
        )
    }
}

/// How an outbound connection is secured (Postfix's smtp_tls_security_level):
/// parsed when the configuration is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Plain text only.
    None,
    /// TLS when offered, any certificate; plain otherwise.
    May,
    /// TLS required, any certificate.
    Encrypt,
    /// TLS required, the certificate verified against the CA roots.
    Verify,
}

impl Level {
    pub fn required(self) -> bool {
        self >= Level::Encrypt
    }
}
