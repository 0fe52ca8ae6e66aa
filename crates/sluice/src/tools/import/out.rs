//! The translation's output and how Postfix's values become TOML: the
//! table being written (dotted Sluice keys), the report beside it, and
//! the conversions (times, lists, tables, yes/no).
//!
//! Trust: values are the imported file's; they only ever become TOML
//! strings, numbers and booleans here.

use super::postfix::words;
use super::report::Report;

/// How a value converts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Str,
    Int,
    Bool,
    /// Words separated by commas and blanks.
    List,
    /// `type:name` tables (a `{…}` list kept whole).
    Maps,
    /// A time, in seconds; a bare number is in this unit.
    Secs(char),
}

/// The translation under way: the output table and the report.
pub struct Out {
    pub toml: toml::Table,
    pub report: Report,
}

impl Out {
    /// Sets the dotted Sluice `key` to `value`.
    pub fn set(&mut self, key: &str, value: toml::Value) {
        let mut parts: Vec<&str> = key.split('.').collect();
        let last = parts.pop().unwrap_or(key);
        let mut table = &mut self.toml;
        for p in parts {
            let entry = table
                .entry(p.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if !entry.is_table() {
                *entry = toml::Value::Table(toml::Table::new());
            }
            table = entry.as_table_mut().expect("made a table above");
        }
        table.insert(last.to_string(), value);
    }

    pub fn has(&self, key: &str) -> bool {
        let mut table = &self.toml;
        let mut parts = key.split('.').peekable();
        while let Some(p) = parts.next() {
            match (table.get(p), parts.peek()) {
                (Some(_), None) => return true,
                (Some(toml::Value::Table(t)), Some(_)) => table = t,
                _ => return false,
            }
        }
        false
    }
}

/// A value as the TOML a Sluice setting of `kind` takes.
pub fn convert(kind: Kind, value: &str) -> Result<toml::Value, String> {
    use toml::Value;
    Ok(match kind {
        Kind::Str => Value::String(value.to_string()),
        Kind::Int => Value::Integer(
            value
                .trim()
                .parse()
                .map_err(|_| format!("not a number: {value:?}"))?,
        ),
        Kind::Bool => Value::Boolean(boolean(value)?),
        Kind::List => Value::Array(words(value).into_iter().map(Value::String).collect()),
        Kind::Maps => Value::Array(maps(value).into_iter().map(Value::String).collect()),
        Kind::Secs(unit) => Value::Integer(seconds(value, unit)?),
    })
}

fn boolean(value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "yes" | "true" => Ok(true),
        "no" | "false" => Ok(false),
        _ => Err(format!("not yes or no: {value:?}")),
    }
}

/// A Postfix time (`300s`, `5d`, `2h`; a bare number in `unit`) in
/// seconds.
pub fn seconds(value: &str, unit: char) -> Result<i64, String> {
    let v = value.trim();
    let (num, u) = match v.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&v[..i], c),
        _ => (v, unit),
    };
    let n: i64 = num.parse().map_err(|_| format!("not a time: {value:?}"))?;
    let scale = match u.to_ascii_lowercase() {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86400,
        'w' => 604_800,
        _ => return Err(format!("not a time unit: {value:?}")),
    };
    n.checked_mul(scale)
        .ok_or_else(|| format!("too large: {value:?}"))
}

/// A list of `type:name` tables, a `{…}` member list kept whole
/// (`unionmap:{a, b}`).
pub fn maps(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0usize;
    for c in value.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' | ' ' | '\t' if depth == 0 => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_convert_as_postfix_reads_them() {
        assert_eq!(seconds("300", 's'), Ok(300));
        assert_eq!(seconds("5d", 's'), Ok(432_000));
        assert_eq!(seconds("5", 'd'), Ok(432_000));
        assert!(seconds("5x", 's').is_err() && seconds("", 's').is_err());
        assert_eq!(
            maps("hash:/a, unionmap:{pcre:/b, texthash:/c} ldap:/d"),
            vec!["hash:/a", "unionmap:{pcre:/b, texthash:/c}", "ldap:/d"]
        );
        assert_eq!(
            convert(Kind::List, "a, b\tc"),
            Ok(toml::Value::Array(vec!["a".into(), "b".into(), "c".into()]))
        );
        assert!(convert(Kind::Bool, "maybe").is_err());
    }

    #[test]
    fn dotted_keys_make_tables() {
        let mut out = Out {
            toml: toml::Table::new(),
            report: Report::default(),
        };
        out.set("smtpd.banner", "x".into());
        out.set("hostname", "h".into());
        assert!(out.has("smtpd.banner") && out.has("hostname") && !out.has("smtpd.listen"));
        assert_eq!(out.toml["smtpd"]["banner"].as_str(), Some("x"));
    }
}
