//! Netstrings (D. J. Bernstein's `LEN:DATA,`), as the socketmap protocol
//! frames each request and reply.
//!
//! Trusts nothing it reads: the length is decimal digits only, at most
//! [`MAX_DIGITS`] of them, checked against the caller's limit before a
//! byte of data is buffered, so a hostile server cannot make us allocate
//! more than the limit; a missing `,` is a format error.

use tokio::io::{AsyncBufRead, AsyncReadExt};

/// More digits than any length under a sane limit needs.
pub const MAX_DIGITS: usize = 10;

/// `data` framed as one netstring.
pub fn encode(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{}:", data.len()).into_bytes();
    out.reserve(data.len() + 1);
    out.extend_from_slice(data);
    out.push(b',');
    out
}

/// Why a netstring could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NetstringError {
    #[error("connection closed")]
    Eof,
    #[error("{0}")]
    Io(std::io::Error),
    #[error("longer than {0} bytes")]
    TooLong(usize),
    #[error("{0}")]
    Format(&'static str),
}

fn read_err(e: std::io::Error) -> NetstringError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        NetstringError::Eof
    } else {
        NetstringError::Io(e)
    }
}

/// Reads one netstring whose data is at most `limit` bytes.
pub async fn read<R: AsyncBufRead + Unpin>(
    r: &mut R,
    limit: usize,
) -> Result<Vec<u8>, NetstringError> {
    let mut len: usize = 0;
    let mut digits = 0;
    loop {
        let b = r.read_u8().await.map_err(read_err)?;
        match b {
            b':' if digits > 0 => break,
            b':' => return Err(NetstringError::Format("no length")),
            b'0'..=b'9' if digits < MAX_DIGITS => {
                digits += 1;
                len = len * 10 + usize::from(b - b'0');
            }
            b'0'..=b'9' => return Err(NetstringError::TooLong(limit)),
            _ => return Err(NetstringError::Format("length is not a decimal number")),
        }
    }
    if len > limit {
        return Err(NetstringError::TooLong(limit));
    }
    let mut data = vec![0; len];
    r.read_exact(&mut data).await.map_err(read_err)?;
    match r.read_u8().await.map_err(read_err)? {
        b',' => Ok(data),
        _ => Err(NetstringError::Format("no ',' after the data")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn parse(bytes: &[u8], limit: usize) -> Result<Vec<u8>, NetstringError> {
        let mut r = tokio::io::BufReader::new(bytes);
        read(&mut r, limit).await
    }

    #[tokio::test]
    async fn round_trip() {
        for data in [&b""[..], b"OK x", b"a,b:c\0d", &[0xff; 300]] {
            assert_eq!(parse(&encode(data), 1000).await.unwrap(), data);
        }
        assert_eq!(encode(b"map key"), b"7:map key,");
        // Leading zeros are digits like others (as Postfix reads them).
        assert_eq!(parse(b"02:OK,", 10).await.unwrap(), b"OK");
    }

    #[tokio::test]
    async fn hostile() {
        use NetstringError::*;
        assert!(matches!(parse(b"", 10).await, Err(Eof)));
        assert!(matches!(parse(b"5:OK", 10).await, Err(Eof)));
        assert!(matches!(parse(b"2:OK", 10).await, Err(Eof)));
        assert!(matches!(parse(b"2:OK;", 10).await, Err(Format(_))));
        assert!(matches!(parse(b":OK,", 10).await, Err(Format(_))));
        assert!(matches!(parse(b"-2:OK,", 10).await, Err(Format(_))));
        assert!(matches!(parse(b" 2:OK,", 10).await, Err(Format(_))));
        assert!(matches!(parse(b"11:OK,", 10).await, Err(TooLong(10))));
        assert!(matches!(
            parse(b"99999999999999999999999:", 10).await,
            Err(TooLong(10))
        ));
    }
}
