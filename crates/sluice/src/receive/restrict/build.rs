//! Building the restriction lists from `[restrictions]` when the
//! configuration is loaded: every list read, the tables and policy
//! services they name built once and shared, classes checked for loops,
//! and relaying checked closed.
//!
//! Trust: the configuration is the operator's. Invariants: a list that
//! names an unknown keyword, table or class is refused here; so is a
//! class that reaches itself; so is a configuration whose relay and
//! recipient lists (main or any listener's) hold nothing that refuses
//! mail (Postfix refuses mail with `451 4.3.5` in that case; Sluice does
//! not start).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;

use super::parse::{parse_list, words, ParseError, Resolve};
use super::{Restriction, Stage, TableCheck};
use crate::config::restrictions::{ListOverrides, RestrictionsConfig};
use crate::config::services::ServiceAddr;
use crate::config::Config;
use crate::log::Logger;
use crate::receive::policy::PolicyClient;
use crate::tables::Table;

/// Why the lists cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("restrictions.{list}: {err}")]
    List { list: String, err: ParseError },
    #[error("restriction class {0:?} reaches itself")]
    Loop(String),
    #[error("restriction class {0:?} has the name of a restriction")]
    ClassName(String),
    #[error("restrictions.{0} = {1}: not a 4XX or 5XX code")]
    Code(&'static str, u16),
    #[error(
        "{0}: neither the relay nor the recipient list refuses anything \
         (an open relay); end one with reject_unauth_destination, \
         defer_unauth_destination, reject or defer"
    )]
    OpenRelay(String),
}

/// The lists of one set (main, or a listener's).
#[derive(Debug, Clone)]
pub struct Lists {
    lists: [Arc<Vec<Restriction>>; 7],
}

impl Lists {
    pub fn get(&self, stage: Stage) -> &Arc<Vec<Restriction>> {
        &self.lists[stage as usize]
    }
}

const STAGES: [Stage; 7] = [
    Stage::Client,
    Stage::Helo,
    Stage::Sender,
    Stage::Relay,
    Stage::Recipient,
    Stage::Data,
    Stage::EndOfData,
];

/// Everything the lists need, built.
pub struct Restrictions {
    pub config: RestrictionsConfig,
    main: Lists,
    listeners: HashMap<SocketAddr, Lists>,
    classes: HashMap<String, Arc<Vec<Restriction>>>,
    tables: HashMap<String, Arc<Table>>,
    policies: HashMap<String, Arc<PolicyClient>>,
    /// smtpd_sender_login_maps, in order.
    pub sender_login: Vec<Arc<Table>>,
    /// relay_clientcerts, in order (`permit_tls_clientcerts`).
    pub relay_clientcerts: Vec<Arc<Table>>,
    /// `[rewrite]`'s tables (built here, with the lists' tables, for the
    /// intake).
    pub rewrite: Arc<crate::intake::rewrite::RewriteMaps>,
    /// `[content_checks]`'s tables and the listeners' own (built here
    /// too, for the intake).
    pub content_checks: Arc<crate::intake::content_checks::CheckTables>,
    /// `[delivery]`'s smtp_sasl_password_maps (built here too, for the
    /// SMTP client).
    pub sasl_passwords: Vec<Arc<Table>>,
    /// A restriction needs the client's names (computed once, at build).
    names: bool,
}

/// Builds tables and policy clients for the lists, sharing each.
struct Builder<'a> {
    config: &'a Config,
    logger: &'a Logger,
    classes: &'a BTreeMap<String, String>,
    tables: HashMap<String, Arc<Table>>,
    policies: HashMap<String, Arc<PolicyClient>>,
}

impl Resolve for Builder<'_> {
    fn table(&mut self, spec: &str) -> Result<Arc<Table>, String> {
        if let Some(t) = self.tables.get(spec) {
            return Ok(t.clone());
        }
        let table = match self.config.tables.get(spec) {
            Some(cfg) => Table::build_in(spec, cfg, &self.config.tables, self.logger),
            None => {
                let cfg = crate::tables::spec::parse(spec).map_err(|e| e.to_string())?;
                Table::build(spec, &cfg, self.logger)
            }
        }
        .map_err(|e| e.to_string())?;
        let table = Arc::new(table);
        self.tables.insert(spec.to_string(), table.clone());
        Ok(table)
    }

    fn is_class(&self, name: &str) -> bool {
        self.classes.contains_key(name)
    }

    fn policy(&mut self, addr: &str) -> Result<Arc<PolicyClient>, String> {
        if let Some(p) = self.policies.get(addr) {
            return Ok(p.clone());
        }
        let service: ServiceAddr = addr
            .parse()
            .map_err(|e: crate::config::services::BadService| e.to_string())?;
        let mut smtpd = self.config.smtpd.clone();
        smtpd.policy_service = Some(service);
        let client = Arc::new(PolicyClient::from_config(&smtpd).expect("service set"));
        self.policies.insert(addr.to_string(), client.clone());
        Ok(client)
    }
}

