//! Postfix's main.cf as postconf(5) reads it: logical lines (a line
//! starting with whitespace continues the one before; empty lines and
//! lines whose first non-blank character is `#` are skipped), `name =
//! value` with the blanks around both trimmed, the last setting of a
//! name winning; and `$name` expansion with Postfix's forms: `$name`,
//! `${name}`, `$(name)`, `${name?value}`, `${name:value}` (and their
//! `{value}` forms), `${name?{a}:{b}}`, the relational `${{A} == {B} ?
//! {a} : {b}}` (`==`, `!=`, `<`, `<=`, `>`, `>=`, and the `level` ones
//! compatibility_level uses), and `$$`.
//!
//! Trust: none. The file may come from anywhere: a file over
//! [`MAX_BYTES`], a NUL byte, a line that is no `name = value`, a
//! `$name` loop or an expansion deeper than [`MAX_DEPTH`], longer than
//! [`MAX_EXPANDED`] or past [`MAX_WORK`] lookups is an error that names the line or the parameter;
//! nothing here runs, opens or evaluates anything but the text.

use std::collections::HashMap;

/// The biggest main.cf read (real ones are a few KiB).
pub const MAX_BYTES: usize = 4 << 20;
/// How deep `$name` may nest (Postfix stops at 100; loops end sooner).
pub const MAX_DEPTH: usize = 30;
/// The longest value an expansion may make.
pub const MAX_EXPANDED: usize = 1 << 20;
/// How many `$name`s one expansion may look up (a value naming another
/// twice, nested, doubles the work at each level without growing).
pub const MAX_WORK: usize = 100_000;

/// One setting as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    pub name: String,
    /// The value, unexpanded, continuation lines joined by one space.
    pub value: String,
    /// The line where the setting starts (1-based).
    pub line: usize,
}

/// Why a file cannot be read as main.cf.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("file is larger than {MAX_BYTES} bytes")]
    TooLarge,
    #[error("line {0}: binary data (a NUL byte)")]
    Binary(usize),
    #[error("line {0}: not \"name = value\": {1:?}")]
    NotASetting(usize, String),
    #[error("line {0}: a continuation line with nothing before it")]
    Orphan(usize),
}

/// Why a value cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    #[error("${{{0}}} refers to itself (a $parameter loop)")]
    Loop(String),
    #[error("expansion nests deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("expansion is longer than {MAX_EXPANDED} bytes")]
    TooLong,
    #[error("expansion looks up more than {MAX_WORK} parameters")]
    TooMuchWork,
    #[error("malformed expression at {0:?}")]
    Malformed(String),
}

/// The settings of one main.cf, in file order (the last of a name wins).
#[derive(Debug, Clone, Default)]
pub struct MainCf {
    pub params: Vec<Param>,
    index: HashMap<String, usize>,
}

impl MainCf {
    pub fn parse(text: &[u8]) -> Result<MainCf, ParseError> {
        if text.len() > MAX_BYTES {
            return Err(ParseError::TooLarge);
        }
        let mut cf = MainCf::default();
        let mut current: Option<Param> = None;
        for (i, raw) in text.split(|&b| b == b'\n').enumerate() {
            let n = i + 1;
            if raw.contains(&0) {
                return Err(ParseError::Binary(n));
            }
            let line = String::from_utf8_lossy(raw);
            let line = line.trim_end_matches('\r');
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            if line.starts_with([' ', '\t']) {
                let Some(p) = current.as_mut() else {
                    return Err(ParseError::Orphan(n));
                };
                if !p.value.is_empty() {
                    p.value.push(' ');
                }
                p.value.push_str(trimmed);
                continue;
            }
            if let Some(p) = current.take() {
                cf.set(p);
            }
            let Some((name, value)) = line.split_once('=') else {
                return Err(ParseError::NotASetting(n, cut(line)));
            };
            let name = name.trim();
            // Per-service names carry the service's (`smtp-amavis_…`).
            if name.is_empty() || !name.bytes().all(|b| is_name_byte(b) || b == b'-') {
                return Err(ParseError::NotASetting(n, cut(line)));
            }
            current = Some(Param {
                name: name.to_string(),
                value: value.trim().to_string(),
                line: n,
            });
        }
        if let Some(p) = current {
            cf.set(p);
        }
        Ok(cf)
    }

