//! Postfix's parameter files for tables (`ldap_table(5)`, `pgsql_table(5)`
//! …): `name = value` per logical line, as main.cf is written —
//! continuation lines, `#` comment lines, blanks around `=` — read into a
//! map. A later line for the same name wins, as in main.cf.
//!
//! Pure apart from [`read`]. Trust: the file is the operator's; nothing in
//! it is executed, and a line that is not `name = value` is an error
//! naming its line, never silently dropped (it may have been meant as a
//! filter or a password).

use std::collections::BTreeMap;
use std::path::Path;

use super::pattern::lines::logical_lines;

/// Why a parameter file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CfError {
    #[error("{path}: {err}")]
    Read { path: String, err: std::io::Error },
    #[error("{path}, line {line}: expected \"name = value\"")]
    Syntax { path: String, line: usize },
    #[error("{path}: {name} = {value:?}: {why}")]
    Unsupported {
        path: String,
        name: String,
        value: String,
        why: &'static str,
    },
}

/// The parameters of one file, and where they came from.
#[derive(Debug, Clone)]
pub struct Params {
    pub path: String,
    pub values: BTreeMap<String, String>,
}

impl Params {
    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// An error about `name`'s value.
    pub fn unsupported(&self, name: &str, why: &'static str) -> CfError {
        CfError::Unsupported {
            path: self.path.clone(),
            name: name.to_string(),
            value: self.get(name).unwrap_or_default().to_string(),
            why,
        }
    }
}

/// Reads and parses the file at `path`.
pub fn read(path: &Path) -> Result<Params, CfError> {
    let shown = path.display().to_string();
    let text = std::fs::read(path).map_err(|err| CfError::Read {
        path: shown.clone(),
        err,
    })?;
    parse(&String::from_utf8_lossy(&text), &shown)
}

/// Parses a parameter file's text; `path` names it in errors.
pub fn parse(text: &str, path: &str) -> Result<Params, CfError> {
    let (lines, orphans) = logical_lines(text);
    if let Some(&line) = orphans.first() {
        return Err(CfError::Syntax {
            path: path.to_string(),
            line,
        });
    }
    let mut values = BTreeMap::new();
    for l in lines {
        let (name, value) = l.text.split_once('=').ok_or(CfError::Syntax {
            path: path.to_string(),
            line: l.line,
        })?;
        let name = name.trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(CfError::Syntax {
                path: path.to_string(),
                line: l.line,
            });
        }
        values.insert(name.to_string(), value.trim().to_string());
    }
    Ok(Params {
        path: path.to_string(),
        values,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_value_lines_with_continuations_and_comments() {
        let p = parse(
            "# comment\nserver_host = ldap://a\n   ldap://b\nquery_filter=(mail=%s)\n\nbind_pw = x = y\nbind_pw = last\n",
            "f",
        )
        .unwrap();
        assert_eq!(p.get("server_host"), Some("ldap://a   ldap://b"));
        assert_eq!(p.get("query_filter"), Some("(mail=%s)"));
        assert_eq!(p.get("bind_pw"), Some("last"));
        assert!(matches!(
            parse("a = b\nno equals sign\n", "f"),
            Err(CfError::Syntax { line: 2, .. })
        ));
        assert!(matches!(
            parse("  leading = x\n", "f"),
            Err(CfError::Syntax { line: 1, .. })
        ));
    }
}
