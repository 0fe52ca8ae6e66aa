//! Recovery after torn writes and corruption: nothing acknowledged is lost
//! because of one bad record, damaged bytes are kept in `corrupt/`, and a
//! second start-up finds nothing new.

use super::*;

/// Body size that puts three messages in each 64 KiB segment.
const BIG: usize = 30_000;

/// Stores `n` messages with distinct 30,000-byte bodies and stops the spool.
fn stored_then_closed(dir: &Path, n: usize) -> Vec<(Envelope, BodyRef)> {
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(dir)).unwrap();
    let stored = (0..n)
        .map(|i| store(&rt, &spool, 1, vec![b'a' + i as u8; BIG]))
        .collect();
    spool.shutdown();
    stored
}

fn body_of(i: usize) -> Vec<u8> {
    vec![b'a' + i as u8; BIG]
}

fn reopen(dir: &Path) -> (Vec<Recovered>, RecoveryReport) {
    let (spool, recovered, report) = Spool::open(config(dir)).unwrap();
    for r in &recovered {
        let body = spool.read_body(r.body).unwrap();
        assert_eq!(body.len(), BIG, "{:?}", r.body);
        assert!(body.iter().all(|&b| b == body[0]), "{:?}", r.body);
    }
    spool.shutdown();
    (recovered, report)
}

#[test]
fn flipped_byte_mid_newest_segment_keeps_the_messages_after_it() {
    let dir = temp_dir("flip-newest");
    let stored = stored_then_closed(&dir, 3);
    let seg = segment_path(&dir, 1);
    let recs = records(&seg);
    assert_eq!(recs.len(), 3, "all three in the newest segment");
    let (at, len) = recs[1];
    flip_byte(&seg, at + len - 5);
    let damaged = std::fs::read(&seg).unwrap()[at..at + len].to_vec();

    let (recovered, report) = reopen(&dir);
    assert_eq!(ids(&recovered), vec![stored[0].0.id, stored[2].0.id]);
    assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
    assert!(report.damage[0].contains("corrupt"), "{:?}", report.damage);
    let name = format!("00000001-{at}.bin");
    assert_eq!(quarantined(&dir), vec![name.clone()]);
    assert_eq!(
        std::fs::read(dir.join("corrupt").join(name)).unwrap(),
        damaged
    );
    assert!(
        segment_path(&dir, 1).exists(),
        "the segment still holds mail"
    );
}

#[test]
fn flipped_byte_mid_older_segment_keeps_the_messages_after_it() {
    let dir = temp_dir("flip-older");
    let stored = stored_then_closed(&dir, 7);
    let seg = segment_path(&dir, 1);
    let recs = records(&seg);
    assert_eq!(recs.len(), 3);
    assert!(segment_path(&dir, 3).exists());
    let (at, len) = recs[1];
    flip_byte(&seg, at + 20);
    let damaged = std::fs::read(&seg).unwrap()[at..at + len].to_vec();

    let (recovered, report) = reopen(&dir);
    let mut expect: Vec<u64> = stored.iter().map(|(e, _)| e.id).collect();
    expect.remove(1);
    assert_eq!(ids(&recovered), expect);
    assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
    let name = format!("00000001-{at}.bin");
    assert_eq!(
        std::fs::read(dir.join("corrupt").join(&name)).unwrap(),
        damaged
    );
    let (recovered_again, _) = reopen(&dir);
    assert_eq!(ids(&recovered_again), expect, "the older segment was kept");
}

#[test]
fn torn_tail_in_an_older_segment_is_quarantined_and_kept() {
    let dir = temp_dir("torn-older");
    let stored = stored_then_closed(&dir, 7);
    let seg = segment_path(&dir, 1);
    let (at, len) = records(&seg)[2];
    truncate_to(&seg, (at + len - 1000) as u64);
    let tail = std::fs::read(&seg).unwrap()[at..].to_vec();

    let (recovered, report) = reopen(&dir);
    let mut expect: Vec<u64> = stored.iter().map(|(e, _)| e.id).collect();
    expect.remove(2);
    assert_eq!(ids(&recovered), expect);
    assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
    assert!(report.damage[0].contains("torn"), "{:?}", report.damage);
    let name = format!("00000001-{at}.bin");
    assert_eq!(std::fs::read(dir.join("corrupt").join(name)).unwrap(), tail);
    assert_eq!(
        std::fs::metadata(&seg).unwrap().len(),
        (at + len - 1000) as u64,
        "only the newest segment is ever cut"
    );
}

#[test]
fn torn_tail_of_the_newest_segment_is_kept_then_cut() {
    let dir = temp_dir("torn-newest");
    let stored = stored_then_closed(&dir, 2);
    let seg = segment_path(&dir, 1);
    let (at, len) = records(&seg)[1];
    truncate_to(&seg, (at + len - 50) as u64);
    let tail = std::fs::read(&seg).unwrap()[at..].to_vec();

    let (recovered, report) = reopen(&dir);
    assert_eq!(ids(&recovered), vec![stored[0].0.id], "only whole records");
    assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
    assert!(report.damage[0].contains("torn"), "{:?}", report.damage);
    let name = format!("00000001-{at}.bin");
    assert_eq!(quarantined(&dir), vec![name.clone()]);
    assert_eq!(std::fs::read(dir.join("corrupt").join(name)).unwrap(), tail);
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), at as u64);

    // A torn header alone (no more than 13 bytes) holds nothing worth
    // keeping: it is cut without a quarantine file.
    let newest = segment_path(&dir, 2);
    let mut header = record::MAGIC.to_le_bytes().to_vec();
    header.extend_from_slice(&[1, 0, 0]);
    std::fs::write(&newest, header).unwrap();
    let (recovered, report) = reopen(&dir);
    assert_eq!(ids(&recovered), vec![stored[0].0.id]);
    assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
    assert_eq!(quarantined(&dir).len(), 1, "{:?}", quarantined(&dir));
    assert_eq!(std::fs::metadata(&newest).unwrap().len(), 0);
}

