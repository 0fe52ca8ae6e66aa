//! A Postfix pgsql_table(5), mysql_table(5) or sqlite_table(5) file,
//! read by the tables' common parameter-file reader (`tables::cf`:
//! main.cf's logical lines, the last of a name given twice wins) into
//! [`Settings`]; unknown names are ignored, as Postfix ignores them.
//!
//! Trust: the file is the operator's. The password is kept apart from
//! everything that can be shown ([`Host::label`] never holds it).

use std::path::Path;
use std::time::Duration;

use super::{Flavour, SqlError};

/// Where a server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Address {
    Tcp {
        host: String,
        port: Option<u16>,
    },
    /// A socket path (MySQL) or socket directory (PostgreSQL).
    Unix(String),
    /// A PostgreSQL connection URI (its user, password and dbname win).
    Uri(String),
}

#[derive(Debug, Clone)]
pub(super) struct Host {
    pub(super) address: Address,
    /// For logs and errors: the host as written, any URI password hidden.
    pub(super) label: String,
}

pub(super) struct Settings {
    pub(super) hosts: Vec<Host>,
    pub(super) user: String,
    pub(super) password: String,
    pub(super) dbname: String,
    pub(super) dbpath: String,
    pub(super) query: String,
    pub(super) result_format: String,
    pub(super) domain: Vec<String>,
    pub(super) expansion_limit: usize,
    pub(super) connect_timeout: Duration,
    pub(super) query_timeout: Duration,
    pub(super) idle_interval: Duration,
    pub(super) pool_size: usize,
}

impl Settings {
    pub(super) fn read(name: &str, flavour: Flavour, cf: &Path) -> Result<Settings, SqlError> {
        let params = crate::tables::cf::read(cf).map_err(|err| match err {
            crate::tables::cf::CfError::Read { err, .. } => SqlError::Read {
                table: name.to_string(),
                path: cf.to_path_buf(),
                err: err.to_string(),
            },
            other => SqlError::Config {
                table: name.to_string(),
                path: cf.to_path_buf(),
                reason: other.to_string(),
            },
        })?;
        let bad = |reason: String| SqlError::Config {
            table: name.to_string(),
            path: cf.to_path_buf(),
            reason,
        };
        let map = params.values;
        let get = |k: &str| map.get(k).cloned().unwrap_or_default();
        let query = match map.get("query") {
            Some(q) => q.clone(),
            None => legacy_query(&map).map_err(bad)?,
        };
        let hosts = parse_hosts(&get("hosts"), flavour);
        if flavour == Flavour::Sqlite && get("dbpath").is_empty() {
            return Err(bad("sqlite needs dbpath".into()));
        }
        let secs = |k: &str, default: u64| -> Result<Duration, SqlError> {
            map.get(k)
                .map_or(Ok(Duration::from_secs(default)), |v| parse_time(v))
                .map_err(|e| bad(format!("{k}: {e}")))
        };
        let int = |k: &str, default: usize| -> Result<usize, SqlError> {
            map.get(k).map_or(Ok(default), |v| {
                v.parse()
                    .map_err(|_| bad(format!("{k}: not a number: {v:?}")))
            })
        };
        let domain = parse_domain(&get("domain")).map_err(bad)?;
        Ok(Settings {
            hosts,
            user: get("user"),
            password: get("password"),
            dbname: get("dbname"),
            dbpath: get("dbpath"),
            query,
            result_format: map
                .get("result_format")
                .cloned()
                .unwrap_or_else(|| "%s".into()),
            domain,
            expansion_limit: int("expansion_limit", 0)?,
            connect_timeout: secs("connect_timeout", 3)?,
            query_timeout: secs("query_timeout", 3)?,
            idle_interval: secs("idle_interval", 60)?,
            pool_size: int("pool_size", 4)?.max(1),
        })
    }
}

/// The query Postfix builds from the old `table`, `select_field`,
/// `where_field` and `additional_conditions`.
fn legacy_query(map: &std::collections::BTreeMap<String, String>) -> Result<String, String> {
    let get = |k: &str| {
        map.get(k)
            .filter(|v| !v.is_empty())
            .ok_or(format!("neither query nor {k} is set"))
    };
    let (table, select, field) = (get("table")?, get("select_field")?, get("where_field")?);
    let more = map
        .get("additional_conditions")
        .cloned()
        .unwrap_or_default();
    Ok(format!(
        "SELECT {select} FROM {table} WHERE {field}='%s' {more}"
    ))
}

/// `hosts`: names separated by blanks or commas; `unix:/path`,
/// `inet:host[:port]`, `host[:port]`, and for PostgreSQL a
/// `postgresql://` URI or a bare `/path`. None given: `localhost`.
fn parse_hosts(text: &str, flavour: Flavour) -> Vec<Host> {
    let mut hosts: Vec<Host> = text
        .split(|c: char| c == ',' || c.is_ascii_whitespace())
        .filter(|h| !h.is_empty())
        .map(|h| parse_host(h, flavour))
        .collect();
    if hosts.is_empty() && flavour != Flavour::Sqlite {
        hosts.push(parse_host("localhost", flavour));
    }
    hosts
}

