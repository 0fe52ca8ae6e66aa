//! Fuzz targets for the SMTP decoders, as proptest properties that run on
//! stable Rust: fast in a normal `cargo test`, for as long as asked under
//! `scripts/fuzz` (see [`harness`]).
//!
//! * `fuzz_command`: [`LineFramer::next_frame`] on arbitrary bytes cut at
//!   arbitrary points, and [`parse_command`] on arbitrary and near-valid
//!   lines. Never panics; the framer always makes progress and frames the
//!   same way however the bytes arrive; an accepted mailbox has no control
//!   character, nothing unquoted that ends a path, and reads back as itself
//!   when written into `RCPT TO:<…>` (so it cannot inject anything).
//! * `fuzz_data`: [`DataDecoder::feed`] on arbitrary bytes cut at arbitrary
//!   points gives the same end, flaws and body however they are cut, ends
//!   exactly at the first `CRLF.CRLF`, and matches a naive reference;
//!   [`dotstuff::stuff_into`] then decoding gives the body back (with long
//!   lines wrapped); [`data::scan_body`] and friends never panic and agree
//!   with naive references.
//!
//! What the targets found is kept as plain regression tests at the end.

mod data_checks;
mod harness;
mod split;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

use crate::address::{parse_domain, parse_path, Path, MAX_LOCAL_PART, MAX_PATH};
use crate::command::{parse_command, Command, CommandError};
use crate::data::{BareLinePolicy, DataLimits};
use crate::line::{Frame, LineError, LineFramer};
use data_checks::{check_decoder, check_scan_body, check_stuffing};
use harness::{prop, run_target, Bytes};
use split::{cuts, split};

#[test]
fn fuzz_command() {
    run_target(
        "command",
        vec![
            prop("arbitrary_lines", smtp_bytes(600), |line| {
                check_command(&line)
            }),
            prop("near_valid_lines", near_valid_line(), |line| {
                check_command(&line)
            }),
            prop(
                "framer",
                (smtp_bytes(2000), frame_limit(), cuts()),
                |(data, max_len, cuts)| check_framer(&data, max_len, &cuts),
            ),
        ],
    );
}

#[test]
fn fuzz_data() {
    run_target(
        "data",
        vec![
            prop(
                "decoder",
                (
                    data_bytes(3000),
                    cuts(),
                    any::<bool>(),
                    0usize..4000,
                    0usize..1100,
                ),
                |(input, cuts, normalize, max_size, max_line)| {
                    let limits = DataLimits {
                        // A small limit half the time, none the other half.
                        max_size: if max_size % 2 == 0 { max_size } else { 1 << 20 },
                        max_line,
                        bare_line: if normalize {
                            BareLinePolicy::Normalize
                        } else {
                            BareLinePolicy::Reject
                        },
                    };
                    check_decoder(&input, &cuts, limits)
                },
            ),
            prop("stuffing_round_trip", (body(), cuts()), |(body, cuts)| {
                check_stuffing(&body, &cuts)
            }),
            prop(
                "scan_body",
                (data_bytes(3000), 0usize..1100),
                |(body, max_line)| check_scan_body(&body, max_line),
            ),
        ],
    );
}

// ---------------------------------------------------------------- inputs

/// Bytes where the octets SMTP cares about are common.
fn smtp_bytes(max: usize) -> impl Strategy<Value = Bytes> {
    let special = select(b"\r\n.\0 <>@\"\\:=aA0\x7f\xc3\xa9".to_vec());
    vec(prop_oneof![3 => any::<u8>(), 7 => special], 0..max).prop_map(Bytes)
}

/// DATA streams: raw bytes and the tokens that matter to the decoder.
fn data_bytes(max: usize) -> impl Strategy<Value = Bytes> {
    let token = prop_oneof![
        4 => vec(any::<u8>(), 1..8),
        6 => select(vec![
            &b"\r\n"[..], b"\r\n.\r\n", b".", b"..", b"\r", b"\n", b"\0", b"a", b"xyz ",
            b"\r\n.", b".\r\n", b"\n.\n", b"\r.\r", b"\r\r\n",
        ])
        .prop_map(<[u8]>::to_vec),
        1 => (1usize..1100).prop_map(|n| vec![b'x'; n]),
    ];
    vec(token, 0..max / 8).prop_map(|tokens| Bytes(tokens.concat()))
}

