//! A client controls message bodies (BDAT takes binary), so a body may
//! hold bytes that look like a whole record. Recovery resynchronises after
//! damage by looking for the next record that checks out; it must never
//! take one of those for mail. Record checksums are keyed with the spool's
//! secret salt, which a client cannot know.

use super::*;

/// The record a client can compute: the old, unkeyed format.
fn unsalted_record(env: &Envelope, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    record::encode_message(&Salt::legacy(), env, body, &mut out).unwrap();
    let crc = crc32fast::hash(&out[record::HEADER_LEN..]);
    out[9..13].copy_from_slice(&crc.to_le_bytes());
    out
}

fn forged_envelope(id: u64) -> Envelope {
    Envelope {
        id,
        arrival: 1,
        sender: "attacker@evil.example".into(),
        recipients: vec!["victim@target.example".into()],
        flags: 0,
        dsn: None,
        orig_rcpt: Vec::new(),
        login: String::new(),
        filter: String::new(),
        xforward: String::new(),
    }
}

/// A body carrying a whole forged record between ordinary text.
fn body_with(forged: &[u8]) -> Vec<u8> {
    let mut body = b"Subject: hello\r\n\r\n".to_vec();
    body.extend_from_slice(forged);
    body.extend_from_slice(&b"more text after it\r\n".repeat(20));
    body
}

/// Stores a genuine message, one whose body hides a forged record, and
/// (if `after`) another genuine one; returns them and the forged ID.
fn spool_with_a_forgery(dir: &Path, after: bool) -> (Vec<(Envelope, BodyRef)>, u64, usize) {
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(dir)).unwrap();
    let forged_id = spool.new_id() + 1_000_000;
    let forged = unsalted_record(&forged_envelope(forged_id), b"spam\r\n");
    let mut stored = vec![store(&rt, &spool, 1, b"genuine one\r\n".to_vec())];
    stored.push(store(&rt, &spool, 1, body_with(&forged)));
    if after {
        stored.push(store(&rt, &spool, 1, b"genuine two\r\n".to_vec()));
    }
    spool.shutdown();
    (stored, forged_id, forged.len())
}

/// Checked on the spool that recovered the records: references from one
/// open are not valid after another (its compaction may move them).
fn no_forgery(spool: &Spool, recovered: &[Recovered], forged_id: u64) {
    assert!(!ids(recovered).contains(&forged_id), "forged record taken");
    for r in recovered {
        let env = spool.read_envelope(r.body).unwrap();
        assert_ne!(env.sender, "attacker@evil.example");
    }
}

#[test]
fn a_record_hidden_in_a_body_is_not_recovered_after_corruption() {
    let dir = temp_dir("forged-corrupt");
    let (stored, forged_id, _) = spool_with_a_forgery(&dir, true);
    let victim = stored[1].1;
    // Damage the envelope of the message carrying the forgery.
    flip_byte(
        &segment_path(&dir, victim.segment),
        victim.record as usize + 20,
    );

    let (spool, recovered, report) = Spool::open(config(&dir)).unwrap();
    no_forgery(&spool, &recovered, forged_id);
    spool.shutdown();
    drop(spool);
    assert_eq!(
        ids(&recovered),
        vec![stored[0].0.id, stored[2].0.id],
        "the genuine record after the damage still counts"
    );
    assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
}

#[test]
fn a_record_hidden_in_a_body_is_not_recovered_from_a_torn_tail() {
    let dir = temp_dir("forged-torn");
    let (stored, forged_id, forged_len) = spool_with_a_forgery(&dir, false);
    let victim = stored[1].1;
    // Killed mid-write: the tail ends just after the forged record.
    let seg = segment_path(&dir, victim.segment);
    truncate_to(&seg, victim.offset + 18 + forged_len as u64 + 5);

    let (spool, recovered, report) = Spool::open(config(&dir)).unwrap();
    no_forgery(&spool, &recovered, forged_id);
    spool.shutdown();
    drop(spool);
    assert_eq!(ids(&recovered), vec![stored[0].0.id]);
    assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
    assert!(report.damage[0].contains("torn"), "{:?}", report.damage);
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), victim.record);
}

#[test]
fn a_new_spool_gets_a_secret_salt_and_keys_its_records_with_it() {
    let dir = temp_dir("salt-new");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    let (_, body) = store(&rt, &spool, 1, b"keyed\r\n".to_vec());
    spool.shutdown();
    drop(spool);
    let path = dir.join("salt");
    let salt = std::fs::read(&path).unwrap();
    assert_eq!(salt.len(), 16);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let data = std::fs::read(segment_path(&dir, body.segment)).unwrap();
    assert!(record::decode(&Salt::legacy(), &data).is_err(), "unkeyed");
    assert!(record::decode(&salt_of(&segment_path(&dir, 1)), &data).is_ok());

    // The salt stays: reopening keeps reading what was written with it.
    let (spool, recovered, report) = Spool::open(config(&dir)).unwrap();
    assert_eq!(recovered.len(), 1);
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    spool.shutdown();
    assert_eq!(std::fs::read(&path).unwrap(), salt);
}

