//! An on-path attacker for DNSSEC tests: a UDP forwarder that sends
//! queries asking for DNSSEC records (EDNS DO bit) to the real, signed
//! server and every other query to a forger's server. A validating
//! resolver sees the truth; a non-validating one sees the forgery.

use std::net::SocketAddr;
use std::sync::Arc;

use hickory_resolver::proto::op::Message;
use tokio::net::UdpSocket;

pub struct DnsSplit {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl DnsSplit {
    pub async fn start(signed: SocketAddr, forged: SocketAddr) -> DnsSplit {
        let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let addr = socket.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let Ok((n, client)) = socket.recv_from(&mut buf).await else {
                    return;
                };
                let query = buf[..n].to_vec();
                let dnssec = Message::from_vec(&query)
                    .ok()
                    .and_then(|m| m.edns)
                    .is_some_and(|e| e.flags().dnssec_ok);
                let upstream = if dnssec { signed } else { forged };
                let socket = socket.clone();
                tokio::spawn(async move {
                    let relay = UdpSocket::bind("127.0.0.1:0").await.unwrap();
                    relay.send_to(&query, upstream).await.unwrap();
                    let mut answer = vec![0u8; 4096];
                    let wait = std::time::Duration::from_secs(2);
                    if let Ok(Ok(n)) = tokio::time::timeout(wait, relay.recv(&mut answer)).await {
                        let _ = socket.send_to(&answer[..n], client).await;
                    }
                });
            }
        });
        DnsSplit { addr, task }
    }
}

impl Drop for DnsSplit {
    fn drop(&mut self) {
        self.task.abort();
    }
}
