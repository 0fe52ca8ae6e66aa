//! The message as Postfix's mime_state(3) walks it for cleanup's header
//! and body checks: one logical header at a time (with the class that
//! says which table list sees it), then each body line, following
//! multipart boundaries and attached message/rfc822 headers.
//!
//! As Postfix: a header starts with a name (printable ASCII, no colon,
//! optional blanks before the colon) and goes on over the lines that
//! start with a blank; a header block ends at an empty line, or at a line
//! that is no header (the rest is body, "garbage in header"). A
//! `Content-Type: multipart/*` pushes each of its `boundary` values; a
//! body line `--boundary` (of any open level: the inner ones are closed)
//! starts a part's headers, `--boundary--` closes the level. After the
//! headers of a `message/rfc822` (or of a part of a `multipart/digest`
//! without a Content-Type) come the attached message's headers. MIME
//! headers (Content-*, MIME-Version) are of the class `Multipart`, as are
//! all the headers of a body part.
//!
//! Trust: the message is the sender's: any bytes, any nesting. Bounds:
//! at most [`MAX_DEPTH`] open boundaries and [`MAX_BOUNDARY`] bytes of
//! each (Postfix's `mime_nesting_limit`, `mime_boundary_length_limit`);
//! the walk is one pass, without recursion. Invariant: items come in
//! order, their byte ranges do not overlap, and every header range ends
//! with its last line's end (CRLF included).

/// Postfix's `mime_nesting_limit`.
pub const MAX_DEPTH: usize = 100;
/// Postfix's `mime_boundary_length_limit`.
pub const MAX_BOUNDARY: usize = 2048;

/// Which header list sees a header (Postfix's `MIME_HDR_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// The message's own headers: `header_checks`.
    Primary,
    /// MIME headers anywhere, and a body part's headers:
    /// `mime_header_checks`.
    Multipart,
    /// An attached message's headers: `nested_header_checks`.
    Nested,
}

/// One thing to check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A logical header: `msg[start..end]`, its lines' CRLFs included;
    /// its name is `name_len` bytes.
    Header {
        class: Class,
        start: usize,
        end: usize,
        name_len: usize,
    },
    /// A body line `msg[start..end]` (without its line end), `offset`
    /// bytes into its body segment (the text after a header block).
    Body {
        start: usize,
        end: usize,
        offset: usize,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Headers(Class),
    Body,
}

/// What the header block being read says its body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ctype {
    Other,
    Message { rfc822: bool },
    Multipart,
}

struct Bound {
    text: Vec<u8>,
    /// multipart/digest: its parts are message/rfc822 by default.
    digest: bool,
}

/// The walk over one message.
pub struct Walker<'a> {
    msg: &'a [u8],
    pos: usize,
    state: State,
    ctype: Ctype,
    stack: Vec<Bound>,
    segment: usize,
}

