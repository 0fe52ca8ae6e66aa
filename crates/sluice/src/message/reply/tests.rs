use super::*;

fn status(text: &str) -> Enhanced {
    Enhanced::parse(text).expect("a status")
}

#[test]
fn enhanced_status_codes_are_well_formed_or_nothing() {
    assert_eq!(status("5.1.1").to_string(), "5.1.1");
    assert_eq!(status("4.7.26").to_string(), "4.7.26");
    assert_eq!(status("2.0.0"), Enhanced::SENT);
    for bad in [
        "3.1.1", "5.1", "5.1.1.1", "55.1.1", "5..1", "5.1.x", "", "5.1.1000", "x",
    ] {
        assert_eq!(Enhanced::parse(bad), None, "{bad}");
    }
    assert_eq!(Enhanced::from_esc([0, 0, 0]), None);
    assert_eq!(Enhanced::from_esc([3, 1, 1]), None);
    assert_eq!(Enhanced::from_esc([5, 7, 1]), Some(status("5.7.1")));
}

#[test]
fn a_reply_off_the_wire_keeps_its_parts() {
    let r = Reply::from_response(smtp_proto::Response {
        code: 550,
        esc: [5, 1, 1],
        message: "User unknown\r\n".to_string(),
    });
    assert_eq!(r, Reply::smtp(550, Some(status("5.1.1")), "User unknown"));
    assert_eq!(r.to_string(), "550 5.1.1 User unknown");
    assert!(!r.is_temporary());
    // No enhanced status: none is made up.
    let r = Reply::from_response(smtp_proto::Response {
        code: 451,
        esc: [0, 0, 0],
        message: "try\nlater ".to_string(),
    });
    assert_eq!((r.status, r.to_string().as_str()), (None, "451 try later"));
    assert!(r.is_temporary());
    // A status of no class stays in the text, as it was said.
    let r = Reply::from_response(smtp_proto::Response {
        code: 550,
        esc: [3, 1, 1],
        message: "odd".to_string(),
    });
    assert_eq!((r.status, r.to_string().as_str()), (None, "550 3.1.1 odd"));
}

#[test]
fn replies_parse_back_from_their_text() {
    let cases = [
        (
            "550 5.1.1 User unknown",
            Reply::smtp(550, Some(status("5.1.1")), "User unknown"),
        ),
        (
            "451 try again later",
            Reply::smtp(451, None, "try again later"),
        ),
        ("250 ", Reply::smtp(250, None, "")),
        (
            "4.4.1 connect to mx[192.0.2.1]:25: timed out",
            Reply::own(
                451,
                Some(status("4.4.1")),
                "connect to mx[192.0.2.1]:25: timed out",
            ),
        ),
        ("mailbox full", Reply::own(451, None, "mailbox full")),
        ("", Reply::own(451, None, "")),
        ("550 5.1.1.1 x", Reply::smtp(550, None, "5.1.1.1 x")),
        ("650 5.1.1 x", Reply::own(451, None, "650 5.1.1 x")),
    ];
    for (text, reply) in cases {
        assert_eq!(Reply::parse(text, 451), reply, "{text}");
        assert_eq!(reply.to_string(), text, "round trip of {text:?}");
    }
    // Our own text takes the code its context gives.
    assert_eq!(Reply::parse("5.4.6 loop", 550).code, 550);
    // Whatever the text, it is shown again as it was stored.
    let odd = [
        "550",
        "550 5.1.1",
        "550 5.1.1 ",
        "5.1.1",
        "4501 x",
        "451  two spaces",
        " lead",
        "250 2.0.0 Ok: queued as 1A",
        "x 4.4.1 y",
        "\u{e9}t\u{e9} 4.2.2",
    ];
    for text in odd {
        assert_eq!(Reply::parse(text, 451).to_string(), text, "{text:?}");
    }
    assert_eq!(
        Reply::parse("550 5.1.1", 451).status,
        None,
        "a status needs its text"
    );
}

#[test]
fn the_status_falls_back_to_the_class_default() {
    let none = Reply::smtp(550, None, "User unknown");
    assert_eq!(none.status_or(Enhanced::BOUNCED).to_string(), "5.0.0");
    let deferred = Reply::own(451, None, "mailbox full");
    assert_eq!(deferred.status_or(Enhanced::DEFERRED).to_string(), "4.0.0");
    let some = Reply::smtp(452, Some(status("5.2.2")), "full");
    assert_eq!(some.status_or(Enhanced::DEFERRED).to_string(), "5.2.2");
}

#[test]
fn relays_show_as_the_log_always_said() {
    let addr = "192.0.2.1:25".parse().expect("an address");
    let smtp = Relay::Smtp {
        host: "mx.b".into(),
        addr,
    };
    assert_eq!(smtp.to_string(), "mx.b[192.0.2.1]:25");
    let v6 = Relay::Smtp {
        host: "mx6".into(),
        addr: "[2001:db8::1]:2525".parse().expect("an address"),
    };
    assert_eq!(v6.to_string(), "mx6[2001:db8::1]:2525");
    assert_eq!(Relay::None.to_string(), "none");
    assert_eq!(Relay::Maildir.to_string(), "maildir");
    assert_eq!(Relay::Maildir.shown(), "virtual");
    assert_eq!(
        Relay::Lmtp("unix:/run/lmtp".into()).to_string(),
        "unix:/run/lmtp"
    );
    assert_eq!(Relay::Hop("mx.b:25".into()).to_string(), "mx.b:25");
    assert_eq!(Relay::Maildir.labels(), ("maildir", "virtual"));
    assert_eq!(Relay::Lmtp("inet:h:24".into()).labels(), ("lmtp", "lmtp"));
    assert_eq!(Relay::Hop("lmtp:unix:/x".into()).labels(), ("smtp", "smtp"));
    assert!(smtp.is_remote() && Relay::Hop("x:25".into()).is_remote());
    assert!(!Relay::None.is_remote() && !Relay::Maildir.is_remote());
}
