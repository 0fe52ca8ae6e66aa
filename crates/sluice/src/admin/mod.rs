//! The admin socket: `<data_dir>/admin.sock`, mode 0600 (only the
//! daemon's user and root may administer the queue), and never reachable
//! under a wider one (`socket.rs`: bound in a private directory, then
//! renamed into place). One request per
//! connection, one JSON line each way (`protocol.rs`); `sluice queue …`
//! and `mailq` are its clients.
//!
//! It turns requests into queue operations (`queue/admin.rs`) and reads
//! envelopes and headers of waiting mail from the spool itself, off the
//! runtime's workers. Trust: whoever can open the admin socket is an
//! administrator; on the submission socket, anyone; requests are parsed
//! strictly and bounded (64 KiB) on both.

pub mod control;
mod door;
pub mod gauges;
mod history;
pub mod http;
mod limits;
pub mod protocol;
mod recorder;
pub mod socket;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;

use sluice_spool::Spool;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::task::JoinHandle;

use crate::accept::AcceptErrors;
use crate::log::Event;
use crate::log::Logger;
use crate::queue::admin::{AdminReply, AdminRequest, Op, Place, Snap, Tally};
use crate::queue::QueueHandle;
use crate::receive::local::{self as submit, Submitter};
use arc_swap::ArcSwap;
use protocol::{Entry, Filter, RcptEntry, Request, Response};

/// Longest request line, past a submitted message's size.
const MAX_REQUEST: u64 = 64 << 10;

/// Where the socket of a daemon with `data_dir` is.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join("admin.sock")
}

/// Where the submission socket is: any local user may connect (sendmail,
/// mailq), in a directory others may enter while `data_dir` lets them
/// through but not list it (0711).
pub fn submit_socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join("public").join("submit.sock")
}

/// Which socket a session came in on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Door {
    /// `admin.sock`, 0660: the queue's administration.
    Admin,
    /// `public/submit.sock`, 0666: submissions and the queue's listing.
    Public,
}

#[derive(Clone)]
struct Admin {
    queue: QueueHandle,
    spool: Spool,
    logger: Logger,
    log_file: Option<PathBuf>,
    /// Replaced by a reload (tables, hostname, size limit).
    submitter: Arc<ArcSwap<Submitter>>,
    /// Requests open on the public socket, per uid (`door.rs`).
    public: door::Gate,
    /// To the process's main loop (`control.rs`).
    control: control::ControlSender,
}

/// Listens on the admin socket until the task is aborted.
pub fn spawn(
    data_dir: &Path,
    queue: &QueueHandle,
    submitter: Arc<ArcSwap<Submitter>>,
    log_file: Option<PathBuf>,
    control: control::ControlSender,
) -> Result<JoinHandle<()>, socket::BindError> {
    let queue = queue.clone();
    let (spool, logger) = {
        let s = submitter.load();
        (s.intake.spool.clone(), s.logger.clone())
    };
    let admin_listener = socket::bind(&socket_path(data_dir), 0o660)?;
    public_dir(data_dir)?;
    let public_listener = socket::bind(&submit_socket_path(data_dir), 0o666)?;
    let admin = Admin {
        queue,
        spool,
        logger,
        log_file,
        submitter,
        public: door::Gate::default(),
        control,
    };
    let public_loop = tokio::spawn(admin.clone().serve(public_listener, Door::Public, data_dir));
    let admin_loop = admin.serve(admin_listener, Door::Admin, data_dir);
    Ok(tokio::spawn(async move {
        let _ends_with_it = tokio_util::task::AbortOnDropHandle::new(public_loop);
        admin_loop.await
    }))
}

/// `data_dir` made 0711 (others may pass, not list) and `public/` 0755.
fn public_dir(data_dir: &Path) -> Result<(), socket::BindError> {
    use std::os::unix::fs::PermissionsExt;
    let dir = data_dir.join("public");
    let err = |err| socket::BindError::Private {
        path: dir.clone(),
        err,
    };
    std::fs::create_dir_all(&dir).map_err(err)?;
    std::fs::set_permissions(data_dir, std::fs::Permissions::from_mode(0o711)).map_err(err)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).map_err(err)
}

