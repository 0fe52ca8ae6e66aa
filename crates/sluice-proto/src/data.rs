//! Strict decoding of a `DATA` body (RFC 5321 §4.1.1.4, §4.5.2).
//!
//! Only the five octets `CR LF . CR LF` end a message. `LF.LF`, `CR.LF`,
//! `LF.CRLF`, `CR CR LF` and every other bare CR or bare LF are ordinary
//! content here, so no line ending a downstream server might read
//! differently can end the message early and smuggle a second one. Bare
//! CR/LF are reported so the session can reject the message (the default)
//! or, in [`BareLinePolicy::Normalize`] mode, rewritten to CRLF.
//!
//! Dot-stuffing is undone exactly: a line that starts with `.` loses that
//! first `.`. The decoded body always keeps CRLF line endings; the sending
//! side stuffs again (see [`crate::dotstuff`]).

/// What to do with a bare CR or LF inside a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BareLinePolicy {
    /// Keep the octets but flag the message, which the session rejects.
    #[default]
    Reject,
    /// Rewrite each bare CR or LF to CRLF.
    Normalize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At the start of a line (after CRLF, or at the very beginning).
    LineStart,
    /// Inside a line.
    Text,
    /// Saw CR inside a line.
    Cr,
    /// Saw `.` at the start of a line.
    Dot,
    /// Saw `.` CR at the start of a line.
    DotCr,
}

/// Limits applied while decoding.
#[derive(Debug, Clone, Copy)]
pub struct DataLimits {
    /// Largest decoded body, in octets; past it the body is dropped but the
    /// stream is still read to its end so the session can answer 552.
    pub max_size: usize,
    /// Longest line, CRLF included (RFC 5321: 1000).
    pub max_line: usize,
    pub bare_line: BareLinePolicy,
}

/// What is wrong with a decoded message, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DataFlaws {
    pub bare_cr_or_lf: bool,
    pub line_too_long: bool,
    pub too_big: bool,
    /// A NUL octet (RFC 5322 §2.1: text excludes it).
    pub nul: bool,
}

impl DataFlaws {
    pub fn any(&self) -> bool {
        self.bare_cr_or_lf || self.line_too_long || self.too_big || self.nul
    }
}

/// Push decoder for one message body.
#[derive(Debug, Clone)]
pub struct DataDecoder {
    limits: DataLimits,
    state: State,
    line_len: usize,
    flaws: DataFlaws,
}

impl DataDecoder {
    pub fn new(limits: DataLimits) -> Self {
        Self {
            limits,
            state: State::LineStart,
            line_len: 0,
            flaws: DataFlaws::default(),
        }
    }

    pub fn flaws(&self) -> DataFlaws {
        self.flaws
    }

    /// Decodes from `input` into `out`. Returns `Some(consumed)` when the
    /// end-of-data marker was found (bytes after it belong to the next
    /// command), or `None` when all of `input` was consumed.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Option<usize> {
        let mut i = 0;
        while i < input.len() {
            match self.state {
                State::LineStart | State::Text => {
                    if self.state == State::LineStart && input[i] == b'.' {
                        // The transparency dot does not count towards the
                        // line limit (RFC 5321 §4.5.3.1.6).
                        self.state = State::Dot;
                        i += 1;
                        continue;
                    }
                    // Copy the run up to the next CR, LF or NUL in one go.
                    let rest = &input[i..];
                    let run = memchr::memchr3(b'\r', b'\n', 0, rest).unwrap_or(rest.len());
                    self.emit(&rest[..run], out);
                    self.line_len += run;
                    i += run;
                    if i == input.len() {
                        if run > 0 {
                            self.state = State::Text;
                        }
                        break;
                    }
                    match input[i] {
                        b'\r' => self.state = State::Cr,
                        b'\n' => {
                            self.bare(b'\n', out);
                            self.state = State::Text;
                        }
                        _ => {
                            self.flaws.nul = true;
                            self.emit(&[0], out);
                            self.line_len += 1;
                            self.state = State::Text;
                        }
                    }
                    i += 1;
                }
                State::Cr => {
                    if input[i] == b'\n' {
                        self.end_line(out);
                        i += 1;
                    } else {
                        // A CR not followed by LF: bare CR; reread this byte as text.
                        self.bare(b'\r', out);
                        self.state = State::Text;
                    }
                }
                State::Dot => {
                    // The leading dot was stuffing (or the start of the end marker).
                    if input[i] == b'\r' {
                        self.state = State::DotCr;
                        i += 1;
                    } else {
                        self.state = State::Text;
                    }
                }
                State::DotCr => {
                    if input[i] == b'\n' {
                        self.state = State::LineStart;
                        return Some(i + 1);
                    }
                    // ".\r" then something else: the CR is bare.
                    self.bare(b'\r', out);
                    self.state = State::Text;
                }
            }
        }
        None
    }

    fn emit(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        if out.len() + bytes.len() > self.limits.max_size {
            self.flaws.too_big = true;
        } else {
            out.extend_from_slice(bytes);
        }
    }

    fn end_line(&mut self, out: &mut Vec<u8>) {
        if self.line_len + 2 > self.limits.max_line {
            self.flaws.line_too_long = true;
        }
        self.emit(b"\r\n", out);
        self.line_len = 0;
        self.state = State::LineStart;
    }

    /// A bare CR or LF was seen. Under `Reject` its octet is kept only for
    /// the record (the message is refused anyway); under `Normalize` it
    /// becomes a real line end.
    fn bare(&mut self, octet: u8, out: &mut Vec<u8>) {
        match self.limits.bare_line {
            BareLinePolicy::Reject => {
                self.flaws.bare_cr_or_lf = true;
                self.emit(&[octet], out);
                self.line_len += 1;
            }
            BareLinePolicy::Normalize => {
                if self.line_len + 2 > self.limits.max_line {
                    self.flaws.line_too_long = true;
                }
                self.emit(b"\r\n", out);
                self.line_len = 0;
            }
        }
    }
}

