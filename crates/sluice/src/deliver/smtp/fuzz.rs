//! Fuzz target `fuzz_reply` for the outbound reply parser
//! ([`conn::parse_reply`], the pure step `SmtpConn` reads every reply
//! with, and [`conn::ehlo_capabilities`]), as proptest properties that run
//! on stable Rust: fast in a normal `cargo test`, for as long as asked
//! under `scripts/fuzz` (see the shared harness in sluice-proto).
//!
//! A next hop's bytes (plausible replies, noise, over-long lines) arrive
//! cut at arbitrary points and are read as the connection reads them: a
//! fresh parser per reply, the bytes after a reply kept for the next one.
//! Never panics, never loops (every step that does not wait for more bytes
//! consumes some; a watchdog catches a hang inside the parser), reads the
//! same replies however the bytes are cut, and every reply has a 3-digit
//! code and a single-line text of bounded length.

#[path = "../../../../sluice-proto/src/fuzz/harness.rs"]
mod harness;
#[path = "../../../../sluice-proto/src/fuzz/split.rs"]
mod split;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use smtp_proto::response::parser::{ResponseReceiver, MAX_RESPONSE_LENGTH};

use super::conn::{ehlo_capabilities, parse_reply};
use harness::{prop, run_target, Bytes};
use split::{cuts, split};

#[test]
fn fuzz_reply() {
    run_target(
        "reply",
        vec![
            prop("reply_stream", (reply_bytes(), cuts()), |(stream, cuts)| {
                let pieces = read_replies(&split(&stream, &cuts))?;
                let whole = read_replies(&[&stream])?;
                prop_assert_eq!(pieces, whole, "replies depend on how the bytes arrive");
                Ok(())
            }),
            prop("ehlo_capabilities", reply_bytes(), |raw| {
                let _ = ehlo_capabilities(&raw);
                Ok(())
            }),
        ],
    );
}

// ---------------------------------------------------------------- inputs

/// A next hop's output: reply lines, nearly reply lines, noise.
fn reply_bytes() -> impl Strategy<Value = Bytes> {
    const CODES: &[&str] = &[
        "250 ",
        "250-",
        "220 ",
        "354 ",
        "550 5.1.1 ",
        "421-4.7.0 ",
        "250-2.1.0 ",
        "250 2.10.100 ",
        "251 5.1.1000 ",
        "250 2.1.0",
        "999 ",
        "000-",
    ];
    const BAD_CODES: &[&str] = &["2", "25", "250", "1234 ", "25x ", " 250 ", "-", ""];
    const TEXT: &[&str] = &[
        "ok",
        "PIPELINING",
        "SIZE 10240000",
        "8BITMIME",
        "SMTPUTF8",
        "STARTTLS",
        "AUTH PLAIN LOGIN",
        "ENHANCEDSTATUSCODES",
        "mx.example ESMTP",
        "2.1.0",
        "5.",
        ".",
        " ",
        "é",
        "\u{85}",
        "\0",
        "\x1b[31m",
        "\u{fffd}",
    ];
    const ENDS: &[&str] = &["\n", "\r", "", "\r\r\n"];
    let line = (
        prop_oneof![12 => select(CODES), 1 => select(BAD_CODES)],
        vec(select(TEXT), 0..5),
        prop_oneof![12 => Just("\r\n"), 1 => select(ENDS)],
    )
        .prop_map(|(code, text, end)| format!("{code}{}{end}", text.concat()).into_bytes());
    let token = prop_oneof![
        30 => line,
        1 => vec(any::<u8>(), 1..16),
        1 => (4000usize..4200).prop_map(|n| {
            let mut long = b"250 ".to_vec();
            long.resize(n, b'x');
            long.extend_from_slice(b"\r\n");
            long
        }),
    ];
    vec(token, 0..40).prop_map(|t| Bytes(t.concat()))
}

// ---------------------------------------------------------------- checks

/// What the connection makes of a stream.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    Reply {
        code: u16,
        text: String,
        raw: Bytes,
    },
    /// A malformed reply: the connection gives up.
    Malformed(String),
    /// The stream ended; `partial` if inside a reply.
    End {
        partial: bool,
    },
}

/// Reads `chunks` as `SmtpConn::read_reply_raw` does, one after another.
fn read_replies(chunks: &[&[u8]]) -> Result<Vec<Event>, TestCaseError> {
    let total: usize = chunks.iter().map(|c| c.len()).sum();
    let mut parser = ResponseReceiver::default();
    let (mut rbuf, mut raw, mut events) = (Vec::new(), Vec::new(), Vec::new());
    let mut steps = 0;
    for chunk in chunks {
        rbuf.extend_from_slice(chunk);
        loop {
            steps += 1;
            prop_assert!(
                steps <= 2 * (total + chunks.len()) + 2,
                "{steps} parse steps for {total} bytes: no progress"
            );
            let before = rbuf.len();
            match parse_reply(&mut parser, &mut rbuf, &mut raw) {
                Ok(Some(reply)) => {
                    prop_assert!(rbuf.len() < before, "a reply made of no bytes");
                    prop_assert!(reply.code <= 999, "code {}", reply.code);
                    let text = reply.to_string();
                    prop_assert!(
                        text.starts_with(&reply.code.to_string()),
                        "text {:?} for {}",
                        text,
                        reply.code
                    );
                    prop_assert!(!text.contains(['\r', '\n']), "{:?}", text);
                    // At most 4 KiB of octets, each invalid one becoming U+FFFD.
                    prop_assert!(
                        text.len() <= 3 * (MAX_RESPONSE_LENGTH + 2) + 16,
                        "text of {} bytes",
                        text.len()
                    );
                    let _ = ehlo_capabilities(&raw);
                    events.push(Event::Reply {
                        code: reply.code,
                        text,
                        raw: Bytes(std::mem::take(&mut raw)),
                    });
                    parser = ResponseReceiver::default();
                    if rbuf.is_empty() {
                        break;
                    }
                }
                Ok(None) => {
                    prop_assert!(rbuf.is_empty(), "waits for more with bytes unread");
                    break;
                }
                Err(e) => {
                    events.push(Event::Malformed(e.to_string()));
                    return Ok(events);
                }
            }
        }
    }
    events.push(Event::End {
        partial: !raw.is_empty(),
    });
    Ok(events)
}
