//! Message bodies for delivery and bounces: from memory when the scheduler
//! still holds them, otherwise read back from the spool.
//!
//! Reading is blocking file I/O, so it runs on tokio's blocking pool.

use std::sync::Arc;

use sluice_spool::{BodyRef, Spool};

/// The body from memory if cached, else read back from the spool.
pub async fn load(
    spool: &Spool,
    cached: &Option<Arc<Vec<u8>>>,
    body_ref: BodyRef,
) -> Result<Arc<Vec<u8>>, String> {
    if let Some(body) = cached {
        return Ok(body.clone());
    }
    let spool = spool.clone();
    match tokio::task::spawn_blocking(move || spool.read_body(body_ref)).await {
        Ok(Ok(body)) => Ok(Arc::new(body)),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e.to_string()),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