impl Restrictions {
    /// Builds the lists of `config.restrictions` and of every listener.
    pub fn build(config: &Config, logger: &Logger) -> Result<Restrictions, BuildError> {
        let rc = &config.restrictions;
        for (name, code) in rc.codes() {
            if !(400..600).contains(&code) {
                return Err(BuildError::Code(name, code));
            }
        }
        let mut b = Builder {
            config,
            logger,
            classes: &rc.classes,
            tables: HashMap::new(),
            policies: HashMap::new(),
        };
        let mut classes = HashMap::new();
        for (name, list) in &rc.classes {
            if !matches!(parse_list(name, &mut NoTables), Err(ParseError::Unknown(_))) {
                return Err(BuildError::ClassName(name.clone()));
            }
            let parsed = parse_list(list, &mut b).map_err(|err| BuildError::List {
                list: format!("classes.{name}"),
                err,
            })?;
            classes.insert(name.clone(), Arc::new(parsed));
        }
        check_loops(&classes)?;
        let main = lists(rc, &ListOverrides::default(), &mut b, "restrictions")?;
        let mut listeners = HashMap::new();
        for l in &config.smtpd.listeners {
            let what = format!("listener {}", l.listen);
            listeners.insert(l.listen, lists(rc, &l.restrictions, &mut b, &what)?);
        }
        let mut maps = |specs: &[String], list: &str| -> Result<Vec<Arc<Table>>, BuildError> {
            specs
                .iter()
                .map(|spec| {
                    b.table(spec).map_err(|e| BuildError::List {
                        list: list.into(),
                        err: ParseError::Table(spec.clone(), e),
                    })
                })
                .collect()
        };
        let sender_login = maps(&rc.sender_login_maps, "sender_login_maps")?;
        let relay_clientcerts = maps(&rc.relay_clientcerts, "relay_clientcerts")?;
        let rw = &config.rewrite;
        let rewrite = Arc::new(crate::intake::rewrite::RewriteMaps {
            sender_bcc: maps(&rw.sender_bcc_maps, "rewrite.sender_bcc_maps")?,
            recipient_bcc: maps(&rw.recipient_bcc_maps, "rewrite.recipient_bcc_maps")?,
            canonical: maps(&rw.canonical_maps, "rewrite.canonical_maps")?,
            sender_canonical: maps(&rw.sender_canonical_maps, "rewrite.sender_canonical_maps")?,
            recipient_canonical: maps(
                &rw.recipient_canonical_maps,
                "rewrite.recipient_canonical_maps",
            )?,
            generic: maps(&rw.smtp_generic_maps, "rewrite.smtp_generic_maps")?,
            classes: crate::intake::rewrite::Classes::new(rw),
            masquerade: crate::intake::rewrite::Masquerade::new(
                &rw.masquerade_domains,
                &rw.masquerade_exceptions,
            ),
            header_clients: crate::intake::rewrite::HeaderClients::new(rw),
            virtual_alias: maps(&rw.virtual_alias_maps, "rewrite.virtual_alias_maps")?,
            virtual_alias_domains: rw
                .virtual_alias_domains
                .as_ref()
                .map(|d| d.iter().map(|d| d.to_ascii_lowercase()).collect()),
        });
        let content_checks = Arc::new(content_checks(config, &mut maps)?);
        let sasl_passwords = maps(
            &config.delivery.smtp_sasl_password_maps,
            "delivery.smtp_sasl_password_maps",
        )?;
        let mut built = Restrictions {
            config: rc.clone(),
            main,
            listeners,
            classes,
            tables: b.tables,
            policies: b.policies,
            sender_login,
            relay_clientcerts,
            rewrite,
            content_checks,
            sasl_passwords,
            names: false,
        };
        let names = built.all().any(|r| match r {
            Restriction::Dns(d) => d.needs_names(),
            Restriction::Access(check, _) => {
                matches!(check, TableCheck::Client | TableCheck::ReverseClient)
            }
            _ => false,
        });
        built.names = names;
        Ok(built)
    }

    /// Whether any list or class holds `reject_unverified_*` (a verifier
    /// is then built for the sessions).
    pub fn verifies(&self) -> bool {
        let holds = |l: &Arc<Vec<Restriction>>| {
            l.iter()
                .any(|r| matches!(r, Restriction::RejectUnverified { .. }))
        };
        let sets = std::iter::once(&self.main).chain(self.listeners.values());
        sets.flat_map(|s| s.lists.iter()).any(holds) || self.classes.values().any(holds)
    }

