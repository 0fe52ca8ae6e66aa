//! Configuration: one TOML file, every setting with a default that works on
//! a laptop. Unknown keys are errors (reported with their line number by
//! the TOML parser), so a typo never silently falls back to a default.
//!
//! This is the bottom of the tree beside `message`: it imports nothing of
//! the crate but its own value types (`hop`), so every stage may read its
//! settings here and none is configured from above.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Serializes value types as the text they were parsed from (their
/// `Display`), so `sluice config` prints what a file would hold.
macro_rules! as_text {
    ($($t:ty),*) => {$(
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
    )*};
}
pub(crate) use as_text;

pub mod acme;
pub mod cluster;
pub mod content_checks;
pub mod content_filter;
pub mod delivery;
mod dkim;
pub mod dnsbl;
pub mod forwarding;
pub mod hop;
pub mod limits;
pub mod listener;
pub mod local;
pub mod names;
mod one_line;
mod overrides;
pub mod owner;
pub mod pipe;
pub mod pipe_argv;
pub mod restrictions;
pub mod rewrite;
pub mod sasl_client;
pub mod services;
pub mod show;
pub mod smtpd;
pub mod source;
pub mod system;
pub mod tables;
pub mod transports;
mod validate;
pub mod verify;

use serde::Deserialize;

pub use delivery::DeliveryConfig;
pub use dkim::{DkimConfig, DkimKeyConfig};
use hop::{Cidr, NextHop};
use names::{Domain, MailAddress};
pub use smtpd::{BareLineEnds, SmtpdConfig};

/// Recipients one spooled message can have (outcome records index them
/// with 16 bits).
pub use sluice_spool::MAX_RECIPIENTS;

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Name in the greeting, in Received: headers and in our EHLO.
    pub hostname: Domain,
    /// Spool and other state live under here.
    pub data_dir: PathBuf,
    /// Log file; stderr when unset.
    pub log_file: Option<PathBuf>,
    /// `text` (maillog lines, the default) or `json` (one object a line).
    pub log_format: LogFormat,
    /// Where `RCPT TO:<Postmaster>` (no domain, RFC 5321 §4.5.1) goes;
    /// default `postmaster@<hostname>`. Accepted from any client.
    pub postmaster: Option<MailAddress>,
    pub smtpd: SmtpdConfig,
    /// Postfix's recipient_delimiter: any one of these characters starts
    /// an address extension (`user+ext`), for table searches ("" none).
    pub recipient_delimiter: String,
    /// Postfix's restriction lists (`receive/restrict`).
    pub restrictions: restrictions::RestrictionsConfig,
    /// Address verification (`reject_unverified_*`; Postfix's
    /// `address_verify_*`, `unverified_*`).
    pub verify: verify::VerifySettings,
    /// How much our own users may send before their mail is held.
    pub sender_limits: limits::SenderLimits,
    /// The intake's rewriting (`always_bcc`, the BCC maps).
    pub rewrite: rewrite::RewriteConfig,
    /// Postfix's header and body checks (`header_checks`, …).
    pub content_checks: content_checks::ContentChecksConfig,
    pub tls: listener::TlsConfig,
    pub auth: listener::AuthConfig,
    pub spool: SpoolSettings,
    pub queue: QueueConfig,
    pub delivery: DeliveryConfig,
    /// Routing: domain (`example.com`, `.example.com` for subdomains, or
    /// `*`) → `smtp:[host]:port`, `smtp:host:port` or `discard` (parsed
    /// when the file is read).
    pub transport: BTreeMap<String, NextHop>,
    /// Named transports (`[transports.NAME]`, master.cf's services with
    /// `-o` overrides) that next hops may name (`NAME:[host]:port`).
    pub transports: BTreeMap<String, transports::TransportConfig>,
    /// Local (virtual mailbox) domains and their tables.
    pub local: local::LocalConfig,
    /// System accounts and local(8) delivery (`mydestination`).
    pub system: system::SystemConfig,
    /// Named lookup tables (`[tables.NAME]`), used by `[local]`.
    pub tables: BTreeMap<String, tables::TableConfig>,
    /// Resolver for MX lookups.
    pub dns: DnsConfig,
    /// DKIM signing keys.
    pub dkim: DkimConfig,
    /// The Sender Rewriting Scheme for forwarded mail (off by default).
    pub srs: forwarding::SrsConfig,
    /// ARC: verify chains, seal forwarded mail (off by default).
    pub arc: forwarding::ArcConfig,
    /// Prometheus /metrics and the dashboard.
    pub metrics: MetricsConfig,
    /// Certificates from an ACME CA (off unless configured).
    pub acme: Option<acme::AcmeConfig>,
    /// One node of several sharing limits in Redis (off unless configured).
    pub cluster: Option<cluster::ClusterConfig>,
    /// The account `serve` runs as when started as root (it binds its
    /// ports first); default: `sluice` when that account exists.
    pub user: Option<String>,
    /// Allow `serve` to keep running as root (no such account). Off: a
    /// root start with no account to switch to is refused.
    pub run_as_root: bool,
}

