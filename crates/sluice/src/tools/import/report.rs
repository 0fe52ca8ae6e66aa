//! What the importer did with each main.cf parameter, as a typed verdict
//! per setting, and the report it prints: one line per parameter, then
//! a summary line counting each kind (the report never drops one).
//!
//! Trust: the names and values come from the file being imported; they
//! are printed cut to one line of at most 200 characters, control
//! characters replaced, so a hostile file cannot forge report lines.

use std::fmt::Write as _;

/// The verdict on one parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Written as these Sluice settings.
    Translated(Vec<String>),
    /// Sluice does the same without a setting (its default matches).
    Same(String),
    /// Behaviour Sluice cannot express yet.
    Unsupported(String),
    /// Postfix needs it; Sluice does not (why).
    NotNeeded(String),
    /// Only how things look (paths of manuals, names in texts).
    Cosmetic(String),
    /// Not a Postfix 3.7 parameter (a typo, a template placeholder, or a
    /// name only used in other `$name` expansions).
    Unknown,
    /// The value could not be read (an expansion loop, …).
    Error(String),
}

impl Verdict {
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Translated(_) => "translated",
            Verdict::Same(_) => "same",
            Verdict::Unsupported(_) => "unsupported",
            Verdict::NotNeeded(_) => "not-needed",
            Verdict::Cosmetic(_) => "cosmetic",
            Verdict::Unknown => "unknown",
            Verdict::Error(_) => "error",
        }
    }

    fn detail(&self) -> String {
        match self {
            Verdict::Translated(keys) => format!("-> {}", keys.join(", ")),
            Verdict::Same(why)
            | Verdict::Unsupported(why)
            | Verdict::NotNeeded(why)
            | Verdict::Cosmetic(why)
            | Verdict::Error(why) => why.clone(),
            Verdict::Unknown => "not a Postfix 3.7 parameter".into(),
        }
    }
}

/// One parameter's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `main.cf:LINE` or `master.cf:LINE (service)`.
    pub source: String,
    pub name: String,
    pub verdict: Verdict,
}

/// Everything the importer decided.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub entries: Vec<Entry>,
    /// Postfix defaults that differ from Sluice's and were written out
    /// (`name`, the Sluice keys), so the translation behaves as Postfix
    /// with the parameter unset.
    pub implied: Vec<(String, Vec<String>)>,
}

impl Report {
    pub fn count(&self, word: &str) -> usize {
        self.entries
            .iter()
            .filter(|e| e.verdict.word() == word)
            .count()
    }

    /// The last line: every kind counted.
    pub fn summary(&self) -> String {
        let words = [
            "translated",
            "same",
            "not-needed",
            "cosmetic",
            "unsupported",
            "unknown",
            "error",
        ];
        let counts: Vec<String> = words
            .iter()
            .map(|w| format!("{} {w}", self.count(w)))
            .collect();
        format!(
            "{} parameters read: {}",
            self.entries.len(),
            counts.join(", ")
        )
    }

    /// The whole report, as printed and kept as a golden file.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for e in &self.entries {
            let _ = writeln!(
                out,
                "{:<11} {} {}: {}",
                e.verdict.word(),
                shown(&e.source),
                shown(&e.name),
                shown(&e.verdict.detail())
            );
        }
        for (name, keys) in &self.implied {
            let _ = writeln!(
                out,
                "{:<11} (default) {}: -> {}",
                "implied",
                shown(name),
                shown(&keys.join(", "))
            );
        }
        out.push_str(&self.summary());
        out.push('\n');
        out
    }
}

/// One line of at most 200 characters, control characters as `?`.
fn shown(text: &str) -> String {
    text.chars()
        .take(200)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hostile name or value cannot add a line to the report.
    #[test]
    fn a_line_cannot_be_forged() {
        let r = Report {
            entries: vec![Entry {
                source: "main.cf:1".into(),
                name: "x\ntranslated  main.cf:2 fake".into(),
                verdict: Verdict::Unsupported("y\r\nz".repeat(100)),
            }],
            implied: Vec::new(),
        };
        let text = r.render();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.lines().next().unwrap().chars().count() < 450);
        assert_eq!(r.count("unsupported"), 1);
    }
}
