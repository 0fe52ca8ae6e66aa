//! Postfix's logical lines (readllines(3)), shared by every table file
//! kind (the source format, pattern and cidr tables): blank lines and
//! lines whose first non-blank character is `#` are skipped, also between
//! a line and its continuation; a line that starts with whitespace
//! continues the previous logical line (joined without the line end, its
//! leading whitespace and any CR kept, as postmap does); trailing
//! whitespace is dropped. Each logical line carries the number of its
//! first physical line. A continuation with nothing to continue is
//! skipped, and its line number reported (postmap warns "logical line must
//! not start with whitespace").
//!
//! Trusts nothing: any text gives some list of lines.

/// One logical line: its first physical line number (1-based) and text.
pub(crate) struct Logical {
    pub(crate) line: usize,
    pub(crate) text: String,
}

/// Splits `text` into logical lines; also the numbers of the lines that
/// continued nothing.
pub(crate) fn logical_lines(text: &str) -> (Vec<Logical>, Vec<usize>) {
    let mut out: Vec<Logical> = Vec::new();
    let mut orphans = Vec::new();
    for (i, raw) in text.split('\n').enumerate() {
        let trimmed = raw.trim_start();
        if trimmed.trim_end().is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let continues = raw.len() != trimmed.len();
        match out.last_mut() {
            Some(last) if continues => last.text.push_str(raw),
            None if continues => orphans.push(i + 1),
            _ => out.push(Logical {
                line: i + 1,
                text: raw.to_string(),
            }),
        }
    }
    for l in &mut out {
        let end = l.text.trim_end().len();
        l.text.truncate(end);
    }
    (out, orphans)
}

/// The statement a logical line holds: `if`, `endif`, or anything else.
pub(crate) enum Statement<'a> {
    /// `if` and the text after the keyword.
    If(&'a str),
    /// `endif` and any text after it (to warn about).
    Endif(&'a str),
    Other,
}

/// Recognises `IF`/`ENDIF` (case-insensitive, not followed by a letter or
/// digit), as Postfix does: `if/x/` is an IF.
pub(crate) fn statement(text: &str) -> Statement<'_> {
    let word = |kw: &str| {
        let n = kw.len();
        text.len() >= n
            && text.is_char_boundary(n)
            && text[..n].eq_ignore_ascii_case(kw)
            && !text[n..].starts_with(|c: char| c.is_ascii_alphanumeric())
    };
    if word("if") {
        Statement::If(&text[2..])
    } else if word("endif") {
        Statement::Endif(text[5..].trim())
    } else {
        Statement::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuation_and_comments() {
        let (l, orphans) = logical_lines("  o\n# c\n/a/ x\n  y\n\n\t z  \n/b/ c\n");
        assert_eq!(orphans, [1]);
        let got: Vec<(usize, &str)> = l.iter().map(|l| (l.line, l.text.as_str())).collect();
        assert_eq!(got, vec![(3, "/a/ x  y\t z"), (7, "/b/ c")]);
    }

    #[test]
    fn statements() {
        assert!(matches!(statement("if/x/"), Statement::If("/x/")));
        assert!(matches!(statement("ENDIF junk"), Statement::Endif("junk")));
        assert!(matches!(statement("iffy"), Statement::Other));
    }
}
