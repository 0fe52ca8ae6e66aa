//! Postfix's master.cf as master(5) reads it: one service per logical
//! line (a line starting with whitespace continues it; `#` lines are
//! skipped), eight fields (`service type private unpriv chroot wakeup
//! maxproc command`) then the command's arguments, where `-o name=value`
//! or `-o { name = value }` overrides a main.cf parameter for that
//! service and `{ … }` keeps an argument with blanks whole.
//!
//! Trust: none (as main.cf's): a file over [`MAX_BYTES`], a NUL byte, a
//! line with fewer than eight fields or an unclosed `{` is an error
//! naming the line; nothing is run.

use super::maincf::MAX_BYTES;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// `smtp`, `submission`, `127.0.0.1:10025`, `dovecot` …
    pub name: String,
    /// `inet`, `unix`, `unix-dgram`, `fifo`, `pass`.
    pub kind: String,
    /// The daemon: `smtpd`, `pipe`, `smtp`, `lmtp`, `local` …
    pub command: String,
    /// The command's arguments other than `-o` (`flags=DRhu`, `user=…`,
    /// `argv=…` and what follows it).
    pub args: Vec<String>,
    /// The `-o` overrides, in order.
    pub overrides: Vec<(String, String)>,
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MasterError {
    #[error("file is larger than {MAX_BYTES} bytes")]
    TooLarge,
    #[error("line {0}: binary data (a NUL byte)")]
    Binary(usize),
    #[error("line {0}: fewer than 8 fields")]
    Short(usize),
    #[error("line {0}: a `{{` is not closed")]
    Unclosed(usize),
    #[error("line {0}: -o without name=value")]
    BadOverride(usize),
}

pub fn parse(text: &[u8]) -> Result<Vec<Service>, MasterError> {
    if text.len() > MAX_BYTES {
        return Err(MasterError::TooLarge);
    }
    let mut logical: Vec<(usize, String)> = Vec::new();
    for (i, raw) in text.split(|&b| b == b'\n').enumerate() {
        if raw.contains(&0) {
            return Err(MasterError::Binary(i + 1));
        }
        let line = String::from_utf8_lossy(raw);
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        match (line.starts_with([' ', '\t']), logical.last_mut()) {
            (true, Some((_, text))) => {
                text.push(' ');
                text.push_str(trimmed);
            }
            _ => logical.push((i + 1, trimmed.to_string())),
        }
    }
    logical.into_iter().map(|(n, l)| service(n, &l)).collect()
}

fn service(n: usize, line: &str) -> Result<Service, MasterError> {
    let fields = split(line).ok_or(MasterError::Unclosed(n))?;
    if fields.len() < 8 {
        return Err(MasterError::Short(n));
    }
    let mut args = Vec::new();
    let mut overrides = Vec::new();
    let mut rest = fields[8..].iter();
    while let Some(a) = rest.next() {
        if a == "-o" {
            let v = rest.next().ok_or(MasterError::BadOverride(n))?;
            let v = v
                .strip_prefix('{')
                .and_then(|v| v.strip_suffix('}'))
                .unwrap_or(v);
            let (name, value) = v.split_once('=').ok_or(MasterError::BadOverride(n))?;
            overrides.push((name.trim().to_string(), value.trim().to_string()));
        } else if let Some(v) = a.strip_prefix("-o") {
            let (name, value) = v.split_once('=').ok_or(MasterError::BadOverride(n))?;
            overrides.push((name.trim().to_string(), value.trim().to_string()));
        } else {
            args.push(a.clone());
        }
    }
    Ok(Service {
        name: fields[0].clone(),
        kind: fields[1].clone(),
        command: fields[7].clone(),
        args,
        overrides,
        line: n,
    })
}

/// Blank-separated words, a `{ … }` group one word (its braces kept).
fn split(line: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0usize;
    for c in line.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.checked_sub(1)?,
            c if c.is_whitespace() && depth == 0 => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if depth != 0 {
        return None;
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_overrides_and_groups() {
        let text = b"# comment\nsmtp      inet  n       -       y       -       -       smtpd\nsubmission inet n       -       y       -       -       smtpd\n  -o syslog_name=postfix/submission\n  -o { smtpd_recipient_restrictions = permit_sasl_authenticated, reject }\n  -o smtpd_tls_security_level=encrypt\nmaildrop  unix  -       n       n       -       -       pipe\n  flags=DRhu user=vmail argv=/usr/bin/maildrop -d ${recipient}\n";
        let s = parse(text).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(
            (s[1].name.as_str(), s[1].command.as_str(), s[1].line),
            ("submission", "smtpd", 3)
        );
        assert_eq!(
            s[1].overrides,
            vec![
                ("syslog_name".into(), "postfix/submission".into()),
                (
                    "smtpd_recipient_restrictions".into(),
                    "permit_sasl_authenticated, reject".into()
                ),
                ("smtpd_tls_security_level".into(), "encrypt".into()),
            ]
        );
        assert_eq!(
            s[2].args[..3],
            ["flags=DRhu", "user=vmail", "argv=/usr/bin/maildrop"]
        );
    }

    #[test]
    fn hostile_master_cf_gives_errors_naming_the_line() {
        assert_eq!(
            parse(b"smtp inet n - y - - \n").unwrap_err(),
            MasterError::Short(1)
        );
        assert_eq!(
            parse(b"x inet n - y - - smtpd -o {a=b\n").unwrap_err(),
            MasterError::Unclosed(1)
        );
        assert_eq!(
            parse(b"x inet n - y - - smtpd -o\n").unwrap_err(),
            MasterError::BadOverride(1)
        );
        assert_eq!(parse(b"x\0").unwrap_err(), MasterError::Binary(1));
        assert_eq!(
            parse(b"x inet n - y - - smtpd }{\n").unwrap_err(),
            MasterError::Unclosed(1)
        );
    }
}
