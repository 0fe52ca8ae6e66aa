//! Where a configuration comes from: a file or the embedded default, with
//! `-o key=value` overrides on top (Postfix's `postfix -o`, `smtpd -o`).
//!
//! The same `Source` is read at start and at every reload, so an override
//! given on the command line keeps applying after a SIGHUP. `document()`
//! is what was set explicitly (the file's keys, the embedded default's
//! and the overrides): `sluice config -n` prints it with the effective
//! values.
//!
//! The embedded default (no file) is the quick start: it delivers mail
//! for `localhost` and the machine's host name to Maildirs under
//! `./var/mail/<user>/`, as Postfix's default `mydestination =
//! $myhostname, localhost` delivers to local users, so a first message
//! can be read and its bounces land. Trust: the file and the command line
//! are the operator's; errors name the key at fault.
// libc calls the standard library does not wrap; each block says why
// it is sound.
#![allow(unsafe_code)]

use std::path::{Path, PathBuf};

use super::{Config, ConfigError};

/// A configuration's origin: a file (or none: the embedded default) and
/// the overrides given with `-o`, in order (a later one wins).
#[derive(Debug, Clone, Default)]
pub struct Source {
    pub path: Option<PathBuf>,
    pub overrides: Vec<Override>,
}

/// One `-o key=value`: a dotted key (`smtpd.listen`) and a TOML value.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    pub key: Vec<String>,
    /// The value as given (parsed as TOML when it parses, else a string).
    pub value: toml::Value,
}

impl std::str::FromStr for Override {
    type Err = ConfigError;
    /// `key=value`. The value is TOML (`25`, `true`, `["a", "b"]`,
    /// `"text"`); anything else is taken as a string, so
    /// `-o hostname=mx.example.com` needs no quotes.
    fn from_str(text: &str) -> Result<Override, ConfigError> {
        let bad = |why: &str| ConfigError::Invalid(format!("-o {text}: {why}"));
        let (key, value) = text.split_once('=').ok_or_else(|| bad("want key=value"))?;
        let key: Vec<String> = key
            .trim()
            .split('.')
            .map(|k| k.trim().to_string())
            .collect();
        if key.iter().any(|k| k.is_empty()) {
            return Err(bad("want a dotted key such as smtpd.listen"));
        }
        let value = value.trim();
        let parsed = format!("v = {value}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"));
        let value = parsed.unwrap_or_else(|| toml::Value::String(value.to_string()));
        Ok(Override { key, value })
    }
}

impl Source {
    /// A file, or the embedded default when `path` is None.
    pub fn new(path: Option<&Path>, overrides: Vec<Override>) -> Source {
        Source {
            path: path.map(Path::to_path_buf),
            overrides,
        }
    }

    /// Reads, overrides, parses and checks the configuration.
    pub fn load(&self) -> Result<Config, ConfigError> {
        if self.path.is_some() && self.overrides.is_empty() {
            // Straight from the text: TOML's errors keep their line.
            return Config::load(self.path.as_deref().unwrap_or(Path::new("")));
        }
        let document = self.document()?;
        let config: Config = toml::Value::Table(document).try_into().map_err(|err| {
            ConfigError::Invalid(format!("{} (with -o overrides): {err}", self.name()))
        })?;
        config.validate()?;
        Ok(config)
    }

    /// What was set explicitly: the file's settings (or the embedded
    /// default's), with the overrides applied.
    pub fn document(&self) -> Result<toml::Table, ConfigError> {
        let mut table = match &self.path {
            Some(path) => read_table(path)?,
            None => toml::Table::new(),
        };
        let defaults = toml::Value::try_from(Config::default())
            .map_err(|e| ConfigError::Invalid(format!("the defaults: {e}")))?;
        for o in &self.overrides {
            set(&mut table, o, &defaults)?;
        }
        if self.path.is_none() {
            embedded(&mut table);
        }
        Ok(table)
    }

    /// The file's name, or `the embedded default`.
    pub fn name(&self) -> String {
        match &self.path {
            Some(path) => path.display().to_string(),
            None => "the embedded default".into(),
        }
    }
}

fn read_table(path: &Path) -> Result<toml::Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Read {
        path: path.to_path_buf(),
        err,
    })?;
    text.parse::<toml::Table>().map_err(|err| {
        let (line, column) = super::position(&text, err.span().map(|s| s.start));
        ConfigError::Parse {
            path: path.to_path_buf(),
            line,
            column,
            err: Box::new(err),
        }
    })
}