/// What is wrong with a whole BDAT body (raw octets, no stuffing): bare
/// CR or LF, NUL, lines over `max_line` octets (CRLF included).
pub fn scan_body(body: &[u8], max_line: usize) -> DataFlaws {
    let mut flaws = DataFlaws {
        bare_cr_or_lf: has_bare_cr_or_lf(body),
        nul: memchr::memchr(0, body).is_some(),
        ..DataFlaws::default()
    };
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', body) {
        if end + 1 - start > max_line {
            flaws.line_too_long = true;
        }
        start = end + 1;
    }
    // An unterminated last line is sent with a CRLF added.
    let tail = body.len() - start;
    if tail > 0 && tail + 2 > max_line {
        flaws.line_too_long = true;
    }
    flaws
}

/// True if `body` contains a CR or LF that is not part of a CRLF pair.
/// Used for BDAT chunks, which carry raw octets with no end marker.
pub fn has_bare_cr_or_lf(body: &[u8]) -> bool {
    let mut pos = 0;
    while let Some(off) = memchr::memchr2(b'\r', b'\n', &body[pos..]) {
        let at = pos + off;
        if body[at] == b'\r' {
            if body.get(at + 1) != Some(&b'\n') {
                return true;
            }
            pos = at + 2;
        } else {
            return true;
        }
    }
    false
}