/// `[metrics]`: where /metrics and the live dashboard are served (off
/// unless `listen` is set; keep it on loopback).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// e.g. `127.0.0.1:9469` (parsed when the file is read).
    pub listen: Option<std::net::SocketAddr>,
    /// Connections served at once; more are answered 503 and closed.
    pub max_connections: usize,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: None,
            max_connections: 64,
        }
    }
}

/// `[dns]`: where MX and address lookups go.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DnsConfig {
    /// `ip:port` of each server; empty = the system's resolv.conf.
    pub nameservers: Vec<std::net::SocketAddr>,
    pub timeout_ms: u64,
    pub attempts: usize,
    /// DNSKEY records to validate DNSSEC from (for DANE); default: the
    /// root zone's keys.
    pub trust_anchor_file: Option<PathBuf>,
}

impl Default for DnsConfig {
    fn default() -> Self {
        DnsConfig {
            nameservers: Vec::new(),
            timeout_ms: 5000,
            attempts: 2,
            trust_anchor_file: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SpoolSettings {
    /// DANGER: acknowledge mail before it is on stable storage. Mail that
    /// got `250` is lost on power failure or kernel crash. Off by default.
    pub unsafe_ack_before_fsync: bool,
    /// Start a new spool segment at this size (MiB). Default: 64, or a
    /// sixteenth of the spool's file system if that is less (at least 1).
    pub segment_mib: Option<u64>,
    /// Message bodies kept in memory for delivery (MiB); the rest is read
    /// back from the spool.
    pub body_cache_mib: usize,
    /// Free space (MiB) kept on the spool's filesystem for outcome records:
    /// new mail gets `452 4.3.1` before the disk is full, so delivered mail
    /// can always be recorded and its space freed. Default: two segments,
    /// at least 4 MiB (or an eighth of the file system if that is less).
    pub reserve_mib: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    /// First retry delay; doubles per attempt up to the maximum.
    pub minimal_backoff_secs: u64,
    pub maximal_backoff_secs: u64,
    /// Give up and bounce after this long in the queue (default 5 days).
    pub maximal_lifetime_secs: u64,
    /// Messages held in memory at most (Postfix: qmgr_message_active_limit);
    /// the rest wait on disk and are brought in as room frees up.
    pub active_limit: usize,
    /// On shutdown, how long deliveries in flight may take to finish (their
    /// outcomes are recorded; what is still out then is sent again later).
    pub shutdown_drain_secs: u64,
    /// Tell the sender once when mail is still undelivered after this
    /// long (a DSN with Action: delayed; Postfix's delay_warning_time).
    /// 0: never (the default, as Postfix's).
    pub delay_warning_secs: u64,
    /// In-flow pacing (`intake/flow.rs`; Postfix's `in_flow_delay`): when
    /// more than `in_flow_limit` jobs wait for local delivery, a new SMTP
    /// transaction waits at MAIL FROM up to this long. 0: no pacing.
    pub in_flow_delay_ms: u64,
    /// Jobs waiting for local delivery (Maildir, LMTP) above which new
    /// transactions are paced.
    pub in_flow_limit: usize,
    /// Any local user's `mailq` lists the whole queue (Postfix's default
    /// `authorized_mailq_users = static:anyone`). Off by default: an
    /// ordinary user sees only the mail they sent (senders and recipients
    /// of others' mail are not theirs to read); root and the daemon's
    /// group see everything.
    pub mailq_anyone: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            hostname: "localhost".parse().expect("a valid name"),
            data_dir: PathBuf::from("./var"),
            log_file: None,
            log_format: LogFormat::Text,
            postmaster: None,
            smtpd: SmtpdConfig::default(),
            recipient_delimiter: String::new(),
            restrictions: Default::default(),
            verify: Default::default(),
            sender_limits: Default::default(),
            rewrite: Default::default(),
            content_checks: Default::default(),
            tls: listener::TlsConfig::default(),
            auth: listener::AuthConfig::default(),
            spool: SpoolSettings::default(),
            queue: QueueConfig::default(),
            delivery: DeliveryConfig::default(),
            transport: BTreeMap::new(),
            transports: BTreeMap::new(),
            local: local::LocalConfig::default(),
            system: system::SystemConfig::default(),
            tables: BTreeMap::new(),
            dns: DnsConfig::default(),
            dkim: DkimConfig::default(),
            srs: Default::default(),
            arc: Default::default(),
            metrics: MetricsConfig::default(),
            acme: None,
            cluster: None,
            user: None,
            run_as_root: false,
        }
    }
}

impl Default for SpoolSettings {
    fn default() -> Self {
        SpoolSettings {
            unsafe_ack_before_fsync: false,
            segment_mib: None,
            body_cache_mib: 256,
            reserve_mib: None,
        }
    }
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            minimal_backoff_secs: 300,
            maximal_backoff_secs: 4000,
            maximal_lifetime_secs: 5 * 24 * 3600,
            shutdown_drain_secs: 30,
            active_limit: 20_000,
            delay_warning_secs: 0,
            in_flow_delay_ms: 1000,
            in_flow_limit: 1000,
            mailq_anyone: false,
        }
    }
}

