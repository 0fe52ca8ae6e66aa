//! `[smtpd]`: the SMTP server's listeners, limits and checks.

use serde::Deserialize;

use super::hop::Cidr;
use super::listener;
use super::names::DomainPattern;
use super::services::{PolicyAction, PolicyStage, ServiceAddr};

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SmtpdConfig {
    /// Plain SMTP listeners (port 25 style); see also `listeners`.
    pub listen: Vec<std::net::SocketAddr>,
    /// Listeners with a kind (`smtp`, `submission`, `submissions`) and
    /// options (`proxy_protocol`, `auth_without_tls`).
    pub listeners: Vec<listener::ListenerConfig>,
    /// Concurrent sessions; one more gets `421 4.3.2` and is closed.
    pub max_sessions: usize,
    /// Let several Sluice processes listen on the same ports (SO_REUSEPORT;
    /// the kernel spreads connections), e.g. where one process may not
    /// hold as many descriptors as there are sessions.
    pub reuse_port: bool,
    /// Behind a load balancer: on stop, first fail its health checks for
    /// this long (a PROXY `LOCAL` connection, as HAProxy's
    /// `check-send-proxy` sends, gets `421`), still serving every session,
    /// so it stops sending new ones before the listeners close (0: close
    /// at once).
    pub balancer_drain_secs: u64,
    /// Largest message accepted, octets (Postfix: message_size_limit).
    pub message_size_limit: usize,
    /// Recipients per message; more get `452 4.5.3`.
    pub max_recipients: usize,
    /// Errors in one session before `421` and disconnect.
    pub max_errors: u32,
    /// Seconds a client may stay silent between commands.
    pub idle_timeout_secs: u64,
    /// Seconds a client may stay silent inside DATA or BDAT.
    pub data_timeout_secs: u64,
    /// Command line limit, CRLF included (RFC 5321: 512).
    pub command_line_limit: usize,
    /// Text line limit inside a message, CRLF included (RFC 5321: 1000); 0 = none.
    pub text_line_limit: usize,
    /// `reject` (default) or `normalize` messages with bare CR or LF.
    pub bare_line_ends: BareLineEnds,
    /// Disconnect (554 5.5.0) a client outside mynetworks and not
    /// authenticated that sends commands where RFC 2920 lets no command
    /// follow unanswered (after EHLO, HELO, DATA, VRFY, EXPN, NOOP), as
    /// Postfix's `smtpd_forbid_unauth_pipelining` (default yes from 3.9);
    /// and, stricter than Postfix, after the end of DATA before our reply
    /// (that message is not taken): a defence against smuggling through
    /// other servers' parsers. docs/CONFIG.md says how Postfix differs.
    pub forbid_unauth_pipelining: bool,
    /// Clients that may relay to any domain.
    pub mynetworks: Vec<Cidr>,
    /// Domains anyone may send to (everyone else is denied relaying).
    pub relay_domains: Vec<DomainPattern>,
    /// Table (from `[tables]`) of the valid recipients in `relay_domains`:
    /// an address or `@domain` key (Postfix: relay_recipient_maps). Others
    /// get `550 5.1.1` at RCPT instead of a bounce later (backscatter).
    pub relay_recipient_table: Option<String>,
    /// Wait this long for the client to talk before the 220 greeting; a
    /// client that does (RFC 5321 §4.3.1 violation, typical of spam bots)
    /// gets `554 5.5.1` and is closed. 0 = greet at once (no check).
    pub greet_pause_ms: u64,
    /// NOOP, RSET, VRFY, HELP and EHLO/HELO a session may send before they
    /// count as errors (Postfix: smtpd_junk_command_limit).
    pub junk_command_limit: u32,
    /// A session ends with `421 4.4.2` after this many seconds, busy or not.
    pub max_session_secs: u64,
    /// Inside DATA/BDAT a client must average at least this many octets a
    /// second after the first `data_timeout_secs` (Postfix:
    /// smtpd_min_data_rate); 0 = only the silence timeout applies.
    pub min_data_rate: u64,
    /// Per-client limits (0 = none); clients in `mynetworks` are exempt,
    /// as in Postfix. Concurrent sessions per address (Postfix:
    /// smtpd_client_connection_count_limit):
    pub client_connection_limit: u32,
    /// New sessions per address per minute (`421 4.7.0`).
    pub client_connection_rate_limit: u32,
    /// MAIL commands per address per minute (`450 4.7.1`).
    pub client_message_rate_limit: u32,
    /// RCPT commands per address per minute (`450 4.7.1`).
    pub client_recipient_rate_limit: u32,
    /// Failed AUTH attempts per address per minute: the one that reaches
    /// it is answered `535` then `421 4.7.0`, and every AUTH from that
    /// client is refused unchecked for a minute (3: three passwords
    /// checked, the fourth attempt refused).
    pub client_auth_failure_limit: u32,
    /// IPv6 clients are counted per network of this prefix length for
    /// all per-client limits (64: one site, as providers assign).
    pub client_ipv6_prefix: u8,
    /// Text after the hostname in the 220 greeting.
    pub banner: String,
    /// More `Received:` headers than this means a mail loop: `554 5.4.6`.
    pub hop_count_limit: usize,
    /// Memory all sessions together may hold for message bodies being
    /// received (KiB). A message that would exceed it is read to its end,
    /// dropped and answered `452 4.3.1` (try again later).
    pub message_memory_budget_kib: u32,
    /// For the `listen` addresses: check SPF, DKIM and DMARC and add
    /// Authentication-Results: (per listener in `[[smtpd.listeners]]`).
    pub sender_auth: bool,
    /// ... and refuse mail failing DMARC under p=reject.
    pub dmarc_reject: bool,
    /// With `sender_auth`: DKIM signatures evaluated per message (each
    /// costs DNS lookups); the rest are recorded as not evaluated.
    pub dkim_verify_max_signatures: usize,
    /// A policy server (Postfix's SMTP access policy delegation, e.g.
    /// postgrey): `inet:host:port` or `unix:/path`. Asked at the stages in
    /// `policy_service_at`, only once Sluice itself would accept.
    pub policy_service: Option<ServiceAddr>,
    /// `rcpt` (default), `data`, `end-of-message`.
    pub policy_service_at: Vec<PolicyStage>,
    /// Clients that may relay (mynetworks, authenticated) are not asked,
    /// as with `permit_mynetworks, permit_sasl_authenticated` before
    /// `check_policy_service` in Postfix; false asks about every client.
    pub policy_service_exempt_trusted: bool,
    /// Seconds for one try: connect, request and reply (Postfix:
    /// smtpd_policy_service_timeout, 100 s).
    pub policy_service_timeout_secs: u64,
    /// Tries before the default action (Postfix:
    /// smtpd_policy_service_try_limit); a second second apart.
    pub policy_service_try_limit: u32,
    /// What applies when the server cannot answer, or answers with an
    /// action Sluice does not apply (Postfix:
    /// smtpd_policy_service_default_action).
    pub policy_service_default_action: PolicyAction,
    /// An idle connection is closed after this many seconds (Postfix:
    /// smtpd_policy_service_max_idle) ...
    pub policy_service_max_idle_secs: u64,
    /// ... and any connection after this many (smtpd_policy_service_max_ttl).
    pub policy_service_max_ttl_secs: u64,
    /// Connections to the policy server at most; more requests wait.
    pub policy_service_max_connections: usize,
    /// DNS block- and allowlists asked at connect, scored like postscreen
    /// (Postfix: postscreen_dnsbl_sites): `zone[=filter][*weight]`.
    /// Clients in `mynetworks` are not looked up.
    pub dnsbl_sites: Vec<super::dnsbl::DnsblSite>,
    /// A client whose weights add up to this or more gets `554 5.7.1`
    /// naming a list, and is disconnected (postscreen_dnsbl_threshold).
    pub dnsbl_threshold: i32,
    /// The greeting waits at most this long for the lists' answers (run
    /// beside `greet_pause_ms`); a list that has not answered by then
    /// counts as not listing the client.
    pub dnsbl_timeout_ms: u64,
    /// A client's score is kept this long (postscreen_dnsbl_ttl is 1 h;
    /// shorter here, as a delisted client should not wait an hour).
    pub dnsbl_cache_secs: u64,
    /// Content filters (the Sendmail milter protocol, version 6, e.g.
    /// rspamd, OpenDKIM) for mail from SMTP clients, in order
    /// (Postfix: smtpd_milters): `inet:host:port` or `unix:/path`.
    pub milters: Vec<ServiceAddr>,
    /// ... and for mail from local users, sendmail(1) (non_smtpd_milters).
    pub non_smtpd_milters: Vec<ServiceAddr>,
    /// When a filter is down, slow or speaks nonsense (milter_default_action).
    pub milter_default_action: MilterDefault,
    /// Seconds to connect to a filter (milter_connect_timeout).
    pub milter_connect_timeout_secs: u64,
    /// Seconds for a filter's answer to one step (milter_command_timeout) ...
    pub milter_command_timeout_secs: u64,
    /// ... and to the body and the end of the message (milter_content_timeout).
    pub milter_content_timeout_secs: u64,
}

