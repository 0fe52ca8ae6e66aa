//! Postfix's way of naming a table, `type:name`, turned into a table's
//! settings: what `sluice lookup` takes on the command line (as `postmap
//! -q KEY TYPE:NAME`) and what a union or pipe may list as a member.
//!
//! - `hash:/etc/postfix/virtual` (and `lmdb`, `btree`, `cdb`, `dbm`,
//!   `sdbm`, `texthash`, `text`): the source file is read, as it is (no
//!   `.db`: Sluice keeps the map in memory, see `text.rs`);
//! - `regexp:`, `pcre:`, `cidr:` a file; `ldap:`, `pgsql:`, `mysql:`,
//!   `sqlite:` Postfix's parameter file for it (`ldap_table(5)` …);
//! - `static:VALUE`, `static:{VALUE WITH BLANKS}`;
//! - `socketmap:inet:HOST:PORT:NAME`, `socketmap:unix:PATH:NAME`,
//!   `tcp:HOST:PORT`;
//! - `unionmap:{T1, T2 …}`, `pipemap:{T1, T2 …}`;
//! - `proxy:T` is `T`: Sluice's tables are already shared and pooled in
//!   one process, which is what Postfix's proxymap is for.
//!
//! Pure: no I/O. Trust: the spec is the operator's (a configuration or
//! the command line).

use crate::tables::config::TableConfig;

/// Why a spec names no table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("{0:?}: not a table (want TYPE:NAME, e.g. hash:/etc/postfix/virtual)")]
    NoType(String),
    #[error("{0:?}: unknown table type {1:?}")]
    UnknownType(String, String),
    #[error("{0:?}: {1}")]
    Malformed(String, &'static str),
}

/// Postfix's names whose source file is a text map.
pub const TEXT_KINDS: &[&str] = &[
    "text", "texthash", "hash", "lmdb", "btree", "cdb", "dbm", "sdbm",
];

/// The settings a `type:name` spec means.
pub fn parse(spec: &str) -> Result<TableConfig, SpecError> {
    let bad = |why| SpecError::Malformed(spec.to_string(), why);
    let (kind, name) = spec
        .split_once(':')
        .ok_or_else(|| SpecError::NoType(spec.to_string()))?;
    let kind = kind.to_ascii_lowercase();
    let mut config = TableConfig::of_kind(&kind);
    match kind.as_str() {
        "proxy" => return parse(name),
        k if TEXT_KINDS.contains(&k) => config.kind = "text".into(),
        "regexp" | "pcre" | "cidr" | "ldap" | "pgsql" | "mysql" | "sqlite" => {}
        "static" => {
            config.value = Some(braced(name).unwrap_or(name).to_string());
            return Ok(config);
        }
        "tcp" => {
            config.address = Some(name.to_string());
            return Ok(config);
        }
        "socketmap" => {
            let (address, map) = name.rsplit_once(':').ok_or_else(|| {
                bad("want socketmap:inet:HOST:PORT:NAME or socketmap:unix:PATH:NAME")
            })?;
            config.address = Some(address.to_string());
            config.map_name = Some(map.to_string());
            return Ok(config);
        }
        "unionmap" | "pipemap" => {
            let inner = braced(name).ok_or_else(|| bad("want {TYPE:NAME, TYPE:NAME …}"))?;
            config.kind = kind.trim_end_matches("map").to_string();
            config.tables = members(inner);
            if config.tables.is_empty() {
                return Err(bad("no member tables"));
            }
            return Ok(config);
        }
        _ => return Err(SpecError::UnknownType(spec.to_string(), kind)),
    }
    if name.is_empty() {
        return Err(bad("no file"));
    }
    config.path = Some(name.into());
    Ok(config)
}

/// The text inside `{…}`, trimmed.
fn braced(s: &str) -> Option<&str> {
    Some(s.trim().strip_prefix('{')?.strip_suffix('}')?.trim())
}

/// A member list: separated by commas or blanks, outside braces.
fn members(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for c in list.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 && (c == ',' || c.is_whitespace()) {
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
        } else {
            current.push(c);
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postfix_specs_become_settings() {
        let t = parse("hash:/etc/postfix/virtual").unwrap();
        assert_eq!(
            (t.kind.as_str(), t.path.unwrap()),
            ("text", "/etc/postfix/virtual".into())
        );
        assert_eq!(parse("proxy:pcre:/x").unwrap().kind, "pcre");
        assert_eq!(parse("static:{a b}").unwrap().value.unwrap(), "a b");
        let s = parse("socketmap:inet:127.0.0.1:9999:srs").unwrap();
        assert_eq!(s.address.unwrap(), "inet:127.0.0.1:9999");
        assert_eq!(s.map_name.unwrap(), "srs");
        let u = parse("unionmap:{hash:/a, static:{x y}  cidr:/c}").unwrap();
        assert_eq!(u.kind, "union");
        assert_eq!(u.tables, ["hash:/a", "static:{x y}", "cidr:/c"]);
        assert!(matches!(parse("nope"), Err(SpecError::NoType(_))));
        assert!(matches!(parse("nis:x"), Err(SpecError::UnknownType(..))));
        assert!(matches!(parse("pipemap:a"), Err(SpecError::Malformed(..))));
    }
}
