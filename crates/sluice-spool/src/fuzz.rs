//! Fuzz target `fuzz_spool_record` for the spool record decoder
//! ([`record::decode`]), as proptest properties that run on stable Rust:
//! fast in a normal `cargo test`, for as long as asked under
//! `scripts/fuzz` (see the shared harness in sluice-proto).
//!
//! * Arbitrary bytes, often behind a plausible header, with a checksum
//!   that is wrong or, half the time, right (so the structural checks see
//!   random payloads): decoding never panics, and a record it returns
//!   always checks out (magic, length within the buffer, keyed checksum)
//!   and encodes back to exactly the bytes it came from.
//! * Valid records, encoded with a legacy or a keyed salt, then cut short,
//!   extended, or with bytes flipped: the untouched record decodes to what
//!   was encoded; a damaged one is refused, never decoded as something
//!   else; and no record checks out under another salt.
//!
//! What the target found is kept as a plain regression test at the end.

#[path = "../../sluice-proto/src/fuzz/harness.rs"]
mod harness;

use proptest::collection::vec;
use proptest::prelude::*;

use crate::record::{
    self, Attempt, Envelope, Record, HEADER_LEN, KIND_ATTEMPT, KIND_MARKS, KIND_MESSAGE,
    KIND_OUTCOME, MAGIC,
};
use crate::salt::Salt;
use harness::{prop, run_target, Bytes};

#[test]
fn fuzz_spool_record() {
    run_target(
        "spool_record",
        vec![
            prop(
                "arbitrary_bytes",
                (0u8..4, any::<u8>(), payload(), any::<bool>()),
                |(shape, kind, payload, keyed)| {
                    let salt = salt(keyed);
                    let buf = candidate(&salt, shape, kind, &payload);
                    check_decoded(&salt, &buf).map(drop)
                },
            ),
            prop(
                "damaged_records",
                (spec(), any::<bool>(), vec(damage(), 0..4)),
                |(spec, keyed, damage)| check_damage(&spec, keyed, &damage),
            ),
        ],
    );
}

// ---------------------------------------------------------------- inputs

fn salt(keyed: bool) -> Salt {
    if keyed {
        Salt::from_bytes((1..=16).collect())
    } else {
        Salt::legacy()
    }
}

/// Bytes for the decoder: raw (shape 0), or behind a header with our
/// magic, a kind (usually a real one) and a length that fits (or not),
/// whose checksum is random (shape 1) or right (shapes 2 and 3).
fn candidate(salt: &Salt, shape: u8, kind: u8, payload: &[u8]) -> Bytes {
    if shape == 0 {
        return Bytes(payload.to_vec());
    }
    let kind = match kind % 6 {
        0 => kind,
        1 | 2 => KIND_MESSAGE,
        3 => KIND_OUTCOME,
        4 => KIND_ATTEMPT,
        _ => KIND_MARKS,
    };
    // Shape 3 claims a little more or less than is there.
    let len = match shape {
        3 => (payload.len() as u32)
            .wrapping_add(u32::from(kind % 5))
            .wrapping_sub(2),
        _ => payload.len() as u32,
    };
    let crc = match shape {
        1 => u32::from_le_bytes([kind, payload.len() as u8, 7, 9]),
        _ => salt.checksum(&payload[..payload.len().min(len as usize)]),
    };
    let mut buf = MAGIC.to_le_bytes().to_vec();
    buf.push(kind);
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&crc.to_le_bytes());
    buf.extend_from_slice(payload);
    Bytes(buf)
}

/// Random bytes, or fields that read as small counts and lengths (so the
/// structural checks are reached, and passed, often).
fn payload() -> impl Strategy<Value = Vec<u8>> {
    let field = prop_oneof![
        2 => vec(any::<u8>(), 1..12),
        1 => (0u16..8).prop_map(|n| n.to_le_bytes().to_vec()),
        1 => (0u32..5).prop_map(|n| n.to_le_bytes().to_vec()),
        1 => (0u64..40).prop_map(|n| n.to_le_bytes().to_vec()),
    ];
    prop_oneof![
        vec(any::<u8>(), 0..300),
        vec(field, 0..24).prop_map(|f| f.concat()),
    ]
}

/// A record to encode.
#[derive(Debug, Clone)]
enum Spec {
    Message(Envelope, Bytes),
    Outcome(u64, Vec<u16>),
    Marks(u64, u32),
    Attempt(u64, Attempt),
}