/// `smtpd.milter_default_action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MilterDefault {
    /// `451 4.7.1`: the client tries again later (the default, as Postfix).
    Tempfail,
    /// Go on as if the filter had not been configured.
    Accept,
    /// `550 5.7.1`.
    Reject,
}

impl Default for SmtpdConfig {
    fn default() -> Self {
        SmtpdConfig {
            listen: vec![std::net::SocketAddr::from(([127, 0, 0, 1], 2525))],
            listeners: Vec::new(),
            max_sessions: 10_000,
            reuse_port: false,
            balancer_drain_secs: 0,
            message_size_limit: 10_240_000,
            max_recipients: 1000,
            max_errors: 20,
            idle_timeout_secs: 300,
            data_timeout_secs: 300,
            command_line_limit: 512,
            text_line_limit: 1000,
            bare_line_ends: BareLineEnds::Reject,
            forbid_unauth_pipelining: true,
            mynetworks: ["127.0.0.0/8", "::1/128"]
                .iter()
                .filter_map(|n| Cidr::parse(n))
                .collect(),
            relay_domains: Vec::new(),
            relay_recipient_table: None,
            greet_pause_ms: 0,
            junk_command_limit: 100,
            max_session_secs: 3600,
            min_data_rate: 500,
            client_connection_limit: 50,
            client_connection_rate_limit: 0,
            client_message_rate_limit: 0,
            client_recipient_rate_limit: 0,
            client_auth_failure_limit: 10,
            client_ipv6_prefix: 64,
            banner: "ESMTP Sluice".into(),
            hop_count_limit: 50,
            message_memory_budget_kib: 1 << 20,
            sender_auth: false,
            dmarc_reject: false,
            dkim_verify_max_signatures: 5,
            policy_service: None,
            policy_service_at: vec![PolicyStage::Rcpt],
            policy_service_exempt_trusted: true,
            policy_service_timeout_secs: 100,
            policy_service_try_limit: 2,
            policy_service_default_action: PolicyAction::server_problem(),
            policy_service_max_idle_secs: 300,
            policy_service_max_ttl_secs: 1000,
            policy_service_max_connections: 100,
            dnsbl_sites: Vec::new(),
            dnsbl_threshold: 1,
            dnsbl_timeout_ms: 2000,
            dnsbl_cache_secs: 600,
            milters: Vec::new(),
            non_smtpd_milters: Vec::new(),
            milter_default_action: MilterDefault::Tempfail,
            milter_connect_timeout_secs: 30,
            milter_command_timeout_secs: 30,
            milter_content_timeout_secs: 300,
        }
    }
}

/// `smtpd.bare_line_ends`: what DATA does with a bare CR or LF.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BareLineEnds {
    /// Refuse the message (554 5.6.0): no smuggling (the default).
    Reject,
    /// Make every line end CRLF and take the message.
    Normalize,
}
