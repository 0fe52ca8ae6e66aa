//! A real ACME CA for tests: Let's Encrypt's pebble (Debian's package),
//! its API served over HTTPS with a certificate from a test CA made here
//! (`ca_file`), resolving names through the test's nsd, validating http-01
//! challenges on a port the test chooses. Its own issuing root is fetched
//! from its management API ([`Pebble::root`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BIN: &str = "/usr/bin/pebble";

pub struct Pebble {
    /// The test CA that signed pebble's HTTPS certificate.
    pub ca_file: PathBuf,
    management: std::net::SocketAddr,
    child: Child,
}

/// A free loopback port (pebble cannot report the one it bound).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl Pebble {
    /// Pebble serving `directory` (`https://127.0.0.1:PORT/dir`),
    /// validating http-01 on `http_port` (where the server under test
    /// answers), asking `dns` for addresses. Its test CA is
    /// `<test_dir>/pebble/ca.pem`.
    pub fn start_at(
        test_dir: &Path,
        directory: &str,
        http_port: u16,
        dns: std::net::SocketAddr,
    ) -> Pebble {
        super::ensure_package(BIN, "pebble");
        let dir = test_dir.join("pebble");
        std::fs::create_dir_all(&dir).unwrap();
        let ca_file = test_ca(&dir);
        let api: u16 = directory
            .trim_start_matches("https://127.0.0.1:")
            .trim_end_matches("/dir")
            .parse()
            .expect("https://127.0.0.1:PORT/dir");
        let management = free_port();
        let conf = serde_json::json!({ "pebble": {
            "listenAddress": format!("127.0.0.1:{api}"),
            "managementListenAddress": format!("127.0.0.1:{management}"),
            "certificate": dir.join("server.pem"),
            "privateKey": dir.join("server.key"),
            "httpPort": http_port,
            "tlsPort": free_port(),
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
        }});
        std::fs::write(dir.join("pebble.json"), conf.to_string()).unwrap();
        let mut child = Command::new(BIN)
            .arg("-config")
            .arg(dir.join("pebble.json"))
            .arg("-dnsserver")
            .arg(dns.to_string())
            // No random waits before validating, no nonces refused on purpose.
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("pebble.out")).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pebble");
        let up = |port| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !(up(api) && up(management)) {
            let exited = child.try_wait().unwrap();
            assert!(
                exited.is_none() && std::time::Instant::now() < deadline,
                "pebble did not start ({exited:?}); see {}",
                dir.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Pebble {
            ca_file,
            management: ([127, 0, 0, 1], management).into(),
            child,
        }
    }

    /// Pebble's issuing root (PEM), from its management API.
    pub async fn root(&self) -> String {
        let roots = sluice::pki::roots(Some(&self.ca_file)).unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(
            sluice::pki::verifying_client(roots).unwrap(),
        ));
        let tcp = tokio::net::TcpStream::connect(self.management)
            .await
            .unwrap();
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let mut s = tls.connect(name, tcp).await.unwrap();
        s.write_all(b"GET /roots/0 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut all = Vec::new();
        let _ = s.read_to_end(&mut all).await;
        let text = String::from_utf8_lossy(&all).to_string();
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        assert!(body.contains("BEGIN CERTIFICATE"), "{text}");
        body.to_string()
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A CA and a certificate for 127.0.0.1 signed by it (pebble's HTTPS);
/// returns the CA's file.
fn test_ca(dir: &Path) -> PathBuf {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "pebble test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca_cert.pem()).unwrap();
    std::fs::write(dir.join("server.pem"), leaf.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
    ca_file
}
