//! main.cf parameter by parameter: each one the file sets gets a
//! [`Verdict`] and, when translated, Sluice settings in the output
//! table; then the Postfix defaults that differ from Sluice's (the
//! host name, the listeners, the relay restrictions, local delivery for
//! `mydestination`) are written out too, so the translation decides as
//! Postfix does with those parameters unset.
//!
//! The rules follow docs/CONFIG.md's "From Postfix: parameter by
//! parameter"; a parameter without a rule is `unsupported` (never
//! dropped silently). Values are expanded first (`$name`), as Postfix
//! uses them.
//!
//! Trust: values are the file's; they only ever become TOML strings,
//! numbers and booleans (the TOML writer quotes them), never commands.

use super::postfix::{words, Postfix};
use super::report::{Entry, Report, Verdict};
use super::rules::{rule, Kind, Rule};

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

/// Translates every parameter main.cf sets, master.cf's services, then
/// the implied defaults.
pub fn main_cf(pf: &Postfix, services: &[super::mastercf::Service]) -> Out {
    let mut out = Out {
        toml: toml::Table::new(),
        report: Report::default(),
    };
    for p in &pf.main.params {
        let verdict = match pf.get(&p.name) {
            Err(e) => Verdict::Error(e.to_string()),
            Ok(value) => one(pf, &mut out, &p.name, &value),
        };
        out.report.entries.push(Entry {
            source: format!("main.cf:{}", p.line),
            name: p.name.clone(),
            verdict,
        });
    }
    super::master::services(pf, &mut out, services);
    super::implied::defaults(pf, &mut out);
    out
}

/// One parameter's verdict (and its settings written).
pub(super) fn one(pf: &Postfix, out: &mut Out, name: &str, value: &str) -> Verdict {
    if !pf.known(name) {
        return match restriction_class(pf, name) {
            true => super::rules::class(out, name, value),
            false => Verdict::Unknown,
        };
    }
    match rule(name) {
        Rule::To(key, kind) => match convert(kind, value) {
            Ok(v) => {
                out.set(&key, v);
                Verdict::Translated(vec![key])
            }
            Err(why) => Verdict::Unsupported(why),
        },
        Rule::With(f) => f(pf, out, value),
        Rule::NotNeeded(why) => Verdict::NotNeeded(why.into()),
        Rule::Cosmetic(why) => Verdict::Cosmetic(why.into()),
        Rule::Unsupported(why) => Verdict::Unsupported(why.into()),
        Rule::None if pf.is_default(name, value) => {
            Verdict::Same("set to Postfix's default, which Sluice has too".into())
        }
        Rule::None => Verdict::Unsupported("no Sluice equivalent yet".into()),
    }
}

/// Whether `name` is one of `smtpd_restriction_classes`.
fn restriction_class(pf: &Postfix, name: &str) -> bool {
    let classes = pf.get("smtpd_restriction_classes").unwrap_or_default();
    words(&classes).iter().any(|c| c == name)
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
