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

use super::out::Out;
use super::postfix::Postfix;
use super::report::{Entry, Report, Verdict};
use super::rules::one;

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