    /// Every restriction of every list and class.
    fn all(&self) -> impl Iterator<Item = &Restriction> {
        let sets = std::iter::once(&self.main).chain(self.listeners.values());
        sets.flat_map(|s| s.lists.iter())
            .chain(self.classes.values())
            .flat_map(|l| l.iter())
    }

    /// Whether a DNS restriction is configured (a checker is built).
    pub fn uses_dns(&self) -> bool {
        self.needs_names() || self.all().any(|r| matches!(r, Restriction::Dns(_)))
    }

    /// Whether a restriction needs the client's names (a PTR and a
    /// forward lookup, once per session, as Postfix's smtpd at connect).
    pub fn needs_names(&self) -> bool {
        self.names
    }

    /// The lists for a session on the listener at `listen`.
    pub fn lists(&self, listen: SocketAddr) -> &Lists {
        self.listeners.get(&listen).unwrap_or(&self.main)
    }

    pub fn class(&self, name: &str) -> Option<&Arc<Vec<Restriction>>> {
        self.classes.get(name)
    }

    /// Reads a list a table answered (run time): only the tables, classes
    /// and services built at load may appear in it.
    pub fn parse_answer(&self, list: &str) -> Result<Vec<Restriction>, ParseError> {
        parse_list(list, &mut Built(self))
    }

    /// Every table the lists use, for reloads and statistics.
    pub fn tables(&self) -> impl Iterator<Item = &Arc<Table>> {
        self.tables.values()
    }

    /// Re-reads, within a second, the static tables whose files changed
    /// (off the lookup path), for as long as these lists are in use: the
    /// task ends once a reload has replaced them. Outside a runtime
    /// (`check-config`) nothing is started.
    pub fn watch(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.tables.is_empty() {
            return;
        }
        let weak = Arc::downgrade(self);
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                let Some(lists) = weak.upgrade() else { return };
                let _ = tokio::task::spawn_blocking(move || {
                    for table in lists.tables.values() {
                        table.reload_if_changed();
                    }
                })
                .await;
            }
        });
    }
}

/// The header and body checks' tables: the main lists, and those of each
/// listener whose lists differ.
fn content_checks(
    config: &Config,
    maps: &mut impl FnMut(&[String], &str) -> Result<Vec<Arc<Table>>, BuildError>,
) -> Result<crate::intake::content_checks::CheckTables, BuildError> {
    use crate::config::content_checks::{CheckLists, CheckOverrides};
    use crate::intake::content_checks::{CheckTables, Checks};
    let cc = &config.content_checks;
    let mut build = |l: &CheckLists| -> Result<Checks, BuildError> {
        Ok(Checks {
            header: maps(&l.header, "content_checks.header_checks")?,
            mime: maps(&l.mime, "content_checks.mime_header_checks")?,
            nested: maps(&l.nested, "content_checks.nested_header_checks")?,
            body: maps(&l.body, "content_checks.body_checks")?,
        })
    };
    let main = cc.lists(&CheckOverrides::default());
    let mut listeners = Vec::new();
    for l in &config.smtpd.listeners {
        let own = cc.lists(&l.content_checks);
        if own != main {
            listeners.push((l.listen, build(&own)?));
        }
    }
    Ok(CheckTables::new(build(&main)?, listeners))
}

/// Reads the seven lists of a set, checking that relaying is closed.
fn lists(
    rc: &RestrictionsConfig,
    o: &ListOverrides,
    b: &mut Builder<'_>,
    what: &str,
) -> Result<Lists, BuildError> {
    let texts = [
        o.client.as_ref().unwrap_or(&rc.client),
        o.helo.as_ref().unwrap_or(&rc.helo),
        o.sender.as_ref().unwrap_or(&rc.sender),
        o.relay.as_ref().unwrap_or(&rc.relay),
        o.recipient.as_ref().unwrap_or(&rc.recipient),
        o.data.as_ref().unwrap_or(&rc.data),
        o.end_of_data.as_ref().unwrap_or(&rc.end_of_data),
    ];
    let mut out = Vec::with_capacity(7);
    for (stage, text) in STAGES.iter().zip(texts) {
        let parsed = parse_list(text, b).map_err(|err| BuildError::List {
            list: stage.name().into(),
            err,
        })?;
        out.push(Arc::new(parsed));
    }
    let closes = |text: &str| {
        words(text).iter().any(|w| {
            matches!(
                w.to_ascii_lowercase().as_str(),
                "reject_unauth_destination" | "defer_unauth_destination" | "reject" | "defer"
            )
        })
    };
    if !closes(texts[3]) && !closes(texts[4]) {
        return Err(BuildError::OpenRelay(what.to_string()));
    }
    let lists: [Arc<Vec<Restriction>>; 7] = out.try_into().expect("seven lists");
    Ok(Lists { lists })
}

