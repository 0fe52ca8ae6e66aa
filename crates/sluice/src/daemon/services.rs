//! Listeners as master.cf services: a listener with `overrides` (its
//! `-o` settings, `config/overrides.rs`) gets a session context of its
//! own, built from its configuration: its banner, limits, mynetworks,
//! milters (an intake of its own), policy service, DNSBLs and
//! certificate. What is not overridden is shared with the main context
//! (tables, restriction lists, the spool, the queue).
//!
//! Invariant: a listener without overrides serves the main context
//! itself. Per-client counters are shared unless the listener changes
//! their limits; then it counts on its own, as Postfix's anvil counts per
//! service.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{Config, ConfigError};
use crate::pki::TlsError;
use crate::receive::dnsbl::Dnsbl;
use crate::receive::policy::PolicyClient;
use crate::receive::smtp::anvil::{self, Anvil};
use crate::receive::smtp::tls::ServerTls;
use crate::receive::smtp::SessionContext;
use crate::routing::dns::Dns;
use crate::routing::policy::RelayPolicy;

/// The contexts sessions start with, per listener: keyed by its place
/// in `Config::all_listeners` (two listeners on port 0 share an address).
pub(super) struct Contexts {
    pub main: Arc<SessionContext>,
    own: HashMap<usize, Arc<SessionContext>>,
}

impl Contexts {
    /// The context of listener number `index` of `Config::all_listeners`.
    pub fn of(&self, index: usize) -> &Arc<SessionContext> {
        self.own.get(&index).unwrap_or(&self.main)
    }
}

/// Why a listener's own parts could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ListenerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// A listener's own configuration and certificate, made with the parts
/// (a bad certificate refuses the start or the reload).
pub(super) struct ListenerParts {
    config: Arc<Config>,
    tls: Option<Arc<ServerTls>>,
}

/// The listeners of `config` that have overrides (by their place in
/// `Config::all_listeners`), each with its own configuration and, when it
/// changes `[tls]`, its own certificate.
pub(super) fn listener_parts(
    config: &Config,
    main_tls: &Option<Arc<ServerTls>>,
) -> Result<HashMap<usize, ListenerParts>, ListenerError> {
    let mut all = HashMap::new();
    for (index, l) in config.all_listeners().iter().enumerate() {
        let Some(own) = config.for_listener(l)? else {
            continue;
        };
        let tls = match format!("{:?}", own.tls) == format!("{:?}", config.tls) {
            true => main_tls.clone(),
            false => ServerTls::load(&own)?,
        };
        let config = Arc::new(own);
        all.insert(index, ListenerParts { config, tls });
    }
    Ok(all)
}

/// The main context and each overriding listener's (`dns`: the
/// resolver its DNSBLs use).
pub(super) fn contexts(
    main: Arc<SessionContext>,
    listeners: &HashMap<usize, ListenerParts>,
    dns: &Arc<Dns>,
) -> Contexts {
    let own = listeners
        .iter()
        .map(|(index, parts)| (*index, Arc::new(listener_context(&main, parts, dns))))
        .collect();
    Contexts { main, own }
}

fn listener_context(main: &SessionContext, own: &ListenerParts, dns: &Arc<Dns>) -> SessionContext {
    let config = own.config.clone();
    let smtpd = &config.smtpd;
    let same = |f: fn(&Config) -> String| f(&config) == f(&main.config);
    let intake = match same(milter_key) {
        true => main.intake.clone(),
        false => Arc::new(main.intake.for_listener(config.clone())),
    };
    let anvil = match same(anvil_key) {
        true => main.anvil.clone(),
        false => Anvil::new(anvil::Limits::from_config(smtpd)),
    };
    let policy_service = match same(policy_key) {
        true => main.policy_service.clone(),
        false => PolicyClient::from_config(smtpd).map(Arc::new),
    };
    let dnsbl = match same(dnsbl_key) {
        true => main.dnsbl.clone(),
        false => Dnsbl::from_config(smtpd, dns.clone()).map(Arc::new),
    };
    SessionContext {
        policy: RelayPolicy::new(config.mynetworks(), &smtpd.relay_domains)
            .with_parent_matches(config.restrictions.parent_domain_matches_subdomains),
        mailboxes: main.mailboxes.clone(),
        restrictions: main.restrictions.clone(),
        dnscheck: main.dnscheck.clone(),
        verifier: main.verifier.clone(),
        spool: main.spool.clone(),
        logger: main.logger.clone(),
        body_memory: main.body_memory.clone(),
        anvil,
        tls: own.tls.clone(),
        credentials: main.credentials.clone(),
        dovecot: main.dovecot.clone(),
        intake,
        policy_service,
        dnsbl,
        stopping: main.stopping.clone(),
        config,
    }
}

fn milter_key(c: &Config) -> String {
    let s = &c.smtpd;
    format!(
        "{:?}{:?}{:?}{}{}{}",
        s.milters,
        s.non_smtpd_milters,
        s.milter_default_action,
        s.milter_connect_timeout_secs,
        s.milter_command_timeout_secs,
        s.milter_content_timeout_secs
    )
}

fn anvil_key(c: &Config) -> String {
    format!("{:?}", anvil::Limits::from_config(&c.smtpd))
}

fn policy_key(c: &Config) -> String {
    let s = &c.smtpd;
    format!(
        "{:?}{:?}{}{}{}{}{}{}",
        s.policy_service,
        s.policy_service_default_action,
        s.policy_service_timeout_secs,
        s.policy_service_try_limit,
        s.policy_service_max_idle_secs,
        s.policy_service_max_ttl_secs,
        s.policy_service_max_connections,
        s.policy_service_exempt_trusted
    )
}

fn dnsbl_key(c: &Config) -> String {
    let s = &c.smtpd;
    format!(
        "{:?}{}{}{}{}",
        s.dnsbl_sites, s.dnsbl_threshold, s.dnsbl_timeout_ms, s.dnsbl_cache_secs, s.greet_pause_ms
    )
}
