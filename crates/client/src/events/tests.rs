use super::*;

#[test]
fn events_in_the_server_schema() {
    let e = ClientEvent::DnsFallback {
        host: "www.example.com".into(),
        reason: FallbackReason::Timeout,
        duration: Duration::from_millis(120),
    };
    assert_eq!(
        e.to_json(1672531200, Some(true)),
        json!({"event": "dns_fallback", "timestamp": 1672531200, "host": "www.example.com",
                "fallback_reason": "HTTPDNS_TIMEOUT", "fallback_duration_ms": 120, "convergence": true})
    );
    let s = ClientEvent::HostSwitch {
        from: "a.example.com".into(),
        to: None,
        reason: Failure::Status5xx,
        duration: Duration::ZERO,
    };
    assert!(s.to_json(1, None).get("to").is_none(), "absent, not null");
}

#[test]
fn sampling_bounds() {
    assert!(sampled(1.0));
    assert!(!sampled(0.0));
    let hits = (0..10_000).filter(|_| sampled(0.5)).count();
    assert!((4_000..6_000).contains(&hits), "{hits}");
}

#[tokio::test]
async fn bounded_queue_persisted_and_sent_once() {
    use axum::routing::post;
    let got = Arc::new(Mutex::new(Vec::<Value>::new()));
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let app = {
        let (got, fail) = (got.clone(), fail.clone());
        axum::Router::new().route(
            "/app/events",
            post(move |body: axum::body::Bytes| {
                let (got, fail) = (got.clone(), fail.clone());
                async move {
                    if fail.load(Ordering::SeqCst) {
                        return http::StatusCode::SERVICE_UNAVAILABLE;
                    }
                    let v: Value = serde_json::from_slice(&body).unwrap();
                    got.lock().extend(v["events"].as_array().unwrap().iter().cloned());
                    http::StatusCode::ACCEPTED
                }
            }),
        )
    };
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    let dir = tempfile::tempdir().unwrap();
    let opts = EventOptions {
        batch_size: 2,
        max_queue: 3,
        file: Some(dir.path().join("events.json")),
        ..Default::default()
    };
    let url: Url = format!("http://{addr}/app/events").parse().unwrap();
    let r = Reporter::new(opts.clone(), vec![url.clone()]);
    for i in 0..5 {
        r.record(ClientEvent::HostRevive { host: format!("h{i}.example.com") });
    }
    let s = r.stats();
    assert_eq!((s.recorded, s.queued, s.dropped), (5, 3, 2), "the oldest two dropped");
    assert!(r.flush().await.is_err(), "the server is down");
    assert_eq!(r.stats().queued, 3, "kept for a retry");

    // A restart reads the queue back.
    // The first address is down: the second takes the batch.
    let r = Reporter::new(opts, vec!["http://127.0.0.1:1/app/events".parse().unwrap(), url]);
    assert_eq!(r.stats().queued, 3);
    fail.store(false, Ordering::SeqCst);
    assert_eq!(r.flush().await.unwrap(), 3);
    let hosts: Vec<String> = got.lock().iter().map(|v| v["host"].as_str().unwrap().to_owned()).collect();
    assert_eq!(hosts, ["h2.example.com", "h3.example.com", "h4.example.com"]);
    assert_eq!(r.flush().await.unwrap(), 0, "nothing sent twice");
    let on_disk: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("events.json")).unwrap()).unwrap();
    assert_eq!(on_disk, json!([]));
}
