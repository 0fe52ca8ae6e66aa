//! What the scheduler holds in memory and what it counts as backlog:
//! bodies of deferred mail, the active limit, and the local-delivery
//! backlog published for in-flow pacing (harness in the parent module).

use super::*;

#[tokio::test]
async fn a_deferred_message_does_not_keep_its_body_in_memory() {
    let (tx, mut workers) = mpsc::unbounded_channel();
    let tmp = tempfile::tempdir().unwrap();
    let (spool, _, _) = Spool::open(SpoolConfig {
        dir: tmp.path().join("spool"),
        sync: false,
        segment_bytes: 1 << 20,
        reserve_bytes: 0,
    })
    .unwrap();
    let mut config = Config::default();
    config
        .transport
        .insert("*".into(), "smtp:[127.0.0.1]:1".parse().unwrap());
    let router = Router::new(&config.transport, None, LocalDomains::none());
    let (queue, _rx) = QueueHandle::channel();
    let mut s = Scheduler::new(
        Arc::new(config.clone()),
        router,
        spool.clone(),
        Logger::disabled(),
        Arc::new(FakeAgent(tx)),
        &queue,
        intake(&config, &spool, &queue),
    );
    let env = Envelope {
        id: spool.new_id(),
        arrival: timefmt::now_millis(),
        sender: "a@b.test".into(),
        recipients: vec!["r@c.test".into()],
        flags: 0,
        dsn: None,
        orig_rcpt: Vec::new(),
        login: String::new(),
        filter: String::new(),
        xforward: String::new(),
    };
    let body = Arc::new(vec![b'y'; 5000]);
    let body_ref = spool.store(env.clone(), body.clone()).await.unwrap();
    s.handle(Event::Queued(QueuedMessage {
        envelope: env,
        body_ref,
        body: Some(body),
        done: vec![false],
    }));
    assert_eq!(s.counts(), (1, 0, 5000));
    let w = workers.recv().await.unwrap();
    s.handle(Event::Report(done_report(&w, deferred(&w.first), false)));
    assert_eq!(
        s.counts(),
        (0, 1, 0),
        "parked on disk for its retry, body released"
    );
}

#[tokio::test]
async fn no_more_than_the_active_limit_is_held_in_memory() {
    let mut h = harness("active", |c| {
        c.queue.active_limit = 2;
        c.delivery.default_concurrency = 100;
        c.delivery.initial_concurrency = 100;
    });
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(
            h.message("a@b.test", &[&format!("r{i}@c.test")], Some(10))
                .await,
        );
    }
    // Two are active (each has a worker); the other four wait on disk.
    let mut live = vec![
        h.workers.recv().await.unwrap(),
        h.workers.recv().await.unwrap(),
    ];
    tokio::task::yield_now().await;
    assert!(h.workers.try_recv().is_err(), "only two messages in memory");
    let mut order = Vec::new();
    while let Some(w) = live.pop() {
        order.push(w.first.msg);
        let results = delivered(&w.first);
        finish_once(w, results, false).await;
        // Each completed message lets one waiting message in (its envelope
        // read back from the spool), in arrival order.
        if order.len() + live.len() < 6 {
            live.push(h.workers.recv().await.unwrap());
        }
        assert!(live.len() <= 2);
    }
    order.sort();
    assert_eq!(order, ids, "every message was delivered once");
    h.task.abort();
}

#[tokio::test]
async fn only_jobs_waiting_for_local_delivery_count_for_in_flow_pacing() {
    // One connection each: a remote destination and an LMTP mailbox
    // server, 5 messages each. 4 of each wait; only the LMTP ones are
    // local delivery's backlog (a slow remote must not pace everyone).
    let mut h = harness("flow", |c| {
        c.delivery.initial_concurrency = 1;
        c.delivery.default_concurrency = 1;
        c.transport
            .insert("box.test".into(), "lmtp:[127.0.0.3]:24".parse().unwrap());
    });
    for i in 0..5 {
        h.message("a@b.test", &[&format!("r{i}@far.test")], Some(10))
            .await;
        h.message("a@b.test", &[&format!("r{i}@box.test")], Some(10))
            .await;
    }
    let _remote = h.workers.recv().await.unwrap();
    let _local = h.workers.recv().await.unwrap();
    let flow = h.queue.flow();
    let settled = tokio::time::timeout(Duration::from_secs(10), async {
        while flow.waiting() != 4 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    assert!(settled.is_ok(), "waiting = {}", flow.waiting());
    assert!(h.workers.try_recv().is_err(), "one connection each");
}
