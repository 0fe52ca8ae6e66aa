//! Routes chosen by the envelope sender, as Postfix's trivial-rewrite
//! does for remote mail: `sender_dependent_relayhost_maps` replaces
//! `relayhost`, and `sender_dependent_default_transport_maps` the default
//! transport (`smtp`), for that sender's mail to domains the transport
//! tables do not route.
//!
//! Keys, in Postfix's order (mail_addr_find): the sender, the sender
//! without its extension, the local part forms when the sender's domain
//! is ours, `@domain`; the null sender under
//! `empty_address_relayhost_maps_lookup_key` (`<>`). `DUNNO` ends the
//! search with no override. The first table with an answer wins.
//!
//! Invariant: the tables are static (text files or patterns): routing
//! runs on the scheduler's task and never waits. A lookup that cannot be
//! answered (a pattern past its backtracking limit) is [`Lookup::Failed`]:
//! the recipient is deferred, never sent by the default route instead.
//! Every entry of a text file is checked when loaded and at each reload:
//! a typo is refused, never routed to the default.
//!
//! Trust: the sender is the client's; it is only ever a key.

use std::sync::Arc;

use crate::config::hop::NextHop;
use crate::tables::search::{address_keys, Rules};
use crate::tables::{Table, TableError};

/// The sender-dependent tables.
#[derive(Default)]
pub struct SenderRoutes {
    relayhost: Vec<Arc<Table>>,
    transport: Vec<Arc<Table>>,
    null_key: String,
    delimiters: String,
}

/// What a sender-dependent table said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// Not found, or `DUNNO`: the global setting stands.
    Default,
    Hop(NextHop),
    /// The table could not answer: defer.
    Failed,
}