    fn set(&mut self, p: Param) {
        match self.index.get(&p.name) {
            Some(&i) => self.params[i] = p,
            None => {
                self.index.insert(p.name.clone(), self.params.len());
                self.params.push(p);
            }
        }
    }

    /// The value as written, if the file sets `name`.
    pub fn raw(&self, name: &str) -> Option<&str> {
        self.index.get(name).map(|&i| self.params[i].value.as_str())
    }

    /// The setting of `name`, if the file has one.
    pub fn param(&self, name: &str) -> Option<&Param> {
        self.index.get(name).map(|&i| &self.params[i])
    }
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn cut(line: &str) -> String {
    line.chars().take(80).collect()
}

/// Where `$name` values come from: the file, then the defaults.
pub trait Lookup {
    /// The unexpanded value of `name`, or `None` (expands to nothing).
    fn value(&self, name: &str) -> Option<String>;
}

/// Expands `value` as postconf does.
pub fn expand(value: &str, from: &dyn Lookup) -> Result<String, ExpandError> {
    let mut st = State::default();
    expand_in(value, from, &mut st)
}

/// One expansion's progress: the names being expanded, and the work done.
#[derive(Default)]
struct State {
    stack: Vec<String>,
    work: usize,
}

fn expand_in(value: &str, from: &dyn Lookup, st: &mut State) -> Result<String, ExpandError> {
    if st.stack.len() > MAX_DEPTH {
        return Err(ExpandError::TooDeep);
    }
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (piece, used) = expand_one(after, from, st)?;
        out.push_str(&piece);
        if out.len() > MAX_EXPANDED {
            return Err(ExpandError::TooLong);
        }
        rest = &after[used..];
    }
    out.push_str(rest);
    Ok(out)
}

/// One `$…` (the text after the `$`): its expansion and how many bytes
/// of `after` it took.
fn expand_one(
    after: &str,
    from: &dyn Lookup,
    st: &mut State,
) -> Result<(String, usize), ExpandError> {
    let malformed = || ExpandError::Malformed(after.chars().take(40).collect());
    match after.as_bytes().first() {
        Some(b'$') => Ok(("$".into(), 1)),
        Some(&open @ (b'{' | b'(')) => {
            let close = if open == b'{' { b'}' } else { b')' };
            let end = matching(after, 0, open, close).ok_or_else(malformed)?;
            let inner = &after[1..end];
            let text = if inner.starts_with('{') {
                relational(inner, from, st)?
            } else {
                conditional(inner, from, st)?
            };
            Ok((text, end + 1))
        }
        Some(b) if is_name_byte(*b) => {
            let len = after.bytes().take_while(|b| is_name_byte(*b)).count();
            Ok((named(&after[..len], from, st)?, len))
        }
        // A lone `$` stays (postconf leaves it).
        _ => Ok(("$".into(), 0)),
    }
}

