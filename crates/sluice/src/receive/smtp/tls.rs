//! The server side of TLS (rustls): the certificate, reloadable, and the
//! stream a session talks over before and after STARTTLS.
//!
//! With no `[tls] cert_file`, a self-signed certificate for `hostname` is
//! generated on first start under `<data_dir>/tls/` and kept (Postfix's
//! "snakeoil"), so STARTTLS works out of the box. With `[acme]`, the
//! certificate the CA issued (`<data_dir>/acme/`) once there is one, the
//! self-signed one until then; a new one is installed without a restart.
//! SIGHUP re-reads the files; sessions already encrypted keep their keys.
//!
//! Trust: the certificate files are the administrator's; a file that does
//! not load, or a key that does not match its certificate, leaves the
//! previous certificate in place (at start and in `check-config`: an
//! error).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use rustls::pki_types::PrivateKeyDer;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::ccert::{Asking, PeerCert};
use crate::config::Config;
use crate::pki::{certified_key, TlsError};
use crate::smtp::io::{summary, MaybeTls};

/// The certificate in use, swapped whole on reload.
#[derive(Debug)]
struct Resolver(ArcSwap<CertifiedKey>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

/// TLS for every listener: one reloadable certificate, served by an
/// acceptor that asks for no client certificate and one that asks.
pub struct ServerTls {
    acceptor: TlsAcceptor,
    /// For listeners with smtpd_tls_ask_ccert (`ccert.rs`).
    asking: TlsAcceptor,
    ccert: Asking,
    resolver: Arc<Resolver>,
    /// The certificate and key files in use (changed by [`ServerTls::install`]).
    files: Mutex<(PathBuf, PathBuf)>,
}

/// Where `[acme]` keeps the certificate the CA issued with its key: one
/// file (chain, then key), replaced whole, so a crash can never leave a
/// new key beside an old certificate.
pub fn acme_file(data_dir: &Path) -> PathBuf {
    data_dir.join("acme").join("cert.pem")
}

impl ServerTls {
    /// Loads (or first generates) the certificate; None when TLS is off.
    pub fn load(config: &Config) -> Result<Option<Arc<ServerTls>>, TlsError> {
        if !config.tls.enabled {
            return Ok(None);
        }
        let issued = acme_file(&config.data_dir);
        let issued = config
            .acme
            .as_ref()
            .and_then(|_| Some((certified_key(&issued, &issued).ok()?, issued)));
        let (pair, cert, key) = match (&config.tls.cert_file, &config.tls.key_file, issued) {
            (Some(c), Some(k), _) => {
                let pair = certified_key(c, k).map_err(|e| e.of("tls"))?;
                (pair, c.clone(), k.clone())
            }
            // One the CA issued; one that does not load is ordered again.
            (None, None, Some((pair, file))) => (pair, file.clone(), file),
            (None, None, None) => {
                let (c, k) = snakeoil(&config.data_dir.join("tls"), &config.hostname)?;
                (certified_key(&c, &k).map_err(|e| e.of("tls"))?, c, k)
            }
            _ => return Err(TlsError::HalfPair.of("tls")),
        };
        let resolver = Arc::new(Resolver(ArcSwap::from_pointee(pair)));
        let t = &config.tls;
        let ccert = Asking::new(
            t.smtpd_tls_ca_file.as_deref(),
            t.smtpd_tls_fingerprint_digest,
        )?;
        Ok(Some(Arc::new(ServerTls {
            acceptor: acceptor(resolver.clone())?,
            asking: asking_acceptor(resolver.clone(), ccert.verifier.clone())?,
            ccert,
            resolver,
            files: Mutex::new((cert, key)),
        })))
    }

    /// The acceptor of a listener that asks for a client certificate
    /// (`ask_ccert`) or not.
    pub fn acceptor(&self, ask_ccert: bool) -> &TlsAcceptor {
        match ask_ccert {
            true => &self.asking,
            false => &self.acceptor,
        }
    }

    /// The client's certificate, as the restrictions see it (None: none
    /// was asked for, or sent).
    pub fn peer_cert<S>(&self, stream: &TlsStream<S>) -> Option<PeerCert> {
        self.ccert.peer(stream.get_ref().1.peer_certificates())
    }

    /// Re-reads the certificate files; on error the old one stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let (cert, key) = self.files();
        self.install(cert, key)
    }

    /// Checks that these files load as a pair (as [`ServerTls::install`]
    /// would), without serving them.
    pub fn check(cert: &Path, key: &Path) -> Result<(), TlsError> {
        certified_key(cert, key)
            .map(|_| ())
            .map_err(|e| e.of("tls"))
    }

    /// Serves the certificate in these files from now on (new sessions);
    /// on error the old one stays.
    pub fn install(&self, cert: PathBuf, key: PathBuf) -> Result<(), TlsError> {
        let pair = certified_key(&cert, &key).map_err(|e| e.of("tls"))?;
        self.resolver.0.store(Arc::new(pair));
        *self.files.lock().unwrap_or_else(PoisonError::into_inner) = (cert, key);
        Ok(())
    }

    pub fn cert_path(&self) -> PathBuf {
        self.files().0
    }

    fn files(&self) -> (PathBuf, PathBuf) {
        self.files
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// An acceptor with a fresh self-signed certificate held in memory only
/// (the `sluice-bench sink --starttls` test peer).
pub fn ephemeral_acceptor(hostname: &str) -> Result<TlsAcceptor, TlsError> {
    let (cert, signing_key) = self_signed(hostname)?;
    let der = PrivateKeyDer::from(rustls::pki_types::PrivatePkcs8KeyDer::from(
        signing_key.serialize_der(),
    ));
    let signer = rustls::crypto::ring::sign::any_supported_type(&der)?;
    let key = CertifiedKey::new(vec![cert.der().clone()], signer);
    acceptor(Arc::new(Resolver(ArcSwap::from_pointee(key))))
}

/// An acceptor serving whatever certificate `resolver` holds.
fn acceptor(resolver: Arc<Resolver>) -> Result<TlsAcceptor, TlsError> {
    let server = rustls::ServerConfig::builder_with_provider(crate::pki::provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    Ok(TlsAcceptor::from(Arc::new(server)))
}

/// An acceptor asking for a client certificate, any (`ccert.rs`).
fn asking_acceptor(
    resolver: Arc<Resolver>,
    verifier: Arc<super::ccert::AnyClientCert>,
) -> Result<TlsAcceptor, TlsError> {
    let server = rustls::ServerConfig::builder_with_provider(crate::pki::provider())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(resolver);
    Ok(TlsAcceptor::from(Arc::new(server)))
}

/// A self-signed certificate for `hostname` (its DNS name and common
/// name), valid from a day ago for ten years, as `make-ssl-cert` makes
/// Debian's snakeoil (rcgen's defaults say "rcgen self signed cert" and
/// 1975 to 4096).
pub fn self_signed(hostname: &str) -> Result<(rcgen::Certificate, rcgen::KeyPair), rcgen::Error> {
    const DAY: std::time::Duration = std::time::Duration::from_secs(86_400);
    let mut params = rcgen::CertificateParams::new(vec![hostname.to_string()])?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, hostname);
    let now = std::time::SystemTime::now();
    params.not_before = (now - DAY).into();
    params.not_after = (now + 3650 * DAY).into();
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((cert, key))
}

/// The self-signed certificate under `dir`, generated if missing.
fn snakeoil(dir: &Path, hostname: &str) -> Result<(PathBuf, PathBuf), TlsError> {
    let (cert, key) = (dir.join("snakeoil-cert.pem"), dir.join("snakeoil-key.pem"));
    if cert.exists() && key.exists() {
        return Ok((cert, key));
    }
    let (made, signing_key) = self_signed(hostname).map_err(|e| TlsError::from(e).of("tls"))?;
    std::fs::create_dir_all(dir)
        .and_then(|_| write_private(&key, signing_key.serialize_pem().as_bytes()))
        .and_then(|_| std::fs::write(&cert, made.pem()))
        .map_err(|err| {
            let path = cert.clone();
            TlsError::Generate { path, err }.of("tls")
        })?;
    Ok((cert, key))
}

fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// What a session talks over: plain until STARTTLS, then TLS.
pub type Io<S> = MaybeTls<S, TlsStream<S>>;

impl<S: AsyncRead + AsyncWrite + Unpin> Io<S> {
    /// "TLSv1.3 with cipher TLS13_AES_256_GCM_SHA384", once encrypted.
    pub fn tls_summary(&self) -> Option<String> {
        let MaybeTls::Tls(t) = self else { return None };
        summary(t.get_ref().1)
    }

    /// The TLS stream, once encrypted.
    pub fn tls_stream(&self) -> Option<&TlsStream<S>> {
        match self {
            MaybeTls::Tls(t) => Some(t.as_ref()),
            _ => None,
        }
    }

    /// Takes the plain stream and gives it back encrypted.
    pub async fn start_tls(&mut self, acceptor: &TlsAcceptor) -> io::Result<()> {
        let plain = self.take_plain()?;
        let tls = acceptor.accept(plain).await?;
        *self = MaybeTls::Tls(Box::new(tls));
        Ok(())
    }
}
