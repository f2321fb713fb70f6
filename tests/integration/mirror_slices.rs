//! Large objects filled in slices (`slice_bytes`) and `format,auto`, on the real binary, with
//! the recording origin and the gateway of `mirror_production.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use futures_util::StreamExt;
use reqwest::Method;
use serde_json::json;

use crate::mirror_production::{disk_usage, x_cache, Gateway, RunningRecorder};

/// A body of `len` bytes no two 8-byte words alike.
fn pattern(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    while out.len() < len {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// `GET path` with `Range`, timed to its first body byte; the whole body read.
async fn timed_range(gw: &Gateway, path: &str, range: &str) -> (Duration, StatusCode, Vec<u8>) {
    let t = Instant::now();
    let resp = gw.http.get(gw.mirror(path)).header("range", range).send().await.unwrap();
    let status = resp.status();
    let mut stream = resp.bytes_stream();
    let mut body = Vec::new();
    let mut first = None;
    while let Some(chunk) = stream.next().await {
        first.get_or_insert_with(|| t.elapsed());
        body.extend_from_slice(&chunk.unwrap());
    }
    (first.unwrap_or_else(|| t.elapsed()), status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_large_object_fills_in_slices_and_a_range_is_served_before_the_whole() {
    const SIZE: usize = 256 << 20;
    const SLICE: usize = 8 << 20;
    let origin = RunningRecorder::start("big").await;
    let object = pattern(SIZE);
    origin.put("/big.bin", object.clone());
    // About 64 MB/s from the origin: a whole fill takes seconds.
    origin.throttle(Duration::from_millis(1));
    // The fourth slice fails once: it is fetched again.
    let fourth = format!("bytes={}-{}", 3 * SLICE, 4 * SLICE - 1);
    origin.fail_once(&fourth);
    let gw = Gateway::start(&[]);
    gw.rule("whole", json!({"path_prefix": "/whole", "origin": origin.url()})).await;
    gw.rule("sliced", json!({"path_prefix": "/sliced", "origin": origin.url(), "slice_bytes": SLICE})).await;
    let at = 200 << 20;
    let range = format!("bytes={at}-{}", at + 4095);

    let (sliced_ttfb, s, body) = timed_range(&gw, "/sliced/big.bin", &range).await;
    assert_eq!(s, StatusCode::PARTIAL_CONTENT);
    assert_eq!(body, &object[at..at + 4096]);
    let (whole_ttfb, s, body) = timed_range(&gw, "/whole/big.bin", &range).await;
    assert_eq!(s, StatusCode::PARTIAL_CONTENT);
    assert_eq!(body, &object[at..at + 4096]);
    eprintln!("256 MiB object, range at 200 MiB: first byte after {sliced_ttfb:?} in slices of 8 MiB, {whole_ttfb:?} filled whole");
    assert!(sliced_ttfb * 3 < whole_ttfb, "slices: {sliced_ttfb:?}, whole: {whole_ttfb:?}");

    // The sliced copy is assembled, verified and stored; served whole from the store.
    let t = Instant::now();
    loop {
        let (s, meta) = gw.admin(Method::GET, "/admin/v1/mirror/objects/sliced/big.bin", None).await;
        if s == StatusCode::OK {
            assert_eq!(meta["length"], SIZE as u64);
            assert_eq!(meta["origin_etag"], "\"v1\"");
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(120), "the sliced copy was never stored");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refetched =
        origin.seen().iter().filter(|(_, h)| h.get("range").is_some_and(|r| r == fourth.as_str())).count();
    assert_eq!(refetched, 2, "the failed slice was fetched again");
    let sliced_requests = origin.seen().iter().filter(|(_, h)| h.get("if-match").is_some()).count();
    assert_eq!(sliced_requests, SIZE / SLICE, "31 slices after the first, one of them twice");
    let resp = gw.http.get(gw.mirror("/sliced/big.bin")).send().await.unwrap();
    assert_eq!(x_cache(resp.headers()), "HIT");
    let got = resp.bytes().await.unwrap();
    assert!(got.len() == SIZE && got[..] == object[..], "the stored copy is the origin's object");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_that_changes_mid_fill_is_never_stored_torn() {
    let origin = RunningRecorder::start("torn").await;
    let object = pattern(8 << 20);
    origin.put("/t.bin", object);
    origin.throttle(Duration::from_millis(2));
    let gw = Arc::new(Gateway::start(&[]));
    gw.rule("t", json!({"path_prefix": "/t", "origin": origin.url(), "slice_bytes": 1 << 20})).await;
    let client = {
        let gw = gw.clone();
        tokio::spawn(async move {
            let resp = gw.http.get(gw.mirror("/t/t.bin")).send().await.unwrap();
            let status = resp.status();
            (status, resp.bytes().await.map(|b| b.len()).ok())
        })
    };
    // The object changes at the origin once the first slice is on its way.
    let t = Instant::now();
    while origin.requests() == 0 {
        assert!(t.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    origin.set_etag("\"v2\"");
    let (status, got) = client.await.unwrap();
    assert!(status != 200 || got != Some(8 << 20), "a complete body was served: {status} {got:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, _) = gw.admin(Method::GET, "/admin/v1/mirror/objects/t/t.bin", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "a torn copy was stored");
    assert_eq!(disk_usage(&gw.store_dir()).1, 0);
    assert!(origin.seen().iter().any(|(_, h)| h.get("if-match").is_some_and(|v| v == "\"v1\"")));
    // An empty object has no first slice (the origin answers 416): it is fetched whole.
    origin.put("/empty.bin", Vec::new());
    let (s, _, body) = gw.get("/t/empty.bin", &[]).await;
    assert_eq!((s, body.len()), (StatusCode::OK, 0));
    let t = Instant::now();
    loop {
        let (_, h, body) = gw.get("/t/empty.bin", &[]).await;
        if x_cache(&h) == "HIT" {
            assert!(body.is_empty());
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "the empty object was never stored");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn format_auto_follows_accept_and_varies_on_it() {
    let origin = RunningRecorder::start("img").await;
    let png = crate::origin::png(64, 48);
    origin.put("/p.png", png.clone());
    let gw = Gateway::start(&[]);
    gw.rule("img", json!({"path_prefix": "/img", "origin": origin.url()})).await;
    let q = "/img/p.png?x-oss-process=image/resize,w_32/format,auto";
    let webp = [("accept", "image/avif,image/webp,image/apng,*/*;q=0.8")];
    let plain = [("accept", "image/png,image/*;q=0.8,*/*;q=0.5")];
    let content_type = |h: &HeaderMap| h["content-type"].to_str().unwrap().to_owned();
    for round in 0..2 {
        let (s, h, body) = gw.get(q, &webp).await;
        assert_eq!((s, content_type(&h).as_str()), (StatusCode::OK, "image/webp"), "round {round}");
        assert_eq!(h["vary"], "Accept");
        assert_eq!(&body[8..12], b"WEBP");
        assert_eq!(crate::origin::dimensions(&body), (32, 24));
        let (s, h, body) = gw.get(q, &plain).await;
        assert_eq!((s, content_type(&h).as_str()), (StatusCode::OK, "image/png"), "round {round}");
        assert_eq!(h["vary"], "Accept");
        assert_eq!(crate::origin::dimensions(&body), (32, 24));
        if round == 1 {
            // Two stored variants, one per answer.
            assert_eq!(x_cache(&h), "HIT");
        }
    }
    // `format,auto` alone: WebP for those who take it, the original for the rest.
    let (s, h, body) = gw.get("/img/p.png?x-oss-process=image/format,auto", &plain).await;
    assert_eq!((s, body.as_slice()), (StatusCode::OK, png.as_slice()));
    assert_eq!(h["vary"], "Accept");
    let (_, h, _) = gw.get("/img/p.png?x-oss-process=image/format,auto", &webp).await;
    assert_eq!(content_type(&h), "image/webp");
    // Without format,auto nothing varies.
    let (_, h, _) = gw.get("/img/p.png?x-oss-process=image/resize,w_16", &webp).await;
    assert!(h.get("vary").is_none());
}
