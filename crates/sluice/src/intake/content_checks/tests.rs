use super::*;

#[test]
fn a_folded_header_is_looked_up_as_postfix_joins_it() {
    let h = b"Subject : one\r\n two\r\n\tthree\r\n";
    assert_eq!(header_key(h, 7), "Subject: one\n two\n\tthree");
    assert_eq!(header_key(b"X-A:b\r\n", 3), "X-A:b");
    assert_eq!(header_key(b"X-A: b", 3), "X-A: b");
    // Not UTF-8: still a key.
    assert_eq!(header_key(b"X-A: \xff\r\n", 3), "X-A: \u{fffd}");
}

#[test]
fn a_huge_header_is_cut_to_the_limit() {
    let mut h = b"X-Big: ".to_vec();
    h.extend(std::iter::repeat_n(b'a', 1 << 20));
    h.extend_from_slice(b"\r\n");
    assert_eq!(header_key(&h, 5).len(), HEADER_SIZE_LIMIT);
}

#[test]
fn each_door_has_its_lists() {
    use crate::intake::{LocalUser, SmtpClient};
    use crate::tables::Answer;
    let reject = || Checks {
        header: vec![Arc::new(Table::Static(Arc::new(Answer::text("REJECT"))))],
        ..Checks::default()
    };
    let submission: SocketAddr = "127.0.0.1:587".parse().unwrap();
    let tables = CheckTables::new(reject(), vec![(submission, Checks::default())]);
    let smtp = |listener| {
        Origin::Smtp(SmtpClient {
            peer: "192.0.2.1:1".parse().unwrap(),
            listener,
            helo: String::new(),
            trusted: false,
            authenticated: false,
            auth_user: None,
            sender_auth: false,
            dmarc_reject: false,
        })
    };
    assert!(tables.for_origin(&smtp(submission)).is_none());
    assert!(tables
        .for_origin(&smtp("127.0.0.1:25".parse().unwrap()))
        .is_some());
    let local = Origin::Local {
        uid: None,
        full_name: None,
        user: LocalUser::Trusted,
    };
    assert!(tables.for_origin(&local).is_some());
    assert!(tables.for_origin(&Origin::Notice).is_none());
    let none = CheckTables::new(Checks::default(), Vec::new());
    assert!(none.for_origin(&local).is_none());
}
