//! What the daemon builds from a configuration, once at start and again
//! at each reload: tables, routes, TLS, resolvers, signing keys, the
//! delivery agents and the context every SMTP session shares.
//! `sluice check-config` builds the same (without agents, which need the
//! spool), so a file it passes does not fail at start or reload.
//!
//! A reload builds everything before anything is replaced; a part whose
//! settings did not change is kept (its caches and connections with it)
//! and only re-reads its files: tables and the certificate.
//!
//! Trust: the configuration has been validated (`Config::validate`).

use std::sync::Arc;
use std::time::Duration;

use sluice_spool::Spool;
use tokio::sync::Semaphore;

use super::reuse::{delivery_key, dns_key, same, tables_key, tls_key};
use crate::config::hop::NextHop;
use crate::config::restrictions::TempfailAction;
use crate::config::Config;
use crate::deliver::maildir::commit::Committer;
use crate::deliver::maildir::dirs::MaildirPolicy;
use crate::deliver::maildir::owner::Ownership;
use crate::deliver::maildir::write::SyncStats;
use crate::deliver::maildir::MaildirAgent;
use crate::deliver::smtp::dane::Dane;
use crate::deliver::smtp::dead::DeadHosts;
use crate::deliver::smtp::guard::OwnAddrs;
use crate::deliver::smtp::mta_sts::MtaSts;
use crate::deliver::smtp::tls::ClientTls;
use crate::deliver::smtp::{Prober, SmtpAgent};
use crate::deliver::verify::Verifier;
use crate::intake::dkim::Signers;
use crate::intake::sender_auth::SenderAuth;
use crate::intake::Intake;
use crate::log::Event;
use crate::log::Logger;
use crate::queue::{DeliveryAgent, QueueHandle, WorkerStart};
use crate::receive::dnsbl::Dnsbl;
use crate::receive::dnscheck::{self, DnsCheckCodes, DnsChecker};
use crate::receive::policy::PolicyClient;
use crate::receive::restrict::Restrictions;
use crate::receive::smtp::anvil::{self, Anvil};
use crate::receive::smtp::tls::ServerTls;
use crate::receive::smtp::SessionContext;
use crate::routing::dns::Dns;
use crate::routing::forward::Forwarding;
use crate::routing::mailboxes::VirtualMailboxes;
use crate::routing::policy::RelayPolicy;
use crate::routing::Router;

/// Picks the agent for a next hop.
pub(super) struct Agents {
    smtp: SmtpAgent,
    maildir: MaildirAgent,
    pipe: crate::deliver::pipe::PipeAgent,
    local: crate::deliver::local::LocalAgent,
}

impl DeliveryAgent for Agents {
    fn spawn(&self, start: WorkerStart) {
        match &*start.hop {
            NextHop::Maildir => self.maildir.spawn(start),
            NextHop::Pipe { .. } => self.pipe.spawn(start),
            NextHop::System => self.local.spawn(start),
            // Discard never reaches an agent (the queue handles it); SMTP
            // refuses anything that is not SMTP with a deferral.
            _ => self.smtp.spawn(start),
        }
    }

    fn flushed(&self) {
        self.smtp.flushed();
    }
}

/// Everything built from one configuration.
pub(super) struct Parts {
    pub config: Arc<Config>,
    pub mailboxes: Arc<VirtualMailboxes>,
    pub restrictions: Arc<Restrictions>,
    pub router: Router,
    pub tls: Option<Arc<ServerTls>>,
    pub client_tls: Arc<ClientTls>,
    pub dns: Arc<Dns>,
    pub dane: Option<Arc<Dane>>,
    pub sender_auth: Option<Arc<SenderAuth>>,
    pub dkim: Arc<Signers>,
    /// SRS and ARC's forwarding (`[srs]`, `[arc]`; None: both off).
    pub forwarding: Option<Arc<Forwarding>>,
    /// The ARC sealing key (`[arc] enabled`, `intake/arc.rs`).
    pub arc: Option<Arc<crate::intake::arc::Sealer>>,
    /// Set by [`Parts::agents`].
    pub agents: Option<Arc<Agents>>,
    /// The node's cluster (`[cluster]`), made once at start and kept
    /// across reloads.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
    /// Shadow copies on a peer (`[cluster] shadow`), made once at start.
    pub shadow: Option<Arc<crate::cluster::shadow::Shadow>>,
    /// Where the sender limits count (`intake/limits.rs`), made at start
    /// (in Redis with `[cluster]`, `daemon/start.rs`) and kept across
    /// reloads with the hour's counts.
    pub limits: Arc<dyn crate::intake::limits::Counter>,
    /// Maildir files and syncs, over reloads (for the log at shutdown).
    pub maildir_stats: Arc<SyncStats>,
    /// Where the local(8) agent submits forwarded mail: the intake in
    /// force (set by [`Parts::intake`]), over reloads.
    pub reinject: crate::deliver::local::Reinject,
    /// Our listening addresses (the configured ones until the listeners
    /// are bound), over reloads: next hops from DNS never lead there.
    pub own_addrs: Arc<OwnAddrs>,
    /// What the agents were built from, CA file's date included.
    delivery_stamp: String,
    /// Source addresses, HELO names and certificates per transport.
    pub egress: Arc<crate::deliver::smtp::egress::Egresses>,
    /// The listeners with overrides: their configuration and certificate
    /// (`services.rs`).
    pub(super) listeners: std::collections::HashMap<usize, super::services::ListenerParts>,
}

