//! Sluice's integration tests, one binary: each module was a test binary
//! of its own (each linking the whole daemon, each compiling `common`
//! again); now the daemon is linked and `common` compiled once.
//!
//! libtest runs these tests as threads of one process: a test must not
//! change process-wide state (environment, current directory, umask), and
//! one that asserts on it runs itself alone ([`common::alone`]). nextest
//! (`scripts/test`) runs each test in a process of its own.

mod common;

mod abuse;
mod access_actions;
mod acme;
mod balancer;
mod bcc_maps;
mod canonical;
mod client_certs;
mod cluster;
mod config_doc;
mod content_filter;
mod dane;
mod dashboard;
mod delay_warning;
mod delivery;
mod descriptors;
mod dkim;
mod dns;
mod dnsbl;
mod downgrade;
mod dsn;
mod durability;
mod first_hour;
mod forwarding;
mod header_checks;
mod header_rewrite;
mod import_corpus;
mod intake;
mod launcher;
mod ldap;
mod ldap_replica;
mod limits;
mod listener_overrides;
mod lmtp;
mod local;
mod local_users;
mod log_why;
mod logging;
mod loops;
mod maildir_owner;
mod manual;
mod milter;
mod mta_sts;
mod mx_limits;
mod outbound;
mod outbound_tls;
mod pipe;
mod plus_addressing;
mod policy;
mod privilege;
mod process;
mod proxy;
mod queue_admin;
mod queue_story;
mod relay;
mod reload;
mod restrict_diff;
mod restrict_dns;
mod restrict_hostile;
mod restrict_redirect;
mod rollup;
mod sasl_dovecot;
mod sender_auth;
mod sender_limits;
mod sender_routes;
mod sendmail;
mod session;
mod shadow;
mod shadow_trust;
mod small_disk;
mod smarthost_auth;
mod smuggling;
mod strictness;
mod system_commands;
mod system_commands_diff;
mod system_users;
mod system_users_diff;
mod tables_lookup;
mod tables_postmap;
mod tables_remote;
mod tables_search;
mod tables_sql;
mod tables_text;
mod tls_auth;
mod verify;
mod virtual_alias;
