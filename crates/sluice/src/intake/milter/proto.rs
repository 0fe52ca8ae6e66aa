//! The Sendmail milter protocol (version 6, as Postfix speaks it), the
//! wire half only: packets are a 4-byte big-endian length (command byte
//! included), a command byte, and its data; strings are NUL-terminated.
//! [`Command`] is what the MTA sends, [`Response`] what a filter answers;
//! nothing here does I/O.
//!
//! Written by hand: no maintained Rust crate implements the MTA side of
//! the protocol (the crates there are for writing filters), and the
//! format is a few dozen lines.
//!
//! Trust: every response byte is the filter's, which may be broken or
//! hostile. Invariants: a frame over [`MAX_FRAME`] bytes, an unknown
//! response code, a missing NUL or a short integer is a [`ProtoError`],
//! never a panic or an unbounded allocation.

/// Largest frame read from a filter (body replacements come in chunks of
/// at most 64 KiB; headers and replies are far smaller).
pub const MAX_FRAME: usize = 1 << 20;

/// Protocol version we speak.
pub const VERSION: u32 = 6;

/// Actions a filter may take (SMFIF_*): we allow all of these.
pub mod action {
    pub const ADD_HEADERS: u32 = 0x01;
    pub const CHANGE_BODY: u32 = 0x02;
    pub const ADD_RCPT: u32 = 0x04;
    pub const DELETE_RCPT: u32 = 0x08;
    pub const CHANGE_HEADERS: u32 = 0x10;
    pub const QUARANTINE: u32 = 0x20;
    pub const CHANGE_FROM: u32 = 0x40;
    pub const ADD_RCPT_PAR: u32 = 0x80;
    pub const SET_SYMLIST: u32 = 0x100;
    pub const ALL: u32 = 0x1ff;
}

/// Protocol steps a filter may skip or not answer (SMFIP_*).
pub mod step {
    pub const NO_CONNECT: u32 = 0x01;
    pub const NO_HELO: u32 = 0x02;
    pub const NO_MAIL: u32 = 0x04;
    pub const NO_RCPT: u32 = 0x08;
    pub const NO_BODY: u32 = 0x10;
    pub const NO_HEADERS: u32 = 0x20;
    pub const NO_EOH: u32 = 0x40;
    pub const NR_HEADER: u32 = 0x80;
    pub const NO_UNKNOWN: u32 = 0x100;
    pub const NO_DATA: u32 = 0x200;
    pub const SKIP: u32 = 0x400;
    pub const RCPT_REJ: u32 = 0x800;
    pub const NR_CONNECT: u32 = 0x1000;
    pub const NR_HELO: u32 = 0x2000;
    pub const NR_MAIL: u32 = 0x4000;
    pub const NR_RCPT: u32 = 0x8000;
    pub const NR_DATA: u32 = 0x10000;
    pub const NR_UNKNOWN: u32 = 0x20000;
    pub const NR_EOH: u32 = 0x40000;
    pub const NR_BODY: u32 = 0x80000;
    pub const HEADER_LEADING_SPACE: u32 = 0x100000;
    /// Everything we understand: offered in the negotiation.
    pub const ALL: u32 = 0x1fffff;
}

/// What the MTA sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    /// Option negotiation: version, actions allowed, steps offered.
    Negotiate {
        version: u32,
        actions: u32,
        steps: u32,
    },
    /// Macros for the step `stage` (the step's command byte).
    Macros {
        stage: u8,
        pairs: &'a [(&'a str, String)],
    },
    Connect {
        host: &'a str,
        addr: std::net::SocketAddr,
    },
    Helo(&'a str),
    /// `<sender>` and ESMTP parameters.
    Mail(&'a [&'a str]),
    /// `<recipient>` and ESMTP parameters.
    Rcpt(&'a [&'a str]),
    Data,
    Header {
        name: &'a str,
        value: &'a str,
    },
    EndOfHeaders,
    /// A piece of the body (at most 65,535 bytes).
    Body(&'a [u8]),
    EndOfMessage,
    Abort,
    Quit,
}

