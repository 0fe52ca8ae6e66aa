//! Postfix's `%` templates for SQL tables (db_common(3)): which keys a
//! table looks up at all, what each `%x` stands for, the query turned
//! into a parameterized statement, and `result_format` applied to each
//! value found.
//!
//! Postfix's rules, kept here:
//! - `%s` the key, `%u` its local part (the whole key if it has no `@`),
//!   `%d` its domain (after the LAST `@`), `%1`…`%9` the domain's labels
//!   from the right (`%1` the top-level one, empty labels dropped), `%%`
//!   a `%`; `%S %U %D` are the same in a query, and the lookup key's parts
//!   in `result_format` (where `%s %u %d` are the value's). Any other
//!   `%x` is an error when the table is opened.
//! - A key is not looked up (no query, not found) when it is empty, when
//!   a template uses a domain (`%d %D %1-9`) and the key has none (no `@`
//!   or nothing after it), when a template uses a local part (`%u %U`)
//!   and the key starts with `@`, or when `%N` asks for more labels than
//!   the domain has. The flags are the union over BOTH templates, as
//!   Postfix keeps them in one context.
//! - A value that is NULL or empty is skipped; so is one lacking what
//!   `result_format`'s `%d`/`%u` need.
//!
//! The query becomes a statement with bound parameters (see [`compile`]):
//! the key never becomes SQL text, so no quoting can go wrong.
//!
//! Trust: the templates are the operator's; the key and the values are
//! not trusted and are only ever data.

use super::Flavour;

/// One `%x` of a query: what its parameter is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    Key,
    Local,
    Domain,
    Label(usize),
}

/// What the templates need of a key (and of a value).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Needs {
    key_user: bool,
    key_domain: bool,
    value_user: bool,
    value_domain: bool,
    labels: usize,
}

impl Needs {
    /// Adds what `format` needs (`query`: the query, else result_format);
    /// Err names the bad `%x`.
    pub(super) fn add(&mut self, format: &str, query: bool) -> Result<(), String> {
        let mut chars = format.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                continue;
            }
            match chars.next() {
                Some('%' | 's' | 'S') => {}
                Some('u') if query => self.key_user = true,
                Some('u') => self.value_user = true,
                Some('d') if query => self.key_domain = true,
                Some('d') => self.value_domain = true,
                Some('U') => self.key_user = true,
                Some('D') => self.key_domain = true,
                Some(n @ '1'..='9') => {
                    self.key_domain = true;
                    self.labels = self.labels.max(n as usize - '0' as usize);
                }
                other => {
                    let what = other.map(String::from).unwrap_or_default();
                    return Err(format!("invalid %{what} in {format:?}"));
                }
            }
        }
        Ok(())
    }
}

/// A key's parts, once it is known to be looked up.
pub(super) struct Key<'a> {
    key: &'a str,
    local: &'a str,
    domain: Option<&'a str>,
    labels: Vec<&'a str>,
}

impl<'a> Key<'a> {
    /// The key's parts, or None when Postfix would not look it up.
    pub(super) fn split(key: &'a str, needs: &Needs) -> Option<Key<'a>> {
        if key.is_empty() {
            return None;
        }
        let (local, domain) = match key.rfind('@') {
            Some(at) => (&key[..at], Some(&key[at + 1..])),
            None => (key, None),
        };
        if needs.key_domain && domain.is_none_or(str::is_empty) {
            return None;
        }
        if needs.key_user && domain.is_some() && local.is_empty() {
            return None;
        }
        let labels: Vec<&str> = domain
            .unwrap_or("")
            .split('.')
            .filter(|l| !l.is_empty())
            .collect();
        if labels.len() < needs.labels {
            return None;
        }
        Some(Key {
            key,
            local,
            domain,
            labels,
        })
    }

    /// The text a query parameter is bound to.
    pub(super) fn part(&self, part: Part) -> &'a str {
        match part {
            Part::Key => self.key,
            Part::Local => self.local,
            Part::Domain => self.domain.unwrap_or(""),
            Part::Label(n) => self.labels[self.labels.len() - n],
        }
    }

    /// `value` through `format` (result_format), or None if skipped.
    pub(super) fn format(&self, format: &str, value: &str, needs: &Needs) -> Option<String> {
        if value.is_empty() {
            return None;
        }
        let (vlocal, vdomain) = match value.rfind('@') {
            Some(at) => (&value[..at], Some(&value[at + 1..])),
            None => (value, None),
        };
        if needs.value_domain && vdomain.is_none_or(str::is_empty) {
            return None;
        }
        if needs.value_user && vdomain.is_some() && vlocal.is_empty() {
            return None;
        }
        let mut out = String::with_capacity(format.len() + value.len());
        let mut chars = format.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('%') => out.push('%'),
                Some('s') => out.push_str(value),
                Some('u') => out.push_str(vlocal),
                Some('d') => out.push_str(vdomain.unwrap_or("")),
                Some('S') => out.push_str(self.key),
                Some('U') => out.push_str(self.local),
                Some('D') => out.push_str(self.domain.unwrap_or("")),
                Some(n @ '1'..='9') => {
                    out.push_str(self.part(Part::Label(n as usize - '0' as usize)))
                }
                // Refused when the table was opened (Needs::add).
                _ => {}
            }
        }
        Some(out)
    }
}

