//! Postfix's `regexp:` and `pcre:` tables (regexp_table(5), pcre_table(5)):
//! an ordered list of `/pattern/flags result` rules (any delimiter, `!` to
//! negate, `if /pattern/` … `endif` blocks that nest); the first rule that
//! matches gives the result, with `$1`…`$9`, `${n}`, `$(n)` replaced by
//! the match's groups and `$$` by `$`.
//!
//! Loading trusts nothing in the file: like postmap, a bad line is skipped
//! with a [`Warning`] (file, line, [`Problem`]) and the rest still loads.
//! Lookups do no I/O and take any key (long, NUL, newlines) without
//! panicking.
//!
//! Engines. `regexp:` uses the `regex` crate on the POSIX text rewritten by
//! [`posix`] (it lacks back-references, collating elements and equivalence
//! classes; such rules are skipped at load). Being linear-time, it cannot
//! blow up on any key. `pcre:` uses `fancy-regex`: look-around, atomic
//! groups and back-references work; it lacks PCRE's recursion, `(?R)`,
//! callouts, `\Z`-style `$` before a final newline (its `$` is always end
//! of text, i.e. PCRE's `E` flag is always on), `\C`, and verbs such as
//! `(*SKIP)`; such rules are skipped at load. Its backtracking is bounded
//! by [`BACKTRACK_LIMIT`]: a match that reaches it is a
//! [`MatchError::BacktrackLimit`] (the table is "unavailable, try again"),
//! never a silent miss (postmap instead warns and goes on to the next rule).

mod expand;
pub(crate) mod lines;
mod posix;

use std::path::Path;

use expand::Template;
use lines::{logical_lines, statement, Statement};

/// Backtracking steps one `pcre:` match may take.
pub const BACKTRACK_LIMIT: usize = 100_000;

/// Compiled-size bound for one pattern (the `regex` crate's budget).
const SIZE_LIMIT: usize = 1 << 20;

/// Which of Postfix's two pattern table formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    Regexp,
    Pcre,
}

/// Why a rule or statement was skipped or a line warned about.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Problem {
    #[error("no pattern: skipping this rule")]
    NoPattern,
    #[error("no closing delimiter {0:?}: skipping this rule")]
    NoClosingDelimiter(char),
    #[error("unknown flag {0:?}: skipping this rule")]
    UnknownFlag(char),
    #[error("bad pattern: {0}: skipping this rule")]
    BadPattern(String),
    #[error("bad replacement syntax {0:?}: skipping this rule")]
    BadReplacement(String),
    #[error("non-numeric replacement index {0:?}: skipping this rule")]
    NonNumericIndex(String),
    #[error("out of range replacement index {0:?}: skipping this rule")]
    IndexOutOfRange(String),
    #[error("$number found in negative match replacement text: skipping this rule")]
    GroupInNegated,
    #[error("ignoring obsolete flag {0:?}")]
    ObsoleteFlag(char),
    #[error("no replacement text: using empty string")]
    NoReplacement,
    #[error("ignoring extra text after IF statement: {0:?}")]
    ExtraAfterIf(String),
    #[error("ignoring extra text after ENDIF: {0:?}")]
    ExtraAfterEndif(String),
    #[error("ignoring ENDIF without matching IF")]
    EndifWithoutIf,
    #[error("IF has no matching ENDIF")]
    IfWithoutEndif,
    #[error("logical line must not start with whitespace")]
    LeadingWhitespace,
    #[error("bad network value {0:?}: skipping this rule")]
    BadNetwork(String),
    #[error("bad mask length {0:?}: skipping this rule")]
    BadMask(String),
    #[error("non-null host address bits in {0:?}: skipping this rule")]
    HostBits(String),
}

/// A line postmap would warn about.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{origin}, line {line}: {problem}")]
pub struct Warning {
    pub origin: String,
    pub line: usize,
    pub problem: Problem,
}

impl Warning {
    /// The warnings for continuation lines that continued nothing.
    pub(crate) fn orphans(origin: &str, lines: Vec<usize>) -> impl Iterator<Item = Warning> + '_ {
        lines.into_iter().map(move |line| Warning {
            origin: origin.to_string(),
            line,
            problem: Problem::LeadingWhitespace,
        })
    }
}

/// The table file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{}: {err}", path.display())]
    Read {
        path: std::path::PathBuf,
        err: std::io::Error,
    },
}

/// A lookup that could not decide (the caller answers "try again").
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MatchError {
    #[error("{origin}, line {line}: pattern hit its backtracking limit")]
    BacktrackLimit { origin: String, line: usize },
}

impl From<MatchError> for super::LookupError {
    fn from(e: MatchError) -> Self {
        super::LookupError::Unavailable(e.to_string())
    }
}

enum Matcher {
    Posix(regex::Regex),
    Pcre(fancy_regex::Regex),
}

enum Step {
    /// `if`: when the pattern's outcome differs from `matches`, jump to
    /// `skip_to` (the step after the matching `endif`).
    If {
        matcher: Matcher,
        matches: bool,
        skip_to: usize,
        line: usize,
    },
    Rule {
        matcher: Matcher,
        matches: bool,
        result: Template,
        line: usize,
    },
}