impl Command<'_> {
    /// Appends the frame to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        match self {
            Command::Negotiate {
                version,
                actions,
                steps,
            } => {
                out.push(b'O');
                for n in [version, actions, steps] {
                    out.extend_from_slice(&n.to_be_bytes());
                }
            }
            Command::Macros { stage, pairs } => {
                out.extend_from_slice(&[b'D', *stage]);
                for (name, value) in pairs.iter() {
                    cstr(out, name.as_bytes());
                    cstr(out, value.as_bytes());
                }
            }
            Command::Connect { host, addr } => {
                out.push(b'C');
                cstr(out, host.as_bytes());
                out.push(if addr.is_ipv4() { b'4' } else { b'6' });
                out.extend_from_slice(&addr.port().to_be_bytes());
                cstr(out, addr.ip().to_string().as_bytes());
            }
            Command::Helo(name) => {
                out.push(b'H');
                cstr(out, name.as_bytes());
            }
            Command::Mail(args) | Command::Rcpt(args) => {
                out.push(if matches!(self, Command::Mail(_)) {
                    b'M'
                } else {
                    b'R'
                });
                for a in args.iter() {
                    cstr(out, a.as_bytes());
                }
            }
            Command::Data => out.push(b'T'),
            Command::Header { name, value } => {
                out.push(b'L');
                cstr(out, name.as_bytes());
                cstr(out, value.as_bytes());
            }
            Command::EndOfHeaders => out.push(b'N'),
            Command::Body(chunk) => {
                out.push(b'B');
                out.extend_from_slice(chunk);
            }
            Command::EndOfMessage => out.push(b'E'),
            Command::Abort => out.push(b'A'),
            Command::Quit => out.push(b'Q'),
        }
        let len = (out.len() - start - 4) as u32;
        out[start..start + 4].copy_from_slice(&len.to_be_bytes());
    }
}

/// Appends `s` without its NULs (a NUL would end the string early), then
/// the terminating NUL.
fn cstr(out: &mut Vec<u8>, s: &[u8]) {
    out.extend(s.iter().copied().filter(|&b| b != 0));
    out.push(0);
}

/// What a filter answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// The negotiation's answer, with the macros it asks for per stage.
    Negotiate {
        version: u32,
        actions: u32,
        steps: u32,
        macros: Vec<(u32, String)>,
    },
    Accept,
    Continue,
    Discard,
    Reject,
    Tempfail,
    /// A full SMTP reply, `550 5.7.1 text`.
    Reply(String),
    Skip,
    Progress,
    Quarantine(String),
    AddRcpt(String),
    /// A recipient with ESMTP parameters.
    AddRcptPar(String, String),
    DeleteRcpt(String),
    ReplaceBody(Vec<u8>),
    AddHeader {
        name: String,
        value: String,
    },
    /// Insert at `index` (0: first).
    InsertHeader {
        index: u32,
        name: String,
        value: String,
    },
    /// Change the `index`th (from 1) field called `name`; an empty value
    /// deletes it.
    ChangeHeader {
        index: u32,
        name: String,
        value: String,
    },
    ChangeFrom(String, String),
    /// The filter gives up on this connection (SMFIR_SHUTDOWN/CONN_FAIL).
    Shutdown,
}

/// A response that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error("frame of {0} bytes (over {MAX_FRAME})")]
    TooLong(usize),
    #[error("empty frame")]
    Empty,
    #[error("unknown response code {0:#04x}")]
    Unknown(u8),
    #[error("response {0:?} cut short")]
    Short(char),
}

/// The length of the frame whose 4-byte header is `head`.
pub fn frame_len(head: [u8; 4]) -> Result<usize, ProtoError> {
    let len = u32::from_be_bytes(head) as usize;
    match len {
        0 => Err(ProtoError::Empty),
        n if n > MAX_FRAME => Err(ProtoError::TooLong(n)),
        n => Ok(n),
    }
}

/// Parses one frame (code byte and data, without the length).
pub fn decode(frame: &[u8]) -> Result<Response, ProtoError> {
    let (&code, data) = frame.split_first().ok_or(ProtoError::Empty)?;
    parse(code, data).map_err(|e| match e {
        // (The reader's "ran out" is the response's being cut short.)
        ProtoError::Empty => ProtoError::Short(code as char),
        e => e,
    })
}

