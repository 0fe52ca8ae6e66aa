//! Certificates from an ACME CA (`[acme]`, RFC 8555) with instant-acme:
//! an account kept under `<data_dir>/acme/`, an order for the configured
//! names when there is no issued certificate or it has fewer than
//! `renew_before_days` left, http-01 challenges answered by
//! `challenge.rs`, and the new certificate installed in the running
//! listeners (new sessions get it; no restart).
//!
//! Trust: the CA's answers come over HTTPS, checked against the system's
//! roots or `ca_file`; the certificate it sends is parsed and loaded like
//! an administrator's file before it replaces anything.
//! Invariants: a failure of any step (CA down, challenge refused, a chain
//! that does not load) leaves the certificate in use and its files as they
//! were, is logged (`acme_failed`), and is tried again `retry_secs` later;
//! the chain and its key are one file (0600), written and synced under a
//! new name, loaded and matched, then renamed over the old one: a crash
//! leaves the old pair or the new one, never a key beside the wrong
//! certificate.

pub mod challenge;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::acme::AcmeConfig;
use crate::log::Event;
use crate::log::Logger;
use crate::pki::TlsError;
use crate::receive::smtp::tls::{acme_file, ServerTls};
use challenge::Challenges;

#[derive(Debug, thiserror::Error)]
pub enum AcmeError {
    #[error("ACME: {0}")]
    Protocol(#[from] instant_acme::Error),
    #[error("{path}: {err}")]
    File { path: PathBuf, err: std::io::Error },
    #[error("account file {0}: not an account of this CA; remove it to register again")]
    Account(PathBuf),
    #[error("order for {names} ended {status:?}")]
    Order { names: String, status: OrderStatus },
    #[error("authorization for {0} offers no http-01 challenge")]
    NoHttp01(String),
    #[error("authorization for {0} is {1:?}")]
    Authorization(String, AuthorizationStatus),
    #[error("the issued certificate does not load: {0}")]
    Tls(#[from] TlsError),
    #[error("the issued certificate cannot be read: {0}")]
    Certificate(String),
}

/// What the certificate on disk says.
struct Issued {
    not_after: SystemTime,
    not_after_secs: u64,
    serial: String,
}

/// Runs the ACME client and the challenge responder until `shutdown`.
pub fn spawn(
    config: AcmeConfig,
    data_dir: &Path,
    tls: Arc<ServerTls>,
    listener: TcpListener,
    logger: Logger,
    mut shutdown: watch::Receiver<bool>,
) {
    let challenges = Challenges::default();
    let responder = tokio::spawn(challenge::serve(listener, challenges.clone()));
    let client = Client {
        config,
        dir: data_dir.join("acme"),
        file: acme_file(data_dir),
        tls,
        challenges,
        logger,
    };
    tokio::spawn(async move {
        tokio::select! {
            _ = client.run() => {}
            _ = shutdown.changed() => {}
        }
        responder.abort();
    });
}

struct Client {
    config: AcmeConfig,
    dir: PathBuf,
    /// The issued chain and its key, in one file.
    file: PathBuf,
    tls: Arc<ServerTls>,
    challenges: Challenges,
    logger: Logger,
}

impl Client {
    async fn run(self) {
        let check = Duration::from_secs(self.config.check_secs);
        let retry = Duration::from_secs(self.config.retry_secs);
        loop {
            let wait = match self.due() {
                None => check,
                Some(why) => match self.renew(why).await {
                    // Not sooner than a retry, even if still "due" (a
                    // renewal window longer than the CA's lifetimes).
                    Ok(issued) => self.until_due(&issued).clamp(retry, check),
                    Err(e) => {
                        self.logger.emit(&Event::AcmeFailed {
                            error: e.to_string().into(),
                            retry_secs: retry.as_secs(),
                        });
                        retry
                    }
                },
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Why a certificate is needed now, if it is.
    fn due(&self) -> Option<&'static str> {
        if self.tls.cert_path() != self.file {
            // None issued yet, or the file did not load at start.
            return Some("no issued certificate in use");
        }
        match read_issued(&self.file) {
            Err(_) => Some("no certificate issued yet"),
            Ok(issued) if self.until_due(&issued).is_zero() => Some("renewal due"),
            Ok(_) => None,
        }
    }

    fn until_due(&self, issued: &Issued) -> Duration {
        let window = Duration::from_secs(self.config.renew_before_days.saturating_mul(86_400));
        let renew_at = issued
            .not_after
            .checked_sub(window)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        renew_at
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO)
    }

    /// One order, start to finish; installs and returns the certificate.
    async fn renew(&self, why: &str) -> Result<Issued, AcmeError> {
        let names: Vec<String> = self.config.domains.iter().map(|d| d.to_string()).collect();
        self.logger.emit(&Event::AcmeOrdering {
            domains: names.join(",").into(),
            reason: why.into(),
        });
        let account = self.account().await?;
        let identifiers: Vec<Identifier> = names.iter().cloned().map(Identifier::Dns).collect();
        let mut order = account.new_order(&NewOrder::new(&identifiers)).await?;
        let result = self.authorize_and_fetch(&mut order).await;
        self.challenges.clear();
        let (key_pem, chain_pem) = result?;
        // Loaded and matched before anything on disk changes.
        let staged = self.dir.join("cert.pem.new");
        write_private(&staged, format!("{chain_pem}\n{key_pem}").as_bytes())?;
        ServerTls::check(&staged, &staged)?;
        std::fs::rename(&staged, &self.file)
            .and_then(|()| sluice_spool::sync_dir(&self.dir))
            .map_err(|err| AcmeError::File {
                path: self.file.clone(),
                err,
            })?;
        self.tls.install(self.file.clone(), self.file.clone())?;
        let issued = read_issued(&self.file)?;
        let not_after = crate::timefmt::iso8601(issued.not_after_secs.saturating_mul(1000));
        self.logger.emit(&Event::AcmeIssued {
            domains: names.join(",").into(),
            serial: issued.serial.to_string().into(),
            not_after: not_after.into(),
        });
        Ok(issued)
    }

    /// Answers the challenges, finalizes: (key PEM, chain PEM).
    async fn authorize_and_fetch(
        &self,
        order: &mut instant_acme::Order,
    ) -> Result<(String, String), AcmeError> {
        let mut authorizations = order.authorizations();
        while let Some(authz) = authorizations.next().await {
            let mut authz = authz?;
            let name = authz.identifier().to_string();
            match authz.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                other => return Err(AcmeError::Authorization(name, other)),
            }
            let mut challenge = authz
                .challenge(ChallengeType::Http01)
                .ok_or(AcmeError::NoHttp01(name))?;
            let key_authorization = challenge.key_authorization().as_str().to_string();
            self.challenges
                .publish(challenge.token.clone(), key_authorization);
            challenge.set_ready().await?;
        }
        let polling = RetryPolicy::new().timeout(Duration::from_secs(120));
        let status = order.poll_ready(&polling).await?;
        if status != OrderStatus::Ready {
            let names = self.config.domains.iter().map(|d| d.to_string());
            let names = names.collect::<Vec<_>>().join(",");
            return Err(AcmeError::Order { names, status });
        }
        let key_pem = order.finalize().await?;
        let chain_pem = order.poll_certificate(&polling).await?;
        Ok((key_pem, chain_pem))
    }

    /// The account kept on disk, or a new one (then kept).
    async fn account(&self) -> Result<Account, AcmeError> {
        if let Some(ca) = &self.config.ca_file {
            // instant-acme would say only "No such file or directory".
            std::fs::metadata(ca).map_err(|err| AcmeError::File {
                path: ca.clone(),
                err,
            })?;
        }
        let builder = || match &self.config.ca_file {
            Some(ca) => Account::builder_with_root(ca),
            None => Account::builder(),
        };
        let path = self.dir.join("account.json");
        if let Ok(text) = std::fs::read_to_string(&path) {
            let credentials: AccountCredentials =
                serde_json::from_str(&text).map_err(|_| AcmeError::Account(path.clone()))?;
            return Ok(builder()?.from_credentials(credentials).await?);
        }
        let contact: Vec<&str> = self.config.contact.iter().map(String::as_str).collect();
        let new = NewAccount {
            contact: &contact,
            terms_of_service_agreed: true,
            only_return_existing: false,
        };
        let (account, credentials) = builder()?
            .create(&new, self.config.directory.clone(), None)
            .await?;
        let text =
            serde_json::to_string(&credentials).map_err(|_| AcmeError::Account(path.clone()))?;
        write_private(&path, text.as_bytes())?;
        Ok(account)
    }
}

/// Writes `bytes` durably (0600, synced, renamed over the old file).
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), AcmeError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    std::fs::create_dir_all(dir)
        .and_then(|()| sluice_spool::replace_file(dir, name, bytes, 0o600))
        .map_err(|err| AcmeError::File {
            path: path.to_path_buf(),
            err,
        })
}

/// The expiry and serial of the first certificate in the PEM file.
fn read_issued(path: &Path) -> Result<Issued, AcmeError> {
    let der = CertificateDer::from_pem_file(path)
        .map_err(|e| AcmeError::Certificate(format!("{}: {e}", path.display())))?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der)
        .map_err(|e| AcmeError::Certificate(format!("{}: {e}", path.display())))?;
    let secs = cert.validity().not_after.timestamp().max(0) as u64;
    Ok(Issued {
        not_after: SystemTime::UNIX_EPOCH + Duration::from_secs(secs),
        not_after_secs: secs,
        serial: cert.raw_serial_as_string(),
    })
}
