//! Scripted table servers: a socketmap (netstring) server and a tcp_table
//! (line) server, each answering a fixed map, including the hostile
//! replies (too long, malformed, a hang, a close mid-reply), and
//! recording every request's bytes as received and every connection
//! accepted. Written from the protocol descriptions, not from Sluice's
//! client code, so the two are checked against each other.

use std::sync::{Arc, Mutex};

use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};

/// The socketmap name the scripted server serves.
pub const MAP: &str = "mymap";

/// What a server does for one request.
enum Act {
    Send(Vec<u8>),
    /// Sends, then closes the connection.
    SendClose(Vec<u8>),
    /// Never replies (reads the next request, if any).
    Hang,
}

fn netstring(payload: &[u8]) -> Vec<u8> {
    let mut v = format!("{}:", payload.len()).into_bytes();
    v.extend_from_slice(payload);
    v.push(b',');
    v
}

/// The socketmap server's map.
fn socketmap_act(name: &[u8], key: &[u8]) -> Act {
    if name != MAP.as_bytes() {
        return Act::Send(netstring(b"PERM no such map"));
    }
    let ok = |v: &str| Act::Send(netstring(format!("OK {v}").as_bytes()));
    match key {
        b"found@example.com" => ok("value one"),
        b"spaced key" => ok("a value  with spaces"),
        b"comma,colon:key" => ok("c,v:1,"),
        b"user@example.com" => ok("lower"),
        b"line\nbreak" => ok("nl"),
        b"percent%41" => ok("p%41"),
        k if k == "josé@example.com".as_bytes() => ok("ünïcode"),
        b"empty" => Act::Send(netstring(b"OK ")),
        b"temp" => Act::Send(netstring(b"TEMP busy")),
        b"timeout" => Act::Send(netstring(b"TIMEOUT slow")),
        b"perm" => Act::Send(netstring(b"PERM broken")),
        b"weird" => Act::Send(netstring(b"WHAT x")),
        b"lowercase" => Act::Send(netstring(b"ok x")),
        // The largest reply Postfix takes, and one byte more.
        b"max" => ok(&"v".repeat(100_000 - 3)),
        b"over" => ok(&"v".repeat(100_000 - 2)),
        b"giant" => {
            let mut v = b"2000000000:OK ".to_vec();
            v.resize(v.len() + 65_536, b'x');
            Act::Send(v)
        }
        b"badlen" => Act::Send(b"abc:OK x,".to_vec()),
        b"noterm" => Act::Send(b"4:OK x;".to_vec()),
        b"closemid" => Act::SendClose(b"10:OK ab".to_vec()),
        b"dropme" => Act::SendClose(netstring(b"OK dropped")),
        b"hang" => Act::Hang,
        _ => Act::Send(netstring(b"NOTFOUND ")),
    }
}