/// A query template as a statement: its SQL with placeholders, and what
/// each placeholder is bound to, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Statement {
    pub(super) sql: String,
    pub(super) params: Vec<Part>,
}

/// Turns `template` into a parameterized statement for `flavour`:
/// - a quoted literal that is exactly one expansion (`'%s'`) becomes a
///   placeholder; a literal mixing text and expansions (`'%u@%d'`,
///   `'%s%%'`) becomes a concatenation of its pieces and placeholders
///   (`('' || $1 …)` in PostgreSQL and SQLite, `CONCAT(…)` in MySQL);
/// - an expansion outside quotes becomes a placeholder too (a value, never
///   SQL text: a template that used it as SQL, a table name say, fails);
/// - inside comments expansions are dropped;
/// - an expansion inside a quoted identifier, after a backslash escape,
///   or a placeholder of the template's own (`$1`, `?`, `:name`) is
///   refused, as the statement's numbering is ours.
pub(super) fn compile(template: &str, flavour: Flavour) -> Result<Statement, String> {
    let mut lexer = Lexer {
        flavour,
        src: template.as_bytes(),
        at: 0,
        out: Statement {
            sql: String::with_capacity(template.len() + 16),
            params: Vec::new(),
        },
    };
    lexer.run(template)?;
    Ok(lexer.out)
}

struct Lexer<'a> {
    flavour: Flavour,
    src: &'a [u8],
    at: usize,
    out: Statement,
}

/// A piece of a quoted literal: raw text (as written, escapes kept) or an
/// expansion.
enum Piece {
    Raw(String),
    Exp(Part),
}

