//! Command-line framing.
//!
//! RFC 5321 §4.5.3.1.4 limits a command line to 512 octets including CRLF.
//! A line may arrive in pieces; a line that grows past the limit is thrown
//! away as it arrives (so a hostile client cannot make us buffer it) and
//! answered once, when its LF finally comes. Only CRLF ends a command:
//! a bare LF, or a NUL anywhere in the line, makes the line an error.

/// Why a framed line is unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineError {
    /// Longer than the configured limit.
    TooLong,
    /// Ended by LF without the CR before it.
    BareLf,
    /// Contains a NUL octet.
    Nul,
}

/// What the framer found at the front of the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// No complete line yet: read more.
    Incomplete,
    /// Drop this many bytes: the middle of an over-long line.
    Discard(usize),
    /// A well-formed line of this many bytes, CRLF included.
    Line(usize),
    /// A line of this many bytes (LF included) that must be answered with an error.
    Bad(usize, LineError),
}

/// Splits a byte stream into command lines.
#[derive(Debug, Clone)]
pub struct LineFramer {
    max_len: usize,
    /// True while we are skipping the rest of an over-long line.
    discarding: bool,
}

impl LineFramer {
    pub fn new(max_len: usize) -> Self {
        Self {
            max_len: max_len.max(3),
            discarding: false,
        }
    }

    /// Looks at the front of `buf`; the caller consumes the reported length.
    pub fn next_frame(&mut self, buf: &[u8]) -> Frame {
        let window = &buf[..buf.len().min(self.max_len)];
        match memchr::memchr(b'\n', window) {
            Some(lf) => {
                let len = lf + 1;
                if std::mem::take(&mut self.discarding) {
                    Frame::Bad(len, LineError::TooLong)
                } else if lf == 0 || buf[lf - 1] != b'\r' {
                    Frame::Bad(len, LineError::BareLf)
                } else if memchr::memchr(0, &buf[..lf]).is_some() {
                    Frame::Bad(len, LineError::Nul)
                } else {
                    Frame::Line(len)
                }
            }
            None if buf.len() >= self.max_len => {
                self.discarding = true;
                Frame::Discard(self.max_len)
            }
            None => Frame::Incomplete,
        }
    }

    /// True while the rest of an over-long line is being skipped.
    pub fn is_discarding(&self) -> bool {
        self.discarding
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_table() {
        let cases: &[(&[u8], Frame)] = &[
            (b"", Frame::Incomplete),
            (b"NOOP", Frame::Incomplete),
            (b"NOOP\r", Frame::Incomplete),
            (b"NOOP\r\n", Frame::Line(6)),
            (b"NOOP\r\nQUIT\r\n", Frame::Line(6)),
            (b"NOOP\n", Frame::Bad(5, LineError::BareLf)),
            (b"\n", Frame::Bad(1, LineError::BareLf)),
            (b"NO\0OP\r\n", Frame::Bad(7, LineError::Nul)),
        ];
        for (input, want) in cases {
            assert_eq!(
                LineFramer::new(512).next_frame(input),
                *want,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn over_long_line_is_discarded_then_answered_once() {
        let mut framer = LineFramer::new(16);
        let long = [b'A'; 40];
        assert_eq!(framer.next_frame(&long), Frame::Discard(16));
        assert!(framer.is_discarding());
        assert_eq!(framer.next_frame(&long[16..]), Frame::Discard(16));
        assert_eq!(
            framer.next_frame(b"AAAA\r\nNOOP\r\n"),
            Frame::Bad(6, LineError::TooLong)
        );
        assert_eq!(framer.next_frame(b"NOOP\r\n"), Frame::Line(6));
    }

    #[test]
    fn line_of_exactly_the_limit_is_accepted() {
        let mut line = vec![b'X'; 14];
        line.extend_from_slice(b"\r\n");
        assert_eq!(LineFramer::new(16).next_frame(&line), Frame::Line(16));
        line.insert(0, b'X');
        let mut framer = LineFramer::new(16);
        assert_eq!(framer.next_frame(&line), Frame::Discard(16));
        assert_eq!(
            framer.next_frame(&line[16..]),
            Frame::Bad(1, LineError::TooLong)
        );
    }
}
