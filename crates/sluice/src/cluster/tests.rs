//! The cluster's local arithmetic: shares, and what the queue may hold as
//! Redis answers, stops answering and comes back (paused clock). The
//! Redis side runs against a real redis-server in `tests/it/cluster.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

fn config(peers: usize) -> ClusterConfig {
    let mut c: ClusterConfig = toml::from_str("redis_url = \"redis://127.0.0.1:1/\"").unwrap();
    c.peers = (0..peers).map(|i| format!("10.0.0.{i}:25")).collect();
    c
}

fn names(n: &[&str]) -> Vec<Arc<str>> {
    n.iter().map(|s| Arc::from(*s)).collect()
}

#[test]
fn shares_never_add_up_to_more_than_the_cap() {
    let three = names(&["a", "b", "c"]);
    let two = names(&["a", "b"]);
    for cap in 3..20 {
        // Views that disagree: two nodes saw two, one saw three.
        let sum = 2 * share_of(&two, 3, cap) + share_of(&three, 3, cap);
        assert!(sum <= cap, "cap {cap}: {sum}");
    }
    assert_eq!(share_of(&three, 1, 7), 2);
    // A view from before the others joined: divided by the configured size.
    assert_eq!(share_of(&names(&["a"]), 2, 4), 2);
    // A cap below the number of nodes: one each, never none.
    assert_eq!(share_of(&three, 3, 2), 1);
    assert_eq!(share_of(&three, 3, 0), 0);
}

#[tokio::test(start_paused = true)]
async fn before_redis_answers_a_node_takes_its_share_among_its_peers() {
    let c = Cluster::new(config(2), "mx1", Duration::from_secs(60));
    let key: Arc<str> = "mx:example.net:25".into();
    assert_eq!(
        c.allowance(&key, 10, 8, 0),
        0,
        "nothing before the first round"
    );
    c.round_failed();
    // Three nodes (itself and two peers): 10 / 3 = 3.
    assert_eq!(c.allowance(&key, 10, 8, 0), 3);
    assert_eq!(c.allowance(&key, 10, 2, 0), 3, "the share, not the want");
}

#[tokio::test(start_paused = true)]
async fn grants_hold_while_redis_answers_then_shares_take_over() {
    let c = Cluster::new(config(0), "b", Duration::from_secs(60));
    let key: Arc<str> = "d".into();
    let grew = Arc::new(AtomicUsize::new(0));
    let seen = grew.clone();
    c.on_grant(Box::new(move |_| {
        seen.fetch_add(1, Ordering::Relaxed);
    }));
    c.allowance(&key, 10, 7, 0);
    c.round_ok(names(&["a", "b"]), vec![(key.clone(), 7)]);
    assert_eq!(grew.load(Ordering::Relaxed), 1, "a grant that grew pumps");
    assert_eq!(c.allowance(&key, 10, 7, 7), 7, "the grant");
    assert!(c.shared());
    // Lease 15 s: for half of it the grant stands.
    tokio::time::advance(Duration::from_millis(7_400)).await;
    assert_eq!(c.allowance(&key, 10, 7, 7), 7);
    // Then the smaller of grant and share (10 / 2 nodes = 5) ...
    tokio::time::advance(Duration::from_millis(200)).await;
    assert!(!c.shared());
    assert_eq!(c.allowance(&key, 10, 7, 7), 5);
    // ... and once the lease has lapsed, the share even if larger.
    c.round_ok(names(&["a", "b"]), vec![(key.clone(), 2)]);
    tokio::time::advance(Duration::from_secs(15)).await;
    assert_eq!(c.allowance(&key, 10, 7, 2), 5);
    // Redis back: the grant again.
    c.round_ok(names(&["a", "b"]), vec![(key.clone(), 3)]);
    assert_eq!(c.allowance(&key, 10, 7, 3), 3);
}

#[tokio::test(start_paused = true)]
async fn a_node_claims_at_least_what_it_holds() {
    let c = Cluster::new(config(0), "a", Duration::from_secs(60));
    let key: Arc<str> = "d".into();
    c.allowance(&key, 10, 1, 4);
    let claims = c.claims();
    assert_eq!(claims.len(), 1);
    assert_eq!((claims[0].1.want, claims[0].1.held), (4, 4));
    // Nothing wanted or granted: forgotten.
    c.allowance(&key, 10, 0, 0);
    assert!(c.claims().is_empty());
}

#[tokio::test(start_paused = true)]
async fn without_redis_a_waiting_destination_is_pumped_again() {
    let c = Cluster::new(config(0), "a", Duration::from_secs(60));
    let pumped = Arc::new(AtomicUsize::new(0));
    let seen = pumped.clone();
    c.on_grant(Box::new(move |_| {
        seen.fetch_add(1, Ordering::Relaxed);
    }));
    let (busy, idle): (Arc<str>, Arc<str>) = ("busy".into(), "idle".into());
    c.allowance(&busy, 4, 3, 1);
    c.allowance(&idle, 4, 2, 2);
    c.round_failed();
    assert_eq!(
        pumped.load(Ordering::Relaxed),
        1,
        "only the one wanting more"
    );
}

#[tokio::test(start_paused = true)]
async fn a_claim_under_way_caps_the_grant_at_what_it_asks_for() {
    let c = Cluster::new(config(0), "a", Duration::from_secs(60));
    let key: Arc<str> = "d".into();
    c.allowance(&key, 10, 7, 0);
    c.round_ok(names(&["a"]), vec![(key.clone(), 7)]);
    assert_eq!(c.allowance(&key, 10, 2, 2), 7);
    // The next claim asks for 2: until Redis answers, the queue may not
    // open more than that, though more mail came meanwhile.
    c.claims();
    assert_eq!(c.allowance(&key, 10, 7, 2), 2);
}
