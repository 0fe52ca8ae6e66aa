//! The DATA target's checks: the decoder at any split against a naive
//! reference, the dot-stuffing round trip, and the BDAT body scan.

use proptest::prelude::*;

use super::split::split;
use crate::data::{self, BareLinePolicy, DataDecoder, DataFlaws, DataLimits};
use crate::dotstuff;

struct Decoded {
    out: Vec<u8>,
    end: Option<usize>,
    flaws: DataFlaws,
}

/// Feeds `chunks` one by one until the end of data.
fn decode(chunks: &[&[u8]], limits: DataLimits) -> Result<Decoded, TestCaseError> {
    let mut dec = DataDecoder::new(limits);
    let (mut out, mut at) = (Vec::new(), 0);
    for chunk in chunks {
        if let Some(n) = dec.feed(chunk, &mut out) {
            prop_assert!(
                (1..=chunk.len()).contains(&n),
                "consumed {n} of {}",
                chunk.len()
            );
            return Ok(Decoded {
                out,
                end: Some(at + n),
                flaws: dec.flaws(),
            });
        }
        at += chunk.len();
    }
    Ok(Decoded {
        out,
        end: None,
        flaws: dec.flaws(),
    })
}

/// Where a DATA stream ends: just after the first `CRLF.CRLF` (or a `.CRLF`
/// at the very start).
fn reference_end(input: &[u8]) -> Option<usize> {
    if input.starts_with(b".\r\n") {
        return Some(3);
    }
    memchr::memmem::find(input, b"\r\n.\r\n").map(|at| at + 5)
}

fn reference_has_bare(body: &[u8]) -> bool {
    body.iter().enumerate().any(|(i, &b)| match b {
        b'\r' => body.get(i + 1) != Some(&b'\n'),
        b'\n' => i == 0 || body[i - 1] != b'\r',
        _ => false,
    })
}

pub(super) fn check_decoder(
    input: &[u8],
    cuts: &[usize],
    limits: DataLimits,
) -> Result<(), TestCaseError> {
    let whole = decode(&[input], limits)?;
    let pieces = decode(&split(input, cuts), limits)?;
    prop_assert_eq!(whole.end, pieces.end, "end depends on how the bytes arrive");
    prop_assert_eq!(whole.flaws, pieces.flaws, "flaws depend on the cuts");
    // Past the size limit the body is thrown away (552): only its flag counts.
    if !whole.flaws.too_big {
        prop_assert!(whole.out == pieces.out, "body depends on the cuts");
    }
    prop_assert!(whole.out.len() <= limits.max_size);
    prop_assert_eq!(whole.end, reference_end(input), "wrong end of data");
    if limits.bare_line == BareLinePolicy::Normalize && !whole.flaws.too_big {
        prop_assert!(!whole.flaws.bare_cr_or_lf);
        prop_assert!(!data::has_bare_cr_or_lf(&whole.out), "bare CR/LF left");
    }

    // Against a naive reference: the lines before the end, each losing one
    // leading dot, CRLF after each.
    let (Some(end), BareLinePolicy::Reject) = (whole.end, limits.bare_line) else {
        return Ok(());
    };
    let region = &input[..end - 3];
    let mut want = Vec::new();
    let mut too_long = false;
    let mut rest = region;
    while let Some(at) = memchr::memmem::find(rest, b"\r\n") {
        let line = &rest[..at];
        let line = line.strip_prefix(b".").unwrap_or(line);
        too_long |= line.len() + 2 > limits.max_line;
        want.extend_from_slice(line);
        want.extend_from_slice(b"\r\n");
        rest = &rest[at + 2..];
    }
    prop_assert!(rest.is_empty(), "region {region:?} does not end in CRLF");
    let flaws = whole.flaws;
    prop_assert_eq!(flaws.too_big, want.len() > limits.max_size);
    if !flaws.too_big {
        prop_assert!(whole.out == want, "decoded {:?}, want {want:?}", whole.out);
    }
    prop_assert_eq!(flaws.bare_cr_or_lf, reference_has_bare(region));
    prop_assert_eq!(flaws.nul, region.contains(&0));
    prop_assert_eq!(flaws.line_too_long, too_long);
    Ok(())
}

pub(super) fn check_stuffing(body: &[u8], cuts: &[usize]) -> Result<(), TestCaseError> {
    let mut wire = Vec::new();
    dotstuff::stuff_into(body, &mut wire);
    let limits = DataLimits {
        max_size: usize::MAX,
        max_line: 1000,
        bare_line: BareLinePolicy::Reject,
    };
    let got = decode(&split(&wire, cuts), limits)?;
    prop_assert_eq!(
        got.end,
        Some(wire.len()),
        "the end marker is not where it should be"
    );
    let mut want = dotstuff::wrap_long_lines(body).into_owned();
    if !want.is_empty() && !want.ends_with(b"\r\n") {
        want.extend_from_slice(b"\r\n");
    }
    let fits = body
        .split_inclusive(|&b| b == b'\n')
        .all(|l| l.strip_suffix(b"\r\n").unwrap_or(l).len() <= dotstuff::MAX_TEXT);
    if fits {
        // Nothing to wrap: exactly the body comes back.
        prop_assert!(
            want[..body.len()] == *body,
            "wrapped a body with short lines"
        );
    }
    prop_assert!(got.out == want, "got {:?}\nwant {want:?}", got.out);
    let flaws = got.flaws;
    prop_assert!(!flaws.bare_cr_or_lf && !flaws.line_too_long && !flaws.too_big);
    prop_assert_eq!(flaws.nul, body.contains(&0));
    Ok(())
}

pub(super) fn check_scan_body(body: &[u8], max_line: usize) -> Result<(), TestCaseError> {
    let flaws = data::scan_body(body, max_line);
    let bare = reference_has_bare(body);
    prop_assert_eq!(flaws.bare_cr_or_lf, bare);
    prop_assert_eq!(data::has_bare_cr_or_lf(body), bare);
    prop_assert_eq!(flaws.nul, body.contains(&0));
    prop_assert!(!flaws.too_big);
    // A complete line over the limit is flagged; so is none when even the
    // last, unterminated line would fit with a CRLF added.
    let lines: Vec<&[u8]> = body.split_inclusive(|&b| b == b'\n').collect();
    if lines
        .iter()
        .any(|l| l.ends_with(b"\n") && l.len() > max_line)
    {
        prop_assert!(flaws.line_too_long);
    }
    if lines.iter().all(|l| l.len() + 2 <= max_line) {
        prop_assert!(!flaws.line_too_long);
    }
    let normal = data::normalize_line_ends(body);
    prop_assert!(!data::has_bare_cr_or_lf(&normal));
    prop_assert!(data::normalize_line_ends(&normal) == normal);
    if !bare {
        prop_assert!(normal == body);
    }
    Ok(())
}