/// Sets one override. A list setting given a plain string takes it as
/// Postfix writes lists: items separated by commas or spaces.
fn set(table: &mut toml::Table, o: &Override, defaults: &toml::Value) -> Result<(), ConfigError> {
    let bad = |why: String| ConfigError::Invalid(format!("-o {}: {why}", o.key.join(".")));
    let default = o.key.iter().try_fold(defaults, |v, k| v.get(k));
    let value = match (&o.value, default) {
        (toml::Value::String(s), Some(toml::Value::Array(_))) => toml::Value::Array(
            s.split([',', ' '])
                .filter(|item| !item.is_empty())
                .map(|item| toml::Value::String(item.to_string()))
                .collect(),
        ),
        (value, _) => value.clone(),
    };
    let (last, parents) = o.key.split_last().ok_or_else(|| bad("empty key".into()))?;
    let mut here = table;
    for k in parents {
        let next = here
            .entry(k.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        here = match next {
            toml::Value::Table(t) => t,
            _ => return Err(bad(format!("{k} is not a section"))),
        };
    }
    here.insert(last.clone(), value);
    Ok(())
}

/// The embedded default's own settings, where not overridden: the host
/// name, and local delivery for it and `localhost` into
/// `<data_dir>/mail/<user>/`.
fn embedded(table: &mut toml::Table) {
    let hostname = match table.get("hostname").and_then(toml::Value::as_str) {
        Some(name) => name.to_string(),
        None => system_hostname(),
    };
    table
        .entry("hostname")
        .or_insert_with(|| toml::Value::String(hostname.clone()));
    let local = table
        .entry("local")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let Some(local) = local.as_table_mut() else {
        return; // not a table: deserializing says so
    };
    let mut domains = vec![toml::Value::String(hostname.to_ascii_lowercase())];
    if !hostname.eq_ignore_ascii_case("localhost") {
        domains.push(toml::Value::String("localhost".into()));
    }
    local
        .entry("domains")
        .or_insert_with(|| toml::Value::Array(domains));
    local
        .entry("maildir_template")
        .or_insert_with(|| toml::Value::String("{base}/{localpart}".into()));
}

/// The machine's host name when it is a valid domain name (Postfix's
/// `myhostname` default), else `localhost`.
pub fn system_hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at
    // most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    match rc == 0 && name.parse::<super::names::Domain>().is_ok() {
        true => name,
        false => "localhost".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(text: &str) -> Override {
        text.parse().unwrap()
    }

    #[test]
    fn overrides_parse_as_toml_or_text() {
        assert_eq!(o("smtpd.max_sessions=7").value, toml::Value::Integer(7));
        assert_eq!(
            o("hostname=mx.example.com").value,
            toml::Value::String("mx.example.com".into())
        );
        assert!("novalue".parse::<Override>().is_err());
        assert!("a..b=1".parse::<Override>().is_err());
    }

    #[test]
    fn overrides_apply_over_the_embedded_default() {
        let source = Source::new(
            None,
            vec![
                o("smtpd.listen=127.0.0.1:2626, 127.0.0.2:2626"),
                o("hostname=mx.example.test"),
                o("queue.minimal_backoff_secs=60"),
            ],
        );
        let config = source.load().unwrap();
        assert_eq!(config.smtpd.listen.len(), 2);
        assert_eq!(config.hostname.as_str(), "mx.example.test");
        assert_eq!(config.queue.minimal_backoff_secs, 60);
        let domains: Vec<&str> = config.local.domains.iter().map(|d| d.as_str()).collect();
        assert_eq!(domains, ["mx.example.test", "localhost"]);
        assert_eq!(config.local.maildir_template, "{base}/{localpart}");
    }

    #[test]
    fn a_bad_override_names_its_key() {
        let source = Source::new(None, vec![o("smtpd.max_sesions=3")]);
        let err = source.load().unwrap_err().to_string();
        assert!(err.contains("max_sesions"), "{err}");
        let source = Source::new(None, vec![o("hostname.x=3")]);
        assert!(source.load().is_err());
    }

    #[test]
    fn a_file_without_overrides_keeps_its_line_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(&path, "hostname = \"a\"\n\n[smtpd]\nmax_sesions = 3\n").unwrap();
        let err = Source::new(Some(&path), Vec::new()).load().unwrap_err();
        assert_eq!(err.line(), Some(4));
        let with = Source::new(Some(&path), vec![o("smtpd.max_sessions=3")]);
        assert!(with.load().unwrap_err().to_string().contains("max_sesions"));
        // A file has no embedded local domains.
        std::fs::write(&path, "hostname = \"a\"\n").unwrap();
        let config = Source::new(Some(&path), Vec::new()).load().unwrap();
        assert!(config.local.domains.is_empty());
    }
}
