//! `sendmail` (the binary invoked under that name, or `sluice sendmail`):
//! the sendmail(1) interface programs expect. Reads a message on stdin,
//! hands it to the running daemon through the admin socket, exits with
//! sysexits.h statuses.
//!
//! Options (Postfix's set, less the ones that need no daemon): `-t`
//! (recipients from To:, Cc:, Bcc:; Bcc: removed), `-i`/`-oi` (a lone dot
//! does not end the message), `-f ADDR`/`-r ADDR` (sender), `-F NAME`
//! (full name for a From: that has to be made), `-C FILE` (configuration;
//! default as `tools::locate` says: never the current directory), `-bp` (mailq),
//! `-bi` (newaliases: a no-op, tables are read live), `-bv` (where each
//! recipient would go, printed as `sluice address` prints it; nothing is
//! sent: Postfix mails the report, we print it),
//! `-q` (flush), `-bm` (the default); other `-o…`, `-v`, `-N…`, `-B…` are
//! accepted and ignored, as Postfix does.

use std::path::PathBuf;

use crate::message::mime::{field_named, header_fields};

pub use crate::intake::refusal::{EX_OK, EX_SOFTWARE, EX_TEMPFAIL, EX_USAGE};

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Options {
    pub sender: Option<String>,
    pub full_name: Option<String>,
    pub from_headers: bool,
    /// A line with a single dot ends the message (no `-i`).
    pub dot_ends: bool,
    pub config: Option<PathBuf>,
    pub list_queue: bool,
    pub flush: bool,
    /// `-bi` (`newaliases`): nothing to rebuild, tables are read live.
    pub rebuild_aliases: bool,
    /// `-bv`: explain the recipients, send nothing.
    pub verify: bool,
    pub recipients: Vec<String>,
}

/// A command line sendmail does not understand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    #[error("{0} needs a value")]
    NoValue(&'static str),
    #[error("-b{0} is not supported")]
    Mode(String),
    #[error("unknown option -{0}")]
    Unknown(String),
}

/// Parses sendmail's command line (without the program name).
pub fn parse(args: &[String]) -> Result<Options, UsageError> {
    let mut o = Options {
        dot_ends: true,
        ..Default::default()
    };
    let mut it = args.iter().peekable();
    let value =
        |flag: &'static str, rest: &str, it: &mut std::iter::Peekable<std::slice::Iter<String>>| {
            if rest.is_empty() {
                it.next().cloned().ok_or(UsageError::NoValue(flag))
            } else {
                Ok(rest.to_string())
            }
        };
    while let Some(arg) = it.next() {
        if arg == "--" {
            o.recipients.extend(it.by_ref().cloned());
            break;
        }
        let Some(opt) = arg.strip_prefix('-') else {
            o.recipients.push(arg.clone());
            continue;
        };
        let (flag, rest) = opt.split_at(opt.len().min(1));
        match flag {
            "t" if rest.is_empty() => o.from_headers = true,
            "i" if rest.is_empty() => o.dot_ends = false,
            "o" if rest == "i" => o.dot_ends = false,
            // -G (a gateway submission: FILTER_README's filters send
            // their copy back with it) and -U change nothing here.
            "o" | "v" | "N" | "B" | "X" | "n" | "m" | "G" | "U" => {}
            "f" | "r" => o.sender = Some(value("-f", rest, &mut it)?),
            "F" => o.full_name = Some(value("-F", rest, &mut it)?),
            "C" => o.config = Some(PathBuf::from(value("-C", rest, &mut it)?)),
            "b" => match rest {
                "p" => o.list_queue = true,
                "i" => o.rebuild_aliases = true,
                "v" => o.verify = true,
                "m" => {}
                other => return Err(UsageError::Mode(other.to_string())),
            },
            "q" => o.flush = true,
            _ => return Err(UsageError::Unknown(opt.to_string())),
        }
    }
    Ok(o)
}

