//! Password hashes: checking a password against an argon2 or
//! SHA-512-crypt hash (PHC or crypt strings, as tables and LDAP keep
//! them), and making a new argon2id hash (`sluice hash-password`). A leaf:
//! the AUTH verb (`auth.rs`) and the hashing pool (`hash_pool.rs`) both
//! call it.
//!
//! Trust: the hash is the administrator's, the password the client's
//! (any bytes). Invariant: a hash that does not parse, or of an unknown
//! kind, never matches; the comparison is constant-time.

/// True if `password` matches the PHC/crypt string `hash`.
pub fn check_hash(hash: &str, password: &str) -> bool {
    check_hash_in(hash, password, &mut Vec::new())
}

/// [`check_hash`] with argon2's working memory in `blocks`, grown to the
/// hash's `m` and kept by the caller: the hashing threads reuse one block
/// each, so a flood of checks does not allocate and free ~19 MiB per
/// attempt (glibc kept the freed buffers: a 190 MB peak in the auth-flood
/// benchmark of 8ca8176).
pub fn check_hash_in(hash: &str, password: &str, blocks: &mut Vec<argon2::Block>) -> bool {
    if hash.starts_with("$argon2") {
        return argon2_check(hash, password.as_bytes(), blocks).unwrap_or(false);
    }
    if hash.starts_with("$6$") {
        return sha_crypt::sha512_check(password, hash).is_ok();
    }
    false
}

/// `None` for a hash that does not parse (never a match).
fn argon2_check(hash: &str, password: &[u8], blocks: &mut Vec<argon2::Block>) -> Option<bool> {
    use argon2::password_hash::{Output, PasswordHash};
    let parsed = PasswordHash::new(hash).ok()?;
    let expected = parsed.hash?;
    let params = argon2::Params::try_from(&parsed).ok()?;
    let algorithm = argon2::Algorithm::try_from(parsed.algorithm).ok()?;
    let version = match parsed.version {
        Some(v) => argon2::Version::try_from(v).ok()?,
        None => argon2::Version::default(),
    };
    let mut salt = [0u8; 64];
    let salt = parsed.salt?.decode_b64(&mut salt).ok()?;
    if blocks.len() < params.block_count() {
        blocks.resize(params.block_count(), argon2::Block::default());
    }
    let argon = argon2::Argon2::new(algorithm, version, params);
    let mut out = [0u8; Output::MAX_LENGTH];
    let out = out.get_mut(..expected.len())?;
    argon
        .hash_password_into_with_memory(password, salt, out, &mut blocks[..])
        .ok()?;
    // Output's equality is constant-time.
    Some(Output::new(out).ok()? == expected)
}

/// A new argon2id hash of `password` (for `sluice hash-password`).
pub fn hash_password(password: &str) -> Result<String, argon2::password_hash::Error> {
    use argon2::password_hash::rand_core::OsRng;
    use argon2::password_hash::{PasswordHasher, SaltString};
    let salt = SaltString::generate(&mut OsRng);
    argon2::Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
}
