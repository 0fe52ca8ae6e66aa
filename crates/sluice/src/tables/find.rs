//! Looking an address up in a list of tables, in Postfix's order
//! (`mail_addr_find`): for each key of `search::address_keys`, every
//! table in turn; the first answer wins, and a table that cannot answer
//! stops the search with "try again" (a later key's answer could be the
//! wrong one: `451`, never a wrong `550` or a wrong delivery).
//!
//! Partial keys (`user@domain` without the extension, `user`, `@domain`)
//! are asked only of tables with fixed keys ([`Table::fixed`]).
//!
//! Trust: the address is the client's; it is only ever a key.

use std::sync::Arc;

use super::search::{address_keys, Rules};
use super::{LookupError, Table, Values};

/// What an address found, and under which key.
#[derive(Debug, Clone)]
pub struct Found {
    pub values: Values,
    /// The key that found it.
    pub key: String,
    /// The extension that key left out, with its delimiter (`+ext`,
    /// `-ext`), for `propagate_unmatched_extensions`
    /// (`search::mapped_address`).
    pub dropped: Option<String>,
    /// Which table of the list answered.
    pub table: usize,
}

impl Table {
    /// Looks `address` up in this table in Postfix's order.
    pub async fn find_address(
        self: &Arc<Self>,
        address: &str,
        rules: &Rules<'_>,
    ) -> Result<Option<Found>, LookupError> {
        find_address(std::slice::from_ref(self), address, rules).await
    }
}

/// Looks `address` up in `tables` in Postfix's order (see the head).
pub async fn find_address(
    tables: &[Arc<Table>],
    address: &str,
    rules: &Rules<'_>,
) -> Result<Option<Found>, LookupError> {
    for key in address_keys(address, rules) {
        for (index, table) in tables.iter().enumerate() {
            if key.partial && !table.fixed() {
                continue;
            }
            if let Some(values) = table.lookup(&key.text).await? {
                return Ok(Some(Found {
                    values,
                    key: key.text.into_owned(),
                    dropped: key.extension.map(std::borrow::Cow::into_owned),
                    table: index,
                }));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::Logger;
    use crate::tables::config::TableConfig;

    fn table(dir: &tempfile::TempDir, name: &str, kind: &str, text: &str) -> Arc<Table> {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let mut config = TableConfig::of_kind(kind);
        config.path = Some(path);
        Arc::new(Table::build(name, &config, &Logger::disabled()).unwrap())
    }

    #[tokio::test]
    async fn keys_in_order_across_tables_and_patterns_see_full_keys_only() {
        let dir = tempfile::tempdir().unwrap();
        let text = table(&dir, "t", "text", "@x.test catchall\nbob@x.test bob-box\n");
        let pattern = table(&dir, "p", "regexp", "/^bob/ pattern\n/^@/ never\n");
        let rules = Rules {
            delimiters: "+",
            local: false,
            owner_request_special: true,
        };
        let both = [pattern.clone(), text.clone()];
        let found = find_address(&both, "Bob+news@x.test", &rules)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (found.values.raw(), found.table),
            ("pattern", 0),
            "full key first, in every table"
        );
        let found = find_address(&both, "carol@x.test", &rules)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            found.values.raw(),
            "catchall",
            "the regexp never sees @x.test"
        );
        let found = text
            .find_address("bob+news@x.test", &rules)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (found.key.as_str(), found.dropped.as_deref()),
            ("bob@x.test", Some("+news"))
        );
    }
}
