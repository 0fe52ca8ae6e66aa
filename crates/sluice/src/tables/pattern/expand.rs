//! A rule's result text with `$n`, `${n}`, `$(n)` and `$$`, parsed once at
//! load (as Postfix checks it when it opens the table) and expanded per
//! lookup from the match's groups. A group that took no part in the match
//! expands to nothing.
//!
//! Invariant: every group index in a [`Template`] is in `1..=groups` of its
//! rule's pattern, so expansion never indexes out of range.

use super::Problem;

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Group(usize),
}

/// A parsed result text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Template {
    pieces: Vec<Piece>,
}

impl Template {
    /// Parses `text` for a pattern with `groups` capture groups; `negated`
    /// rules may not refer to groups (Postfix skips such a rule).
    pub(crate) fn parse(text: &str, groups: usize, negated: bool) -> Result<Template, Problem> {
        let mut pieces = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(pos) = rest.find('$') {
            lit.push_str(&rest[..pos]);
            rest = &rest[pos + 1..];
            let (name, after) = if let Some(r) = rest.strip_prefix('$') {
                lit.push('$');
                rest = r;
                continue;
            } else if let Some(r) = rest.strip_prefix('{') {
                closed(r, '}')?
            } else if let Some(r) = rest.strip_prefix('(') {
                closed(r, ')')?
            } else {
                let n = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                if n == 0 {
                    return Err(Problem::BadReplacement(text.to_string()));
                }
                (&rest[..n], &rest[n..])
            };
            rest = after;
            if negated {
                return Err(Problem::GroupInNegated);
            }
            let index: usize = match name.parse() {
                Ok(i) if name.bytes().all(|b| b.is_ascii_digit()) => i,
                _ => return Err(Problem::NonNumericIndex(name.to_string())),
            };
            if index == 0 || index > groups {
                return Err(Problem::IndexOutOfRange(name.to_string()));
            }
            if !lit.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut lit)));
            }
            pieces.push(Piece::Group(index));
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            pieces.push(Piece::Text(lit));
        }
        Ok(Template { pieces })
    }

    /// Whether expansion needs the match's groups.
    pub(crate) fn uses_groups(&self) -> bool {
        self.pieces.iter().any(|p| matches!(p, Piece::Group(_)))
    }

    /// The text with each group replaced by `group(n)` (None: empty).
    pub(crate) fn expand<'k>(&self, group: impl Fn(usize) -> Option<&'k str>) -> String {
        let mut out = String::new();
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Group(i) => out.push_str(group(*i).unwrap_or("")),
            }
        }
        out
    }
}

fn closed(r: &str, close: char) -> Result<(&str, &str), Problem> {
    match r.find(close) {
        Some(end) => Ok((&r[..end], &r[end + 1..])),
        None => Err(Problem::BadReplacement(r.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let t = Template::parse("a$1-${2}$(1)$$x", 2, false).expect("parses");
        let g = ["", "X", "Y"];
        assert_eq!(t.expand(|i| g.get(i).copied()), "aX-YX$x");
        assert!(t.uses_groups());
    }

    #[test]
    fn problems() {
        assert_eq!(
            Template::parse("x$1y", 1, false),
            Err(Problem::NonNumericIndex("1y".into()))
        );
        assert_eq!(
            Template::parse("$0", 1, false),
            Err(Problem::IndexOutOfRange("0".into()))
        );
        assert_eq!(
            Template::parse("$2", 1, false),
            Err(Problem::IndexOutOfRange("2".into()))
        );
        assert_eq!(Template::parse("$1", 1, true), Err(Problem::GroupInNegated));
        assert!(Template::parse("$$", 0, true).is_ok());
    }
}