impl Lexer<'_> {
    fn peek(&self, ahead: usize) -> Option<u8> {
        self.src.get(self.at + ahead).copied()
    }

    fn run(&mut self, template: &str) -> Result<(), String> {
        while let Some(c) = self.peek(0) {
            let start = self.at;
            match c {
                b'\'' => self.literal(b'\'', start)?,
                b'"' if self.flavour == Flavour::Mysql => self.literal(b'"', start)?,
                b'"' | b'`' => self.identifier(c)?,
                b'-' if self.peek(1) == Some(b'-') => self.comment("\n"),
                b'#' if self.flavour == Flavour::Mysql => self.comment("\n"),
                b'/' if self.peek(1) == Some(b'*') => self.comment("*/"),
                b'%' => {
                    self.at += 1;
                    match self.expansion()? {
                        Some(part) => self.placeholder(part),
                        None => self.out.sql.push('%'),
                    }
                }
                _ => {
                    self.own_placeholder()?;
                    // One whole character (the template is UTF-8).
                    let len = template[start..].chars().next().map_or(1, char::len_utf8);
                    self.out.sql.push_str(&template[start..start + len]);
                    self.at += len;
                }
            }
        }
        Ok(())
    }

    /// Refuses a placeholder of the template's own at the current point.
    fn own_placeholder(&self) -> Result<(), String> {
        let c = self.peek(0).unwrap_or(0);
        let next = self.peek(1).unwrap_or(0);
        let word = next.is_ascii_alphanumeric() || next == b'_';
        let own = match self.flavour {
            Flavour::Pgsql => c == b'$',
            Flavour::Mysql => c == b'?',
            Flavour::Sqlite => c == b'?' || (matches!(c, b':' | b'@' | b'$') && word),
        };
        if own {
            return Err(format!(
                "the query's own placeholder {:?} is not supported (Sluice binds the %-expansions)",
                c as char
            ));
        }
        Ok(())
    }

    /// After a `%`: the expansion, or None for `%%`.
    fn expansion(&mut self) -> Result<Option<Part>, String> {
        let c = self.peek(0).ok_or("a % at the end")?;
        self.at += 1;
        Ok(Some(match c {
            b'%' => return Ok(None),
            b's' | b'S' => Part::Key,
            b'u' | b'U' => Part::Local,
            b'd' | b'D' => Part::Domain,
            b'1'..=b'9' => Part::Label((c - b'0') as usize),
            _ => return Err(format!("invalid %{}", c as char)),
        }))
    }

    fn placeholder(&mut self, part: Part) {
        self.out.params.push(part);
        match self.flavour {
            Flavour::Pgsql => {
                let n = self.out.params.len();
                self.out.sql.push_str(&format!("${n}"));
            }
            Flavour::Sqlite => {
                let n = self.out.params.len();
                self.out.sql.push_str(&format!("?{n}"));
            }
            Flavour::Mysql => self.out.sql.push('?'),
        }
    }

    /// A quoted string literal from `start` (which may hold a PostgreSQL
    /// `E` prefix just before).
    fn literal(&mut self, quote: u8, start: usize) -> Result<(), String> {
        let escape_prefix = self.flavour == Flavour::Pgsql
            && start > 0
            && matches!(self.src[start - 1], b'E' | b'e')
            && (start < 2 || !self.src[start - 2].is_ascii_alphanumeric());
        let backslashes = self.flavour == Flavour::Mysql || escape_prefix;
        self.at += 1;
        let mut pieces: Vec<Piece> = Vec::new();
        let mut raw: Vec<u8> = Vec::new();
        loop {
            let c = self.peek(0).ok_or("an unterminated quoted string")?;
            if c == quote && self.peek(1) == Some(quote) {
                raw.extend([quote, quote]);
                self.at += 2;
            } else if c == quote {
                self.at += 1;
                break;
            } else if c == b'\\' && backslashes {
                let next = self.peek(1).ok_or("an unterminated quoted string")?;
                if next == b'%' {
                    return Err("a backslash before a % expansion".into());
                }
                raw.extend([c, next]);
                self.at += 2;
            } else if c == b'%' {
                self.at += 1;
                match self.expansion()? {
                    None => raw.push(b'%'),
                    Some(part) => {
                        if !raw.is_empty() {
                            pieces.push(Piece::Raw(utf8(std::mem::take(&mut raw))?));
                        }
                        pieces.push(Piece::Exp(part));
                    }
                }
            } else {
                raw.push(c);
                self.at += 1;
            }
        }
        if !raw.is_empty() || pieces.is_empty() {
            pieces.push(Piece::Raw(utf8(raw)?));
        }
        self.emit_literal(pieces, quote, escape_prefix);
        Ok(())
    }

    fn emit_literal(&mut self, pieces: Vec<Piece>, quote: u8, escape_prefix: bool) {
        let quote = quote as char;
        // The E of E'…' was already copied; later pieces need their own.
        let prefix = if escape_prefix { "E" } else { "" };
        let has_exp = pieces.iter().any(|p| matches!(p, Piece::Exp(_)));
        if !has_exp {
            for p in pieces {
                if let Piece::Raw(text) = p {
                    self.out.sql.push_str(&format!("{quote}{text}{quote}"));
                }
            }
            return;
        }
        if escape_prefix {
            // Drop the copied E: each piece carries its own.
            self.out.sql.pop();
        }
        if let [Piece::Exp(part)] = pieces[..] {
            self.placeholder(part);
            return;
        }
        let mysql = self.flavour == Flavour::Mysql;
        self.out.sql.push_str(if mysql { "CONCAT(" } else { "(" });
        for (i, p) in pieces.into_iter().enumerate() {
            if i > 0 {
                self.out.sql.push_str(if mysql { ", " } else { " || " });
            }
            match p {
                Piece::Raw(text) => self
                    .out
                    .sql
                    .push_str(&format!("{prefix}{quote}{text}{quote}")),
                Piece::Exp(part) => self.placeholder(part),
            }
        }
        self.out.sql.push(')');
    }

    /// A quoted identifier, copied; an expansion in it is refused.
    fn identifier(&mut self, quote: u8) -> Result<(), String> {
        let start = self.at;
        self.at += 1;
        loop {
            let c = self.peek(0).ok_or("an unterminated quoted identifier")?;
            self.at += 1;
            if c == b'%' {
                return Err("a % expansion inside a quoted identifier".into());
            }
            if c == quote {
                if self.peek(0) == Some(quote) {
                    self.at += 1;
                    continue;
                }
                break;
            }
        }
        let text = utf8(self.src[start..self.at].to_vec())?;
        self.out.sql.push_str(&text);
        Ok(())
    }

    /// A comment up to and including `end` (or the end of the template),
    /// copied without its expansions.
    fn comment(&mut self, end: &str) {
        let rest = &self.src[self.at..];
        let len = rest
            .windows(end.len())
            .position(|w| w == end.as_bytes())
            .map_or(rest.len(), |p| p + end.len());
        let text = String::from_utf8_lossy(&rest[..len]).replace('%', "");
        self.out.sql.push_str(&text);
        self.at += len;
    }
}

fn utf8(bytes: Vec<u8>) -> Result<String, String> {
    String::from_utf8(bytes).map_err(|_| "a quoted string that is not UTF-8".to_string())
}

#[cfg(test)]
mod tests;
