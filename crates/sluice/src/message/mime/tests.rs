use super::*;

/// Decodes quoted-printable (for round trips).
fn unqp(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'=' if s[i + 1..].starts_with(b"\r\n") => i += 3,
            b'=' => {
                let hex = std::str::from_utf8(&s[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

fn body_of(msg: &[u8]) -> &[u8] {
    split_entity(msg).1
}

#[test]
fn seven_bit_mail_is_untouched() {
    let m = b"Subject: hi\r\n\r\nplain ascii\r\n.. and more\r\n";
    assert_eq!(downgrade(m).unwrap(), m.to_vec());
    assert!(!is_8bit(m));
}

#[test]
fn an_8bit_text_body_becomes_quoted_printable() {
    let m = "Subject: x\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\nGrüße, \r\nline two\r\n"
        .as_bytes();
    let out = downgrade(m).unwrap();
    assert!(out.is_ascii());
    let text = String::from_utf8(out.clone()).unwrap();
    assert!(
        text.contains("Content-Transfer-Encoding: quoted-printable\r\n"),
        "{text}"
    );
    assert!(
        !text.contains("8bit"),
        "the old encoding header is gone: {text}"
    );
    assert!(text.contains("MIME-Version: 1.0\r\n"), "{text}");
    assert!(
        text.contains("Gr=C3=BC=C3=9Fe,=20\r\nline two\r\n"),
        "{text}"
    );
    assert_eq!(unqp(body_of(&out)), body_of(m), "decodes to the original");
}

#[test]
fn long_lines_get_soft_breaks_and_round_trip() {
    let line = "é".repeat(100) + "x=y " + &"a".repeat(200);
    let m = format!("Content-Type: text/plain\r\n\r\n{line}\r\nend\r\n");
    let out = downgrade(m.as_bytes()).unwrap();
    for l in out.split(|&b| b == b'\n') {
        assert!(l.len() <= 77, "at most 76 characters and CR: {}", l.len());
    }
    assert_eq!(unqp(body_of(&out)), body_of(m.as_bytes()));
}

#[test]
fn multiparts_convert_only_their_8bit_leaves() {
    let ascii_part = "Content-Type: text/plain\r\n\r\nascii only\r\n";
    let m = format!(
        "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b1\"\r\n\r\npreamble\r\n--b1\r\n{ascii_part}\r\n--b1\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\nnaïve\r\n--b1\r\nContent-Type: application/octet-stream\r\n\r\n\u{ff}\u{fe}bin\r\n--b1--\r\nepilogue\r\n"
    );
    let out = String::from_utf8(downgrade(m.as_bytes()).unwrap()).unwrap();
    assert!(out.is_ascii());
    assert!(
        out.contains(&format!("--b1\r\n{ascii_part}\r\n--b1\r\n")),
        "{out}"
    );
    assert!(
        out.contains("Content-Transfer-Encoding: quoted-printable\r\n\r\nna=C3=AFve\r\n--b1\r\n"),
        "{out}"
    );
    let b64 = base64::engine::general_purpose::STANDARD.encode("\u{ff}\u{fe}bin".as_bytes());
    assert!(
        out.contains(&format!(
            "Content-Transfer-Encoding: base64\r\n\r\n{b64}\r\n\r\n--b1--\r\nepilogue\r\n"
        )),
        "{out}"
    );
    assert!(out.starts_with("MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b1\"\r\n\r\npreamble\r\n--b1\r\n"));
    assert_eq!(out.matches("MIME-Version").count(), 1);
}

#[test]
fn encapsulated_messages_are_walked_into() {
    let m = "Content-Type: message/rfc822\r\n\r\nSubject: inner\r\nContent-Type: text/plain\r\n\r\nü\r\n";
    let out = String::from_utf8(downgrade(m.as_bytes()).unwrap()).unwrap();
    assert!(
        out.starts_with("Content-Type: message/rfc822\r\n\r\nSubject: inner\r\n"),
        "{out}"
    );
    assert!(
        out.ends_with("Content-Transfer-Encoding: quoted-printable\r\n\r\n=C3=BC\r\n"),
        "{out}"
    );
}

#[test]
fn eight_bit_headers_cannot_be_downgraded() {
    let m = "Subject: Grüße\r\n\r\nbody\r\n".as_bytes();
    assert!(has_8bit_headers(m));
    assert_eq!(downgrade(m), Err(DowngradeError::EightBitHeader));
    let folded = "X: a\r\n b\r\nContent-Transfer-Encoding: 8bit\r\n\tcontinued\r\n\r\nü\r\n";
    let out = String::from_utf8(downgrade(folded.as_bytes()).unwrap()).unwrap();
    assert!(out.starts_with("X: a\r\n b\r\nMIME-Version: 1.0\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n"), "a folded header is removed whole: {out}");
}