/// The command-line limit: around RFC 5321's 512, or tiny.
fn frame_limit() -> impl Strategy<Value = usize> {
    prop_oneof![0usize..20, 500usize..600]
}

/// Lines made of the pieces a command parser can trip on: mostly MAIL and
/// RCPT with paths that are valid or nearly so, quoted or not.
fn near_valid_line() -> impl Strategy<Value = Bytes> {
    const PATH_VERBS: &[&str] = &["MAIL FROM:", "mail from: ", "RCPT TO:", "rcpt To:  "];
    const OTHER_VERBS: &[&str] = &[
        "EHLO ", "HELO ", "BDAT ", "DATA", "AUTH ", "VRFY ", "NOOP ", "RSET", "QUIT ", "STARTTLS",
        "XYZZY ", "MAIL ", "RCPT TO",
    ];
    const ATEXT: &[&str] = &[
        "a", "Bob", "0", ".", "+", "-", "_", "=", "é", "ü", "😀", "%", "!",
    ];
    const SPECIALS: &[&str] = &[
        " ",
        "\"",
        "\\",
        "\\\"",
        "\\\\",
        "\\a",
        "@",
        "<",
        ">",
        ",",
        ":",
        ";",
        "[",
        "]",
        "(",
        ")",
        "..",
        "postmaster",
        "@a.example,@b.example:",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    ];
    const ODD: &[&str] = &[
        "\r", "\n", "\t", "\0", "\x7f", "\u{85}", "\u{9f}", "\u{2028}", "\u{202e}", "\u{feff}",
    ];
    const LABELS: &[&str] = &[
        "example",
        "com",
        "a-b",
        "bücher",
        "x1",
        "A",
        "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
    ];
    const LITERALS: &[&str] = &[
        "[127.0.0.1]",
        "[IPv6:::1]",
        "[ipv6:2001:DB8::1]",
        "[1.2.3]",
        "[tag:x]",
        "[127.0.0.1",
    ];
    const ODD_DOMAIN: &[&str] = &[
        ".", "-", "x_y", "[", "]", " ", ">", "\"", "\\", "@", "..", "\u{85}", "\0",
    ];
    const PARAMS: &[&str] = &[
        " SIZE=10",
        " SIZE=",
        " SIZE=99999999999999999999999",
        " BODY=8BITMIME",
        " body=7bit",
        " SMTPUTF8",
        " AUTH=<>",
        " NOTIFY=NEVER",
        " NOTIFY=SUCCESS,DELAY",
        " ORCPT=rfc822;a+2B@b",
        " RET=FULL",
        " ENVID=x+2",
        " =x",
        " ",
        "x",
        " LAST",
        " 10",
    ];
    const ENDS: &[&str] = &["\r\n", "", "\n", "\r", " \r\n", "\r\n\r\n"];
    let verb = prop_oneof![8 => select(PATH_VERBS), 2 => select(OTHER_VERBS)];
    let local_piece = prop_oneof![
        12 => select(ATEXT),
        5 => select(SPECIALS),
        1 => select(ODD),
    ];
    let domain = prop_oneof![
        8 => vec(select(LABELS), 1..4).prop_map(|l| l.join(".")),
        1 => select(LITERALS).prop_map(str::to_string),
        1 => vec(prop_oneof![select(LABELS), select(ODD_DOMAIN)], 0..6)
            .prop_map(|p| p.concat()),
    ];
    (
        verb,
        0u8..5,
        vec(local_piece, 1..8),
        domain,
        vec(select(PARAMS), 0..3),
        prop_oneof![6 => Just("\r\n"), 1 => select(ENDS)],
    )
        .prop_map(|(verb, shape, local, domain, params, end)| {
            let local = local.concat();
            let arg = match shape {
                0 | 1 => format!("<{local}@{domain}>"),
                2 => format!("<\"{local}\"@{domain}>"),
                3 => format!("<{local}>"),
                _ => format!("{local}{domain}"),
            };
            Bytes(format!("{verb}{arg}{}{end}", params.concat()).into_bytes())
        })
}

