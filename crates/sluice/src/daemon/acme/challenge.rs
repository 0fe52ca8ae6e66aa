//! The http-01 responder (`[acme] http_listen`): answers
//! `GET /.well-known/acme-challenge/<token>` with the key authorization of
//! an order in progress, and 404 to everything else.
//!
//! Trust: nobody. The listener faces the Internet (the CA connects to port
//! 80), so requests are parsed by hyper, not by hand, with hyper's
//! smallest read buffer. Nobody can keep the CA out by holding
//! connections: while no order is in progress a connection is closed at
//! once; at most `PER_ADDRESS` are open from one address; at most
//! `MAX_CONNECTIONS` in all, a new one evicting the oldest; each lives at
//! most `CONNECTION_SECS` (a request is one small GET).
//! Invariant: only tokens of the order in progress are answered, and only
//! with the key authorization the CA asked for; nothing here changes
//! state.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::AbortHandle;

const PREFIX: &str = "/.well-known/acme-challenge/";
const MAX_CONNECTIONS: usize = 64;
const PER_ADDRESS: usize = 4;
const CONNECTION_SECS: u64 = 3;

/// Tokens of the order in progress and their key authorizations.
#[derive(Clone, Default)]
pub struct Challenges(Arc<Mutex<HashMap<String, String>>>);

impl Challenges {
    pub fn publish(&self, token: String, key_authorization: String) {
        self.lock().insert(token, key_authorization);
    }

    pub fn clear(&self) {
        self.lock().clear();
    }

    fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn answer(&self, path: &str) -> Option<String> {
        let token = path.strip_prefix(PREFIX)?;
        self.lock().get(token).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The connections being served: per address, and oldest first.
#[derive(Default)]
struct Open {
    by_addr: HashMap<IpAddr, usize>,
    order: VecDeque<(u64, AbortHandle)>,
    next: u64,
}

type Shared = Arc<Mutex<Open>>;

fn lock_open(open: &Shared) -> std::sync::MutexGuard<'_, Open> {
    open.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Open {
    /// Room for one more from `ip`: `None` past its address's cap; the
    /// oldest connection, to abort, when all slots are taken.
    fn admit(&mut self, ip: IpAddr) -> Option<(u64, Option<AbortHandle>)> {
        let mine = self.by_addr.entry(ip).or_insert(0);
        if *mine >= PER_ADDRESS {
            return None;
        }
        *mine += 1;
        let evicted = match self.order.len() >= MAX_CONNECTIONS {
            true => self.order.pop_front().map(|(_, h)| h),
            false => None,
        };
        self.next += 1;
        Some((self.next, evicted))
    }

    /// A connection ended (served, timed out or evicted).
    fn gone(&mut self, id: u64, ip: IpAddr) {
        self.order.retain(|(i, _)| *i != id);
        if let Some(n) = self.by_addr.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.by_addr.remove(&ip);
            }
        }
    }
}

/// Gives a connection's place back however its task ends (aborted too).
struct Place(Shared, u64, IpAddr);

impl Drop for Place {
    fn drop(&mut self) {
        lock_open(&self.0).gone(self.1, self.2);
    }
}

/// Serves the challenges on `listener` until the task is aborted.
pub async fn serve(listener: TcpListener, challenges: Challenges) {
    let open: Shared = Arc::default();
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            // Out of descriptors and the like: breathe, go on.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        // No order in progress: nothing to answer, nothing to hold.
        if challenges.is_empty() {
            continue;
        }
        let ip = peer.ip().to_canonical();
        let Some((id, evicted)) = lock_open(&open).admit(ip) else {
            continue; // this address has its share: closed unanswered
        };
        if let Some(oldest) = evicted {
            oldest.abort();
        }
        let challenges = challenges.clone();
        let place = Place(open.clone(), id, ip);
        let task = tokio::spawn(async move {
            let _place = place;
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let reply = respond(&challenges, &req);
                async move { Ok::<_, Infallible>(reply) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .max_buf_size(8192)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(Duration::from_secs(CONNECTION_SECS), conn).await;
        });
        let mut all = lock_open(&open);
        // (Already gone if it finished at once: then nothing to keep.)
        if all.by_addr.contains_key(&ip) && !task.is_finished() {
            all.order.push_back((id, task.abort_handle()));
        }
    }
}

fn respond<B>(challenges: &Challenges, req: &Request<B>) -> Response<Full<Bytes>> {
    let found = match req.method() == hyper::Method::GET {
        true => challenges.answer(req.uri().path()),
        false => None,
    };
    let (status, body) = match found {
        Some(key_authorization) => (StatusCode::OK, key_authorization),
        None => (StatusCode::NOT_FOUND, "not found\n".to_string()),
    };
    let mut reply = Response::new(Full::new(Bytes::from(body)));
    *reply.status_mut() = status;
    reply.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    /// M3 of the 2026-11-27 review: one address gets PER_ADDRESS places;
    /// with every place taken, a newcomer evicts the oldest.
    #[tokio::test]
    async fn one_address_holds_a_few_places_and_the_oldest_makes_room() {
        let mut open = Open::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..PER_ADDRESS {
            let (id, evicted) = open.admit(a).unwrap();
            assert!(evicted.is_none());
            let h = tokio::spawn(std::future::pending::<()>());
            open.order.push_back((id, h.abort_handle()));
        }
        assert!(open.admit(a).is_none(), "a fifth from one address");
        for i in 0..(MAX_CONNECTIONS - PER_ADDRESS) as u32 {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(0xC633_6400 + i));
            let (id, _) = open.admit(ip).unwrap();
            let h = tokio::spawn(std::future::pending::<()>());
            open.order.push_back((id, h.abort_handle()));
        }
        let ca: IpAddr = "203.0.113.7".parse().unwrap();
        let (_, evicted) = open.admit(ca).unwrap();
        assert!(evicted.is_some(), "the CA's connection found no room");
        open.gone(1, a);
        assert_eq!(open.by_addr[&a], PER_ADDRESS - 1);
    }

    #[test]
    fn only_published_tokens_under_the_prefix_are_answered() {
        let c = Challenges::default();
        c.publish("tok".into(), "tok.thumb".into());
        let get = |path: &str| {
            let req = Request::get(path).body(()).unwrap();
            respond(&c, &req).status()
        };
        assert_eq!(get("/.well-known/acme-challenge/tok"), StatusCode::OK);
        assert_eq!(
            get("/.well-known/acme-challenge/other"),
            StatusCode::NOT_FOUND
        );
        assert_eq!(get("/tok"), StatusCode::NOT_FOUND);
        assert_eq!(get("/.well-known/acme-challenge/"), StatusCode::NOT_FOUND);
        let post = Request::post("/.well-known/acme-challenge/tok")
            .body(())
            .unwrap();
        assert_eq!(respond(&c, &post).status(), StatusCode::NOT_FOUND);
        c.clear();
        assert_eq!(
            get("/.well-known/acme-challenge/tok"),
            StatusCode::NOT_FOUND
        );
    }
}
