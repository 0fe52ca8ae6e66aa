//! `sluice config`: Postfix's `postconf`. Prints the settings in force
//! (the file's and every default), only those set (`-n`), only the
//! defaults (`-d`), one key or section, as TOML that can be pasted back
//! into a configuration file, or as JSON. `--running` asks the daemon what
//! it loaded instead of reading the file.
//!
//! Trust: the configuration is the operator's. Secrets in it (an LDAP
//! bind password, the shadow link's secret, a password in a Redis URL)
//! are printed as `(hidden)` unless `--show-secrets` is given, so the
//! output can be pasted into a ticket.

use super::source::Source;
use super::{Config, ConfigError};

/// Which settings to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// Every setting in force (postconf).
    Effective,
    /// Those set in the file or with `-o` (postconf -n).
    Set,
    /// The defaults (postconf -d).
    Defaults,
}

/// What a secret is printed as.
pub const HIDDEN: &str = "(hidden)";

/// Keys whose values are secrets, wherever they appear.
const SECRET_KEYS: &[&str] = &["bind_password", "shadow_secret"];

/// The settings `which` of `source` (the effective values), as a TOML
/// table; secrets hidden unless `secrets`.
pub fn settings(source: &Source, which: Which, secrets: bool) -> Result<toml::Table, ConfigError> {
    let effective = |config: Config| match toml::Value::try_from(config) {
        Ok(toml::Value::Table(t)) => Ok(t),
        Ok(_) => Err(ConfigError::Invalid(
            "the configuration is not a table".into(),
        )),
        Err(e) => Err(ConfigError::Invalid(format!(
            "cannot print the configuration: {e}"
        ))),
    };
    let mut table = match which {
        Which::Effective => effective(source.load()?)?,
        Which::Defaults => effective(Config::default())?,
        Which::Set => {
            let all = effective(source.load()?)?;
            only_set(&all, &source.document()?)
        }
    };
    if !secrets {
        hide_secrets(&mut table);
    }
    Ok(table)
}

/// The values of `all` at the keys `set` has (tables recursively).
fn only_set(all: &toml::Table, set: &toml::Table) -> toml::Table {
    let mut out = toml::Table::new();
    for (key, given) in set {
        let Some(value) = all.get(key) else { continue };
        let kept = match (value, given) {
            (toml::Value::Table(a), toml::Value::Table(s)) => toml::Value::Table(only_set(a, s)),
            (v, _) => v.clone(),
        };
        out.insert(key.clone(), kept);
    }
    out
}

/// Replaces secrets by `(hidden)`, wherever they are in `table`.
pub fn hide_secrets(table: &mut toml::Table) {
    for (key, value) in table.iter_mut() {
        match value {
            toml::Value::Table(t) => hide_secrets(t),
            toml::Value::Array(items) => {
                for item in items.iter_mut() {
                    if let toml::Value::Table(t) = item {
                        hide_secrets(t);
                    }
                }
            }
            toml::Value::String(s) if SECRET_KEYS.contains(&key.as_str()) && !s.is_empty() => {
                *s = HIDDEN.into();
            }
            toml::Value::String(s) if key.ends_with("_url") => *s = without_password(s),
            _ => {}
        }
    }
}

/// A URL with the password of its user info (`scheme://user:pass@host`)
/// replaced by `(hidden)`.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((userinfo, host)) = rest.split_once('@') else {
        return url.to_string();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:{HIDDEN}@{host}"),
        None => url.to_string(),
    }
}

/// The part of `table` at a dotted `key` (`smtpd`, `smtpd.mynetworks`),
/// inside its parent sections so that it prints as it would be written
/// in a file; None when there is no such key.
pub fn select(table: &toml::Table, key: &str) -> Option<toml::Table> {
    let path: Vec<&str> = key.split('.').collect();
    let mut value = table.get(path[0])?;
    for k in &path[1..] {
        value = value.get(k)?;
    }
    let mut out = toml::Table::new();
    out.insert(path[path.len() - 1].to_string(), value.clone());
    for k in path[..path.len() - 1].iter().rev() {
        let mut parent = toml::Table::new();
        parent.insert(k.to_string(), toml::Value::Table(out));
        out = parent;
    }
    Some(out)
}

/// TOML text of a table (sections after the plain keys, as toml writes).
pub fn to_toml(table: &toml::Table) -> String {
    toml::to_string(table).unwrap_or_else(|e| format!("# cannot print as TOML: {e}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(text: &str) -> (tempfile::TempDir, Source) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(&path, text).unwrap();
        let source = Source::new(Some(&path), Vec::new());
        (dir, source)
    }

    #[test]
    fn set_shows_only_what_the_file_sets_with_effective_values() {
        let (_d, s) = source(
            "hostname = \"MX.Example.TEST\"\n[smtpd]\nmynetworks = [\"10.0.0.1\"]\n\
             [tables.users]\nkind = \"static\"\npath = \"/etc/sluice/users\"\n",
        );
        let set = settings(&s, Which::Set, false).unwrap();
        assert_eq!(
            set["hostname"].as_str(),
            Some("mx.example.test"),
            "canonical"
        );
        assert_eq!(set["smtpd"]["mynetworks"][0].as_str(), Some("10.0.0.1/32"));
        assert_eq!(set["smtpd"].as_table().unwrap().len(), 1);
        assert!(set.get("queue").is_none());
        let all = settings(&s, Which::Effective, false).unwrap();
        assert_eq!(all["queue"]["minimal_backoff_secs"].as_integer(), Some(300));
        // What it prints parses back to the same configuration.
        let text = to_toml(&all);
        let again: Config = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(again.hostname.as_str(), "mx.example.test");
        assert_eq!(
            to_toml(&toml::Table::try_from(again).unwrap()),
            text,
            "round trip"
        );
    }

    #[test]
    fn secrets_are_hidden_unless_asked_for() {
        let (_d, s) = source(
            "[tables.dir]\nkind = \"ldap\"\nuris = [\"ldap://127.0.0.1\"]\nbase = \"dc=x\"\n\
             bind_dn = \"cn=a\"\nbind_password = \"s3cret\"\n",
        );
        let text = to_toml(&settings(&s, Which::Set, false).unwrap());
        assert!(!text.contains("s3cret") && text.contains(HIDDEN), "{text}");
        let text = to_toml(&settings(&s, Which::Set, true).unwrap());
        assert!(text.contains("s3cret"), "{text}");
        assert_eq!(
            without_password("redis://:pw@127.0.0.1:6379/0"),
            "redis://:(hidden)@127.0.0.1:6379/0"
        );
        assert_eq!(without_password("redis://127.0.0.1"), "redis://127.0.0.1");
    }

    #[test]
    fn one_key_prints_inside_its_section() {
        let (_d, s) = source("[smtpd]\nmax_sessions = 7\n");
        let all = settings(&s, Which::Effective, false).unwrap();
        let one = select(&all, "smtpd.max_sessions").unwrap();
        assert_eq!(to_toml(&one), "[smtpd]\nmax_sessions = 7\n");
        assert!(select(&all, "smtpd.nope").is_none());
        assert!(select(&all, "hostname").is_some());
    }
}