/// tcp_table's %XX decoding (the test's own).
fn unhex(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' && i + 2 < s.len() {
            let h = std::str::from_utf8(&s[i + 1..i + 3]).unwrap();
            out.push(u8::from_str_radix(h, 16).unwrap());
            i += 3;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

/// The tcp server's map (keys decoded).
fn tcp_act(key: &[u8]) -> Act {
    let line = |l: &str| Act::Send(format!("{l}\n").into_bytes());
    match key {
        b"found" => line("200 a%20value%25"),
        b"a b%c\nd" => line("200 found%20it"),
        k if k == "josé".as_bytes() => line("200 %C3%BCn%c3%afcode"),
        b"twofifty" => line("250 other%2Dcode"),
        b"tab" => line("200\tx"),
        b"missing" => line("500 no such key"),
        b"temp" => line("400 busy"),
        b"weird" => line("300 what"),
        b"badhex" => line("200 %zz"),
        b"nospace" => line("200"),
        // The longest line Postfix takes (4096 with its newline), and one
        // byte more.
        b"max" => line(&format!("200 {}", "x".repeat(4096 - 5))),
        b"over" => line(&format!("200 {}", "x".repeat(4096 - 4))),
        b"endless" => Act::Send(vec![b'x'; 65_536]),
        b"closemid" => Act::SendClose(b"200 half".to_vec()),
        b"hang" => Act::Hang,
        _ => line("500 not%20found"),
    }
}

#[derive(Debug, Default, Clone)]
pub struct Recorded {
    /// Each request as received, framing included.
    pub requests: Vec<Vec<u8>>,
    /// Connections accepted.
    pub accepted: usize,
    /// Connections open now (as the server has seen them end) ...
    pub open: usize,
    /// ... and the most open at once since the last `take`.
    pub peak_open: usize,
}

impl Recorded {
    fn opened(&mut self) {
        self.accepted += 1;
        self.open += 1;
        self.peak_open = self.peak_open.max(self.open);
    }
}

/// Serves one connection, counting it open until it ends.
async fn counted<S: AsyncRead + AsyncWrite + Unpin>(
    s: S,
    protocol: Protocol,
    log: Arc<Mutex<Recorded>>,
) {
    serve(s, protocol, log.clone()).await;
    log.lock().unwrap().open -= 1;
}

#[derive(Clone, Copy)]
enum Protocol {
    Socketmap,
    Tcp,
}

pub struct Fake {
    /// The server's endpoint: `inet:127.0.0.1:PORT` or `unix:/path`.
    pub endpoint: String,
    log: Arc<Mutex<Recorded>>,
    task: tokio::task::JoinHandle<()>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Fake {
    pub async fn socketmap() -> Fake {
        Fake::inet(Protocol::Socketmap).await
    }

    pub async fn tcp() -> Fake {
        Fake::inet(Protocol::Tcp).await
    }

    /// The `host:port` of a tcp server.
    pub fn host_port(&self) -> &str {
        self.endpoint.strip_prefix("inet:").unwrap()
    }

    async fn inet(protocol: Protocol) -> Fake {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("inet:{}", listener.local_addr().unwrap());
        let log = Arc::new(Mutex::new(Recorded::default()));
        let l = log.clone();
        let task = tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                l.lock().unwrap().opened();
                tokio::spawn(counted(s, protocol, l.clone()));
            }
        });
        Fake {
            endpoint,
            log,
            task,
            _dir: None,
        }
    }

    pub async fn socketmap_unix() -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("map.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let log = Arc::new(Mutex::new(Recorded::default()));
        let l = log.clone();
        let task = tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                l.lock().unwrap().opened();
                tokio::spawn(counted(s, Protocol::Socketmap, l.clone()));
            }
        });
        Fake {
            endpoint: format!("unix:{}", path.display()),
            log,
            task,
            _dir: Some(dir),
        }
    }

    /// What was received since the last call.
    pub fn take(&self) -> Recorded {
        let mut log = self.log.lock().unwrap();
        let open = log.open;
        let taken = std::mem::take(&mut *log);
        log.open = open;
        log.peak_open = open;
        taken
    }

    /// The requests received since the last call, as text for readable
    /// failures (one that is not UTF-8 as its bytes: nothing is lost).
    pub fn requests(&self) -> Vec<String> {
        let taken = self.take().requests;
        taken
            .into_iter()
            .map(|r| String::from_utf8(r).unwrap_or_else(|e| format!("{:?}", e.into_bytes())))
            .collect()
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    s: S,
    protocol: Protocol,
    log: Arc<Mutex<Recorded>>,
) {
    let mut s = BufReader::new(s);
    loop {
        let request = match protocol {
            Protocol::Socketmap => read_netstring(&mut s).await,
            Protocol::Tcp => read_line(&mut s).await,
        };
        let Some((raw, act)) = request else { return };
        log.lock().unwrap().requests.push(raw);
        match act {
            Act::Send(b) => {
                if s.write_all(&b).await.is_err() {
                    return;
                }
            }
            Act::SendClose(b) => {
                let _ = s.write_all(&b).await;
                return;
            }
            Act::Hang => {}
        }
    }
}

/// One request's raw bytes and what to do, or None at the end.
async fn read_netstring<R: AsyncBufRead + Unpin>(r: &mut R) -> Option<(Vec<u8>, Act)> {
    let mut raw = Vec::new();
    r.read_until(b':', &mut raw).await.ok()?;
    let len: usize = std::str::from_utf8(raw.strip_suffix(b":")?)
        .ok()?
        .parse()
        .ok()?;
    let start = raw.len();
    raw.resize(start + len + 1, 0);
    r.read_exact(&mut raw[start..]).await.ok()?;
    let payload = &raw[start..start + len];
    let space = payload.iter().position(|&b| b == b' ')?;
    let act = socketmap_act(&payload[..space], &payload[space + 1..]);
    Some((raw, act))
}

async fn read_line<R: AsyncBufRead + Unpin>(r: &mut R) -> Option<(Vec<u8>, Act)> {
    let mut raw = Vec::new();
    r.read_until(b'\n', &mut raw).await.ok()?;
    let key = raw.strip_prefix(b"get ")?.strip_suffix(b"\n")?;
    let act = tcp_act(&unhex(key));
    Some((raw, act))
}
