//! A recording content filter for the tests that must see what a filter
//! is shown: it speaks the milter protocol (version 6) on a Unix socket,
//! continues at every step, records each header field it is sent and, at
//! the end of each message, adds the header fields it was told to (a
//! filter adding results in the MTA's name, as OpenDKIM and OpenDMARC do
//! with their AuthservID). A probe, not a stand-in: the real filters
//! (rspamd, OpenDKIM) have their own tests; no real filter reports what it
//! was sent.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub struct MilterProbe {
    pub socket: PathBuf,
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

impl MilterProbe {
    /// Listens at `socket`; adds `add` (name, value) at each message's end.
    pub fn start(socket: &Path, add: Vec<(String, String)>) -> MilterProbe {
        let listener = UnixListener::bind(socket).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, add) = (seen.clone(), Arc::new(add));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (s, add) = (s.clone(), add.clone());
                std::thread::spawn(move || serve(stream, &s, &add));
            }
        });
        MilterProbe {
            socket: socket.to_path_buf(),
            seen,
        }
    }

    /// Every header field (name, value) the filter was sent so far.
    pub fn headers(&self) -> Vec<(String, String)> {
        self.seen.lock().unwrap().clone()
    }
}

fn send(stream: &mut UnixStream, code: u8, data: &[u8]) -> std::io::Result<()> {
    let mut frame = ((data.len() + 1) as u32).to_be_bytes().to_vec();
    frame.push(code);
    frame.extend_from_slice(data);
    stream.write_all(&frame)
}

fn serve(mut stream: UnixStream, seen: &Mutex<Vec<(String, String)>>, add: &[(String, String)]) {
    loop {
        let mut len = [0u8; 4];
        if stream.read_exact(&mut len).is_err() {
            return;
        }
        let mut frame = vec![0u8; u32::from_be_bytes(len) as usize];
        if frame.is_empty() || stream.read_exact(&mut frame).is_err() {
            return;
        }
        let reply = match frame[0] {
            // Version 6, may add headers, every step sent and answered.
            b'O' => send(&mut stream, b'O', &[0, 0, 0, 6, 0, 0, 0, 1, 0, 0, 0, 0]),
            b'D' | b'A' => Ok(()),
            b'Q' => return,
            b'L' => {
                let mut parts = frame[1..].split(|&b| b == 0);
                let name = String::from_utf8_lossy(parts.next().unwrap_or_default());
                let value = String::from_utf8_lossy(parts.next().unwrap_or_default());
                seen.lock()
                    .unwrap()
                    .push((name.into_owned(), value.into_owned()));
                send(&mut stream, b'c', &[])
            }
            b'E' => add
                .iter()
                .try_for_each(|(name, value)| {
                    let data = [name.as_bytes(), b"\0", value.as_bytes(), b"\0"].concat();
                    send(&mut stream, b'h', &data)
                })
                .and_then(|()| send(&mut stream, b'a', &[])),
            _ => send(&mut stream, b'c', &[]),
        };
        if reply.is_err() {
            return;
        }
    }
}