fn parse(code: u8, data: &[u8]) -> Result<Response, ProtoError> {
    let mut r = Reader { data };
    Ok(match code {
        b'O' => {
            let (version, actions, steps) = (r.u32()?, r.u32()?, r.u32()?);
            let mut macros = Vec::new();
            while !r.data.is_empty() {
                macros.push((r.u32()?, r.string()?));
            }
            Response::Negotiate {
                version,
                actions,
                steps,
                macros,
            }
        }
        b'a' => Response::Accept,
        b'c' => Response::Continue,
        b'd' => Response::Discard,
        b'r' => Response::Reject,
        b't' => Response::Tempfail,
        b's' => Response::Skip,
        b'p' => Response::Progress,
        b'4' | b'%' => Response::Shutdown,
        b'y' => Response::Reply(r.string()?),
        b'q' => Response::Quarantine(r.string()?),
        b'+' => Response::AddRcpt(r.string()?),
        b'2' => Response::AddRcptPar(r.string()?, r.string().unwrap_or_default()),
        b'-' => Response::DeleteRcpt(r.string()?),
        b'b' => Response::ReplaceBody(data.to_vec()),
        b'h' => Response::AddHeader {
            name: r.string()?,
            value: r.string()?,
        },
        b'i' | b'm' => {
            let index = r.u32()?;
            let (name, value) = (r.string()?, r.string()?);
            match code {
                b'i' => Response::InsertHeader { index, name, value },
                _ => Response::ChangeHeader { index, name, value },
            }
        }
        b'e' => Response::ChangeFrom(r.string()?, r.string().unwrap_or_default()),
        other => return Err(ProtoError::Unknown(other)),
    })
}

struct Reader<'a> {
    data: &'a [u8],
}

impl Reader<'_> {
    fn u32(&mut self) -> Result<u32, ProtoError> {
        let (head, rest) = self
            .data
            .split_first_chunk::<4>()
            .ok_or(ProtoError::Empty)?;
        self.data = rest;
        Ok(u32::from_be_bytes(*head))
    }

    /// A NUL-terminated string (lossy UTF-8).
    fn string(&mut self) -> Result<String, ProtoError> {
        let end = memchr::memchr(0, self.data).ok_or(ProtoError::Empty)?;
        let s = String::from_utf8_lossy(&self.data[..end]).into_owned();
        self.data = &self.data[end + 1..];
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(cmd: Command<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        cmd.encode(&mut out);
        out
    }

    #[test]
    fn commands_are_framed_with_their_length() {
        assert_eq!(
            frame(Command::Negotiate {
                version: 6,
                actions: 0x1ff,
                steps: 0
            }),
            [0, 0, 0, 13, b'O', 0, 0, 0, 6, 0, 0, 1, 0xff, 0, 0, 0, 0]
        );
        assert_eq!(
            frame(Command::Connect {
                host: "h",
                addr: "192.0.2.1:25".parse().unwrap()
            }),
            b"\0\0\0\x10Ch\x004\x00\x19192.0.2.1\0".to_vec()
        );
        assert_eq!(
            frame(Command::Rcpt(&["<a@b>", "NOTIFY=NEVER"])),
            b"\0\0\0\x14R<a@b>\0NOTIFY=NEVER\0".to_vec()
        );
        // A NUL inside a client's text cannot split a string in two.
        assert_eq!(frame(Command::Helo("a\0b")), b"\0\0\0\x04Hab\0".to_vec());
        let pairs = [("i", "Q1".to_string())];
        assert_eq!(
            frame(Command::Macros {
                stage: b'M',
                pairs: &pairs
            }),
            b"\0\0\0\x07DMi\0Q1\0".to_vec()
        );
    }

    #[test]
    fn responses_parse_and_garbage_is_an_error() {
        assert_eq!(decode(b"a"), Ok(Response::Accept));
        assert_eq!(
            decode(b"y550 5.7.1 spam\0"),
            Ok(Response::Reply("550 5.7.1 spam".into()))
        );
        assert_eq!(
            decode(b"hX-Spam\0Yes\0"),
            Ok(Response::AddHeader {
                name: "X-Spam".into(),
                value: "Yes".into()
            })
        );
        assert_eq!(
            decode(b"m\0\0\0\x01Subject\0\0"),
            Ok(Response::ChangeHeader {
                index: 1,
                name: "Subject".into(),
                value: String::new()
            })
        );
        let neg = decode(b"O\0\0\0\x06\0\0\0\x01\0\0\0\0\0\0\0\x02{auth_authen} i\0").unwrap();
        assert_eq!(
            neg,
            Response::Negotiate {
                version: 6,
                actions: 1,
                steps: 0,
                macros: vec![(2, "{auth_authen} i".into())]
            }
        );
        for bad in [&b""[..], b"Z", b"y550 no nul", b"m\0\0", b"O\0\0\0\x06"] {
            assert!(decode(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            frame_len([0, 0x10, 0, 1]),
            Err(ProtoError::TooLong(0x100001))
        );
        assert_eq!(frame_len([0, 0, 0, 0]), Err(ProtoError::Empty));
    }
}
