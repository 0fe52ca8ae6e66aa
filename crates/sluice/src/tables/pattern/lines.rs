//! Postfix's logical lines (readllines(3)), shared by the pattern and cidr
//! tables: blank lines and lines whose first non-blank character is `#`
//! are skipped; a line that starts with whitespace continues the previous
//! logical line (joined without the newline, its leading whitespace kept,
//! as postmap does); trailing whitespace is dropped. Each logical line
//! carries the number of its first physical line.
//!
//! Trusts nothing: any text gives some list of lines.

/// One logical line: its first physical line number (1-based) and text.
pub(crate) struct Logical {
    pub(crate) line: usize,
    pub(crate) text: String,
}

/// Splits `text` into logical lines.
pub(crate) fn logical_lines(text: &str) -> Vec<Logical> {
    let mut out: Vec<Logical> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let continues = raw.len() != trimmed.len();
        match out.last_mut() {
            Some(last) if continues => last.text.push_str(raw),
            _ => out.push(Logical {
                line: i + 1,
                text: trimmed.to_string(),
            }),
        }
    }
    for l in &mut out {
        let end = l.text.trim_end().len();
        l.text.truncate(end);
    }
    out
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
        let l = logical_lines("# c\n/a/ x\n  y\n\n\t z  \n/b/ c\n");
        let got: Vec<(usize, &str)> = l.iter().map(|l| (l.line, l.text.as_str())).collect();
        assert_eq!(got, vec![(2, "/a/ x  y\t z"), (6, "/b/ c")]);
    }

    #[test]
    fn statements() {
        assert!(matches!(statement("if/x/"), Statement::If("/x/")));
        assert!(matches!(statement("ENDIF junk"), Statement::Endif("junk")));
        assert!(matches!(statement("iffy"), Statement::Other));
    }
}