/// Rewrites every bare CR or LF in `body` to CRLF.
pub fn normalize_line_ends(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 16);
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'\r' if body.get(i + 1) == Some(&b'\n') => {
                out.extend_from_slice(b"\r\n");
                i += 2;
            }
            b'\r' | b'\n' => {
                out.extend_from_slice(b"\r\n");
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(policy: BareLinePolicy) -> DataLimits {
        DataLimits {
            max_size: 1 << 20,
            max_line: 1000,
            bare_line: policy,
        }
    }

    /// Decodes `input` in one piece and, to prove the decoder is a true push
    /// parser, one byte at a time; both must agree.
    fn decode(input: &[u8], policy: BareLinePolicy) -> (Vec<u8>, Option<usize>, DataFlaws) {
        let mut dec = DataDecoder::new(limits(policy));
        let mut out = Vec::new();
        let end = dec.feed(input, &mut out);
        let mut dec2 = DataDecoder::new(limits(policy));
        let mut out2 = Vec::new();
        let mut end2 = None;
        for (i, b) in input.iter().enumerate() {
            if let Some(n) = dec2.feed(std::slice::from_ref(b), &mut out2) {
                assert_eq!(n, 1);
                end2 = Some(i + 1);
                break;
            }
        }
        assert_eq!(out, out2, "bytewise decode differs");
        assert_eq!(end, end2, "bytewise end differs");
        assert_eq!(dec.flaws(), dec2.flaws());
        (out, end, dec.flaws())
    }

    #[test]
    fn only_crlf_dot_crlf_ends_data() {
        use BareLinePolicy::Reject;
        // (input, decoded body, consumed when ended, bare flagged)
        type Case = (&'static [u8], &'static [u8], Option<usize>, bool);
        let cases: &[Case] = &[
            (b"Hi\r\n.\r\n", b"Hi\r\n", Some(7), false),
            (b".\r\n", b"", Some(3), false),
            (b"Hi\r\n.\r\nMAIL", b"Hi\r\n", Some(7), false),
            (b"a\n.\n", b"a\n.\n", None, true),
            (b"a\r.\r", b"a\r.", None, true),
            (b"a\n.\r\n", b"a\n.\r\n", None, true),
            (b"a\r.\n", b"a\r.\n", None, true),
            (b"a\r\r\n.\r\r\n", b"a\r\r\n\r\r\n", None, true),
            (b"a\r\n.\n", b"a\r\n\n", None, true),
            (b"a\r\n.\rX", b"a\r\n\rX", None, true),
            (b"a\r\n.\r\r\n.\r\n", b"a\r\n\r\r\n", Some(10), true),
        ];
        for (input, body, end, bare) in cases {
            let (out, got_end, flaws) = decode(input, Reject);
            let shown = String::from_utf8_lossy(input);
            assert_eq!(out, *body, "body of {shown:?}");
            assert_eq!(got_end, *end, "end of {shown:?}");
            assert_eq!(flaws.bare_cr_or_lf, *bare, "bare flag of {shown:?}");
        }
    }

    #[test]
    fn smuggled_second_message_stays_inside_the_first() {
        let attack = b"Subject: a\r\n\r\nbody\n.\nMAIL FROM:<evil@x>\nRCPT TO:<v@y>\nDATA\nevil\n.\n\r\n.\r\n";
        let (out, end, flaws) = decode(attack, BareLinePolicy::Reject);
        assert_eq!(end, Some(attack.len()));
        assert!(flaws.bare_cr_or_lf);
        assert!(out.windows(10).any(|w| w == b"MAIL FROM:"));
    }

    #[test]
    fn dot_stuffing_is_undone_exactly() {
        let (out, end, flaws) = decode(b"..\r\n...x\r\n.y\r\n\r\n.\r\n", BareLinePolicy::Reject);
        assert_eq!(out, b".\r\n..x\r\ny\r\n\r\n");
        assert_eq!(end, Some(19));
        assert!(!flaws.any());
    }

    #[test]
    fn normalize_rewrites_bare_line_ends() {
        let (out, end, flaws) = decode(b"a\nb\rc\r\n.\r\n", BareLinePolicy::Normalize);
        assert_eq!(out, b"a\r\nb\r\nc\r\n");
        assert_eq!(end, Some(10));
        assert!(!flaws.any());
        // Normalising never lets LF.LF end the message.
        let (_, end, _) = decode(b"a\n.\nb", BareLinePolicy::Normalize);
        assert_eq!(end, None);
    }

    #[test]
    fn long_lines_and_size_are_flagged() {
        let mut dec = DataDecoder::new(DataLimits {
            max_size: 10,
            max_line: 6,
            bare_line: BareLinePolicy::Reject,
        });
        let mut out = Vec::new();
        assert_eq!(
            dec.feed(b"12345\r\n1234567890\r\n.\r\n", &mut out),
            Some(22)
        );
        let flaws = dec.flaws();
        assert!(flaws.line_too_long && flaws.too_big && !flaws.bare_cr_or_lf);
        assert!(out.len() <= 10);
    }

    #[test]
    fn the_stuffing_dot_is_not_counted_and_nul_is_flagged() {
        // 998 octets of text starting with a dot: 999 on the wire + CRLF.
        let line = format!(".{}", "x".repeat(997));
        let wire = format!(".{line}\r\n.\r\n");
        let (out, _, flaws) = decode(wire.as_bytes(), BareLinePolicy::Reject);
        assert!(!flaws.any(), "{flaws:?}");
        assert_eq!(out, format!("{line}\r\n").as_bytes());
        let (_, _, flaws) = decode(b"a\0b\r\n.\r\n", BareLinePolicy::Reject);
        assert!(flaws.nul && !flaws.bare_cr_or_lf);
    }

    #[test]
    fn bdat_body_scan() {
        let ok = format!("{}\r\nshort\r\n", "x".repeat(998));
        assert!(!scan_body(ok.as_bytes(), 1000).any());
        let long = format!("a\r\n{}\r\n", "x".repeat(999));
        assert!(scan_body(long.as_bytes(), 1000).line_too_long);
        assert!(scan_body(&[b'x'; 1001], 1000).line_too_long);
        assert!(scan_body(b"a\0\r\n", 1000).nul);
        // Found by fuzz_data (scan_body): an empty body has no line at all,
        // whatever the limit; an unterminated last line counts its CRLF.
        assert!(!scan_body(b"", 0).line_too_long);
        assert!(scan_body(&[b'x'; 999], 1000).line_too_long);
        assert!(!scan_body(&[b'x'; 998], 1000).line_too_long);
    }

    #[test]
    fn bdat_bare_line_scan() {
        assert!(!has_bare_cr_or_lf(b"a\r\nb\r\n"));
        assert!(has_bare_cr_or_lf(b"a\nb"));
        assert!(has_bare_cr_or_lf(b"a\rb"));
        assert!(has_bare_cr_or_lf(b"a\r"));
        assert_eq!(normalize_line_ends(b"a\nb\rc\r\n"), b"a\r\nb\r\nc\r\n");
    }
}
