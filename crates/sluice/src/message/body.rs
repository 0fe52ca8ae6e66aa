//! Message bodies for delivery and bounces: from memory when the scheduler
//! still holds them, otherwise read back from the spool.
//!
//! Reading is blocking file I/O, so it runs on tokio's blocking pool.

use std::sync::Arc;

use sluice_spool::{BodyRef, Spool};

/// Why a body could not be had (delivery waits: 4.3.0).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Read(#[from] std::io::Error),
    #[error("the reading task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// The body from memory if cached, else read back from the spool.
pub async fn load(
    spool: &Spool,
    cached: &Option<Arc<Vec<u8>>>,
    body_ref: BodyRef,
) -> Result<Arc<Vec<u8>>, LoadError> {
    if let Some(body) = cached {
        return Ok(body.clone());
    }
    let spool = spool.clone();
    let body = tokio::task::spawn_blocking(move || spool.read_body(body_ref)).await??;
    Ok(Arc::new(body))
}

/// The header section of a body, CRLF of the last header included (up to
/// the first empty line; at most 64 KiB when there is none).
pub fn headers(body: &[u8]) -> &[u8] {
    let section = match memchr::memmem::find(body, b"\r\n\r\n") {
        Some(end) => &body[..end + 2],
        None => body,
    };
    if section.len() <= MAX_HEADERS_RETURNED {
        return section;
    }
    // Cut at the last line end inside the limit (Postfix: header_size_limit).
    let cut = memchr::memrchr(b'\n', &section[..MAX_HEADERS_RETURNED]).map_or(0, |i| i + 1);
    &section[..cut]
}

/// Header octets a bounce quotes at most (Postfix's header_size_limit), so
/// a hostile message cannot make its DSN as big as itself (audit §D7).
pub const MAX_HEADERS_RETURNED: usize = 100 << 10;

/// Number of `Received:` headers in the header section of `body`.
pub fn received_headers(body: &[u8]) -> usize {
    let end = memchr::memmem::find(body, b"\r\n\r\n").unwrap_or(body.len());
    body[..end]
        .split(|&b| b == b'\n')
        .filter(|line| line.len() >= 9 && line[..9].eq_ignore_ascii_case(b"received:"))
        .count()
}

/// Whether a `Received:` header after the first (our own, just added)
/// says the message already passed through `hostname` ("by <hostname>"):
/// the message has looped back to us.
pub fn carries_our_trace(body: &[u8], hostname: &str) -> bool {
    let end = memchr::memmem::find(body, b"\r\n\r\n").unwrap_or(body.len());
    let section = String::from_utf8_lossy(&body[..end]).to_ascii_lowercase();
    let by = format!("by {}", hostname.trim_end_matches('.').to_ascii_lowercase());
    // Fields, their folded continuation lines joined.
    let mut fields: Vec<String> = Vec::new();
    for line in section.split("\r\n") {
        match (line.starts_with([' ', '\t']), fields.last_mut()) {
            (true, Some(last)) => {
                last.push(' ');
                last.push_str(line.trim());
            }
            _ => fields.push(line.to_string()),
        }
    }
    fields
        .iter()
        .filter(|f| f.starts_with("received:"))
        .skip(1)
        .any(|f| {
            let text = f.split_whitespace().collect::<Vec<_>>().join(" ");
            text.match_indices(&by).any(|(i, m)| {
                let after = text[i + m.len()..].chars().next();
                after.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-' || c == '.'))
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_trace_is_found_after_our_new_header() {
        let ours = "Received: from a ([127.0.0.1])\r\n\tby mx.test (Sluice) with ESMTP id 1;\r\n\tdate\r\n";
        let body = |rest: &str| format!("{ours}{rest}Subject: x\r\n\r\nbody by mx.test\r\n");
        assert!(
            !carries_our_trace(body("").as_bytes(), "mx.test"),
            "only the new one"
        );
        assert!(carries_our_trace(
            body("Received: from b\r\n  by   MX.test (Sluice) with SMTP id 2;\r\n").as_bytes(),
            "mx.test."
        ));
        assert!(!carries_our_trace(
            body("Received: from b by mx.test.evil.example with SMTP;\r\n").as_bytes(),
            "mx.test"
        ));
        assert!(!carries_our_trace(
            body("X-Note: by mx.test\r\n").as_bytes(),
            "mx.test"
        ));
    }

    #[test]
    fn returned_headers_are_capped_at_a_line_end() {
        let filler = "X-Filler: yyyyyyyyyyyyyyyyyyyy\r\n".repeat(20_000);
        let huge = format!("{filler}\r\nbody\r\n");
        let h = headers(huge.as_bytes());
        assert!(h.len() <= MAX_HEADERS_RETURNED && h.len() > MAX_HEADERS_RETURNED - 100);
        assert!(h.ends_with(b"\r\n"));
        assert_eq!(headers(b"A: b\r\n\r\nbody"), b"A: b\r\n");
    }
}