/// A loaded `regexp:` or `pcre:` table.
pub struct PatternTable {
    origin: String,
    steps: Vec<Step>,
}

impl PatternTable {
    /// Reads and parses the file at `path`.
    pub fn load(path: &Path, flavour: Flavour) -> Result<(PatternTable, Vec<Warning>), LoadError> {
        let text = std::fs::read(path).map_err(|err| LoadError::Read {
            path: path.to_path_buf(),
            err,
        })?;
        let text = String::from_utf8_lossy(&text);
        Ok(Self::parse(&text, &path.display().to_string(), flavour))
    }

    /// Parses table text; `origin` names it in warnings and errors.
    pub fn parse(text: &str, origin: &str, flavour: Flavour) -> (PatternTable, Vec<Warning>) {
        let mut warnings = Vec::new();
        let mut steps = Vec::new();
        let mut open: Vec<(usize, usize)> = Vec::new(); // (step index, line)
        let (lines, orphans) = logical_lines(text);
        warnings.extend(Warning::orphans(origin, orphans));
        for l in lines {
            let mut warn = |problem| {
                warnings.push(Warning {
                    origin: origin.to_string(),
                    line: l.line,
                    problem,
                })
            };
            match statement(&l.text) {
                Statement::If(rest) => match pattern(rest, flavour) {
                    Ok(Parsed {
                        matcher,
                        matches,
                        rest: extra,
                        note,
                        ..
                    }) => {
                        if let Some(n) = note {
                            warn(n);
                        }
                        if !extra.is_empty() {
                            warn(Problem::ExtraAfterIf(extra.to_string()));
                        }
                        open.push((steps.len(), l.line));
                        steps.push(Step::If {
                            matcher,
                            matches,
                            skip_to: usize::MAX,
                            line: l.line,
                        });
                    }
                    Err(p) => warn(p),
                },
                Statement::Endif(extra) => {
                    if !extra.is_empty() {
                        warn(Problem::ExtraAfterEndif(extra.to_string()));
                    }
                    match open.pop() {
                        Some((at, _)) => close(&mut steps, at),
                        None => warn(Problem::EndifWithoutIf),
                    }
                }
                Statement::Other => match rule(&l.text, flavour, l.line, &mut warn) {
                    Ok(step) => steps.push(step),
                    Err(p) => warn(p),
                },
            }
        }
        while let Some((at, line)) = open.pop() {
            warnings.push(Warning {
                origin: origin.to_string(),
                line,
                problem: Problem::IfWithoutEndif,
            });
            close(&mut steps, at);
        }
        let table = PatternTable {
            origin: origin.to_string(),
            steps,
        };
        (table, warnings)
    }

    /// How many rules and statements the table holds.
    pub fn rules(&self) -> usize {
        self.steps.len()
    }

    /// The first matching rule's expanded result, if any.
    pub fn lookup(&self, key: &str) -> Result<Option<String>, MatchError> {
        let mut i = 0;
        while let Some(step) = self.steps.get(i) {
            match step {
                Step::If {
                    matcher,
                    matches,
                    skip_to,
                    line,
                } => {
                    let hit = self.is_match(matcher, key, *line)?;
                    i = if hit == *matches { i + 1 } else { *skip_to };
                }
                Step::Rule {
                    matcher,
                    matches,
                    result,
                    line,
                } => {
                    if !*matches || !result.uses_groups() {
                        if self.is_match(matcher, key, *line)? == *matches {
                            return Ok(Some(result.expand(|_| None)));
                        }
                    } else if let Some(v) = self.expand(matcher, key, result, *line)? {
                        return Ok(Some(v));
                    }
                    i += 1;
                }
            }
        }
        Ok(None)
    }

    fn limit(&self, line: usize) -> MatchError {
        MatchError::BacktrackLimit {
            origin: self.origin.clone(),
            line,
        }
    }

    fn is_match(&self, m: &Matcher, key: &str, line: usize) -> Result<bool, MatchError> {
        match m {
            Matcher::Posix(re) => Ok(re.is_match(key)),
            Matcher::Pcre(re) => re.is_match(key).map_err(|_| self.limit(line)),
        }
    }

    fn expand(
        &self,
        m: &Matcher,
        key: &str,
        result: &Template,
        line: usize,
    ) -> Result<Option<String>, MatchError> {
        Ok(match m {
            Matcher::Posix(re) => re
                .captures(key)
                .map(|c| result.expand(|i| c.get(i).map(|g| g.as_str()))),
            Matcher::Pcre(re) => re
                .captures(key)
                .map_err(|_| self.limit(line))?
                .map(|c| result.expand(|i| c.get(i).map(|g| g.as_str()))),
        })
    }
}

/// Points the `if` at `at` past the steps pushed since.
fn close(steps: &mut [Step], at: usize) {
    let end = steps.len();
    if let Some(Step::If { skip_to, .. }) = steps.get_mut(at) {
        *skip_to = end;
    }
}

