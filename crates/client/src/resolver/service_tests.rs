//! The resolver against a real HTTP service on loopback answering fixed JSON.
use super::*;
use crate::localdns::LocalDns;
use std::sync::atomic::{AtomicUsize, Ordering};

async fn service(body: &'static str, status: u16) -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let app = axum::Router::new().fallback(move || {
        let h = h.clone();
        async move {
            h.fetch_add(1, Ordering::SeqCst);
            (http::StatusCode::from_u16(status).unwrap(), body)
        }
    });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (format!("http://{addr}"), hits)
}

fn opts(servers: &[&str]) -> ResolverOptions {
    let mut o = ResolverOptions::default();
    o.service.servers = servers.iter().map(|s| s.parse().unwrap()).collect();
    o.local_dns = LocalDns::Off;
    o
}

/// Waits (on the tokio clock) until `f` holds.
async fn until(mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not reached");
}

const ANSWER: &str = r#"{"dns":[{"host":"a.example.com","client_ip":"1.0.2.7","ips":["2.2.2.1","1.1.1.1","0.0.0.0"],
        "ttl":120,"origin_ttl":120,"client_isp":"unicom","ip_isp":{"2.2.2.1":"unicom","1.1.1.1":"telecom"}}]}"#;

#[tokio::test]
async fn fails_over_between_addresses_filters_and_caches() {
    let (good, hits) = service(ANSWER, 200).await;
    let (bad, bad_hits) = service("overloaded", 503).await;
    let r = Resolver::new(opts(&["http://127.0.0.1:1", &bad, &good]));
    let a = r.resolve("A.example.com.").await.unwrap();
    assert_eq!(a.path, Path::HttpDns);
    // The invalid address and the other carrier's node are gone.
    assert_eq!(a.ips, vec!["2.2.2.1".parse::<IpAddr>().unwrap()]);
    assert_eq!(a.dropped.len(), 2);
    assert_eq!(a.ttl, Duration::from_secs(120));
    // Cached: no second request. Another network: asked again, and the address that
    // answered is now tried first (the refused and the 503 ones are not asked again).
    assert_eq!(r.resolve("a.example.com").await.unwrap().path, Path::Cache);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    r.set_network("cellular");
    // The change re-resolves the names in use for the new network in the background.
    until(|| hits.load(Ordering::SeqCst) == 2).await;
    until(|| r.cached_addresses("a.example.com").is_some()).await;
    assert_eq!(r.resolve("a.example.com").await.unwrap().path, Path::Cache);
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    assert_eq!(bad_hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn falls_back_to_localdns_then_to_stale() {
    let (bad, _) = service("down", 503).await;
    let mut o = opts(&[&bad]);
    o.local_dns = LocalDns::System;
    o.allow_private = true;
    let r = Resolver::new(o);
    let a = r.resolve("localhost").await.unwrap();
    assert_eq!(a.path, Path::LocalDns);
    assert!(a.service_error.as_deref().unwrap().contains("503"), "{a:?}");
    // With nothing answering, an expired entry is the last resort, even when expired
    // answers are not otherwise reused.
    let mut o = opts(&[&bad]);
    o.reuse_expired = false;
    let r = Resolver::new(o);
    let expired = Instant::now() - Duration::from_secs(3600);
    r.inner.cache.lock().insert(
        "default",
        "gone.example.com",
        vec!["2.2.2.2".parse().unwrap()],
        Duration::from_secs(60),
        expired,
    );
    let a = r.resolve("gone.example.com").await.unwrap();
    assert_eq!((a.path, a.ips), (Path::Stale, vec!["2.2.2.2".parse::<IpAddr>().unwrap()]));
    // Nothing at all: an error naming both paths.
    let err = r.resolve("none.example.com").await.unwrap_err().to_string();
    assert!(err.contains("HTTPDNS") && err.contains("LocalDNS"), "{err}");
}

#[tokio::test]
async fn concurrent_misses_make_one_request() {
    let (good, hits) = service(ANSWER, 200).await;
    let r = Resolver::new(opts(&[&good]));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let r = r.clone();
            tokio::spawn(async move { r.resolve("a.example.com").await.unwrap() })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap().ips.len(), 1);
    }
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

/// A resolve whose caller goes away mid-lookup (the app cancelled the request) neither
/// cancels the lookup nor leaves the next caller waiting: it joins and gets the answer.
#[tokio::test]
async fn a_cancelled_resolve_harms_nobody() {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let app = axum::Router::new().fallback(move || {
        let h = h.clone();
        async move {
            h.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(400)).await;
            ANSWER
        }
    });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    let r = Resolver::new(opts(&[&format!("http://{addr}")]));
    let first = tokio::time::timeout(Duration::from_millis(100), r.resolve("a.example.com")).await;
    assert!(first.is_err(), "the first caller gives up");
    let started = Instant::now();
    let a = r.resolve("a.example.com").await.unwrap();
    assert_eq!(a.path, Path::HttpDns);
    assert!(started.elapsed() < Duration::from_millis(400), "joined the lookup already out");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}
