//! The intake's first stage, as Postfix's cleanup starts: the body
//! checks every door shares (line ends, NUL, line length, size: as an
//! SMTP session found them while the body streamed in, or scanned here
//! for a local submission), a local submission's trace and the fields it
//! lacks (`headers.rs`), and the hop limit (more `Received:` fields than
//! `smtpd.hop_count_limit`: a loop).
//!
//! Trust: the body is the sender's. Invariant: a body that passes is CRLF
//! text within the limits, with our trace at its top (an SMTP body
//! starts with it already; a notice is ours).

use sluice_proto::data::{self, DataFlaws};

use super::{headers, Intake, Origin, Refusal, Submission};
use crate::message::body;

/// The stage: body checks, trace, hop limit.
pub(super) fn run(intake: &Intake, sub: &mut Submission) -> Result<(), Refusal> {
    complete(intake, sub)?;
    check_hops(intake, &sub.body)
}

/// The body checks, and for a local submission its trace and the fields
/// it lacks. An SMTP body already starts with its trace; a notice is ours.
fn complete(intake: &Intake, sub: &mut Submission) -> Result<(), Refusal> {
    let hostname = &intake.config.hostname;
    match &sub.origin {
        Origin::Smtp(_) => check_body(intake, &mut sub.body, sub.flaws.take()),
        Origin::Local { uid, full_name, .. } => {
            check_body(intake, &mut sub.body, None)?;
            let trace = headers::local_trace(hostname, sub.id, *uid);
            let missing = headers::missing_fields(
                &sub.body,
                &sub.sender,
                full_name.as_deref(),
                hostname,
                sub.id,
            );
            let mut body = Vec::with_capacity(trace.len() + missing.len() + sub.body.len());
            body.extend_from_slice(trace.as_bytes());
            body.extend_from_slice(missing.as_bytes());
            body.extend_from_slice(&sub.body);
            sub.body = body;
            Ok(())
        }
        Origin::Notice => Ok(()),
    }
}

/// The body checks every door shares: `flaws` as an SMTP session
/// found them while the body streamed in, or, for a local submission,
/// as scanned here (with its size).
fn check_body(
    intake: &Intake,
    body: &mut Vec<u8>,
    flaws: Option<DataFlaws>,
) -> Result<(), Refusal> {
    let limit = match intake.config.smtpd.text_line_limit {
        0 => usize::MAX,
        n => n,
    };
    let flaws = match flaws {
        Some(found) => found,
        None => {
            let mut scanned = data::scan_body(body, limit);
            if scanned.bare_cr_or_lf {
                // sendmail input is text from a local program: its
                // line ends are made CRLF, as Postfix's sendmail does.
                *body = data::normalize_line_ends(body);
                scanned.bare_cr_or_lf = false;
            }
            scanned.too_big = body.len() > intake.config.smtpd.message_size_limit;
            scanned
        }
    };
    match flaws {
        DataFlaws { too_big: true, .. } => Err(Refusal::TooBig),
        DataFlaws {
            bare_cr_or_lf: true,
            ..
        } => Err(Refusal::BareLineEnd),
        DataFlaws { nul: true, .. } => Err(Refusal::Nul),
        DataFlaws {
            line_too_long: true,
            ..
        } => Err(Refusal::LineTooLong(limit)),
        _ => Ok(()),
    }
}

/// The hop limit, on the body with our trace at its top.
fn check_hops(intake: &Intake, body: &[u8]) -> Result<(), Refusal> {
    let hops = body::received_headers(body);
    match hops > intake.config.smtpd.hop_count_limit {
        true => Err(Refusal::TooManyHops(hops)),
        false => Ok(()),
    }
}