/// `log_format`: the mail log's lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Postfix-like lines for people (the default).
    Text,
    /// One JSON object an event (`log.rs`).
    Json,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {err}")]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{path}: {err}")]
    Parse {
        path: PathBuf,
        /// The line the error starts on (1-based), when toml says where.
        line: Option<usize>,
        /// Its column on that line (1-based, in characters).
        column: Option<usize>,
        err: Box<toml::de::Error>,
    },
    #[error("{0}")]
    Invalid(String),
}

impl ConfigError {
    /// The line of the configuration file at fault, when known.
    pub fn line(&self) -> Option<usize> {
        match self {
            ConfigError::Parse { line, .. } => *line,
            _ => None,
        }
    }
}

/// The 1-based line and column of a byte offset in a file's text.
fn position(text: &str, offset: Option<usize>) -> (Option<usize>, Option<usize>) {
    let before = offset.and_then(|o| text.get(..o.min(text.len())));
    (
        before.map(|b| 1 + b.matches('\n').count()),
        before.map(|b| 1 + b.rsplit('\n').next().unwrap_or(b).chars().count()),
    )
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Read {
            path: path.to_path_buf(),
            err,
        })?;
        let config: Config = toml::from_str(&text).map_err(|err| {
            let (line, column) = position(&text, err.span().map(|s| s.start));
            ConfigError::Parse {
                path: path.to_path_buf(),
                line,
                column,
                err: Box::new(err),
            }
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Every listener: `smtpd.listen` (kind smtp) then `smtpd.listeners`.
    pub fn all_listeners(&self) -> Vec<listener::ListenerConfig> {
        let plain = self.smtpd.listen.iter().map(|l| listener::ListenerConfig {
            listen: *l,
            kind: listener::ListenerKind::Smtp,
            proxy_protocol: false,
            proxy_protocol_from: Vec::new(),
            auth: None,
            auth_without_tls: false,
            sender_auth: self.smtpd.sender_auth,
            dmarc_reject: self.smtpd.dmarc_reject,
            restrictions: Default::default(),
            content_checks: Default::default(),
            overrides: Default::default(),
            smtpd_tls_ask_ccert: None,
            content_filter: None,
        });
        plain.chain(self.smtpd.listeners.iter().cloned()).collect()
    }

    /// The address `RCPT TO:<Postmaster>` is delivered to.
    pub fn postmaster_address(&self) -> String {
        match &self.postmaster {
            Some(pm) => pm.to_string(),
            None => format!("postmaster@{}", self.hostname),
        }
    }

    /// Settings that work but that an operator should hear about, for
    /// `check-config` and the log at start.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = self.local.warnings();
        out.extend(self.system.warnings(self.run_as_root));
        out.extend(listener::bypass_warnings(
            &self.content_checks.content_filter,
            &self.smtpd.listeners,
        ));
        out
    }

    pub fn mynetworks(&self) -> Vec<Cidr> {
        self.smtpd.mynetworks.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_is_valid_and_safe() {
        let c = Config::default();
        c.validate().unwrap();
        assert_eq!(c.smtpd.listen, vec!["127.0.0.1:2525".parse().unwrap()]);
        assert!(!c.spool.unsafe_ack_before_fsync);
        assert!(c.smtpd.relay_domains.is_empty());
    }

    #[test]
    fn unknown_key_is_an_error_with_its_line() {
        let err =
            toml::from_str::<Config>("hostname = \"a\"\n[smtpd]\nlisten = []\nmax_sesions = 3\n")
                .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("max_sesions"), "{text}");
        assert!(text.contains("line 4"), "{text}");
    }

    #[test]
    fn a_file_that_does_not_parse_names_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sluice.toml");
        std::fs::write(&path, "hostname = \"a\"\n\n[smtpd]\nmax_sesions = 3\n").unwrap();
        let err = Config::load(&path).unwrap_err();
        assert!(matches!(err, ConfigError::Parse { .. }), "{err}");
        assert_eq!(err.line(), Some(4), "{err}");
    }

    #[test]
    fn recipient_limit_fits_the_spool_format() {
        let mut c = Config::default();
        c.smtpd.max_recipients = MAX_RECIPIENTS;
        c.validate().unwrap();
        c.smtpd.max_recipients = MAX_RECIPIENTS + 1;
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("max_recipients"), "{err}");
    }

    #[test]
    fn a_submission_listener_needs_auth_and_tls() {
        let submission: listener::ListenerConfig =
            toml::from_str("listen = \"127.0.0.1:587\"\nkind = \"submission\"").unwrap();
        let mut c = Config::default();
        c.smtpd.listeners.push(submission);
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("requires AUTH"), "{err}");
        c.auth.table = Some("users".into());
        c.validate().unwrap();
        c.tls.enabled = false;
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("needs TLS"), "{err}");
    }

    /// `[auth] type = "dovecot"` (Postfix's `smtpd_sasl_type = dovecot`)
    /// provides AUTH without a table, and contradicting settings are
    /// refused with a reason.
    #[test]
    fn dovecot_auth_is_alone_and_needs_its_path() {
        let submission: listener::ListenerConfig =
            toml::from_str("listen = \"127.0.0.1:587\"\nkind = \"submission\"").unwrap();
        let mut c = Config::default();
        c.smtpd.listeners.push(submission);
        c.auth = toml::from_str("type = \"dovecot\"\ndovecot_path = \"/run/dovecot/auth-client\"")
            .unwrap();
        c.validate().unwrap();
        let path = c.auth.dovecot_path.clone().unwrap();
        assert_eq!(
            path.0,
            services::ServiceAddr::Unix("/run/dovecot/auth-client".into())
        );
        let inet: listener::AuthConfig =
            toml::from_str("type = \"dovecot\"\ndovecot_path = \"inet:127.0.0.1:12345\"").unwrap();
        assert_eq!(
            inet.dovecot_path.unwrap().to_string(),
            "inet:127.0.0.1:12345"
        );
        assert!(toml::from_str::<listener::AuthConfig>("dovecot_path = \"private/auth\"").is_err());
        let refused = |edit: &dyn Fn(&mut Config), want: &str| {
            let mut c = c.clone();
            edit(&mut c);
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        };
        refused(&|c| c.auth.table = Some("users".into()), "with a table");
        refused(&|c| c.auth.ldap_bind = true, "with ldap_bind");
        refused(&|c| c.auth.dovecot_path = None, "needs dovecot_path");
        refused(
            &|c| c.auth.kind = listener::AuthType::Table,
            "dovecot_path is set but type is \"table\"",
        );
    }

    /// A next hop is parsed when the file is read: a bad one is an error
    /// with its line (before: found by `validate()`, with no line, and
    /// parsed again by the router).
    #[test]
    fn a_bad_next_hop_is_an_error_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sluice.toml");
        let text = "hostname = \"a\"\n[delivery]\nrelayhost = \"smtp:[10.0.0.1]:25\"\n\
                    [transport]\n\"x.example\" = \"Carrier-Pigeon:x\"\n";
        std::fs::write(&path, text).unwrap();
        let err = Config::load(&path).unwrap_err();
        assert_eq!(err.line(), Some(5), "{err}");
        assert!(
            err.to_string()
                .contains("bad next hop \"Carrier-Pigeon:x\""),
            "{err}"
        );
        std::fs::write(&path, text.replace("Carrier-Pigeon:x", "discard")).unwrap();
        let ok = Config::load(&path).unwrap();
        assert_eq!(ok.transport["x.example"], NextHop::Discard);
        assert_eq!(ok.delivery.relayhost.unwrap().key(), "smtp:[10.0.0.1]:25");
    }

    /// TLS levels, networks and the other word-valued settings are types:
    /// a bad value fails when the file is read, naming its line.
    #[test]
    fn bad_values_are_errors_with_their_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sluice.toml");
        for (text, line) in [
            (
                "hostname = \"a\"\n[delivery]\ntls_security_level = \"sometimes\"\n",
                3,
            ),
            ("[delivery.tls_policy]\n\"smtp:[a]:25\" = \"strict\"\n", 2),
            (
                "[smtpd]\nmynetworks = [\"10.0.0.0/8\", \"10.0.0.0/99\"]\n",
                2,
            ),
            ("[smtpd]\nbare_line_ends = \"fix\"\n", 2),
            ("[local]\nmaildir_sync = \"never\"\n", 2),
            (
                "[smtpd]\nlisten = [\"127.0.0.1:25\", \"127.0.0.1:99999\"]\n",
                2,
            ),
            ("[metrics]\nlisten = \"localhost\"\n", 2),
            ("[[smtpd.listeners]]\nlisten = \"[::1]:x\"\n", 2),
            ("[dns]\nnameservers = [\"127.0.0.1\"]\n", 2),
            ("\npostmaster = \"not an address\"\n", 2),
            ("hostname = \"mx .test\"\n", 1),
            (
                "[smtpd]\nrelay_domains = [\"ok.test\", \"..bad.test\"]\n",
                2,
            ),
            ("[local]\ndomains = [\"a.test\", \"b_c d.test\"]\n", 2),
            (
                "[[dkim.keys]]\ndomain = \"@x.test\"\nselector = \"s\"\nkey_file = \"k\"\n",
                2,
            ),
        ] {
            std::fs::write(&path, text).unwrap();
            let err = Config::load(&path).unwrap_err();
            assert_eq!(err.line(), Some(line), "{text}: {err}");
        }
    }
}