/// The message as read from stdin: CRLF line ends, ending at a lone dot
/// unless `-i`.
pub fn read_message(input: &[u8], dot_ends: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() + input.len() / 40);
    for line in input.split_inclusive(|&b| b == b'\n') {
        let bare = line
            .strip_suffix(b"\n")
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .unwrap_or(line);
        if dot_ends && bare == b"." {
            break;
        }
        out.extend_from_slice(bare);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// With `-t`: the addresses in To:, Cc: and Bcc:, and the message without
/// its Bcc: fields.
pub fn header_recipients(message: &[u8]) -> (Vec<String>, Vec<u8>) {
    let head_end = memchr::memmem::find(message, b"\r\n\r\n").map_or(message.len(), |i| i + 2);
    let mut recipients = Vec::new();
    let mut kept = Vec::with_capacity(message.len());
    for f in header_fields(&message[..head_end]) {
        if [&b"to"[..], b"cc", b"bcc"]
            .iter()
            .any(|n| field_named(f, n))
        {
            let colon = memchr::memchr(b':', f).unwrap_or(0);
            recipients.extend(addresses(&String::from_utf8_lossy(&f[colon + 1..])));
        }
        if !field_named(f, b"bcc") {
            kept.extend_from_slice(f);
        }
    }
    kept.extend_from_slice(&message[head_end..]);
    (recipients, kept)
}

/// The addresses of an address list: `<a@b>` parts, or bare words with `@`.
fn addresses(list: &str) -> Vec<String> {
    let list = list.replace(['\r', '\n'], " ");
    list.split(',')
        .filter_map(|part| match (part.find('<'), part.rfind('>')) {
            (Some(a), Some(b)) if a < b => Some(part[a + 1..b].trim().to_string()),
            _ => part
                .split_whitespace()
                .find(|w| w.contains('@'))
                .map(str::to_string),
        })
        .filter(|a| !a.is_empty())
        .collect()
}

/// Runs sendmail with parsed `opts`; returns the exit status.
pub async fn run(opts: Options) -> i32 {
    use crate::admin::protocol::{Filter, Request};
    use crate::tools::queue_cli;
    use base64::Engine;
    use std::io::Read;
    if opts.rebuild_aliases {
        // Postfix's newaliases rebuilds aliases.db; Sluice reads its alias
        // tables as they are (a changed file is seen within seconds), so a
        // package's postinst or an administrator's habit gets success.
        eprintln!("newaliases: nothing to rebuild: Sluice reads its alias tables live");
        return EX_OK;
    }
    if opts.verify {
        return verify(&opts).await;
    }
    let data_dir = match crate::tools::locate::data_dir(opts.config.as_deref()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("sendmail: {e}");
            return EX_TEMPFAIL;
        }
    };
    let request = if opts.list_queue {
        Request::List {
            filter: Filter::default(),
        }
    } else if opts.flush {
        Request::Flush {
            id: None,
            domain: None,
        }
    } else {
        let mut input = Vec::new();
        if let Err(e) = std::io::stdin().read_to_end(&mut input) {
            eprintln!("sendmail: cannot read the message: {e}");
            return EX_TEMPFAIL;
        }
        let mut message = read_message(&input, opts.dot_ends);
        let mut recipients = opts.recipients.clone();
        if opts.from_headers {
            let (more, kept) = header_recipients(&message);
            recipients.extend(more);
            message = kept;
        }
        let user = std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .unwrap_or_else(|_| "root".into());
        // Bare names are qualified by the daemon with its hostname (as
        // Postfix's append_at_myorigin): this client reads no configuration
        // it may not be allowed to read.
        let sender = opts.sender.clone().unwrap_or(user);
        // The daemon's intake adds the From:, Date: and Message-ID: the
        // message lacks, as Postfix's cleanup does.
        Request::Submit {
            sender,
            recipients,
            message_b64: base64::engine::general_purpose::STANDARD.encode(message),
            full_name: opts.full_name.clone(),
        }
    };
    match queue_cli::call(&data_dir, &request).await {
        Ok(r) if opts.list_queue => {
            print!("{}", queue_cli::mailq(&r.messages));
            EX_OK
        }
        Ok(_) => EX_OK,
        Err(e) => {
            eprintln!("sendmail: {e}");
            e.exit_status(EX_SOFTWARE, EX_TEMPFAIL)
        }
    }
}

/// `-bv`: each recipient's report; EX_NOUSER when one would be refused,
/// EX_TEMPFAIL when a table could not answer.
async fn verify(opts: &Options) -> i32 {
    use crate::tools::address::{explain, text, Rcpt};
    const EX_NOUSER: i32 = 67;
    if opts.recipients.is_empty() {
        eprintln!("sendmail: -bv needs recipients");
        return EX_USAGE;
    }
    let path = crate::tools::locate::config_file(opts.config.as_deref());
    let source = crate::config::source::Source::new(path.as_deref(), Vec::new());
    let config = match source.load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sendmail: -bv reads the configuration: {e}");
            return EX_TEMPFAIL;
        }
    };
    let mut status = EX_OK;
    for recipient in &opts.recipients {
        match explain(&config, recipient).await {
            Ok(report) => {
                print!("{}", text(&report));
                status = match (&report.rcpt, status) {
                    (Rcpt::Refused { .. }, _) => EX_NOUSER,
                    (Rcpt::TryLater { .. }, EX_OK) => EX_TEMPFAIL,
                    (_, s) => s,
                };
            }
            Err(e) => {
                eprintln!("sendmail: {e}");
                return EX_TEMPFAIL;
            }
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn options_as_programs_pass_them() {
        let o = parse(&args(
            "-t -oi -fme@x.test -F Me -oem a@b.test -- -weird@c.test",
        ))
        .unwrap();
        assert!(o.from_headers && !o.dot_ends);
        assert_eq!(o.sender.as_deref(), Some("me@x.test"));
        assert_eq!(o.full_name.as_deref(), Some("Me"));
        assert_eq!(o.recipients, vec!["a@b.test", "-weird@c.test"]);
        assert_eq!(parse(&args("-f")).unwrap_err(), UsageError::NoValue("-f"));
        assert_eq!(
            parse(&args("-bs")).unwrap_err(),
            UsageError::Mode("s".into())
        );
        assert!(parse(&args("-bp")).unwrap().list_queue);
        assert!(parse(&args("-bv a@b.test")).unwrap().verify);
        let filter = parse(&args("-G -i -f s@x.test -- a@b.test")).unwrap();
        assert_eq!(filter.recipients, vec!["a@b.test"]);
    }

    #[test]
    fn input_is_read_like_sendmail() {
        assert_eq!(read_message(b"a\nb\r\n.\nc\n", true), b"a\r\nb\r\n");
        assert_eq!(read_message(b"a\n.\nc", false), b"a\r\n.\r\nc\r\n");
        let (rcpts, kept) = header_recipients(
            b"To: A <a@x.test>, b@x.test\r\nBcc: hidden@x.test,\r\n more@x.test\r\nSubject: s\r\n\r\nTo: not@x.test\r\n",
        );
        assert_eq!(
            rcpts,
            vec!["a@x.test", "b@x.test", "hidden@x.test", "more@x.test"]
        );
        assert_eq!(
            kept,
            b"To: A <a@x.test>, b@x.test\r\nSubject: s\r\n\r\nTo: not@x.test\r\n"
        );
    }
}
