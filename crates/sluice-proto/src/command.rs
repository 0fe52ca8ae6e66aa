//! One framed command line to a typed request.
//!
//! Parsing proper is Stalwart's `smtp-proto` (fuzzed upstream); this module
//! fixes the contract we rely on: the line given is complete (CRLF
//! included), already checked for length, bare LF and NUL by
//! [`crate::line`].

use std::borrow::Cow;

pub use smtp_proto::{Error as ParseError, Request};

/// Parses a complete command line, CRLF included.
pub fn parse_command(line: &[u8]) -> Result<Request<Cow<'_, str>>, ParseError> {
    Request::parse(&mut line.iter())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_table() {
        let ok: &[(&[u8], &str)] = &[
            (b"EHLO client.example\r\n", "EHLO"),
            (b"helo client\r\n", "HELO"),
            (b"MAIL FROM:<a@b.example>\r\n", "MAIL"),
            (b"MAIL FROM:<> SIZE=100 BODY=8BITMIME\r\n", "MAIL"),
            (b"RCPT TO:<x@y.example>\r\n", "RCPT"),
            (b"DATA\r\n", "DATA"),
            (b"BDAT 10 LAST\r\n", "BDAT"),
            (b"RSET\r\n", "RSET"),
            (b"NOOP\r\n", "NOOP"),
            (b"QUIT\r\n", "QUIT"),
            (b"VRFY user\r\n", "VRFY"),
            (b"HELP\r\n", "HELP"),
        ];
        for (line, name) in ok {
            let req = parse_command(line).unwrap_or_else(|e| panic!("{line:?}: {e:?}"));
            assert_eq!(req.name(), *name);
        }
        let bad: &[&[u8]] = &[
            b"FOO\r\n",
            b"MAIL FROM:a@b\r\n",
            b"BDAT x\r\n",
            b"MAIL FROM:<a@b> SIZE=zz\r\n",
        ];
        for line in bad {
            assert!(
                parse_command(line).is_err(),
                "{:?} should fail",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn mail_parameters_are_parsed() {
        match parse_command(b"MAIL FROM:<a@b.example> SIZE=1234 BODY=8BITMIME SMTPUTF8\r\n") {
            Ok(Request::Mail { from }) => {
                assert_eq!(from.address, "a@b.example");
                assert_eq!(from.size, 1234);
                assert!(from.flags & smtp_proto::MAIL_BODY_8BITMIME != 0);
                assert!(from.flags & smtp_proto::MAIL_SMTPUTF8 != 0);
            }
            other => panic!("{other:?}"),
        }
    }
}
