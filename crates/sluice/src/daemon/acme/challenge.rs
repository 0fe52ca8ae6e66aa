//! The http-01 responder (`[acme] http_listen`): answers
//! `GET /.well-known/acme-challenge/<token>` with the key authorization of
//! an order in progress, and 404 to everything else.
//!
//! Trust: nobody. The listener faces the Internet (the CA connects to port
//! 80), so requests are parsed by hyper, not by hand; at most
//! `MAX_CONNECTIONS` are served at once (more are closed at accept), each
//! for at most `CONNECTION_SECS`, with hyper's smallest read buffer.
//! Invariant: only tokens of the order in progress are answered, and only
//! with the key authorization the CA asked for; nothing here changes
//! state.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

const PREFIX: &str = "/.well-known/acme-challenge/";
const MAX_CONNECTIONS: usize = 64;
const CONNECTION_SECS: u64 = 10;

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

    fn answer(&self, path: &str) -> Option<String> {
        let token = path.strip_prefix(PREFIX)?;
        self.lock().get(token).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Serves the challenges on `listener` until the task is aborted.
pub async fn serve(listener: TcpListener, challenges: Challenges) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors and the like: breathe, go on.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue; // dropped: closed unanswered
        };
        let challenges = challenges.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let reply = respond(&challenges, &req);
                async move { Ok::<_, Infallible>(reply) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .max_buf_size(8192)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(Duration::from_secs(CONNECTION_SECS), conn).await;
            drop(slot);
        });
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
