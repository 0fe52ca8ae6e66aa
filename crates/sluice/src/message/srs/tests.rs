//! The SRS codec: round trips, re-forwarding, case, the day's wrap, and
//! hostile input that must be refused, never panic.

use super::*;

fn srs() -> Srs {
    Srs::new(&[b"s3cret".to_vec()], "fwd.example", 21)
}

#[test]
fn srs0_round_trip() {
    let s = srs();
    let a = s.forward("alice@origin.test", 20_000).unwrap();
    assert!(a.starts_with("SRS0="), "{a}");
    assert!(a.ends_with("=origin.test=alice@fwd.example"), "{a}");
    assert_eq!(s.reverse(&a, 20_000).unwrap(), "alice@origin.test");
    assert_eq!(s.reverse(&a, 20_021).unwrap(), "alice@origin.test");
    assert_eq!(s.reverse(&a, 20_022), Err(SrsError::Expired));
}

#[test]
fn case_does_not_matter_where_libsrs2_ignores_it() {
    let s = srs();
    let a = s.forward("Alice@Origin.TEST", 20_000).unwrap();
    assert_eq!(s.reverse(&a, 20_000).unwrap(), "Alice@Origin.TEST");
    // A mailer that lowercased the whole address: still ours.
    let lower = a.to_ascii_lowercase();
    assert_eq!(s.reverse(&lower, 20_000).unwrap(), "alice@origin.test");
    let upper = a.to_ascii_uppercase();
    assert_eq!(s.reverse(&upper, 20_000).unwrap(), "ALICE@ORIGIN.TEST");
}

#[test]
fn srs1_for_an_srs0_sender_and_back() {
    let first = Srs::new(&[b"other".to_vec()], "first.example", 21);
    let srs0 = first.forward("bob@origin.test", 20_000).unwrap();
    let s = srs();
    let srs1 = s.forward(&srs0, 20_000).unwrap();
    assert!(srs1.starts_with("SRS1="), "{srs1}");
    assert!(srs1.contains("=first.example==") && srs1.ends_with("@fwd.example"));
    // Reversed: the first forwarder's SRS0 address, which it reverses.
    let back = s.reverse(&srs1, 20_500).unwrap();
    assert_eq!(back, srs0);
    assert_eq!(first.reverse(&back, 20_000).unwrap(), "bob@origin.test");
    // Forwarded once more: still SRS1, still pointing at the first host.
    let third = Srs::new(&[b"third".to_vec()], "third.example", 21);
    let again = third.forward(&srs1, 20_000).unwrap();
    assert!(again.starts_with("SRS1=") && again.contains("=first.example=="));
    assert_eq!(third.reverse(&again, 20_000).unwrap(), srs0);
}

#[test]
fn the_day_wraps_at_1024() {
    let s = srs();
    let a = s.forward("c@origin.test", 1023).unwrap();
    assert_eq!(s.reverse(&a, 1024).unwrap(), "c@origin.test");
    assert_eq!(s.reverse(&a, 1023 + 21).unwrap(), "c@origin.test");
    assert_eq!(s.reverse(&a, 1023 + 22), Err(SrsError::Expired));
    // A day "in the future" is one that wrapped: long expired.
    let b = s.forward("c@origin.test", 2000).unwrap();
    assert_eq!(s.reverse(&b, 1999), Err(SrsError::Expired));
}

#[test]
fn rotated_secrets_still_verify_but_do_not_sign() {
    let old = srs();
    let a = old.forward("d@origin.test", 20_000).unwrap();
    let rotated = Srs::new(&[b"new".to_vec(), b"s3cret".to_vec()], "fwd.example", 21);
    assert_eq!(rotated.reverse(&a, 20_000).unwrap(), "d@origin.test");
    let b = rotated.forward("d@origin.test", 20_000).unwrap();
    assert_ne!(a, b);
    assert_eq!(old.reverse(&b, 20_000), Err(SrsError::BadHash));
}

#[test]
fn nothing_to_rewrite() {
    let s = srs();
    assert_eq!(s.forward("", 1), None);
    assert_eq!(s.forward("nodomain", 1), None);
    assert_eq!(s.forward("x@FWD.example", 1), None);
    assert_eq!(
        Srs::new(&[], "fwd.example", 21).forward("a@b.test", 1),
        None
    );
}

#[test]
fn forged_and_malformed_addresses_are_refused() {
    let s = srs();
    let good = s.forward("e@origin.test", 20_000).unwrap();
    let (local, _) = good.split_once('@').unwrap();
    let forged_hash = format!("SRS0=AAAA{}@fwd.example", &local[9..]);
    let other_user = good.replace("=e@", "=eve@");
    let cases: Vec<(String, SrsError)> = vec![
        (forged_hash, SrsError::BadHash),
        (other_user, SrsError::BadHash),
        (
            "SRS0=abcd=ZZ=x.test=y@fwd.example".into(),
            SrsError::BadHash,
        ),
        (
            "SRS0=abcd=Z=x.test=y@fwd.example".into(),
            SrsError::Malformed,
        ),
        (
            "SRS0=abcd=Z!=x.test=y@fwd.example".into(),
            SrsError::Malformed,
        ),
        (
            "SRS0=abcd=AA=x.test@fwd.example".into(),
            SrsError::Malformed,
        ),
        ("SRS0=abcd=AA==y@fwd.example".into(), SrsError::Malformed),
        ("SRS0=@fwd.example".into(), SrsError::Malformed),
        ("SRS1=abcd=host@fwd.example".into(), SrsError::Malformed),
        ("SRS1=abcd=host==x@fwd.example".into(), SrsError::BadHash),
        ("SRS2=abcd=AA=x.test=y@fwd.example".into(), SrsError::NotSrs),
        ("alice@fwd.example".into(), SrsError::NotSrs),
        (
            good.replace("@fwd.example", "@elsewhere.test"),
            SrsError::NotSrs,
        ),
        ("SRS0".into(), SrsError::NotSrs),
        ("".into(), SrsError::NotSrs),
    ];
    for (address, want) in cases {
        assert_eq!(s.reverse(&address, 20_000), Err(want), "{address}");
    }
}

#[test]
fn garbage_never_panics() {
    let s = srs();
    let pieces = [
        "SRS0",
        "SRS1",
        "srs0",
        "=",
        "+",
        "-",
        "@",
        "fwd.example",
        "é",
        "\u{0}",
        "AA",
        "x",
    ];
    // Every combination of up to five pieces.
    let mut inputs = vec![String::new()];
    for _ in 0..5 {
        let mut next = Vec::new();
        for i in &inputs {
            for p in pieces {
                next.push(format!("{i}{p}"));
            }
        }
        inputs.extend(next.iter().cloned());
        inputs = next;
    }
    for i in &inputs {
        let _ = s.reverse(i, 20_000);
        let _ = s.reverse(&format!("{i}@fwd.example"), 20_000);
        let _ = s.forward(i, 20_000);
        let _ = s.looks_like_ours(i);
    }
}

#[test]
fn secret_files_are_read_as_postsrsd_reads_them() {
    assert_eq!(
        secrets_of(b"first\r\n\nsecond\nthird"),
        vec![b"first".to_vec(), b"second".to_vec(), b"third".to_vec()]
    );
    assert!(secrets_of(b"\n\n").is_empty());
}
