//! Policy delegation: the `ccert_*` attributes a policy service gets,
//! from Sluice and from a real Postfix, side by side.

use super::*;

/// Requests a policy server received, each as its attributes.
type Requests = Arc<std::sync::Mutex<Vec<BTreeMap<String, String>>>>;

/// A policy server that answers every request `DUNNO` and keeps it.
async fn recording_policy() -> (SocketAddr, Requests) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Requests = Arc::default();
    let kept = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let kept = kept.clone();
            tokio::spawn(async move {
                let (r, mut w) = stream.into_split();
                let mut lines = tokio::io::BufReader::new(r).lines();
                let mut request = BTreeMap::new();
                while let Ok(Some(line)) = lines.next_line().await {
                    match line.split_once('=') {
                        Some((k, v)) => {
                            request.insert(k.to_string(), v.to_string());
                        }
                        None => {
                            kept.lock().unwrap().push(std::mem::take(&mut request));
                            if w.write_all(b"action=DUNNO\n\n").await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// The `ccert_*` attributes of the last request.
fn ccert_attrs(seen: &Requests) -> Vec<(String, String)> {
    let all = seen.lock().unwrap();
    let last = all.last().expect("a policy request");
    last.iter()
        .filter(|(k, _)| k.starts_with("ccert_"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_services_get_the_certificate_as_from_postfix() {
    let dir = temp_dir("ccert-policy");
    let pki = pki(&dir.join("pki"));
    let (p_addr, p_seen) = recording_policy().await;
    let (s_addr, s_seen) = recording_policy().await;
    let list = |addr| format!("check_policy_service inet:{addr}, reject_unauth_destination");
    let (p_list, s_list) = (list(p_addr), list(s_addr));
    let files = [("relay_clientcerts", ""), ("ccert_access", "")];
    let (postfix, _, _) = start_both(&dir, &pki, "p", &p_list, files, true).await;
    let (_, server, addr) = start_both(&dir, &pki, "s", &s_list, files, true).await;
    // A verified (names sent), C not (fingerprints only), none.
    for (what, cert) in [("A", Some(&pki.a)), ("C", Some(&pki.c)), ("none", None)] {
        rcpt_over_tls(postfix.addr, cert).await;
        rcpt_over_tls(addr, cert).await;
        let (p, s) = (ccert_attrs(&p_seen), ccert_attrs(&s_seen));
        assert_eq!(p.len(), 4, "{what}: {p:?}");
        assert_eq!(p, s, "{what}");
        if what == "A" {
            assert!(
                p.contains(&("ccert_subject".into(), "client-a".into())),
                "{p:?}"
            );
        }
    }
    server.shutdown().await;
}