fn address() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z@.]{0,12}",
        1 => any::<String>(),
        1 => Just("\u{85}\u{0}é@x".to_string()),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    // Small recipient indices are the common case (and make fields that
    // read as zero lengths and counts under the wrong kind).
    let index = prop_oneof![3 => 0u16..4, 1 => any::<u16>()];
    prop_oneof![
        (
            any::<u64>(),
            any::<u64>(),
            address(),
            vec(address(), 0..5),
            any::<u32>(),
            vec(any::<u8>(), 0..200),
        )
            .prop_map(|(id, arrival, sender, recipients, flags, body)| {
                // Bit 31 (the spool's own) picks a DSN block, made from
                // the other fields so it is as wild as they are.
                let dsn = (flags >> 31 == 1).then(|| {
                    Box::new(crate::Dsn {
                        ret: flags as u8,
                        envid: sender.chars().rev().collect(),
                        notify: recipients.iter().map(|r| r.len() as u8).collect(),
                        orcpt: recipients.iter().map(|r| r.repeat(2)).collect(),
                    })
                });
                // Bit 30 (also the spool's) picks original addresses.
                let orig_rcpt = match flags >> 30 & 1 {
                    1 => recipients.iter().map(|r| r.to_uppercase()).collect(),
                    _ => Vec::new(),
                };
                // Bit 29 (the spool's too) picks a login.
                let login = match flags >> 29 & 1 {
                    1 => sender.to_uppercase(),
                    _ => String::new(),
                };
                // Bit 28 (the spool's too) picks a content filter.
                let filter = match flags >> 28 & 1 {
                    1 => format!("smtp:[{}]:10024", sender.len()),
                    _ => String::new(),
                };
                // Bit 27 (the spool's too) picks XFORWARD attributes.
                let xforward = match flags >> 27 & 1 {
                    1 => format!("ADDR={}", sender.len()),
                    _ => String::new(),
                };
                let envelope = Envelope {
                    id,
                    arrival,
                    sender,
                    recipients,
                    flags: flags & !crate::SPOOL_FLAGS,
                    dsn,
                    orig_rcpt,
                    login,
                    filter,
                    xforward,
                };
                Spec::Message(envelope, Bytes(body))
            }),
        (any::<u64>(), vec(index, 0..20)).prop_map(|(id, r)| Spec::Outcome(id, r)),
        (any::<u64>(), any::<u32>()).prop_map(|(id, m)| Spec::Marks(id, m)),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            address()
        )
            .prop_map(|(id, count, at, next, reason)| Spec::Attempt(
                id,
                Attempt {
                    count,
                    at,
                    next,
                    reason
                }
            )),
    ]
}

/// What to do to an encoded record.
#[derive(Debug, Clone)]
enum Damage {
    /// XOR the byte at this place (modulo the length) with a non-zero value.
    Flip(usize, u8),
    /// Cut the record to this length (modulo its length).
    Truncate(usize),
    /// Add bytes after it (they belong to the next record).
    Append(Bytes),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        3 => (any::<usize>(), 1u8..=255).prop_map(|(at, x)| Damage::Flip(at, x)),
        // The header is where a flip is most interesting.
        2 => (0usize..HEADER_LEN, 1u8..=255).prop_map(|(at, x)| Damage::Flip(at, x)),
        1 => any::<usize>().prop_map(Damage::Truncate),
        1 => vec(any::<u8>(), 1..40).prop_map(|b| Damage::Append(Bytes(b))),
    ]
}

// ---------------------------------------------------------------- checks

/// A decoded record, comparable.
#[derive(Debug, PartialEq, Eq)]
enum View {
    Message {
        envelope: Envelope,
        body_at: usize,
        body_len: u64,
    },
    Outcome {
        id: u64,
        recipients: Vec<u16>,
    },
    Marks {
        id: u64,
        marks: u32,
    },
    Attempt {
        id: u64,
        attempt: Attempt,
    },
}

fn view(record: Record) -> View {
    match record {
        Record::Message {
            envelope,
            body_at,
            body_len,
        } => View::Message {
            envelope,
            body_at,
            body_len,
        },
        Record::Outcome { id, recipients } => View::Outcome { id, recipients },
        Record::Marks { id, marks } => View::Marks { id, marks },
        Record::Attempt { id, attempt } => View::Attempt { id, attempt },
    }
}

