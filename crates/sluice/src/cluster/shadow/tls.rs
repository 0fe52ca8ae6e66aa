//! The shadow link's TLS: both ends present a certificate from the
//! cluster's own CA (`sluice cluster-ca`, `sluice cluster-cert`), every
//! frame after the handshake is encrypted and authenticated, and a node's
//! name is the one in its certificate (its first DNS subject alternative
//! name, else its common name).
//!
//! Trust: only the CA file (`cluster.shadow_ca`): a peer whose chain does
//! not end there is refused by rustls before a byte of ours is read. The
//! holder does not check a name against the address it connected to (the
//! origin does not know its peers' names, only their addresses); it is
//! the origin's name, in its hello, that must be the one in its
//! certificate (`holder.rs`), so a node can store copies only as itself.
//! Invariants: TLS 1.2 or 1.3 (rustls's safe defaults, ring); a
//! certificate without a usable name is refused.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use tokio::net::TcpStream;
use tokio_rustls::{client, server, TlsAcceptor, TlsConnector};

use crate::pki::TlsError;

/// The name the origin asks for: unused for checking (any node of the
/// CA is a holder), it only fills the handshake's server name.
const ANY_NODE: &str = "shadow.sluice.invalid";

/// Both halves of a node's link TLS: as holder (server) and origin.
pub struct LinkTls {
    acceptor: TlsAcceptor,
    connector: TlsConnector,
}

impl std::fmt::Debug for LinkTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkTls")
    }
}

impl LinkTls {
    /// From the PEM files named in `[cluster]`.
    pub fn load(ca: &Path, cert: &Path, key: &Path) -> Result<LinkTls, TlsError> {
        let pem = |path: &Path, err| TlsError::Pem {
            path: path.to_path_buf(),
            err,
        };
        let cas = CertificateDer::pem_file_iter(ca)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| pem(ca, e))?;
        let chain = CertificateDer::pem_file_iter(cert)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| pem(cert, e))?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate(cert.to_path_buf()));
        }
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| pem(key, e))?;
        LinkTls::from_parts(cas, chain, key)
    }

    /// From certificates and a key already read.
    pub fn from_parts(
        cas: Vec<CertificateDer<'static>>,
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<LinkTls, TlsError> {
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(cas);
        if roots.is_empty() {
            return Err(TlsError::NoRoots);
        }
        let roots = Arc::new(roots);
        let provider = crate::pki::provider();
        let clients = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))?;
        let server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(clients)
            .with_single_cert(chain.clone(), key.clone_key())?;
        // The holder's chain must end at the cluster CA, whatever name it
        // carries (the origin knows its peers by address).
        let anchors = roots.clone();
        let algorithms = provider.signature_verification_algorithms.all;
        let verifier = crate::pki::CheckedServer::new(
            Box::new(move |end_entity, intermediates, now| {
                let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
                rustls::client::verify_server_cert_signed_by_trust_anchor(
                    &cert,
                    &anchors,
                    intermediates,
                    now,
                    algorithms,
                )
            }),
            provider.clone(),
        );
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_client_auth_cert(chain, key)?;
        Ok(LinkTls {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector: TlsConnector::from(Arc::new(client)),
        })
    }

    /// The holder's side: the handshake, and the origin's node name.
    pub async fn accept(
        &self,
        tcp: TcpStream,
    ) -> std::io::Result<(server::TlsStream<TcpStream>, String)> {
        let stream = self.acceptor.accept(tcp).await?;
        let name = node_name(stream.get_ref().1.peer_certificates());
        match name {
            Some(name) => Ok((stream, name)),
            None => Err(unnamed()),
        }
    }

    /// The origin's side: the handshake, and the holder's node name.
    pub async fn connect(
        &self,
        tcp: TcpStream,
    ) -> std::io::Result<(client::TlsStream<TcpStream>, String)> {
        let name = ServerName::try_from(ANY_NODE).expect("a valid name");
        let stream = self.connector.connect(name, tcp).await?;
        let name = node_name(stream.get_ref().1.peer_certificates());
        match name {
            Some(name) => Ok((stream, name)),
            None => Err(unnamed()),
        }
    }
}

fn unnamed() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        "the peer's certificate names no node",
    )
}

/// The node a certificate chain names: the end entity's first DNS subject
/// alternative name, else its common name.
pub fn node_name(chain: Option<&[CertificateDer<'_>]>) -> Option<String> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(chain?.first()?).ok()?;
    let san = cert.subject_alternative_name().ok().flatten();
    let dns = san.and_then(|s| {
        s.value.general_names.iter().find_map(|n| match n {
            GeneralName::DNSName(d) => Some(d.to_string()),
            _ => None,
        })
    });
    dns.or_else(|| {
        let cn = cert.subject().iter_common_name().next()?;
        cn.as_str().ok().map(str::to_string)
    })
}

/// A node's link TLS made in memory from `ca` (tests).
#[cfg(test)]
pub fn for_test(ca: &super::pki::Pair, node: &str) -> Arc<LinkTls> {
    let pair = super::pki::new_node(&ca.key_pem, node).unwrap();
    let cas = vec![CertificateDer::from_pem_slice(ca.cert_pem.as_bytes()).unwrap()];
    let chain = vec![CertificateDer::from_pem_slice(pair.cert_pem.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(pair.key_pem.as_bytes()).unwrap();
    Arc::new(LinkTls::from_parts(cas, chain, key).unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::shadow::pki::new_ca;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Both ends learn the other's node name from its certificate; an
    /// end whose certificate another CA signed gets no link at all.
    #[tokio::test]
    async fn nodes_of_one_ca_link_and_strangers_do_not() {
        let ca = new_ca().unwrap();
        let (holder, origin) = (for_test(&ca, "n2"), for_test(&ca, "n1"));
        let stranger = for_test(&new_ca().unwrap(), "n1");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let h = holder.clone();
        let server = tokio::spawn(async move {
            let mut names = Vec::new();
            for _ in 0..2 {
                let (tcp, _) = listener.accept().await.unwrap();
                match h.accept(tcp).await {
                    Ok((mut s, name)) => {
                        s.write_all(b"ok").await.unwrap();
                        s.flush().await.unwrap();
                        names.push(name)
                    }
                    Err(_) => names.push("refused".into()),
                }
            }
            names
        });
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (mut s, name) = origin.connect(tcp).await.unwrap();
        assert_eq!(name, "n2");
        let mut ok = [0u8; 2];
        s.read_exact(&mut ok).await.unwrap();
        let tcp = TcpStream::connect(addr).await.unwrap();
        assert!(
            stranger.connect(tcp).await.is_err(),
            "another CA's node linked"
        );
        assert_eq!(server.await.unwrap(), ["n1", "refused"]);
    }
}
