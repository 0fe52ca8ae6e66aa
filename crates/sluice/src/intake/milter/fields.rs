//! A message as a filter sees and changes it: header fields in order
//! (name, value as on the wire, folding kept) and the body after the
//! empty line. The changes a filter may ask for at the end of the message
//! (add, insert, change or delete a field; replace the body) are applied
//! here, then the message is joined again.
//!
//! Trust: names and values come from the filter. Invariants: a field
//! name keeps only printable ASCII other than `:`, and a value's line ends
//! become CRLF followed by a space or tab (a filter cannot end the header
//! early or start a field of its own); the result always has CRLF line
//! ends.

/// One header field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    /// Everything after the colon, up to (not including) the final CRLF.
    pub value: String,
}

/// A message taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub fields: Vec<Field>,
    pub body: Vec<u8>,
}

impl Message {
    /// Splits `raw` at its first empty line; lines before it that are not
    /// fields (no colon) are kept as nameless continuations of the last.
    pub fn parse(raw: &[u8]) -> Message {
        let (head, body) = match memchr::memmem::find(raw, b"\r\n\r\n") {
            Some(i) => (&raw[..i + 2], raw[i + 4..].to_vec()),
            None if raw.starts_with(b"\r\n") => (&raw[..0], raw[2..].to_vec()),
            None => (raw, Vec::new()),
        };
        let head = String::from_utf8_lossy(head);
        let mut fields: Vec<Field> = Vec::new();
        for line in head.split_inclusive("\r\n") {
            let line = line.strip_suffix("\r\n").unwrap_or(line);
            let folded = line.starts_with([' ', '\t']);
            match (folded, fields.last_mut(), line.split_once(':')) {
                (true, Some(last), _) | (false, Some(last), None) => {
                    last.value.push_str("\r\n");
                    last.value.push_str(line);
                }
                (_, _, Some((name, value))) => fields.push(Field {
                    name: name.to_string(),
                    value: value.to_string(),
                }),
                (_, None, None) => fields.push(Field {
                    name: line.to_string(),
                    value: String::new(),
                }),
            }
        }
        Message { fields, body }
    }

    /// The message as bytes again.
    pub fn join(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.body.len() + 64 * self.fields.len() + 2);
        for f in &self.fields {
            out.extend_from_slice(f.name.as_bytes());
            out.push(b':');
            out.extend_from_slice(f.value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        out
    }

    /// A field from a filter, made safe: see the module's invariants.
    /// `leading_space`: the filter gives the value's leading space itself
    /// (SMFIP_HDR_LEADSPC); otherwise one is added.
    pub fn field(name: &str, value: &str, leading_space: bool) -> Field {
        let name: String = name
            .chars()
            .filter(|c| c.is_ascii_graphic() && *c != ':')
            .collect();
        let mut clean = String::with_capacity(value.len() + 1);
        if !leading_space {
            clean.push(' ');
        }
        // (Lines of nothing but white space are dropped: some readers take
        // them for the end of the header.)
        let lines = value.split('\n').map(|l| l.trim_end_matches('\r'));
        for (i, line) in lines.filter(|l| !l.trim().is_empty()).enumerate() {
            if i > 0 {
                clean.push_str("\r\n");
                if !line.starts_with([' ', '\t']) {
                    clean.push('\t');
                }
            }
            clean.push_str(line);
        }
        Field { name, value: clean }
    }

    /// Adds `field` at the end of the header.
    pub fn add(&mut self, field: Field) {
        self.fields.push(field);
    }

    /// Inserts `field` before the field at `index` (0: at the top).
    pub fn insert(&mut self, index: u32, field: Field) {
        let at = (index as usize).min(self.fields.len());
        self.fields.insert(at, field);
    }

    /// Changes the `index`th (from 1) field named `field.name` (any case)
    /// to `field`'s value; an empty value deletes it; a field that is not
    /// there is added (as sendmail does).
    pub fn change(&mut self, index: u32, field: Field) {
        let found = self
            .fields
            .iter()
            .enumerate()
            .filter(|(_, f)| f.name.eq_ignore_ascii_case(&field.name))
            .nth(index.max(1) as usize - 1)
            .map(|(i, _)| i);
        let delete = field.value.trim().is_empty();
        match (found, delete) {
            (Some(i), true) => {
                self.fields.remove(i);
            }
            (Some(i), false) => self.fields[i].value = field.value,
            (None, true) => {}
            (None, false) => self.fields.push(field),
        }
    }

    /// The body, replaced by a filter's: line ends made CRLF.
    pub fn replace_body(&mut self, body: &[u8]) {
        self.body = sluice_proto::data::normalize_line_ends(body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RAW: &[u8] =
        b"Received: from a\r\n\tby b\r\nSubject: hi\r\nX-A: 1\r\nX-a: 2\r\n\r\nbody\r\n";

    #[test]
    fn parse_and_join_round_trip() {
        let m = Message::parse(RAW);
        assert_eq!(m.fields.len(), 4);
        assert_eq!(m.fields[0].value, " from a\r\n\tby b");
        assert_eq!(m.body, b"body\r\n");
        assert_eq!(m.join(), RAW);
    }

    #[test]
    fn changes_as_a_filter_asks() {
        let mut m = Message::parse(RAW);
        m.add(Message::field("X-Spam", "Yes", false));
        m.insert(0, Message::field("X-Top", " first", true));
        m.change(2, Message::field("x-a", "two", false));
        m.change(1, Message::field("Subject", "", false));
        let text = String::from_utf8(m.join()).unwrap();
        assert!(text.starts_with("X-Top: first\r\nReceived:"), "{text}");
        assert!(text.contains("X-A: 1\r\nX-a: two\r\n"), "{text}");
        assert!(!text.contains("Subject"), "{text}");
        assert!(text.contains("X-Spam: Yes\r\n\r\nbody"), "{text}");
    }

    #[test]
    fn a_filter_cannot_end_the_header_or_forge_a_field() {
        let mut m = Message::parse(RAW);
        m.add(Message::field(
            "X-Bad:\r\nTo",
            "a\r\n\r\nEvil: yes\nMore: x",
            false,
        ));
        let text = String::from_utf8(m.join()).unwrap();
        let head = text.split("\r\n\r\n").next().unwrap();
        assert!(
            head.contains("X-BadTo: a\r\n\tEvil: yes\r\n\tMore: x"),
            "{text}"
        );
        assert_eq!(Message::parse(text.as_bytes()).fields.len(), 5);
        m.replace_body(b"new\nbody\n");
        assert!(m.join().ends_with(b"\r\n\r\nnew\r\nbody\r\n"));
    }
}