/// Refuses a class that reaches itself through other classes.
fn check_loops(classes: &HashMap<String, Arc<Vec<Restriction>>>) -> Result<(), BuildError> {
    fn visit<'a>(
        name: &'a str,
        classes: &'a HashMap<String, Arc<Vec<Restriction>>>,
        path: &mut Vec<&'a str>,
    ) -> Result<(), BuildError> {
        if path.contains(&name) {
            return Err(BuildError::Loop(name.to_string()));
        }
        path.push(name);
        for r in classes.get(name).map(|l| l.as_slice()).unwrap_or_default() {
            if let Restriction::Class(next) = r {
                visit(next, classes, path)?;
            }
        }
        path.pop();
        Ok(())
    }
    for name in classes.keys() {
        visit(name, classes, &mut Vec::new())?;
    }
    Ok(())
}

/// Resolves nothing: tells whether a word is a keyword.
struct NoTables;

impl Resolve for NoTables {
    fn table(&mut self, _: &str) -> Result<Arc<Table>, String> {
        Err(String::new())
    }
    fn is_class(&self, _: &str) -> bool {
        false
    }
    fn policy(&mut self, _: &str) -> Result<Arc<PolicyClient>, String> {
        Err(String::new())
    }
}

/// Resolves what was built at load, nothing new.
struct Built<'a>(&'a Restrictions);

impl Resolve for Built<'_> {
    fn table(&mut self, spec: &str) -> Result<Arc<Table>, String> {
        self.0
            .tables
            .get(spec)
            .cloned()
            .ok_or_else(|| "not a table the configuration names".into())
    }
    fn is_class(&self, name: &str) -> bool {
        self.0.classes.contains_key(name)
    }
    fn policy(&mut self, addr: &str) -> Result<Arc<PolicyClient>, String> {
        self.0
            .policies
            .get(addr)
            .cloned()
            .ok_or_else(|| "not a policy service the configuration names".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(f: impl FnOnce(&mut RestrictionsConfig)) -> Result<Restrictions, BuildError> {
        let mut config = Config::default();
        f(&mut config.restrictions);
        Restrictions::build(&config, &Logger::disabled())
    }

    #[test]
    fn the_default_builds() {
        let r = build(|_| {}).unwrap();
        assert_eq!(
            r.lists("127.0.0.1:25".parse().unwrap())
                .get(Stage::Relay)
                .len(),
            3
        );
    }

    #[test]
    fn lists_that_leave_relaying_open_are_refused() {
        let err = build(|r| r.relay = "permit_mynetworks".into())
            .err()
            .unwrap();
        assert!(matches!(err, BuildError::OpenRelay(_)), "{err}");
        let err = build(|r| r.relay = String::new()).err().unwrap();
        assert!(matches!(err, BuildError::OpenRelay(_)), "{err}");
        // A recipient list that ends relaying is enough, as in Postfix.
        build(|r| {
            r.relay = String::new();
            r.recipient = "permit_mynetworks, reject_unauth_destination".into();
        })
        .unwrap();
    }

    #[test]
    fn class_loops_and_bad_words_are_refused() {
        let err = build(|r| {
            r.classes.insert("a".into(), "b".into());
            r.classes.insert("b".into(), "permit_mynetworks, a".into());
        })
        .err()
        .unwrap();
        assert!(matches!(err, BuildError::Loop(_)), "{err}");
        let err = build(|r| r.recipient = "reject_everything_bad".into())
            .err()
            .unwrap();
        assert!(matches!(err, BuildError::List { .. }), "{err}");
        let err = build(|r| r.recipient = "check_recipient_access".into())
            .err()
            .unwrap();
        assert!(err.to_string().contains("needs a table"), "{err}");
        let err = build(|r| r.recipient = "check_recipient_access hash:/nonexistent/x".into());
        assert!(err.is_err());
        let err = build(|r| {
            r.classes.insert("permit".into(), "reject".into());
        })
        .err()
        .unwrap();
        assert!(matches!(err, BuildError::ClassName(_)), "{err}");
        let err = build(|r| r.access_map_reject_code = 250).err().unwrap();
        assert!(matches!(err, BuildError::Code(..)), "{err}");
    }

    #[test]
    fn answers_may_name_only_what_was_built() {
        let r = build(|r| {
            r.classes.insert("strict".into(), "reject".into());
        })
        .unwrap();
        assert!(r.parse_answer("strict, reject_unauth_destination").is_ok());
        assert!(r
            .parse_answer("check_sender_access hash:/etc/passwd")
            .is_err());
        assert!(r
            .parse_answer("check_policy_service inet:192.0.2.1:9")
            .is_err());
    }
}