impl Admin {
    /// Accepts on one socket until aborted.
    fn serve(
        self,
        listener: tokio::net::UnixListener,
        door: Door,
        data_dir: &Path,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let shown = match door {
            Door::Admin => socket_path(data_dir),
            Door::Public => submit_socket_path(data_dir),
        };
        let mut errors =
            AcceptErrors::new(self.logger.clone(), "admin", shown.display().to_string());
        async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        errors.accepted();
                        let admin = self.clone();
                        tokio::spawn(async move { admin.session(stream, door).await });
                    }
                    // Out of descriptors: back off, never stop answering.
                    Err(err) => errors.failed(err).await,
                }
            }
        }
    }

    async fn session(&self, stream: UnixStream, door: Door) {
        let uid = stream.peer_cred().ok().map(|c| c.uid());
        let (read, mut write) = stream.into_split();
        // Any local account may open the public socket: a bounded number
        // of requests per uid and in all, each whole within a deadline.
        let slot = match door {
            Door::Public => match self.public.enter(uid) {
                Ok(slot) => Some(slot),
                Err(busy) => {
                    let mut r = Response::error(busy);
                    r.exit_code = Some(crate::intake::refusal::EX_TEMPFAIL);
                    let mut out = serde_json::to_vec(&r).unwrap_or_default();
                    out.push(b'\n');
                    let _ = write.write_all(&out).await;
                    return;
                }
            },
            Door::Admin => None,
        };
        let mut line = String::new();
        let limit = MAX_REQUEST + (self.submitter.load().size_limit as u64).saturating_mul(4) / 3;
        let mut reader = BufReader::new(read.take(limit));
        let read = match door {
            Door::Public => {
                tokio::time::timeout(door::read_deadline(), reader.read_line(&mut line))
                    .await
                    .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
            }
            Door::Admin => reader.read_line(&mut line).await,
        };
        drop(reader);
        let response = match read {
            Ok(_) => match serde_json::from_str::<Request>(&line) {
                Ok(Request::Submit {
                    sender,
                    recipients,
                    message_b64,
                    full_name,
                }) => match base64::engine::general_purpose::STANDARD.decode(message_b64) {
                    Ok(message) => {
                        let submitter = self.submitter.load_full();
                        let who = submit::Submitter::local(uid, full_name);
                        match submitter.submit(who, &sender, &recipients, message).await {
                            Ok(done) => {
                                let mut r = Response::count(usize::from(done.queued));
                                r.queue_id = Some(done.queue_id);
                                r
                            }
                            Err(refused) => {
                                let mut r = Response::error(refused.why);
                                r.exit_code = Some(refused.exit_code);
                                r
                            }
                        }
                    }
                    Err(e) => Response::error(AdminError::Encoding(e)),
                },
                Ok(Request::List { mut filter }) => {
                    if door == Door::Public {
                        match self.public_listing(uid) {
                            Ok(None) => {}
                            Ok(Some(own)) => filter.sender = Some(own),
                            Err(e) => return self.answer(write, Response::error(e)).await,
                        }
                    }
                    self.handle(Request::List { filter }).await
                }
                Ok(_) if door == Door::Public => Response::error(AdminError::NotPublic),
                Ok(request) => {
                    self.logger.emit(&Event::AdminRequest {
                        line: line.trim().into(),
                    });
                    self.handle(request).await
                }
                Err(e) => Response::error(AdminError::Request(e)),
            },
            Err(e) => Response::error(AdminError::Read(e)),
        };
        drop(slot);
        self.answer(write, response).await
    }

    async fn answer(&self, mut write: tokio::net::unix::OwnedWriteHalf, response: Response) {
        let mut out = serde_json::to_vec(&response).unwrap_or_default();
        out.push(b'\n');
        let _ = write.write_all(&out).await;
    }

    /// What a listing on the public socket may show `uid`: everything
    /// (`None`: root, the daemon's account, or `queue.mailq_anyone`), or
    /// only the mail whose sender is theirs.
    fn public_listing(&self, uid: Option<u32>) -> Result<Option<String>, AdminError> {
        let submitter = self.submitter.load();
        let uid = uid.ok_or(AdminError::NoCredentials)?;
        if submitter.intake.config.queue.mailq_anyone || Submitter::trusted_uid(uid) {
            return Ok(None);
        }
        submitter
            .own_address(uid)
            .map(Some)
            .ok_or(AdminError::NoCredentials)
    }

    async fn handle(&self, request: Request) -> Response {
        match request {
            Request::List { filter } => match self.entries(&filter, None).await {
                Ok(entries) => Response::list(entries),
                Err(e) => Response::error(e),
            },
            Request::Show { id } => self.show(&id, false).await,
            Request::ShowMessage { id } => self.show(&id, true).await,
            Request::Flush { id, domain } => {
                let ids = match (id, domain) {
                    (Some(id), _) => parse_id(&id).map(|n| Some(vec![n])),
                    (None, Some(domain)) => {
                        let filter = Filter {
                            domain: Some(domain),
                            state: Some("deferred".into()),
                            ..Default::default()
                        };
                        self.ids(&filter).await.map(Some)
                    }
                    (None, None) => Ok(None),
                };
                match ids {
                    Ok(ids) => self.count(AdminRequest::Flush(ids)).await,
                    Err(e) => Response::error(e),
                }
            }
            Request::Delete {
                ids,
                all_deferred,
                older_than_secs,
            } => {
                if !ids.is_empty() {
                    return self.apply(Op::Delete, &ids, false).await;
                }
                if !all_deferred && older_than_secs.is_none() {
                    return Response::error(AdminError::NothingToDelete);
                }
                let filter = Filter {
                    state: all_deferred.then(|| "deferred".to_string()),
                    older_than_secs,
                    ..Default::default()
                };
                match self.ids(&filter).await {
                    Ok(ids) => {
                        self.applied(AdminRequest::Apply(Op::Delete, Some(ids)))
                            .await
                    }
                    Err(e) => Response::error(e),
                }
            }
            Request::Hold { id } => self.apply(Op::Hold, &[id], false).await,
            Request::Release { id } => self.apply(Op::Release, &[id], false).await,
            Request::Bounce { id } => self.apply(Op::Bounce, &[id], false).await,
            Request::ReleaseLimited { kind, who } => self.release_limited(kind, &who).await,
            Request::Apply { op, ids, all } => self.apply(op, &ids, all).await,
            Request::Control { action } => match self.control.ask(action).await {
                Some(reply) => Response {
                    ok: true,
                    control: Some(reply),
                    ..Default::default()
                },
                None => Response::error(AdminError::NoMainLoop),
            },
            Request::Submit { .. } => Response::error(AdminError::SubmitHere),
        }
    }

    /// postsuper's `op` on the messages named, or all; every ID named
    /// must be in the queue (those that are are acted on all the same).
    async fn apply(&self, op: Op, ids: &[String], all: bool) -> Response {
        let targets = match (all, ids.is_empty()) {
            (true, true) => None,
            (false, false) => match ids.iter().map(|i| parse_id(i)).collect() {
                Ok(ids) => Some(ids),
                Err(e) => return Response::error(e),
            },
            (true, false) => return Response::error(AdminError::IdsAndAll),
            (false, true) => return Response::error(AdminError::NothingNamed),
        };
        self.applied(AdminRequest::Apply(op, targets)).await
    }

    /// The queue's tally as an answer: an error if IDs were not found.
    async fn applied(&self, request: AdminRequest) -> Response {
        let Some(AdminReply::Applied(tally)) = self.queue.admin(request).await else {
            return Response::error(AdminError::NotRunning);
        };
        let Tally {
            changed,
            unchanged,
            missing,
        } = tally;
        if missing > 0 {
            let wanted = changed + unchanged + missing;
            return Response::error(AdminError::NotFound {
                changed,
                missing,
                wanted,
            });
        }
        let mut response = Response::count(changed);
        response.unchanged = unchanged;
        response
    }

    async fn count(&self, request: AdminRequest) -> Response {
        match self.queue.admin(request).await {
            Some(AdminReply::Count(n)) => Response::count(n),
            _ => Response::error(AdminError::NotRunning),
        }
    }

    async fn ids(&self, filter: &Filter) -> Result<Vec<u64>, AdminError> {
        let entries = self.entries(filter, None).await?;
        entries.iter().map(|e| parse_id(&e.id)).collect()
    }

    /// The queue's messages matching `filter` (and only message `only`,
    /// if given), envelopes read as needed.
    async fn entries(&self, filter: &Filter, only: Option<u64>) -> Result<Vec<Entry>, AdminError> {
        let Some(AdminReply::Snapshot(snaps)) = self.queue.admin(AdminRequest::Snapshot).await
        else {
            return Err(AdminError::NotRunning);
        };
        let spool = self.spool.clone();
        let filter = filter.clone();
        tokio::task::spawn_blocking(move || {
            snaps
                .into_iter()
                .filter(|s| only.is_none_or(|id| s.id == id))
                .filter_map(|s| entry(&spool, s))
                .filter(|e| filter.matches(e))
                .collect()
        })
        .await
        .map_err(AdminError::Panicked)
    }

    /// One message: its entry, its headers (or, `whole`, the message),
    /// and the log lines naming it.
    async fn show(&self, id: &str, whole: bool) -> Response {
        let (n, wanted) = match parse_id(id) {
            Ok(n) => (n, crate::log::qid(n)),
            Err(e) => return Response::error(e),
        };
        let entries = match self.entries(&Filter::default(), Some(n)).await {
            Ok(e) => e,
            Err(e) => return Response::error(e),
        };
        let Some(found) = entries.into_iter().find(|e| e.id == wanted) else {
            return Response::error(AdminError::NoSuchMessage(wanted));
        };
        let (spool, log_file, qid) = (self.spool.clone(), self.log_file.clone(), wanted.clone());
        let Some(body_ref) = found.body_ref else {
            return Response::error(AdminError::NoSuchMessage(wanted));
        };
        let details = tokio::task::spawn_blocking(move || {
            let body = spool.read_body(body_ref).unwrap_or_default();
            let headers = String::from_utf8_lossy(crate::message::body::headers(&body));
            let whole = whole.then(|| base64::engine::general_purpose::STANDARD.encode(&body));
            let history = history::history(log_file.as_deref(), &qid);
            (headers.into_owned(), whole, history)
        })
        .await
        .unwrap_or_default();
        let mut response = Response::list(vec![found]);
        response.headers = Some(details.0);
        response.message_b64 = details.1;
        response.history = details.2;
        response
    }
}