/// A body with no bare CR or LF: lines of any other octets, mostly short,
/// some just under or over the 998-octet limit, some far over it.
fn body() -> impl Strategy<Value = Bytes> {
    let octet = prop_oneof![
        6 => any::<u8>().prop_filter("no CR or LF", |b| *b != b'\r' && *b != b'\n'),
        4 => select(b"..\0 a".to_vec()),
    ];
    let line = prop_oneof![
        8 => vec(octet.clone(), 0..40),
        1 => vec(octet.clone(), 995..1002),
        1 => vec(octet, 1990..2010),
    ];
    (vec(line, 0..10), any::<bool>()).prop_map(|(lines, final_crlf)| {
        let mut body = lines.join(&b"\r\n"[..]);
        if final_crlf && !lines.is_empty() {
            body.extend_from_slice(b"\r\n");
        }
        Bytes(body)
    })
}

// -------------------------------------------------------------- commands

/// Parses one line and checks what came out.
fn check_command(line: &[u8]) -> Result<(), TestCaseError> {
    match parse_command(line) {
        Ok(Command::Mail(path, p)) => {
            check_path(&path)?;
            // What is passed on to a next hop is plain xtext.
            prop_assert!(p.envid.as_deref().is_none_or(crate::dsn::valid_envid));
        }
        Ok(Command::Rcpt(path, p)) => {
            check_path(&path)?;
            prop_assert!(p.orcpt.as_deref().is_none_or(crate::dsn::valid_orcpt));
        }
        Ok(Command::Ehlo(name)) | Ok(Command::Helo(name)) => {
            // It goes into a Received: header as it is.
            prop_assert!(
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic()),
                "HELO name {name:?}"
            );
        }
        Ok(Command::Auth(mechanism, initial)) => {
            for word in std::iter::once(mechanism).chain(initial) {
                prop_assert!(
                    !word.is_empty() && !word.contains(|c: char| c == ' ' || c.is_control()),
                    "AUTH word {word:?}"
                );
            }
        }
        Ok(_) => {}
        Err(e) => {
            let reply = e.reply();
            prop_assert!(!reply.contains(['\r', '\n']), "reply {reply:?}");
        }
    }
    Ok(())
}

/// An accepted path is safe to write back on the wire.
fn check_path(path: &Path) -> Result<(), TestCaseError> {
    let Path::Mailbox { mailbox, .. } = path else {
        return Ok(());
    };
    let address = mailbox.address();
    prop_assert!(
        !address.contains(char::is_control),
        "control character in {address:?}"
    );
    prop_assert!(mailbox.local.len() <= MAX_LOCAL_PART, "{address:?}");
    prop_assert!(address.len() + 2 <= MAX_PATH, "{address:?}");
    prop_assert!(canonical_local(&mailbox.local), "local part {address:?}");
    let domain_ok = match mailbox.domain.strip_prefix('[') {
        Some(lit) => lit.strip_suffix(']').is_some_and(|l| {
            l.parse::<std::net::Ipv4Addr>().is_ok()
                || l.strip_prefix("IPv6:")
                    .is_some_and(|v6| v6.parse::<std::net::Ipv6Addr>().is_ok())
        }),
        None => parse_domain(&mailbox.domain).as_deref() == Ok(&mailbox.domain[..]),
    };
    prop_assert!(domain_ok, "domain of {address:?}");
    let _ = (
        mailbox.local_text(),
        mailbox.has_routing(),
        mailbox.is_literal(),
    );

    // Round trip: written back into a command, it is the same mailbox and
    // nothing else (no parameter, no second address).
    for wire in [
        format!("RCPT TO:<{address}>\r\n"),
        format!("MAIL FROM:<{address}>\r\n"),
    ] {
        let again = match parse_command(wire.as_bytes()) {
            Ok(Command::Rcpt(p, params)) if params == Default::default() => p,
            Ok(Command::Mail(p, params)) if !params.any() => p,
            other => {
                return Err(TestCaseError::fail(format!(
                    "{wire:?} does not parse back: {other:?}"
                )))
            }
        };
        prop_assert_eq!(
            &again,
            &Path::Mailbox {
                mailbox: mailbox.clone(),
                source_route: false
            },
            "{:?}",
            wire
        );
    }
    let with_param = format!("<{address}> X=1");
    let (_, rest) =
        parse_path(&with_param).map_err(|e| TestCaseError::fail(format!("{address:?}: {e:?}")))?;
    prop_assert_eq!(rest, " X=1", "the path of {:?} ends early", address);
    Ok(())
}

