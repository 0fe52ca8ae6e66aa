//! A configuration error on one line, for the mail log (a refused
//! reload): the file, line and column, and toml's message without its
//! source excerpt. A long list of the keys a table accepts (`[smtpd]` has
//! about fifty) is cut to the nearest key, or to its first few.
//!
//! `check-config` prints the full multi-line form ([`ConfigError`]'s
//! `Display`); this is only the log's.

use super::ConfigError;

/// Keys named at most when none is close to the one given.
const LISTED: usize = 6;

impl ConfigError {
    /// `sluice.toml: line 14, column 1: unknown field
    /// `client_message_rate_limt` (did you mean `client_message_rate_limit`?)`.
    pub fn one_line(&self) -> String {
        match self {
            ConfigError::Parse {
                path,
                line,
                column,
                err,
            } => {
                let at = match (line, column) {
                    (Some(l), Some(c)) => format!("line {l}, column {c}: "),
                    (Some(l), None) => format!("line {l}: "),
                    _ => String::new(),
                };
                let message = err.message().trim().replace(['\n', '\r'], " ");
                format!("{}: {at}{}", path.display(), shorten(&message))
            }
            other => other.to_string().replace(['\n', '\r'], " "),
        }
    }
}

/// toml's "unknown field `x`, expected one of `a`, `b`, …" with the list
/// replaced by the closest key, or cut to its first [`LISTED`].
fn shorten(message: &str) -> String {
    let Some((head, list)) = message.split_once(", expected one of ") else {
        return message.to_string();
    };
    let keys: Vec<&str> = list.split(", ").map(|k| k.trim_matches('`')).collect();
    let given = head.split('`').nth(1).unwrap_or_default();
    let nearest = keys
        .iter()
        .map(|k| (distance(given, k), *k))
        .filter(|(d, _)| *d <= 3.max(given.len() / 4))
        .min();
    if let Some((_, key)) = nearest {
        return format!("{head} (did you mean `{key}`?)");
    }
    if keys.len() <= LISTED {
        return message.to_string();
    }
    let first: Vec<String> = keys[..LISTED].iter().map(|k| format!("`{k}`")).collect();
    format!(
        "{head}, expected one of {}, … ({} keys; see docs/CONFIG.md)",
        first.join(", "),
        keys.len()
    )
}

/// Edit distance (Levenshtein) between two short keys.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let replaced = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = replaced.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_key_is_named_with_the_nearest_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sluice.toml");
        let text = "hostname = \"a\"\n\n[smtpd]\nclient_message_rate_limt = 3\n";
        std::fs::write(&path, text).unwrap();
        let err = super::super::Config::load(&path).unwrap_err();
        let line = err.one_line();
        assert!(!line.contains('\n') && !line.contains(" | "), "{line}");
        assert!(line.contains("line 4, column 1: "), "{line}");
        assert!(line.contains("`client_message_rate_limt`"), "{line}");
        assert!(
            line.ends_with("(did you mean `client_message_rate_limit`?)"),
            "{line}"
        );
        assert!(line.len() < 200, "{line}");
    }

    #[test]
    fn a_key_like_none_lists_the_first_few() {
        let message = "unknown field `zzz`, expected one of `aaaaaa`, `bbbbbb`, `cccccc`, `dddddd`, `eeeeee`, `ffffff`, `gggggg`, `hhhhhh`";
        assert_eq!(
            shorten(message),
            "unknown field `zzz`, expected one of `aaaaaa`, `bbbbbb`, `cccccc`, `dddddd`, `eeeeee`, `ffffff`, … (8 keys; see docs/CONFIG.md)"
        );
        assert_eq!(shorten("invalid type"), "invalid type");
        assert_eq!(distance("limt", "limit"), 1);
    }
}