fn parse_host(text: &str, flavour: Flavour) -> Host {
    let uri = text.starts_with("postgresql://") || text.starts_with("postgres://");
    if flavour == Flavour::Pgsql && uri {
        return Host {
            address: Address::Uri(text.to_string()),
            label: hide_password(text),
        };
    }
    let rest = text
        .strip_prefix("inet:")
        .or_else(|| text.strip_prefix("unix:"))
        .unwrap_or(text);
    let address = if text.starts_with("unix:") || rest.starts_with('/') {
        Address::Unix(rest.to_string())
    } else {
        // host:port, the port after the last colon if it is a number.
        match rest.rsplit_once(':') {
            Some((host, port)) if port.parse::<u16>().is_ok() => Address::Tcp {
                host: host.trim_matches(['[', ']']).to_string(),
                port: port.parse().ok(),
            },
            _ => Address::Tcp {
                host: rest.to_string(),
                port: None,
            },
        }
    };
    Host {
        address,
        label: text.to_string(),
    }
}

/// A URI with its password (`user:secret@`) replaced by `***`.
fn hide_password(uri: &str) -> String {
    let Some((scheme, rest)) = uri.split_once("://") else {
        return uri.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, hostpart)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***@{hostpart}{tail}")
        }
        None => uri.to_string(),
    }
    .replace_password_query()
}

trait HideQueryPassword {
    fn replace_password_query(self) -> String;
}

impl HideQueryPassword for String {
    /// `?password=…` in a URI's query, hidden too.
    fn replace_password_query(self) -> String {
        match self.find("password=") {
            Some(at) => {
                let end = self[at..].find('&').map_or(self.len(), |e| at + e);
                format!("{}password=***{}", &self[..at], &self[end..])
            }
            None => self,
        }
    }
}

/// `domain`: a list of domain names (blanks or commas between), `!name`
/// negated. Postfix also takes `type:table` and `/file` entries; Sluice
/// does not (refused, not ignored: the list narrows what is looked up).
fn parse_domain(text: &str) -> Result<Vec<String>, String> {
    let items: Vec<String> = text
        .split(|c: char| c == ',' || c.is_ascii_whitespace())
        .filter(|d| !d.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    if let Some(bad) = items
        .iter()
        .find(|d| d.contains(':') || d.trim_start_matches('!').starts_with('/'))
    {
        return Err(format!(
            "domain: {bad:?}: a table or file in the domain list is not supported (list the domains)"
        ));
    }
    Ok(items)
}

/// A time as Postfix writes one: a number with an optional unit (`s`
/// default, `ms`, `m`, `h`).
fn parse_time(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (n, unit) = text.split_at(split);
    let n: u64 = n.parse().map_err(|_| format!("bad time {text:?}"))?;
    Ok(match unit {
        "" | "s" => Duration::from_secs(n),
        "ms" => Duration::from_millis(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => return Err(format!("bad time unit in {text:?}")),
    })
}

/// Does the `domain` list let `key` be looked up? (No list: every key.)
pub(super) fn domain_allows(list: &[String], key: &str) -> bool {
    if list.is_empty() {
        return true;
    }
    let Some(at) = key.rfind('@') else {
        return false;
    };
    let domain = &key[at + 1..];
    if at == 0 {
        // Postfix's check: "@domain" (nothing before the @) is not looked up.
        return false;
    }
    for item in list {
        let (negated, name) = match item.strip_prefix('!') {
            Some(n) => (true, n),
            None => (false, item.as_str()),
        };
        if name.eq_ignore_ascii_case(domain) {
            return !negated;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_passwords() {
        let h = parse_hosts("inet:db1:5433, db2 unix:/run/pg", Flavour::Pgsql);
        assert_eq!(
            h.iter().map(|h| h.address.clone()).collect::<Vec<_>>(),
            [
                Address::Tcp {
                    host: "db1".into(),
                    port: Some(5433)
                },
                Address::Tcp {
                    host: "db2".into(),
                    port: None
                },
                Address::Unix("/run/pg".into()),
            ]
        );
        let h = parse_host("postgresql://u:s3cret@h/db?password=x2&a=b", Flavour::Pgsql);
        assert!(
            !h.label.contains("s3cret") && !h.label.contains("x2"),
            "{}",
            h.label
        );
        assert_eq!(parse_hosts("", Flavour::Mysql)[0].label, "localhost");
    }

    #[test]
    fn domain_list() {
        let list = parse_domain("example.com, !bad.example.com other.test").unwrap();
        assert!(domain_allows(&list, "a@example.com"));
        assert!(domain_allows(&list, "a@OTHER.test"));
        assert!(!domain_allows(&list, "a@bad.example.com"));
        assert!(!domain_allows(&list, "a@sub.example.com"));
        assert!(!domain_allows(&list, "@example.com"));
        assert!(!domain_allows(&list, "example.com"));
        assert!(domain_allows(&[], "anything"));
        assert!(parse_domain("hash:/etc/postfix/domains").is_err());
        assert!(parse_domain("/etc/postfix/domains").is_err());
    }

    #[test]
    fn times() {
        assert_eq!(parse_time("3").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_time("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse_time("x").is_err());
    }
}