/// Why an administration request failed (its text is the reply's).
#[derive(Debug, thiserror::Error)]
enum AdminError {
    #[error("{0:?} is not a queue ID")]
    NotAQueueId(String),
    #[error("the queue is not running")]
    NotRunning,
    #[error(
        "{missing} of {wanted} queue IDs not found (delivered, or never queued); \
         {changed} message(s) changed"
    )]
    NotFound {
        changed: usize,
        missing: usize,
        wanted: usize,
    },
    #[error("name queue IDs or ALL, not both")]
    IdsAndAll,
    #[error("name queue IDs, ALL, or - (IDs on standard input)")]
    NothingNamed,
    #[error("{0}: no such message in the queue")]
    NoSuchMessage(String),
    #[error("delete: name IDs, --all-deferred or --older-than")]
    NothingToDelete,
    #[error(
        "only submissions and the queue's listing on the submission socket: \
         administering the queue needs root or the daemon's group"
    )]
    NotPublic,
    #[error("who is asking is unknown (no peer credentials or account)")]
    NoCredentials,
    #[error("the daemon's main loop does not answer (a daemon run as a library)")]
    NoMainLoop,
    #[error("submit is handled above")]
    SubmitHere,
    #[error("bad message encoding: {0}")]
    Encoding(base64::DecodeError),
    #[error("bad request: {0}")]
    Request(serde_json::Error),
    #[error("cannot read the request: {0}")]
    Read(std::io::Error),
    #[error("reading the queue failed: {0}")]
    Panicked(tokio::task::JoinError),
}

