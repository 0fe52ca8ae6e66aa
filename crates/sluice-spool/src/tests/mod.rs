//! Spool unit tests. Helpers live here; each file below covers one
//! concern. Every test works in its own scratch directory (removed on drop)
//! and waits only on the spool's own replies or on polls with a deadline.

use super::*;
use crate::salt::Salt;

mod compaction;
mod envelope;
mod forgery;
mod full;
mod limits;
mod outcomes;
mod pressure;
mod recovery;

fn config(dir: &Path) -> SpoolConfig {
    SpoolConfig {
        dir: dir.to_path_buf(),
        sync: true,
        segment_bytes: 1 << 16,
        reserve_bytes: 0,
    }
}

fn envelope(spool: &Spool, rcpts: usize) -> Envelope {
    Envelope {
        id: spool.new_id(),
        arrival: 1,
        sender: "a@b.example".into(),
        recipients: (0..rcpts).map(|i| format!("r{i}@c.example")).collect(),
        flags: 7,
        dsn: None,
        orig_rcpt: Vec::new(),
        login: String::new(),
        filter: String::new(),
        xforward: String::new(),
    }
}

/// A scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("sluice-spool-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    Scratch(dir)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// Stores one message with `rcpts` recipients and this body.
fn store(
    rt: &tokio::runtime::Runtime,
    spool: &Spool,
    rcpts: usize,
    body: Vec<u8>,
) -> (Envelope, BodyRef) {
    let env = envelope(spool, rcpts);
    let body_ref = rt
        .block_on(spool.store(env.clone(), Arc::new(body)))
        .unwrap();
    (env, body_ref)
}

/// The salt of the spool a segment file belongs to.
fn salt_of(segment: &Path) -> Salt {
    let dir = segment.parent().unwrap();
    match std::fs::read(dir.join("salt")) {
        Ok(_) => salt::load_or_create(dir, &[1]).unwrap(),
        Err(_) => Salt::legacy(),
    }
}

/// Offset and length of every whole record at the front of a segment file.
fn records(path: &Path) -> Vec<(usize, usize)> {
    let data = std::fs::read(path).unwrap();
    let salt = salt_of(path);
    let mut pos = 0;
    let mut out = Vec::new();
    while let Ok((_, len)) = record::decode(&salt, &data[pos..]) {
        out.push((pos, len));
        pos += len;
    }
    out
}

/// Inverts one byte of a file.
fn flip_byte(path: &Path, at: usize) {
    let mut data = std::fs::read(path).unwrap();
    data[at] ^= 0xff;
    std::fs::write(path, data).unwrap();
}

fn ids(recovered: &[Recovered]) -> Vec<u64> {
    recovered.iter().map(|r| r.id).collect()
}

/// Polls `done` until it holds or five seconds pass.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Names of the files in `<spool>/corrupt/`, sorted.
fn quarantined(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir.join("corrupt")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn stored_messages_survive_reopen_until_complete() {
    let dir = temp_dir("reopen");
    let rt = runtime();
    let (spool, recovered, _) = Spool::open(config(&dir)).unwrap();
    assert!(recovered.is_empty());
    let e1 = envelope(&spool, 2);
    let e2 = envelope(&spool, 1);
    let b1 = rt
        .block_on(spool.store(e1.clone(), Arc::new(b"body one\r\n".to_vec())))
        .unwrap();
    rt.block_on(spool.store(e2.clone(), Arc::new(b"body two\r\n".to_vec())))
        .unwrap();
    assert_eq!(spool.read_body(b1).unwrap(), b"body one\r\n");
    spool.record_outcome(e1.id, vec![0], false);
    spool.record_outcome(e2.id, vec![0], true);
    spool.shutdown();
    drop(spool);

    let (spool, recovered, report) = Spool::open(config(&dir)).unwrap();
    assert_eq!(report.messages_pending, 1);
    assert_eq!(report.messages_complete, 1);
    assert_eq!(recovered.len(), 1);
    assert_eq!(spool.read_envelope(recovered[0].body).unwrap(), e1);
    assert_eq!(recovered[0].done.to_vec(), vec![true, false]);
    assert_eq!(spool.read_body(recovered[0].body).unwrap(), b"body one\r\n");
    assert!(spool.new_id() > e2.id);
    spool.shutdown();
}

#[test]
fn concurrent_stores_share_syncs() {
    let dir = temp_dir("group-commit");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let spool = spool.clone();
                tokio::spawn(async move {
                    let env = envelope(&spool, 1);
                    spool.store(env, Arc::new(vec![b'g'; 512])).await
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
    });
    let messages = spool.stats().messages.load(Ordering::SeqCst);
    let syncs = spool.stats().syncs.load(Ordering::SeqCst);
    assert_eq!(messages, 64);
    assert!(syncs < messages, "{syncs} syncs for {messages} messages");
    spool.shutdown();
}

#[test]
fn a_second_server_cannot_share_the_spool() {
    let dir = temp_dir("lock");
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    assert!(matches!(
        Spool::open(config(&dir)),
        Err(SpoolError::Locked(_))
    ));
    spool.shutdown();
}

fn count_segments(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".seg")
        })
        .count()
}

fn truncate_to(path: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}