/// The index of the bracket closing the one at `start`.
fn matching(s: &str, start: usize, open: u8, close: u8) -> Option<usize> {
    let mut depth = 0usize;
    for (i, b) in s.bytes().enumerate().skip(start) {
        if b == open {
            depth += 1;
        } else if b == close {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// `$name`'s value, expanded in turn.
fn named(name: &str, from: &dyn Lookup, st: &mut State) -> Result<String, ExpandError> {
    if st.stack.iter().any(|n| n == name) {
        return Err(ExpandError::Loop(name.to_string()));
    }
    st.work += 1;
    if st.work > MAX_WORK {
        return Err(ExpandError::TooMuchWork);
    }
    let Some(value) = from.value(name) else {
        return Ok(String::new());
    };
    st.stack.push(name.to_string());
    let out = expand_in(&value, from, st);
    st.stack.pop();
    out
}

/// `name`, `name?value`, `name:value`, `name?{a}:{b}`.
fn conditional(inner: &str, from: &dyn Lookup, st: &mut State) -> Result<String, ExpandError> {
    let len = inner.bytes().take_while(|b| is_name_byte(*b)).count();
    let (name, rest) = inner.split_at(len);
    if name.is_empty() {
        return Err(ExpandError::Malformed(inner.chars().take(40).collect()));
    }
    let value = named(name, from, st)?;
    let Some(op) = rest.chars().next() else {
        return Ok(value);
    };
    let body = &rest[1..];
    let set = !value.is_empty();
    match op {
        '?' | ':' => {
            let (then, other) = branches(body, op == '?');
            let pick = match (op, set) {
                ('?', true) | (':', false) => then,
                _ => other.unwrap_or_default(),
            };
            expand_in(&pick, from, st)
        }
        _ => Err(ExpandError::Malformed(inner.chars().take(40).collect())),
    }
}

/// The text(s) of a conditional's body: `value`, `{value}`, or (after
/// `?`) `{a}:{b}`.
fn branches(body: &str, may_have_else: bool) -> (String, Option<String>) {
    let body = body.trim();
    if let Some(end) = body
        .starts_with('{')
        .then(|| matching(body, 0, b'{', b'}'))
        .flatten()
    {
        let first = body[1..end].trim().to_string();
        let rest = body[end + 1..].trim();
        if may_have_else {
            if let Some(second) = rest.strip_prefix(':') {
                let second = second.trim();
                let second = second
                    .strip_prefix('{')
                    .and_then(|s| s.strip_suffix('}'))
                    .unwrap_or(second);
                return (first, Some(second.trim().to_string()));
            }
        }
        return (first, None);
    }
    (body.to_string(), None)
}

/// `{A} OP {B} ? {then} : {else}` (the text inside `${` … `}`).
fn relational(inner: &str, from: &dyn Lookup, st: &mut State) -> Result<String, ExpandError> {
    let bad = || ExpandError::Malformed(inner.chars().take(40).collect());
    let (a, rest) = braced(inner).ok_or_else(bad)?;
    let rest = rest.trim_start();
    let op_len = rest.find('{').ok_or_else(bad)?;
    let op = rest[..op_len].trim();
    let (b, rest) = braced(&rest[op_len..]).ok_or_else(bad)?;
    let rest = rest.trim_start().strip_prefix('?').ok_or_else(bad)?;
    let (then, rest) = braced(rest.trim_start()).ok_or_else(bad)?;
    let other = match rest.trim_start().strip_prefix(':') {
        Some(r) => braced(r.trim_start()).ok_or_else(bad)?.0,
        None => "",
    };
    let (a, b) = (expand_in(a, from, st)?, expand_in(b, from, st)?);
    let truth = compare(a.trim(), op, b.trim()).ok_or_else(bad)?;
    expand_in(if truth { then } else { other }, from, st)
}

/// The text of a leading `{…}` and what follows it.
fn braced(s: &str) -> Option<(&str, &str)> {
    if !s.starts_with('{') {
        return None;
    }
    let end = matching(s, 0, b'{', b'}')?;
    Some((&s[1..end], &s[end + 1..]))
}

fn compare(a: &str, op: &str, b: &str) -> Option<bool> {
    use std::cmp::Ordering::*;
    let ord = match op.strip_suffix("level") {
        Some(_) => level(a).cmp(&level(b)),
        None => match (a.parse::<i64>(), b.parse::<i64>()) {
            (Ok(x), Ok(y)) if op != "==" && op != "!=" => x.cmp(&y),
            _ => a.cmp(b),
        },
    };
    Some(match op.trim_end_matches("level") {
        "==" => ord == Equal,
        "!=" => ord != Equal,
        "<" => ord == Less,
        "<=" => ord != Greater,
        ">" => ord == Greater,
        ">=" => ord != Less,
        _ => return None,
    })
}

/// A compatibility level as numbers (`3.6` → [3, 6]; empty or junk → 0).
fn level(s: &str) -> Vec<u64> {
    s.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

#[cfg(test)]
mod tests;
