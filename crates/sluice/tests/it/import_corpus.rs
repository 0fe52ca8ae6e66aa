//! `sluice import-postfix` on a corpus of site shapes (issue 41): each
//! directory under `tests/import/` is a main.cf and master.cf written
//! after what public installers and guides configure (a Dovecot virtual
//! site, a send-only relay through a provider, a spam-filtering gateway
//! with postscreen and amavisd-new, a control panel on SQL maps). The
//! report and the translated configuration of each are golden files:
//! `report.golden` (with whether the result loads) and
//! `sluice.toml.golden`. A change in what the importer decides shows
//! here as a diff; `UPDATE_GOLDEN=1` writes the new files to review.

use std::path::Path;

use sluice::tools::import;

fn corpus() -> Vec<std::path::PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/import");
    let mut dirs: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("main.cf").exists())
        .collect();
    dirs.sort();
    dirs
}

/// The report, then whether the configuration loads.
fn report_text(made: &import::Imported) -> String {
    let load = match &made.load_error {
        None => "load: ok".to_string(),
        Some(e) => format!("load: error: {e}"),
    };
    format!("{}{load}\n", made.report.render())
}

/// The configuration without its header (which names the directory).
fn toml_text(made: &import::Imported) -> String {
    let body: Vec<&str> = made
        .toml
        .lines()
        .skip_while(|l| l.starts_with('#') || l.is_empty())
        .collect();
    body.join("\n") + "\n"
}

#[test]
fn every_site_of_the_corpus_translates_as_its_golden_files_say() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut differ = Vec::new();
    for dir in corpus() {
        let made = import::translate(&dir, "mx.corpus.example").unwrap();
        for (file, text) in [
            ("report.golden", report_text(&made)),
            ("sluice.toml.golden", toml_text(&made)),
        ] {
            let path = dir.join(file);
            if update {
                std::fs::write(&path, &text).unwrap();
                continue;
            }
            let want = std::fs::read_to_string(&path).unwrap_or_default();
            if want != text {
                differ.push(format!("{}:\n{text}", path.display()));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "differs from the golden files (UPDATE_GOLDEN=1 to rewrite):\n{}",
        differ.join("\n")
    );
}

/// Every parameter of every site has a line: the count of `name =`
/// lines in main.cf and of services in master.cf is the report's.
#[test]
fn nothing_is_dropped_silently() {
    for dir in corpus() {
        let made = import::translate(&dir, "mx.corpus.example").unwrap();
        let main = std::fs::read_to_string(dir.join("main.cf")).unwrap();
        let mut names: Vec<&str> = main
            .lines()
            .filter(|l| !l.starts_with([' ', '\t', '#']) && l.contains('='))
            .map(|l| l.split('=').next().unwrap().trim())
            .collect();
        names.sort();
        names.dedup();
        let master = std::fs::read_to_string(dir.join("master.cf")).unwrap_or_default();
        let services = master
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with([' ', '\t', '#']))
            .count();
        assert_eq!(
            made.report.entries.len(),
            names.len() + services,
            "{}",
            dir.display()
        );
    }
}