impl<'a> Walker<'a> {
    pub fn new(msg: &'a [u8]) -> Walker<'a> {
        Walker {
            msg,
            pos: 0,
            state: State::Headers(Class::Primary),
            ctype: Ctype::Other,
            stack: Vec::new(),
            segment: 0,
        }
    }

    /// The line at `at`: (end of its text, start of the next line).
    fn line(&self, at: usize) -> (usize, usize) {
        match memchr::memchr(b'\n', &self.msg[at..]) {
            Some(i) => {
                let nl = at + i;
                let end = if nl > at && self.msg[nl - 1] == b'\r' {
                    nl - 1
                } else {
                    nl
                };
                (end, nl + 1)
            }
            None => (self.msg.len(), self.msg.len()),
        }
    }

    /// A header block ended (at an empty line or at garbage).
    fn end_headers(&mut self, empty_line: bool) {
        self.state = match (empty_line, self.ctype) {
            (true, Ctype::Message { rfc822: true }) => State::Headers(Class::Nested),
            _ => State::Body,
        };
        self.ctype = Ctype::Other;
    }

    fn header(&mut self, class: Class, name_len: usize, next: usize) -> Item {
        let start = self.pos;
        let mut end = next;
        while end < self.msg.len() && matches!(self.msg[end], b' ' | b'\t') {
            end = self.line(end).1;
        }
        self.pos = end;
        let name = &self.msg[start..start + name_len];
        if name.eq_ignore_ascii_case(b"content-type") {
            self.content_type(start + name_len, end);
        }
        let class = match is_mime(name) {
            true => Class::Multipart,
            false => class,
        };
        Item::Header {
            class,
            start,
            end,
            name_len,
        }
    }

    /// Reads a Content-Type value (after its name): the type, and the
    /// boundaries of a multipart.
    fn content_type(&mut self, from: usize, to: usize) {
        let value = &self.msg[from..to];
        let colon = memchr::memchr(b':', value).map_or(value.len(), |i| i + 1);
        let tokens = tokens(&value[colon..]);
        let word = |i: usize| match tokens.get(i) {
            Some(Token::Word(w)) => Some(w.to_ascii_lowercase()),
            _ => None,
        };
        let slash = matches!(tokens.get(1), Some(Token::Special(b'/')));
        let sub = if slash { word(2) } else { None };
        match word(0).as_deref() {
            Some(b"message") => {
                self.ctype = Ctype::Message {
                    rfc822: sub.as_deref() == Some(b"rfc822"),
                }
            }
            Some(b"multipart") => {
                self.ctype = Ctype::Multipart;
                let digest = sub.as_deref() == Some(b"digest");
                for w in tokens.windows(3) {
                    if let [Token::Word(name), Token::Special(b'='), Token::Word(v) | Token::Quoted(v)] =
                        w
                    {
                        if name.eq_ignore_ascii_case(b"boundary") && self.stack.len() < MAX_DEPTH {
                            let text = v[..v.len().min(MAX_BOUNDARY)].to_vec();
                            self.stack.push(Bound { text, digest });
                        }
                    }
                }
            }
            Some(_) => self.ctype = Ctype::Other,
            None => {}
        }
    }

    /// A body line: a boundary of an open level changes the state.
    fn body_line(&mut self, end: usize, next: usize) -> Item {
        let line = &self.msg[self.pos..end];
        if line.len() > 2 && line.starts_with(b"--") && !self.stack.is_empty() {
            let found = self
                .stack
                .iter()
                .rposition(|b| line[2..].starts_with(&b.text));
            if let Some(i) = found {
                self.stack.truncate(i + 1);
                let after = &line[2 + self.stack[i].text.len()..];
                if after.starts_with(b"--") {
                    self.stack.pop();
                    self.state = State::Body;
                } else {
                    self.ctype = match self.stack[i].digest {
                        true => Ctype::Message { rfc822: true },
                        false => Ctype::Other,
                    };
                    self.state = State::Headers(Class::Multipart);
                }
            }
        }
        let item = Item::Body {
            start: self.pos,
            end,
            offset: self.pos - self.segment,
        };
        self.pos = next;
        item
    }
}

impl Iterator for Walker<'_> {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        while self.pos < self.msg.len() {
            let (end, next) = self.line(self.pos);
            match self.state {
                State::Headers(class) => {
                    let line = &self.msg[self.pos..end];
                    if line.is_empty() {
                        self.end_headers(true);
                        self.pos = next;
                        self.segment = next;
                        continue;
                    }
                    if let Some(name_len) = header_name(line) {
                        return Some(self.header(class, name_len, next));
                    }
                    // Garbage: the rest is body, from this line on.
                    self.end_headers(false);
                    self.segment = self.pos;
                }
                State::Body => return Some(self.body_line(end, next)),
            }
        }
        None
    }
}

/// The length of the header name `line` starts with (Postfix's
/// is_header: printable ASCII up to a colon, blanks allowed before it).
pub fn header_name(line: &[u8]) -> Option<usize> {
    let mut len = 0;
    let mut blanks = false;
    for &c in line {
        match c {
            b':' => return (len > 0).then_some(len),
            b' ' | b'\t' if len > 0 => blanks = true,
            c if c.is_ascii_graphic() && !blanks => len += 1,
            _ => return None,
        }
    }
    None
}

/// A MIME header (Postfix's `HDR_OPT_MIME`).
fn is_mime(name: &[u8]) -> bool {
    const MIME: [&[u8]; 6] = [
        b"content-description",
        b"content-disposition",
        b"content-id",
        b"content-transfer-encoding",
        b"content-type",
        b"mime-version",
    ];
    MIME.iter().any(|m| name.eq_ignore_ascii_case(m))
}

#[derive(Debug, PartialEq)]
enum Token {
    Word(Vec<u8>),
    Quoted(Vec<u8>),
    Special(u8),
}

/// RFC 2045 tokens of a header value: words, quoted strings (unquoted),
/// specials; comments and blanks skipped.
fn tokens(value: &[u8]) -> Vec<Token> {
    const SPECIALS: &[u8] = b"()<>@,;:\\\"/[]?=";
    let mut out = Vec::new();
    let mut i = 0;
    while i < value.len() {
        let c = value[i];
        match c {
            b'(' => {
                let mut depth = 0usize;
                while i < value.len() {
                    match value[i] {
                        b'\\' => i += 1,
                        b'(' => depth += 1,
                        b')' => depth -= 1,
                        _ => {}
                    }
                    i += 1;
                    if depth == 0 {
                        break;
                    }
                }
            }
            b'"' => {
                let mut text = Vec::new();
                i += 1;
                while i < value.len() && value[i] != b'"' {
                    if value[i] == b'\\' && i + 1 < value.len() {
                        i += 1;
                    }
                    if !matches!(value[i], b'\r' | b'\n') {
                        text.push(value[i]);
                    }
                    i += 1;
                }
                i += 1;
                out.push(Token::Quoted(text));
            }
            c if c.is_ascii_whitespace() => i += 1,
            c if SPECIALS.contains(&c) => {
                out.push(Token::Special(c));
                i += 1;
            }
            _ => {
                let start = i;
                while i < value.len()
                    && !value[i].is_ascii_whitespace()
                    && !SPECIALS.contains(&value[i])
                {
                    i += 1;
                }
                out.push(Token::Word(value[start..i].to_vec()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