/// A canonical local part: a dot-string, or a quoted string whose only
/// backslashes escape `"` or `\`.
fn canonical_local(local: &str) -> bool {
    if crate::address::is_dot_string(local) {
        return true;
    }
    let Some(inner) = local.strip_prefix('"').and_then(|q| q.strip_suffix('"')) else {
        return false;
    };
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        let ok = match c {
            '\\' => matches!(chars.next(), Some('"' | '\\')),
            '"' => false,
            c => !c.is_control(),
        };
        if !ok {
            return false;
        }
    }
    true
}

/// Frames `data` cut at `cuts` as the session does, checks every frame,
/// and checks that framing it whole gives the same frames.
fn check_framer(data: &[u8], max_len: usize, cuts: &[usize]) -> Result<(), TestCaseError> {
    let pieces = frames(&split(data, cuts), max_len)?;
    let whole = frames(&[data], max_len)?;
    prop_assert_eq!(pieces, whole, "framing depends on how the bytes arrive");
    Ok(())
}

/// The frames (and where each starts) of `chunks` arriving one by one.
fn frames(chunks: &[&[u8]], max_len: usize) -> Result<Vec<(usize, Frame)>, TestCaseError> {
    let limit = max_len.max(3);
    let mut framer = LineFramer::new(max_len);
    let (mut buf, mut at, mut out) = (Vec::new(), 0, Vec::new());
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            let discarding = framer.is_discarding();
            let frame = framer.next_frame(&buf);
            let n = match frame {
                Frame::Incomplete => {
                    prop_assert!(buf.len() < limit && !buf.contains(&b'\n'));
                    break;
                }
                Frame::Discard(n) => {
                    prop_assert!(n == limit && n <= buf.len(), "{frame:?} of {}", buf.len());
                    prop_assert!(!buf[..n].contains(&b'\n') && framer.is_discarding());
                    n
                }
                Frame::Line(n) => {
                    prop_assert!((2..=limit).contains(&n) && n <= buf.len(), "{frame:?}");
                    let line = &buf[..n];
                    prop_assert!(!discarding && line.ends_with(b"\r\n"), "{line:?}");
                    prop_assert!(!line[..n - 1].contains(&b'\n') && !line.contains(&0));
                    check_command(line)?;
                    n
                }
                Frame::Bad(n, why) => {
                    prop_assert!((1..=limit).contains(&n) && n <= buf.len(), "{frame:?}");
                    let line = &buf[..n];
                    prop_assert!(line[n - 1] == b'\n' && !line[..n - 1].contains(&b'\n'));
                    let right = match why {
                        LineError::TooLong => discarding,
                        LineError::BareLf => !discarding && !line.ends_with(b"\r\n"),
                        LineError::Nul => !discarding && line.contains(&0),
                    };
                    prop_assert!(right, "{frame:?} for {line:?} (discarding: {discarding})");
                    n
                }
            };
            out.push((at, frame));
            at += n;
            buf.drain(..n);
        }
    }
    Ok(out)
}

// ----------------------------------------------------------- regressions

/// Found by `fuzz_data` (stuffing_round_trip): a last line of 999 octets
/// with no CRLF was not wrapped, and `stuff_into` sent it as a line of
/// 999 octets plus the CRLF it adds, over RFC 5321's 1000.
#[test]
fn regression_unterminated_last_line_of_999_octets_is_wrapped() {
    let body = Bytes(vec![b'x'; 999]);
    check_stuffing(&body, &[]).unwrap();
}

/// Found by `fuzz_command` (near_valid_lines): a C1 control (here NEL,
/// U+0085, a line break to some readers) passed the control-character
/// check, which looked at C0 octets and DEL only, and went on in an AUTH
/// word or a mailbox.
#[test]
fn regression_c1_controls_are_refused() {
    for line in ["AUTH <\u{85}@>\r\n", "RCPT TO:<a\u{85}b@x.example>\r\n"] {
        check_command(line.as_bytes()).unwrap();
        assert_eq!(parse_command(line.as_bytes()), Err(CommandError::BadOctet));
    }
}