/// Parses a rule line into a step; a problem skips it.
fn rule(
    text: &str,
    flavour: Flavour,
    line: usize,
    warn: &mut impl FnMut(Problem),
) -> Result<Step, Problem> {
    let Parsed {
        matcher,
        matches,
        groups,
        rest,
        note,
    } = pattern(text, flavour)?;
    if let Some(n) = note {
        warn(n);
    }
    if rest.is_empty() {
        warn(Problem::NoReplacement);
    }
    let result = Template::parse(rest, groups, !matches)?;
    Ok(Step::Rule {
        matcher,
        matches,
        result,
        line,
    })
}

/// A parsed `[!…]<d>pattern<d>flags`.
struct Parsed<'a> {
    matcher: Matcher,
    /// Whether a match is wanted (`!` toggles).
    matches: bool,
    groups: usize,
    /// The text after the flags and whitespace.
    rest: &'a str,
    /// A warning that does not skip the rule.
    note: Option<Problem>,
}

/// Parses `[!…]<d>pattern<d>flags` at the start of `text`.
fn pattern(text: &str, flavour: Flavour) -> Result<Parsed<'_>, Problem> {
    let mut matches = true;
    let mut p = text;
    loop {
        p = p.trim_start();
        match p.strip_prefix('!') {
            Some(r) => {
                matches = !matches;
                p = r;
            }
            None => break,
        }
    }
    let delim = p.chars().next().ok_or(Problem::NoPattern)?;
    let body = &p[delim.len_utf8()..];
    let mut end = None;
    let mut it = body.char_indices();
    while let Some((i, c)) = it.next() {
        if c == '\\' {
            if it.next().is_none() {
                break;
            }
        } else if c == delim {
            end = Some(i);
            break;
        }
    }
    let end = end.ok_or(Problem::NoClosingDelimiter(delim))?;
    let pat = &body[..end];
    let after = &body[end + delim.len_utf8()..];
    let flag_end = after.find(char::is_whitespace).unwrap_or(after.len());
    let (flags, rest) = after.split_at(flag_end);
    let (matcher, groups) = compile(pat, flags, flavour)?;
    // Postfix on PCRE2 ignores X (PCRE_EXTRA is gone) with a warning.
    let note =
        (flavour == Flavour::Pcre && flags.contains('X')).then_some(Problem::ObsoleteFlag('X'));
    Ok(Parsed {
        matcher,
        matches,
        groups,
        rest: rest.trim_start(),
        note,
    })
}

fn compile(pat: &str, flags: &str, flavour: Flavour) -> Result<(Matcher, usize), Problem> {
    let bad = |e: &dyn std::fmt::Display| Problem::BadPattern(e.to_string());
    match flavour {
        Flavour::Regexp => {
            let (mut icase, mut newline, mut extended) = (true, false, true);
            for f in flags.chars() {
                match f {
                    'i' => icase = !icase,
                    'm' => newline = !newline,
                    'x' => extended = !extended,
                    _ => return Err(Problem::UnknownFlag(f)),
                }
            }
            let re = regex::RegexBuilder::new(&posix::to_regex(pat, extended, newline))
                .case_insensitive(icase)
                .multi_line(newline)
                .dot_matches_new_line(!newline)
                .size_limit(SIZE_LIMIT)
                .build()
                .map_err(|e| bad(&e))?;
            let groups = re.captures_len() - 1;
            Ok((Matcher::Posix(re), groups))
        }
        Flavour::Pcre => {
            // pcre_table(5): i and s default on, the others off.
            let (mut i, mut m, mut s, mut x, mut a, mut u) =
                (true, false, true, false, false, false);
            for f in flags.chars() {
                match f {
                    'i' => i = !i,
                    'm' => m = !m,
                    's' => s = !s,
                    'x' => x = !x,
                    'A' => a = !a,
                    'U' => u = !u,
                    // E (dollar end-only) is how fancy-regex always reads
                    // `$`; X is obsolete (warned about by the caller).
                    'E' | 'X' => {}
                    _ => return Err(Problem::UnknownFlag(f)),
                }
            }
            let mut src = String::from("(?");
            for (on, c) in [(i, 'i'), (m, 'm'), (s, 's'), (x, 'x'), (u, 'U')] {
                if on {
                    src.push(c);
                }
            }
            src.push_str(if src.len() == 2 { "-i)" } else { ")" });
            if a {
                // Under `x` a trailing comment would swallow the `)`.
                let nl = if x { "\n" } else { "" };
                src.push_str(&format!("\\A(?:{pat}{nl})"));
            } else {
                src.push_str(pat);
            }
            let re = fancy_regex::RegexBuilder::new(&src)
                .backtrack_limit(BACKTRACK_LIMIT)
                .delegate_size_limit(SIZE_LIMIT)
                .build()
                .map_err(|e| bad(&e))?;
            let groups = re.captures_len() - 1;
            Ok((Matcher::Pcre(re), groups))
        }
    }
}

#[cfg(test)]
mod tests;
