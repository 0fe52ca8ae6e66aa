//! POSIX regular expressions (as glibc's regcomp reads them for Postfix's
//! regexp tables) rewritten into the `regex` crate's syntax.
//!
//! Extended (ERE, the default) keeps its operators; inside brackets a
//! backslash is literal in POSIX and `[`, `&`, `~` are plain, so they are
//! escaped for `regex`. Basic (BRE, the `x` flag) swaps `\( \) \{ \} \| \+
//! \?` with their bare forms (the last three are GNU extensions), and a
//! leading `*` is literal.
//!
//! What `regex` lacks, so such a rule is skipped with a warning at load:
//! back-references (`\1`), collating elements (`[[.x.]]`) and equivalence
//! classes (`[[=x=]]`). glibc's `\'` and `` \` `` are not supported either.

/// Rewrites a POSIX pattern (`extended`: ERE, else BRE; `newline`:
/// REG_NEWLINE, the `m` flag).
pub(crate) fn to_regex(pat: &str, extended: bool, newline: bool) -> String {
    let mut out = String::with_capacity(pat.len() + 8);
    let chars: Vec<char> = pat.chars().collect();
    let mut i = 0;
    let mut at_start = true;
    while i < chars.len() {
        let c = chars[i];
        let was_start = at_start;
        at_start = false;
        match c {
            '[' => i = bracket(&chars, i, newline, &mut out),
            '\\' if i + 1 < chars.len() => {
                let n = chars[i + 1];
                i += 2;
                if extended {
                    out.push('\\');
                    out.push(n);
                    continue;
                }
                match n {
                    '{' => interval(&chars, i, &mut out),
                    '(' | ')' | '}' | '|' | '+' | '?' => out.push(n),
                    _ => {
                        out.push('\\');
                        out.push(n);
                    }
                }
                at_start = n == '(' || n == '|';
            }
            '(' | ')' | '{' | '}' | '|' | '+' | '?' if !extended => {
                out.push('\\');
                out.push(c);
                i += 1;
            }
            '{' if extended => {
                interval(&chars, i + 1, &mut out);
                i += 1;
            }
            '*' if !extended && was_start => {
                out.push_str("\\*");
                i += 1;
            }
            _ => {
                out.push(c);
                i += 1;
                at_start = c == '^' && was_start;
            }
        }
    }
    out
}

/// Opens an interval; glibc's `{,n}` is `{0,n}` (`next`: the index after
/// the brace).
fn interval(chars: &[char], next: usize, out: &mut String) {
    out.push('{');
    if chars.get(next) == Some(&',') {
        out.push('0');
    }
}

/// Copies the bracket expression starting at `chars[start]` (`[`), returns
/// the index after it; an unclosed one is copied as is (regex rejects it).
fn bracket(chars: &[char], start: usize, newline: bool, out: &mut String) -> usize {
    let mut i = start + 1;
    out.push('[');
    if chars.get(i) == Some(&'^') {
        out.push('^');
        i += 1;
        if newline {
            // REG_NEWLINE: a non-matching list never matches a newline.
            out.push_str("\\n");
        }
    }
    if chars.get(i) == Some(&']') {
        out.push_str("\\]");
        i += 1;
    }
    while i < chars.len() {
        let c = chars[i];
        match c {
            ']' => {
                out.push(']');
                return i + 1;
            }
            '[' if matches!(chars.get(i + 1), Some(':' | '.' | '=')) => {
                let kind = chars[i + 1];
                let end = (i + 2..chars.len().saturating_sub(1))
                    .find(|&j| chars[j] == kind && chars[j + 1] == ']');
                match end {
                    Some(j) => {
                        out.extend(&chars[i..j + 2]);
                        i = j + 2;
                    }
                    None => {
                        out.push_str("\\[");
                        i += 1;
                    }
                }
            }
            '\\' | '[' | '&' | '~' => {
                out.push('\\');
                out.push(c);
                i += 1;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::to_regex;

    #[test]
    fn ere_and_bre() {
        assert_eq!(to_regex("a[\\]]b", true, false), "a[\\\\]]b");
        assert_eq!(to_regex("[]a[:digit:]]", true, false), "[\\]a[:digit:]]");
        assert_eq!(
            to_regex("\\(a+\\)\\{2\\}(x)", false, false),
            "(a\\+){2}\\(x\\)"
        );
        assert_eq!(to_regex("*a", false, false), "\\*a");
        assert_eq!(to_regex("[^a]", true, true), "[^\\na]");
        assert_eq!(to_regex("a{,2}", true, false), "a{0,2}");
        assert_eq!(to_regex("a\\{,2\\}", false, false), "a{0,2}");
    }
}
