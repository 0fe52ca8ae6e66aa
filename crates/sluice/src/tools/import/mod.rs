//! `sluice import-postfix [DIR] --out OUT` (issue 41, first part): reads a
//! Postfix `main.cf` as postconf does, and `master.cf`'s services
//! (`master.rs`), (`$name` expansion over Postfix
//! 3.7's defaults), translates every parameter it sets by the rules of
//! `rules.rs`, writes the Postfix defaults Sluice does not share
//! (`implied.rs`), and writes `OUT/sluice.toml` and `OUT/report.txt`.
//! The report has one line per parameter read (translated, the same as
//! Sluice's default, not needed, cosmetic, unsupported, unknown, error)
//! and a summary line counting each: nothing is dropped silently.
//!
//! The maps are referenced where they are (Sluice reads Postfix's
//! `type:name` tables itself, text files without `postmap`).
//!
//! Trust: the Postfix directory is untrusted input (see `maincf.rs`): it
//! is read, never executed; only `main.cf` and `master.cf` under DIR are
//! opened, and the
//! output directory is created new (an existing one is refused, so
//! nothing is overwritten). The written configuration is loaded back
//! (Sluice's parser and validation) before the tool says it is done.

mod implied;
pub mod maincf;
mod master;
pub mod mastercf;
pub mod out;
pub mod postfix;
pub mod report;
mod rules;
pub mod translate;

use std::path::{Path, PathBuf};

use maincf::{MainCf, ParseError};
use postfix::Postfix;
pub use report::Report;

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{path}: {err}")]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{path}: {err}")]
    Parse { path: PathBuf, err: ParseError },
    #[error("{path}: {err}")]
    Master {
        path: PathBuf,
        err: mastercf::MasterError,
    },
    #[error("{0}: exists already (give a new directory; nothing is overwritten)")]
    OutExists(PathBuf),
    #[error("{path}: {err}")]
    Write { path: PathBuf, err: std::io::Error },
}

/// What an import made: the configuration's text and the report.
pub struct Imported {
    pub toml: String,
    pub report: Report,
    /// Why the written configuration does not load in Sluice, if it does
    /// not (a restriction or table Sluice refuses).
    pub load_error: Option<String>,
}

/// Translates the main.cf of `dir` (`hostname` stands for the machine's
/// name where `myhostname` is unset).
pub fn translate(dir: &Path, hostname: &str) -> Result<Imported, ImportError> {
    let path = dir.join("main.cf");
    let text = read_limited(&path)?;
    let main = MainCf::parse(&text).map_err(|err| ImportError::Parse {
        path: path.clone(),
        err,
    })?;
    let services = master_cf(dir)?;
    let pf = Postfix::new(main, hostname);
    let out = translate::main_cf(&pf, &services);
    let toml = header(dir) + &toml::to_string(&out.toml).unwrap_or_default();
    let load_error = loads(&toml).err();
    Ok(Imported {
        toml,
        report: out.report,
        load_error,
    })
}

/// Writes `sluice.toml` and `report.txt` into the new directory `out`.
pub fn write(imported: &Imported, out: &Path) -> Result<(), ImportError> {
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |err| ImportError::Write { path, err }
    };
    match std::fs::create_dir(out) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(ImportError::OutExists(out.to_path_buf()))
        }
        r => r.map_err(err(out))?,
    }
    let conf = out.join("sluice.toml");
    std::fs::write(&conf, &imported.toml).map_err(err(&conf))?;
    let report = out.join("report.txt");
    std::fs::write(&report, imported.report.render()).map_err(err(&report))?;
    Ok(())
}

/// master.cf's services (none when there is no master.cf).
fn master_cf(dir: &Path) -> Result<Vec<mastercf::Service>, ImportError> {
    let path = dir.join("master.cf");
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text = read_limited(&path)?;
    mastercf::parse(&text).map_err(|err| ImportError::Master { path, err })
}