#[test]
fn a_legacy_spool_without_a_salt_keeps_its_mail_and_its_format() {
    let dir = temp_dir("salt-legacy");
    std::fs::create_dir_all(&*dir).unwrap();
    let env = forged_envelope(42);
    let mut old = Vec::new();
    record::encode_message(&Salt::legacy(), &env, b"old mail\r\n", &mut old).unwrap();
    std::fs::write(segment_path(&dir, 1), old).unwrap();

    let rt = runtime();
    let (spool, recovered, report) = Spool::open(config(&dir)).unwrap();
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    assert_eq!(ids(&recovered), vec![42]);
    assert_eq!(spool.read_envelope(recovered[0].body).unwrap(), env);
    let (newer, _) = store(&rt, &spool, 1, b"new mail\r\n".to_vec());
    spool.shutdown();
    drop(spool);
    assert!(!dir.join("salt").exists(), "no salt for a spool with mail");

    let (spool, recovered, report) = Spool::open(config(&dir)).unwrap();
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    assert_eq!(ids(&recovered), vec![42, newer.id]);
    spool.shutdown();
}

#[test]
fn a_salt_file_of_the_wrong_size_is_refused() {
    let dir = temp_dir("salt-bad");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    store(&rt, &spool, 1, b"kept\r\n".to_vec());
    spool.shutdown();
    drop(spool);
    std::fs::write(dir.join("salt"), b"short").unwrap();
    let before = std::fs::read(segment_path(&dir, 1)).unwrap();
    let result = Spool::open(config(&dir));
    assert!(
        matches!(&result, Err(SpoolError::Io(e)) if e.kind() == std::io::ErrorKind::InvalidData),
        "{:?}",
        result.err()
    );
    assert_eq!(std::fs::read(segment_path(&dir, 1)).unwrap(), before);
    assert!(quarantined(&dir).is_empty());
}

#[test]
fn a_legacy_spool_switches_to_a_salt_once_it_holds_no_mail() {
    let dir = temp_dir("salt-upgrade");
    std::fs::create_dir_all(&*dir).unwrap();
    let env = forged_envelope(42);
    let mut old = Vec::new();
    record::encode_message(&Salt::legacy(), &env, b"old mail\r\n", &mut old).unwrap();
    std::fs::write(segment_path(&dir, 1), old).unwrap();
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    spool.record_outcome(42, vec![0], true);
    spool.shutdown();
    drop(spool);
    assert!(!dir.join("salt").exists(), "not while it held mail");

    let (spool, recovered, report) = Spool::open(config(&dir)).unwrap();
    assert!(recovered.is_empty());
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    assert_eq!(std::fs::read(dir.join("salt")).unwrap().len(), 16);
    assert!(spool.new_id() > 42, "IDs stay unique");
    let (newer, body) = store(&rt, &spool, 1, b"new mail\r\n".to_vec());
    spool.shutdown();
    drop(spool);
    let data = std::fs::read(segment_path(&dir, body.segment)).unwrap();
    let at = body.record as usize;
    assert!(
        record::decode(&Salt::legacy(), &data[at..]).is_err(),
        "keyed"
    );

    let (spool, recovered, report) = Spool::open(config(&dir)).unwrap();
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    assert_eq!(ids(&recovered), vec![newer.id]);
    spool.shutdown();
}

#[test]
fn a_lost_salt_file_is_refused_rather_than_every_record_quarantined() {
    let dir = temp_dir("salt-lost");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    let (kept, _) = store(&rt, &spool, 1, b"kept\r\n".to_vec());
    spool.shutdown();
    drop(spool);
    let salt = std::fs::read(dir.join("salt")).unwrap();
    std::fs::remove_file(dir.join("salt")).unwrap();
    let before = std::fs::read(segment_path(&dir, 1)).unwrap();

    let result = Spool::open(config(&dir));
    assert!(
        matches!(&result, Err(SpoolError::Io(e)) if e.kind() == std::io::ErrorKind::InvalidData),
        "{:?}",
        result.err()
    );
    assert_eq!(std::fs::read(segment_path(&dir, 1)).unwrap(), before);
    assert!(quarantined(&dir).is_empty());
    assert!(!dir.join("salt").exists(), "no new salt either");

    std::fs::write(dir.join("salt"), salt).unwrap();
    let (spool, recovered, _) = Spool::open(config(&dir)).unwrap();
    assert_eq!(
        ids(&recovered),
        vec![kept.id],
        "restoring the salt is enough"
    );
    spool.shutdown();
}

#[test]
fn an_empty_salt_file_opens_a_legacy_spool_whose_first_record_is_damaged() {
    let dir = temp_dir("salt-empty");
    std::fs::create_dir_all(&*dir).unwrap();
    let legacy = Salt::legacy();
    let mut old = Vec::new();
    record::encode_message(&legacy, &forged_envelope(41), b"damaged\r\n", &mut old).unwrap();
    let second = old.len();
    record::encode_message(&legacy, &forged_envelope(42), b"fine\r\n", &mut old).unwrap();
    old[20] ^= 0xff;
    std::fs::write(segment_path(&dir, 1), &old).unwrap();
    // Indistinguishable from a keyed spool that lost its salt: refused.
    assert!(Spool::open(config(&dir)).is_err());
    assert!(quarantined(&dir).is_empty());

    std::fs::write(dir.join("salt"), b"").unwrap();
    let (spool, recovered, report) = Spool::open(config(&dir)).unwrap();
    assert_eq!(ids(&recovered), vec![42]);
    assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
    assert_eq!(recovered[0].body.record, second as u64);
    spool.shutdown();
}