/// For whom parts are built.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Serve,
    /// `check-config`: nothing is written (no certificate is generated).
    Check,
}

/// DANE's MX check for MX rollup: a domain whose MX RRset is signed, or
/// whose status cannot be had, is not grouped.
pub(super) fn secure_mx(dane: Option<&Arc<Dane>>) -> Option<crate::queue::SecureMx> {
    let dane = dane?.clone();
    Some(Arc::new(move |domain: String| {
        let dane = dane.clone();
        Box::pin(async move {
            dane.secure_mx_hosts(&domain)
                .await
                .map_or(true, |hosts| hosts.is_some())
        })
    }))
}

/// The listening addresses `config` names.
fn configured_addrs(config: &Config) -> Vec<std::net::SocketAddr> {
    config.all_listeners().iter().map(|l| l.listen).collect()
}

/// Why a configuration's parts could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Routing(#[from] crate::routing::RoutingError),
    #[error(transparent)]
    Tls(#[from] crate::pki::TlsError),
    #[error(transparent)]
    Resolver(#[from] crate::routing::dns::ResolverError),
    #[error(transparent)]
    Dkim(#[from] crate::intake::dkim::DkimError),
    #[error(transparent)]
    Restrictions(#[from] crate::receive::restrict::BuildError),
    #[error(transparent)]
    Forward(#[from] crate::routing::forward::ForwardError),
    #[error(transparent)]
    System(#[from] crate::routing::system::SystemError),
    #[error(transparent)]
    SenderRoutes(#[from] crate::routing::senders::SenderRouteError),
    #[error(transparent)]
    Listener(#[from] super::services::ListenerError),
    #[error("spool {}: {err}", dir.display())]
    SpoolSpace {
        dir: std::path::PathBuf,
        err: std::io::Error,
    },
}

impl Parts {
    /// Builds the parts of `config`, keeping those of `previous` whose
    /// settings are unchanged.
    pub fn build(
        config: Arc<Config>,
        logger: &Logger,
        previous: Option<&Parts>,
        purpose: Purpose,
    ) -> Result<Parts, BuildError> {
        let kept = |key: fn(&Config) -> String| previous.filter(|p| same(&p.config, &config, key));
        let mailboxes = match kept(tables_key) {
            Some(p) => p.mailboxes.clone(),
            None => Arc::new(mailboxes(&config, logger)?),
        };
        let router = router(&config, &mailboxes, logger)?;
        // Rebuilt at every reload (its tables are re-read as the lists'
        // text and the tables' files may both have changed).
        let restrictions = Arc::new(Restrictions::build(&config, logger)?);
        restrictions.watch();
        let tls = match (kept(tls_key), purpose) {
            (Some(p), _) => p.tls.clone(),
            (None, Purpose::Check) if config.tls.cert_file.is_none() => None,
            (None, _) => ServerTls::load(&config)?,
        };
        let dns = match kept(dns_key) {
            Some(p) => p.dns.clone(),
            None => Arc::new(Dns::new(&config.dns)?),
        };
        let dane = match (config.delivery.dane, kept(dns_key)) {
            (false, _) => None,
            (true, Some(Parts { dane: Some(d), .. })) => Some(d.clone()),
            (true, _) => Some(Arc::new(Dane::new(
                &config.dns,
                config.dns.trust_anchor_file.as_deref(),
            )?)),
        };
        let wants_sender_auth = config.all_listeners().iter().any(|l| l.sender_auth);
        let sender_auth = match (wants_sender_auth, kept(delivery_key)) {
            (false, _) => None,
            (
                true,
                Some(Parts {
                    sender_auth: Some(s),
                    ..
                }),
            ) => Some(s.clone()),
            (true, _) => Some(Arc::new(SenderAuth::new(&config.dns, &config.hostname)?)),
        };
        let limits: Arc<dyn crate::intake::limits::Counter> = match previous {
            Some(p) => p.limits.clone(),
            None => Arc::new(crate::intake::limits::LocalCounts::open(
                (purpose == Purpose::Serve).then(|| config.data_dir.clone()),
                logger.clone(),
            )),
        };
        let rewrite = restrictions.rewrite.clone();
        let virtual_alias_domain = Arc::new(move |d: &str| rewrite.is_virtual_alias_domain(d));
        let create = purpose == Purpose::Serve;
        let forwarding =
            Forwarding::build(&config, mailboxes.domains(), virtual_alias_domain, create)?
                .map(Arc::new);
        let arc = match config.arc.enabled {
            true => crate::intake::arc::Sealer::load(&config)?.map(Arc::new),
            false => None,
        };
        let listeners = super::services::listener_parts(&config, &tls)?;
        let egress = Arc::new(crate::deliver::smtp::egress::Egresses::new(&config)?);
        Ok(Parts {
            egress,
            listeners,
            forwarding,
            arc,
            own_addrs: match previous {
                Some(p) => p.own_addrs.clone(),
                None => Arc::new(OwnAddrs::new(configured_addrs(&config))),
            },
            delivery_stamp: delivery_key(&config),
            client_tls: Arc::new(ClientTls::build(&config.delivery)?),
            // Key files are read again at each reload, like certificates.
            dkim: Arc::new(Signers::load(
                &config.dkim.keys,
                config.queue.maximal_lifetime_secs,
            )?),
            config,
            mailboxes,
            restrictions,
            router,
            tls,
            dns,
            dane,
            sender_auth,
            agents: None,
            cluster: None,
            shadow: None,
            limits,
            reinject: previous.map(|p| p.reinject.clone()).unwrap_or_default(),
            maildir_stats: previous
                .map(|p| p.maildir_stats.clone())
                .unwrap_or_default(),
        })
    }

    /// Builds the delivery agents, or keeps those of `previous` when
    /// nothing they use changed (their dead-host and policy caches stay).
    pub fn agents(&mut self, spool: &Spool, logger: &Logger, previous: Option<&Parts>) {
        let kept = previous.filter(|p| {
            p.delivery_stamp == self.delivery_stamp
                && same(&p.config, &self.config, tables_key)
                && p.config.rewrite.smtp_generic_maps == self.config.rewrite.smtp_generic_maps
        });
        if let Some(Parts {
            agents: Some(a), ..
        }) = kept
        {
            self.agents = Some(a.clone());
            return;
        }
        let d = &self.config.delivery;
        let sts = match (d.mta_sts, self.client_tls.verifying()) {
            (true, Some(verifying)) => Some(Arc::new(MtaSts::new(
                self.dns.clone(),
                verifying,
                d.mta_sts_port,
                Duration::from_secs(d.connect_timeout_secs.max(1)),
                Some(&self.config.data_dir.join("mta-sts")),
                logger.clone(),
            ))),
            _ => None,
        };
        let owner = self.config.local.maildir_owner.as_ref();
        let ownership = Ownership::for_process(owner.map(|o| (o.uid, o.gid)));
        let policy = Arc::new(
            MaildirPolicy::new(
                self.mailboxes.base().to_path_buf(),
                self.config.local.maildir_allow_absolute,
            )
            .with_ownership(ownership),
        );
        let committer = match self.config.local.maildir_sync {
            crate::config::local::MaildirSync::Each => None,
            crate::config::local::MaildirSync::Batch => {
                Committer::start(policy.clone(), self.maildir_stats.clone())
                    .map(Arc::new)
                    .map_err(|e| {
                        logger.emit(&Event::MaildirNoCommitThread {
                            error: e.to_string().into(),
                        })
                    })
                    .ok()
            }
        };
        self.agents = Some(Arc::new(Agents {
            smtp: SmtpAgent {
                config: self.config.clone(),
                spool: spool.clone(),
                logger: logger.clone(),
                tls: self.client_tls.clone(),
                dns: self.dns.clone(),
                dead: Arc::new(DeadHosts::new(
                    Duration::from_secs(d.dead_host_secs),
                    self.cluster.clone(),
                )),
                sts,
                dane: self.dane.clone(),
                own: self.own_addrs.clone(),
                forwarding: self.forwarding.clone(),
                generic: self.generic(),
                sasl: crate::deliver::smtp::auth::SaslClient::new(
                    d,
                    self.restrictions.sasl_passwords.clone(),
                )
                .map(Arc::new),
                egress: self.egress.clone(),
            },
            pipe: crate::deliver::pipe::PipeAgent {
                config: self.config.clone(),
                spool: spool.clone(),
            },
            local: crate::deliver::local::LocalAgent {
                config: self.config.clone(),
                system: self.mailboxes.system(),
                spool: spool.clone(),
                reinject: self.reinject.clone(),
            },
            maildir: MaildirAgent {
                config: self.config.clone(),
                mailboxes: self.mailboxes.clone(),
                spool: spool.clone(),
                committer,
                policy,
                stats: self.maildir_stats.clone(),
            },
        }));
    }

    /// The main context and each overriding listener's (`services.rs`).
    pub fn contexts(
        &self,
        main: Arc<crate::receive::smtp::SessionContext>,
    ) -> super::services::Contexts {
        super::services::contexts(main, &self.listeners, &self.dns)
    }

    /// The context SMTP sessions share. The per-client counters and the
    /// memory budget are carried over from `previous` (a reload changes
    /// their limits, not their counts; a changed budget starts a new one,
    /// the old sessions finishing on the old).
    pub fn session_context(
        &self,
        intake: &Arc<Intake>,
        previous: Option<&SessionContext>,
    ) -> SessionContext {
        let config = &self.config;
        let limits = anvil::Limits::from_config(&config.smtpd);
        let anvil = match previous {
            Some(p) => {
                p.anvil.set_limits(limits);
                p.anvil.clone()
            }
            None => Anvil::new(limits),
        };
        let budget = config.smtpd.message_memory_budget_kib;
        let body_memory = match previous {
            Some(p) if p.config.smtpd.message_memory_budget_kib == budget => p.body_memory.clone(),
            _ => Arc::new(Semaphore::new(budget as usize)),
        };
        SessionContext {
            policy: RelayPolicy::new(config.mynetworks(), &config.smtpd.relay_domains)
                .with_parent_matches(config.restrictions.parent_domain_matches_subdomains),
            config: config.clone(),
            mailboxes: self.mailboxes.clone(),
            restrictions: self.restrictions.clone(),
            verifier: self.verifier(&intake.logger),
            dnscheck: self.dnscheck(),
            spool: intake.spool.clone(),
            logger: intake.logger.clone(),
            body_memory,
            anvil,
            tls: self.tls.clone(),
            credentials: self.mailboxes.credentials(),
            dovecot: crate::receive::sasl_dovecot::DovecotAuth::from_config(&config.auth)
                .map(Arc::new),
            intake: intake.clone(),
            policy_service: PolicyClient::from_config(&config.smtpd).map(Arc::new),
            dnsbl: Dnsbl::from_config(&config.smtpd, self.dns.clone()).map(Arc::new),
            stopping: previous.map(|p| p.stopping.clone()).unwrap_or_default(),
        }
    }

    /// The DNS checks with the configured codes, when a list needs them.
    fn dnscheck(&self) -> Option<Arc<DnsChecker>> {
        if !self.restrictions.uses_dns() {
            return None;
        }
        let r = &self.config.restrictions;
        let action = |a| match a {
            TempfailAction::Defer => dnscheck::TempfailAction::Defer,
            TempfailAction::DeferIfPermit => dnscheck::TempfailAction::DeferIfPermit,
        };
        let codes = DnsCheckCodes {
            unknown_address_reject_code: r.unknown_address_reject_code,
            unknown_client_reject_code: r.unknown_client_reject_code,
            unknown_hostname_reject_code: r.unknown_hostname_reject_code,
            maps_rbl_reject_code: r.maps_rbl_reject_code,
            unknown_address_tempfail_action: action(r.unknown_address_tempfail_action),
            unknown_helo_hostname_tempfail_action: action(r.unknown_helo_hostname_tempfail_action),
        };
        let limits = dnscheck::Limits::default();
        Some(Arc::new(DnsChecker::new(self.dns.clone(), codes, limits)))
    }

    /// A verifier for `reject_unverified_*`, when a list holds one:
    /// probing with the SMTP agent's dead-host cache and resolver (or,
    /// without agents, as `check-config` and tests build, its own).
    fn verifier(&self, logger: &Logger) -> Option<Arc<Verifier>> {
        if !self.restrictions.verifies() {
            return None;
        }
        let config = &self.config;
        let prober = match &self.agents {
            Some(a) => a.smtp.prober(),
            None => Prober::standalone(config.clone(), logger.clone()).ok()?,
        };
        Some(Arc::new(Verifier::new(
            config.verify.clone(),
            self.router.clone(),
            self.mailboxes.clone(),
            prober,
            &config.data_dir,
        )))
    }

    /// The intake for this configuration, built once per start or reload
    /// and shared by the sessions, the submitter and the queue.
    pub fn intake(&self, spool: &Spool, logger: &Logger, queue: &QueueHandle) -> Arc<Intake> {
        let intake = Arc::new(Intake {
            config: self.config.clone(),
            spool: spool.clone(),
            mailboxes: self.mailboxes.clone(),
            dkim: self.dkim.clone(),
            sender_auth: self.sender_auth.clone(),
            handoff: Arc::new(queue.clone()),
            logger: logger.clone(),
            milters: crate::intake::milter::Filters::from_config(&self.config),
            flow: queue.flow(),
            store: super::cluster::storage(spool, self.shadow.as_ref(), logger),
            limits: self.limits.clone(),
            sender_login: self.restrictions.sender_login.clone(),
            rewrite: self.restrictions.rewrite.clone(),
            forwarding: self.forwarding.clone(),
            arc: self.arc.clone(),
            content_checks: self.restrictions.content_checks.clone(),
        });
        self.reinject.store(Some(intake.clone()));
        intake
    }

    /// `smtp_generic_maps` for the SMTP client, when configured (the
    /// tables built with the restriction lists').
    fn generic(&self) -> Option<Arc<crate::deliver::smtp::generic::Generic>> {
        let tables = &self.restrictions.rewrite.generic;
        (!tables.is_empty()).then(|| {
            Arc::new(crate::deliver::smtp::generic::Generic {
                tables: tables.clone(),
                mailboxes: self.mailboxes.clone(),
                delimiters: self.config.recipient_delimiter.clone(),
            })
        })
    }

    /// What `sluice queue` and sendmail(1) submissions use.
    pub fn submitter(&self, intake: &Arc<Intake>) -> crate::receive::local::Submitter {
        crate::receive::local::Submitter {
            intake: intake.clone(),
            logger: intake.logger.clone(),
            size_limit: self.config.smtpd.message_size_limit,
        }
    }
}

/// The local domains of `config` with their tables, as `serve` reads
/// addresses (extensions split at `recipient_delimiter`).
fn mailboxes(config: &Config, logger: &Logger) -> Result<VirtualMailboxes, BuildError> {
    Ok(VirtualMailboxes::build(
        &config.local,
        &config.smtpd.relay_recipient_table,
        &config.auth.table,
        &config.tables,
        &config.data_dir,
        logger,
    )?
    .with_delimiters(&config.recipient_delimiter)
    .with_system(crate::routing::system::SystemUsers::load(
        &config.system,
        &config.recipient_delimiter,
    )?))
}

/// The routing table of `config` over its local domains.
fn router(
    config: &Config,
    mailboxes: &VirtualMailboxes,
    logger: &Logger,
) -> Result<Router, BuildError> {
    let senders = crate::routing::senders::SenderRoutes::build(config, logger)?;
    Ok(Router::new(
        &config.transport,
        config.delivery.relayhost.as_ref(),
        mailboxes.domains(),
    )
    .with_local_transport(&config.local.transport)
    .with_mx_port(config.delivery.mx_port)
    .with_senders(senders)
    .with_transports(config.transports.keys())
    .with_pipes(
        config
            .transports
            .iter()
            .filter(|(_, t)| t.service == crate::config::transports::Service::Pipe)
            .map(|(name, _)| name),
    ))
}

/// What decides where an address goes, built as `serve` builds it, for
/// `sluice address`: the local domains with their tables, and the router.
pub fn routing(config: &Config) -> Result<(Arc<VirtualMailboxes>, Router), BuildError> {
    let mailboxes = Arc::new(mailboxes(config, &Logger::disabled())?);
    let router = router(config, &mailboxes, &Logger::disabled())?;
    Ok((mailboxes, router))
}

/// `sluice check-config`: builds what `serve` builds, writing nothing;
/// returns warnings (a spool file system too full to take mail, an LMTP
/// transport with no mailbox table).
pub fn check(config: Config) -> Result<Vec<String>, BuildError> {
    let logger = Logger::disabled();
    let dir = config.data_dir.join("spool");
    let fs = match super::spool_size::space_for(&dir) {
        Ok(fs) => fs,
        Err(err) => return Err(BuildError::SpoolSpace { dir, err }),
    };
    let size = super::spool_size::fit(&config.spool, fs);
    let mut warnings: Vec<String> = super::spool_size::shortage(&dir, size, fs)
        .into_iter()
        .collect();
    warnings.extend(config.warnings());
    Parts::build(Arc::new(config), &logger, None, Purpose::Check).map(|_| warnings)
}