/// Why a sender-dependent table cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SenderRouteError {
    #[error("delivery.{0}: {1:?} must be a file table (routing consults it without I/O)")]
    NotStatic(&'static str, String),
    #[error("delivery.{0}: {1:?}: {2}")]
    Spec(&'static str, String, String),
    #[error("delivery.{setting}: {err}")]
    Table {
        setting: &'static str,
        err: Box<TableError>,
    },
}

impl SenderRoutes {
    /// `relayhost` and `transport`: the built tables of
    /// `sender_dependent_relayhost_maps` and
    /// `sender_dependent_default_transport_maps`, with their specs.
    pub fn new(
        relayhost: Vec<(String, Arc<Table>)>,
        transport: Vec<(String, Arc<Table>)>,
        null_key: &str,
        delimiters: &str,
    ) -> Result<SenderRoutes, SenderRouteError> {
        let check = |list: Vec<(String, Arc<Table>)>,
                     setting: &'static str,
                     entry: crate::tables::EntryCheck| {
            list.into_iter()
                .map(|(spec, t)| {
                    if !t.is_static() {
                        return Err(SenderRouteError::NotStatic(setting, spec));
                    }
                    t.set_check(entry).map_err(|err| SenderRouteError::Table {
                        setting,
                        err: Box::new(err),
                    })?;
                    Ok(t)
                })
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(SenderRoutes {
            relayhost: check(relayhost, "sender_dependent_relayhost_maps", check_relay)?,
            transport: check(
                transport,
                "sender_dependent_default_transport_maps",
                check_transport,
            )?,
            null_key: null_key.to_string(),
            delimiters: delimiters.to_string(),
        })
    }

    /// The tables `[delivery]` names, built as the restriction lists
    /// build theirs (`[tables]` names or `type:name`).
    pub fn build(
        config: &crate::config::Config,
        logger: &crate::log::Logger,
    ) -> Result<SenderRoutes, SenderRouteError> {
        let d = &config.delivery;
        let build = |specs: &[String], setting: &'static str| {
            specs
                .iter()
                .map(|spec| {
                    let table = match config.tables.get(spec) {
                        Some(cfg) => Table::build_in(spec, cfg, &config.tables, logger),
                        None => {
                            let cfg = crate::tables::spec::parse(spec).map_err(|e| {
                                SenderRouteError::Spec(setting, spec.clone(), e.to_string())
                            })?;
                            Table::build(spec, &cfg, logger)
                        }
                    }
                    .map_err(|err| SenderRouteError::Table {
                        setting,
                        err: Box::new(err),
                    })?;
                    Ok((spec.clone(), Arc::new(table)))
                })
                .collect::<Result<Vec<_>, SenderRouteError>>()
        };
        SenderRoutes::new(
            build(
                &d.sender_dependent_relayhost_maps,
                "sender_dependent_relayhost_maps",
            )?,
            build(
                &d.sender_dependent_default_transport_maps,
                "sender_dependent_default_transport_maps",
            )?,
            &d.empty_address_relayhost_maps_lookup_key,
            &config.recipient_delimiter,
        )
    }

    pub fn is_empty(&self) -> bool {
        self.relayhost.is_empty() && self.transport.is_empty()
    }

    /// The relayhost for `sender`'s mail.
    pub fn relayhost(&self, sender: &str) -> Lookup {
        self.find(&self.relayhost, sender, parse_relay)
    }

    /// The default transport (and maybe next hop) for `sender`'s mail.
    pub fn transport(&self, sender: &str) -> Lookup {
        self.find(&self.transport, sender, NextHop::parse)
    }

    fn find(
        &self,
        tables: &[Arc<Table>],
        sender: &str,
        parse: fn(&str) -> Option<NextHop>,
    ) -> Lookup {
        if tables.is_empty() {
            return Lookup::Default;
        }
        let sender = if sender.is_empty() {
            self.null_key.as_str()
        } else {
            sender
        };
        let rules = Rules {
            delimiters: &self.delimiters,
            local: false,
            owner_request_special: true,
        };
        for key in address_keys(sender, &rules) {
            for table in tables {
                if key.partial && !table.fixed() {
                    continue;
                }
                match table.lookup_now(&key.text) {
                    None => return Lookup::Failed,
                    Some(None) => {}
                    Some(Some(values)) => {
                        let value = values.raw().trim();
                        if value.eq_ignore_ascii_case("DUNNO") {
                            return Lookup::Default;
                        }
                        return parse(value).map_or(Lookup::Failed, Lookup::Hop);
                    }
                }
            }
        }
        Lookup::Default
    }
}

/// A relayhost as Postfix writes it (`[host]:port`, `host:port`, `host`)
/// or as Sluice's `relayhost` is (`smtp:[host]:port`).
pub fn parse_relay(value: &str) -> Option<NextHop> {
    let value = value.trim();
    if value.starts_with("smtp:") {
        return NextHop::parse(value).filter(|h| matches!(h, NextHop::Smtp { .. }));
    }
    NextHop::parse(&format!("smtp:{value}")).filter(|h| matches!(h, NextHop::Smtp { .. }))
}

fn check_relay(key: &str, values: &[String]) -> Result<(), TableError> {
    check(key, values, "relay host", parse_relay)
}

fn check_transport(key: &str, values: &[String]) -> Result<(), TableError> {
    check(key, values, "transport", NextHop::parse)
}

fn check(
    key: &str,
    values: &[String],
    what: &'static str,
    parse: fn(&str) -> Option<NextHop>,
) -> Result<(), TableError> {
    let value = values.first().map(String::as_str).unwrap_or("");
    if value.eq_ignore_ascii_case("DUNNO") || parse(value).is_some() {
        return Ok(());
    }
    Err(TableError::Entry {
        key: key.to_string(),
        what,
        value: value.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tables::TableConfig;
    use crate::log::Logger;

    fn table(dir: &tempfile::TempDir, name: &str, kind: &str, text: &str) -> (String, Arc<Table>) {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let mut config = TableConfig::of_kind(kind);
        config.path = Some(path);
        let t = Arc::new(Table::build(name, &config, &Logger::disabled()).unwrap());
        (name.to_string(), t)
    }

    #[test]
    fn senders_find_their_routes_in_postfix_order() {
        let dir = tempfile::tempdir().unwrap();
        let relay = table(
            &dir,
            "relay",
            "texthash",
            "a@x.example [10.0.0.1]:587\n@x.example relay.x.example\n\
             b@x.example DUNNO\n<> [10.0.0.9]\n",
        );
        let transport = table(&dir, "tr", "texthash", "@y.example out2:\n");
        let r = SenderRoutes::new(vec![relay], vec![transport], "<>", "+").unwrap();
        let key = |l: Lookup| match l {
            Lookup::Hop(h) => h.key(),
            other => format!("{other:?}"),
        };
        assert_eq!(key(r.relayhost("a@x.example")), "smtp:[10.0.0.1]:587");
        assert_eq!(key(r.relayhost("a+tag@x.example")), "smtp:[10.0.0.1]:587");
        assert_eq!(key(r.relayhost("c@x.example")), "smtp:relay.x.example:25");
        assert_eq!(key(r.relayhost("b@x.example")), "Default");
        assert_eq!(key(r.relayhost("")), "smtp:[10.0.0.9]:25");
        assert_eq!(key(r.relayhost("c@z.example")), "Default");
        assert_eq!(key(r.transport("u@y.example")), "out2:");
    }

    #[test]
    fn a_bad_entry_or_a_remote_table_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let bad = table(&dir, "bad", "texthash", "a@x.example [10.0.0.1:587]\n");
        let err = SenderRoutes::new(vec![bad], vec![], "<>", "")
            .err()
            .unwrap();
        assert!(err.to_string().contains("a@x.example"), "{err}");
        let bad = table(&dir, "bad2", "texthash", "a@x.example Carrier:x\n");
        assert!(SenderRoutes::new(vec![], vec![bad], "<>", "").is_err());
    }
}