/// Decodes `buf`; whatever comes back must check out. Returns the record
/// and its length, if any.
fn check_decoded(salt: &Salt, buf: &[u8]) -> Result<Option<(View, usize)>, TestCaseError> {
    let Ok((record, len)) = record::decode(salt, buf) else {
        return Ok(None);
    };
    prop_assert!((HEADER_LEN..=buf.len()).contains(&len), "length {len}");
    prop_assert_eq!(&buf[0..4], &MAGIC.to_le_bytes()[..]);
    let claimed = u32::from_le_bytes(buf[5..9].try_into().unwrap());
    prop_assert_eq!(claimed as usize, len - HEADER_LEN);
    let crc = u32::from_le_bytes(buf[9..13].try_into().unwrap());
    prop_assert_eq!(
        salt.checksum(&buf[HEADER_LEN..len]),
        crc,
        "a record whose checksum does not match"
    );
    let view = view(record);
    // It is exactly what encoding it gives: nothing ignored, nothing extra.
    let mut again = Vec::new();
    match &view {
        View::Message {
            envelope,
            body_at,
            body_len,
        } => {
            prop_assert_eq!(buf[4], KIND_MESSAGE);
            prop_assert_eq!(*body_at as u64 + body_len, len as u64);
            let body = &buf[*body_at..len];
            let at = record::encode_message(salt, envelope, body, &mut again)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(at, *body_at);
        }
        View::Outcome { id, recipients } => {
            prop_assert_eq!(buf[4], KIND_OUTCOME);
            record::encode_outcome(salt, *id, recipients, &mut again);
        }
        View::Marks { id, marks } => {
            prop_assert_eq!(buf[4], KIND_MARKS);
            record::encode_marks(salt, *id, *marks, &mut again);
        }
        View::Attempt { id, attempt } => {
            prop_assert_eq!(buf[4], KIND_ATTEMPT);
            record::encode_attempt(salt, *id, attempt, &mut again);
        }
    }
    prop_assert!(
        again == buf[..len],
        "decoded {view:?} re-encodes differently: {:?}",
        Bytes(again.clone())
    );
    Ok(Some((view, len)))
}

fn check_damage(spec: &Spec, keyed: bool, damage: &[Damage]) -> Result<(), TestCaseError> {
    let salt = salt(keyed);
    let mut good = Vec::new();
    match spec {
        Spec::Message(envelope, body) => {
            record::encode_message(&salt, envelope, body, &mut good)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        Spec::Outcome(id, recipients) => record::encode_outcome(&salt, *id, recipients, &mut good),
        Spec::Marks(id, marks) => record::encode_marks(&salt, *id, *marks, &mut good),
        Spec::Attempt(id, attempt) => record::encode_attempt(&salt, *id, attempt, &mut good),
    }
    let Some((original, len)) = check_decoded(&salt, &good)? else {
        return Err(TestCaseError::fail("a record just encoded does not decode"));
    };
    prop_assert_eq!(len, good.len());
    // Not under another salt.
    prop_assert!(
        record::decode(&self::salt(!keyed), &good).is_err(),
        "salt ignored"
    );

    let mut bad = good.clone();
    for d in damage {
        match d {
            Damage::Flip(at, x) => {
                let at = at % bad.len().max(1);
                if let Some(b) = bad.get_mut(at) {
                    *b ^= x;
                }
            }
            Damage::Truncate(at) => bad.truncate(at % (bad.len() + 1)),
            Damage::Append(more) => bad.extend_from_slice(more),
        }
    }
    let Some((got, got_len)) = check_decoded(&salt, &bad)? else {
        return Ok(());
    };
    // Decoded after damage: only if the record's own bytes are intact.
    prop_assert!(
        got == original && got_len == len && bad[..len] == good[..],
        "damaged record decoded as {got:?} ({got_len} bytes), was {original:?}"
    );
    Ok(())
}

// ----------------------------------------------------------- regressions

/// Found by `fuzz_spool_record` (arbitrary_bytes): an outcome record with
/// bytes after its recipients (and a checksum over them all) was accepted,
/// the extra bytes ignored, where a message record's length must match.
#[test]
fn regression_outcome_with_trailing_bytes_is_refused() {
    let salt = Salt::legacy();
    let buf = candidate(&salt, 2, 3, &[0; 13]);
    assert_eq!(buf[4], KIND_OUTCOME);
    assert!(record::decode(&salt, &buf).is_err());
    check_decoded(&salt, &buf).unwrap();
}