/// A queue ID in hex; mailq's status mark after it (`*`, `!`) is allowed.
fn parse_id(id: &str) -> Result<u64, AdminError> {
    let hex = id.trim().trim_end_matches(['*', '!']);
    u64::from_str_radix(hex, 16).map_err(|_| AdminError::NotAQueueId(id.to_string()))
}

/// A snapshot entry with its envelope (read from the spool for waiting mail).
fn entry(spool: &Spool, s: Snap) -> Option<Entry> {
    let envelope = match s.envelope {
        Some(e) => (*e).clone(),
        None => spool.read_envelope(s.body_ref).ok()?,
    };
    let recipients = envelope
        .recipients
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let done = s.done.get(i).copied().unwrap_or(false);
            let reason = s.reasons.get(i).cloned().flatten();
            let state = match (done, s.place, &reason) {
                (true, _, _) => "done",
                (false, Place::Hold, _) => "hold",
                (false, Place::Deferred, _) | (false, Place::Active, Some(_)) => "deferred",
                (false, Place::Active, None) => "active",
            };
            let reason = reason.or_else(|| (!done).then(|| s.last_reason.clone()).flatten());
            RcptEntry {
                address: r.clone(),
                state: state.into(),
                reason,
            }
        })
        .collect();
    Some(Entry {
        id: crate::log::qid(s.id),
        size: s.body_ref.len,
        arrival_ms: envelope.arrival,
        sender: envelope.sender,
        login: (!envelope.login.is_empty()).then_some(envelope.login),
        limited: envelope.flags & crate::message::flags::LIMITED != 0,
        state: match s.place {
            Place::Active => "active",
            Place::Deferred => "deferred",
            Place::Hold => "hold",
        }
        .into(),
        attempts: s.attempts,
        last_attempt_ms: s.last_attempt.map(|t| t * 1000),
        next_retry_ms: s.next_retry.map(|t| t * 1000),
        recipients,
        body_ref: Some(s.body_ref),
    })
}