/// The file, if it is no bigger than main.cf may be.
fn read_limited(path: &Path) -> Result<Vec<u8>, ImportError> {
    use std::io::Read;
    let read = |err| ImportError::Read {
        path: path.to_path_buf(),
        err,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut text = Vec::new();
    let limit = maincf::MAX_BYTES as u64 + 1;
    file.take(limit).read_to_end(&mut text).map_err(read)?;
    Ok(text)
}

fn header(dir: &Path) -> String {
    format!(
        "# Made by `sluice import-postfix` from {}/main.cf.\n\
         # Every parameter it read is in report.txt, with what became of it.\n\n",
        dir.display()
    )
}

/// Whether Sluice loads the text: parsed and validated as `serve` would.
fn loads(text: &str) -> Result<(), String> {
    let config: crate::config::Config = toml::from_str(text).map_err(|e| e.to_string())?;
    config.validate().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Debian main.cf of a Dovecot virtual-mailbox site: every line
    /// has a verdict, the result loads, and Postfix's defaults that
    /// Sluice lacks are written.
    #[test]
    fn a_dovecot_site_translates_and_loads() {
        let dir = tempfile::tempdir().unwrap();
        let main = include_str!("testdata/dovecot-site.main.cf");
        std::fs::write(dir.path().join("main.cf"), main).unwrap();
        let master = include_str!("testdata/dovecot-site.master.cf");
        std::fs::write(dir.path().join("master.cf"), master).unwrap();
        let made = translate(dir.path(), "ignored.example").unwrap();
        assert_eq!(made.load_error, None, "{}", made.toml);
        let r = &made.report;
        let set = main
            .lines()
            .filter(|l| l.contains('=') && !l.starts_with('#'));
        let services = master.lines().filter(|l| !l.starts_with([' ', '\t', '#']));
        assert_eq!(r.entries.len(), set.count() + services.count());
        let word = |name: &str| {
            r.entries
                .iter()
                .find(|e| e.name == name)
                .map(|e| e.verdict.word())
        };
        assert_eq!(word("virtual_transport"), Some("translated"));
        assert_eq!(word("my_custom_thing"), Some("unknown"));
        assert_eq!(word("myorigin"), Some("unsupported"));
        assert!(made
            .toml
            .contains("transport = \"lmtp:unix:/var/spool/postfix/private/dovecot-lmtp\""));
        assert!(made.toml.contains("listen = [\"0.0.0.0:25\", \"[::]:25\"]"));
        assert!(made
            .toml
            .contains("mynetworks = [\"127.0.0.0/8\", \"::ffff:127.0.0.0/104\", \"::1/128\"]"));
        assert!(r.render().ends_with(&format!("{}\n", r.summary())));
        // master.cf: submission on both protocols, with its own lists; the
        // reinjection listener without filter, checks or milters; an
        // unused pipe service not needed; -o of what Sluice lacks said.
        let config: crate::config::Config = toml::from_str(&made.toml).unwrap();
        let l = &config.smtpd.listeners;
        assert_eq!(l.len(), 3, "{}", made.toml);
        assert_eq!(l[0].listen.port(), 587);
        assert_eq!(
            l[0].restrictions.recipient.as_deref(),
            Some("permit_sasl_authenticated,reject")
        );
        assert!(l[2]
            .content_filter
            .as_ref()
            .is_some_and(|f| f.hop().is_none()));
        assert_eq!(word("maildrop"), Some("not-needed"));
        assert_eq!(word("submission"), Some("unsupported"));
        let out = dir.path().join("out");
        write(&made, &out).unwrap();
        assert!(matches!(write(&made, &out), Err(ImportError::OutExists(_))));
    }

    #[test]
    fn hostile_main_cf_gives_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("main.cf");
        std::fs::write(&path, "a = $b\nb = $a\nc = ok\n").unwrap();
        let made = translate(dir.path(), "h.example").unwrap();
        let a = &made.report.entries[0];
        assert_eq!(a.verdict.word(), "error");
        std::fs::write(&path, b"x = 1\n\x00\x01binary").unwrap();
        assert!(matches!(
            translate(dir.path(), "h.example"),
            Err(ImportError::Parse { .. })
        ));
        std::fs::write(&path, vec![b'#'; maincf::MAX_BYTES + 10]).unwrap();
        assert!(matches!(
            translate(dir.path(), "h.example"),
            Err(ImportError::Parse {
                err: ParseError::TooLarge,
                ..
            })
        ));
    }
}
