use super::*;

/// (class or "body", text) of each item.
fn walk(msg: &str) -> Vec<(String, String)> {
    Walker::new(msg.as_bytes())
        .map(|item| match item {
            Item::Header {
                class, start, end, ..
            } => (format!("{class:?}"), msg[start..end].to_string()),
            Item::Body { start, end, offset } => {
                (format!("body@{offset}"), msg[start..end].to_string())
            }
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn headers_are_logical_and_the_body_is_lines() {
    let msg =
        "Received: from a\r\n\tby b;\r\n  date\r\nSubject : hi\r\n\r\nline one\r\n\r\nline two\r\n";
    assert_eq!(
        walk(msg),
        pairs(&[
            ("Primary", "Received: from a\r\n\tby b;\r\n  date\r\n"),
            ("Primary", "Subject : hi\r\n"),
            ("body@0", "line one"),
            ("body@10", ""),
            ("body@12", "line two"),
        ])
    );
    assert_eq!(header_name(b"Subject : x"), Some(7));
    assert_eq!(header_name(b"X-A:b"), Some(3));
    assert_eq!(header_name(b" cont"), None);
    assert_eq!(header_name(b"no colon"), None);
    assert_eq!(header_name(b":empty"), None);
}

#[test]
fn garbage_in_the_header_starts_the_body() {
    let msg = "Subject: a\r\nthis is no header\r\nX-Not: header\r\n";
    assert_eq!(
        walk(msg),
        pairs(&[
            ("Primary", "Subject: a\r\n"),
            ("body@0", "this is no header"),
            ("body@19", "X-Not: header"),
        ])
    );
    // A message with no body, and one with no line end at all.
    assert_eq!(
        walk("Subject: a\r\n"),
        pairs(&[("Primary", "Subject: a\r\n")])
    );
    assert_eq!(walk("Subject: a"), pairs(&[("Primary", "Subject: a")]));
}

#[test]
fn multipart_parts_and_attached_messages() {
    let msg = concat!(
        "MIME-Version: 1.0\r\n",
        "Content-Type: multipart/mixed; (a comment) boundary=\"b1\"\r\n",
        "Subject: s\r\n",
        "\r\n",
        "preamble\r\n",
        "--b1\r\n",
        "Content-Type: text/plain\r\n",
        "X-Part: p\r\n",
        "\r\n",
        "text\r\n",
        "--b1\r\n",
        "Content-Type: message/rfc822\r\n",
        "\r\n",
        "Subject: inner\r\n",
        "Content-Type: application/octet-stream; name=\"x.exe\"\r\n",
        "\r\n",
        "inner body\r\n",
        "--b1--\r\n",
        "epilogue\r\n",
    );
    assert_eq!(
        walk(msg),
        pairs(&[
            ("Multipart", "MIME-Version: 1.0\r\n"),
            (
                "Multipart",
                "Content-Type: multipart/mixed; (a comment) boundary=\"b1\"\r\n"
            ),
            ("Primary", "Subject: s\r\n"),
            ("body@0", "preamble"),
            ("body@10", "--b1"),
            ("Multipart", "Content-Type: text/plain\r\n"),
            ("Multipart", "X-Part: p\r\n"),
            ("body@0", "text"),
            ("body@6", "--b1"),
            ("Multipart", "Content-Type: message/rfc822\r\n"),
            ("Nested", "Subject: inner\r\n"),
            (
                "Multipart",
                "Content-Type: application/octet-stream; name=\"x.exe\"\r\n"
            ),
            ("body@0", "inner body"),
            ("body@12", "--b1--"),
            ("body@20", "epilogue"),
        ])
    );
}

#[test]
fn inner_boundaries_close_with_an_outer_one_and_digests_nest() {
    let msg = concat!(
        "Content-Type: multipart/mixed; boundary=out\r\n",
        "\r\n",
        "--out\r\n",
        "Content-Type: multipart/digest; boundary=in\r\n",
        "\r\n",
        "--in\r\n",
        "\r\n",
        "Subject: digested\r\n",
        "\r\n",
        "--out\r\n",
        "X-After: outer part\r\n",
        "\r\n",
    );
    let items = walk(msg);
    assert!(
        items.contains(&("Nested".into(), "Subject: digested\r\n".into())),
        "{items:?}"
    );
    assert_eq!(
        items.last().unwrap(),
        &("Multipart".into(), "X-After: outer part\r\n".into())
    );
}

#[test]
fn hostile_nesting_is_bounded() {
    let mut msg = String::new();
    for i in 0..(MAX_DEPTH + 50) {
        msg.push_str(&format!(
            "Content-Type: multipart/mixed; boundary=b{i}\r\n\r\n--b{i}\r\n"
        ));
    }
    let mut w = Walker::new(msg.as_bytes());
    let n = w.by_ref().count();
    assert!(n > MAX_DEPTH && w.stack.len() <= MAX_DEPTH);
    // A long boundary is cut to the limit.
    let long = format!(
        "Content-Type: multipart/mixed; boundary={}\r\n\r\n",
        "x".repeat(5000)
    );
    let mut w = Walker::new(long.as_bytes());
    w.by_ref().count();
    assert_eq!(w.stack[0].text.len(), MAX_BOUNDARY);
}