#[test]
fn corrupt_only_record_is_quarantined_not_recovered() {
    let dir = temp_dir("crc");
    let stored = stored_then_closed(&dir, 1);
    let seg = segment_path(&dir, stored[0].1.segment);
    flip_byte(&seg, stored[0].1.offset as usize + 10);
    let damaged = std::fs::read(&seg).unwrap();

    let (recovered, report) = reopen(&dir);
    assert!(recovered.is_empty());
    assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
    let name = "00000001-0.bin".to_string();
    assert_eq!(quarantined(&dir), vec![name.clone()]);
    assert_eq!(
        std::fs::read(dir.join("corrupt").join(name)).unwrap(),
        damaged
    );
}

#[test]
fn reopening_twice_reports_the_same_damage_once() {
    let dir = temp_dir("twice");
    let stored = stored_then_closed(&dir, 7);
    let seg = segment_path(&dir, 1);
    let (at, _) = records(&seg)[1];
    flip_byte(&seg, at + 20);
    let newest = segment_path(&dir, 3);
    let (at3, len3) = records(&newest)[0];
    truncate_to(&newest, (at3 + len3 - 7) as u64);

    let (first, report) = reopen(&dir);
    assert_eq!(report.damage.len(), 2, "{:?}", report.damage);
    assert_eq!(report.known_damage, 0);
    let files = quarantined(&dir);
    assert_eq!(files.len(), 2, "{files:?}");
    let (second, report) = reopen(&dir);
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    assert_eq!(
        report.known_damage, 1,
        "the older segment's range, found again"
    );
    assert_eq!(quarantined(&dir), files);
    assert_eq!(ids(&first), ids(&second));
    assert_eq!(first.len(), stored.len() - 2);
}

#[test]
fn a_segment_whose_damage_cannot_be_quarantined_is_never_reclaimed() {
    let dir = temp_dir("pinned");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    let stored: Vec<_> = (0..7).map(|i| store(&rt, &spool, 1, body_of(i))).collect();
    for (env, _) in [&stored[0], &stored[2]] {
        spool.record_outcome(env.id, vec![0], true);
    }
    spool.shutdown();
    drop(spool);
    let seg = segment_path(&dir, 1);
    let (at, _) = records(&seg)[1];
    flip_byte(&seg, at + 20);
    // A plain file where the quarantine directory should go.
    std::fs::write(dir.join("corrupt"), b"in the way").unwrap();

    let (recovered, report) = reopen(&dir);
    assert_eq!(recovered.len(), 4);
    assert_eq!(report.pinned, vec![1], "{:?}", report.damage);
    assert!(seg.exists(), "unsaved damaged bytes keep their segment");

    std::fs::remove_file(dir.join("corrupt")).unwrap();
    let (recovered, report) = reopen(&dir);
    assert_eq!(recovered.len(), 4);
    assert!(report.pinned.is_empty());
    assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
    assert_eq!(quarantined(&dir), vec![format!("00000001-{at}.bin")]);
    assert!(
        !seg.exists(),
        "saved and with no live mail, it is reclaimed"
    );
}

/// A segment of `len` bytes made only of record headers, each claiming a
/// message that runs to the end of the file: every one is a candidate
/// whose checksum covers the rest of the segment.
fn fake_headers(len: usize) -> Vec<u8> {
    let mut data = Vec::with_capacity(len);
    while data.len() + record::HEADER_LEN <= len {
        let claims = (len - data.len() - record::HEADER_LEN) as u32;
        data.extend_from_slice(&record::MAGIC.to_le_bytes());
        data.push(record::KIND_MESSAGE);
        data.extend_from_slice(&claims.to_le_bytes());
        data.extend_from_slice(&[0; 4]);
    }
    data.resize(len, 0);
    data
}

#[test]
fn resynchronising_through_fake_headers_is_bounded_and_quarantines_the_rest() {
    let dir = temp_dir("fake-headers");
    let rt = runtime();
    // An empty segment 1 goes at the next start; the message is in 2.
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    spool.shutdown();
    drop(spool);
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    let (kept, kept_ref) = store(&rt, &spool, 1, body_of(0));
    spool.shutdown();
    drop(spool);
    assert_eq!(kept_ref.segment, 2);
    let fake = fake_headers(256 << 10);
    std::fs::write(segment_path(&dir, 1), &fake).unwrap();

    recover::CHECKSUMMED.with(|c| c.set(0));
    let (recovered, report) = reopen(&dir);
    let checksummed = recover::CHECKSUMMED.with(|c| c.get());
    assert!(
        checksummed <= 4 * fake.len() as u64,
        "{checksummed} bytes checksummed for a {}-byte segment",
        fake.len()
    );
    assert_eq!(ids(&recovered), vec![kept.id], "the next segment counts");
    assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
    assert!(report.damage[0].contains("gave up"), "{:?}", report.damage);
    assert_eq!(quarantined(&dir), vec!["00000001-0.bin".to_string()]);
    assert_eq!(
        std::fs::read(dir.join("corrupt").join("00000001-0.bin")).unwrap(),
        fake,
        "everything after the damage is kept, not dropped"
    );
}
