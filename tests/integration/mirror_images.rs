//! Image variants on the real binary: the memory budget under a burst of renders of a large
//! original, one render per variant however many ask, huge variants served but not stored,
//! and styles and watermarks end to end.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::origin::{dimensions, RunningOrigin};
use crate::support::{env, Db, Process, TOKEN};

/// A PNG of random RGBA pixels: it does not compress, so a 2200×2200 one is ~19 MB on disk
/// and 19 MB decoded, and every render of it is expensive in memory.
fn noise_png(w: u32, h: u32) -> Vec<u8> {
    use image::ImageEncoder as _;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let pixels: Vec<u8> = (0..u64::from(w) * u64::from(h) * 4)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let mut out = Vec::new();
    image::codecs::png::PngEncoder::new_with_quality(
        &mut out,
        image::codecs::png::CompressionType::Fast,
        image::codecs::png::FilterType::NoFilter,
    )
    .write_image(&pixels, w, h, image::ExtendedColorType::Rgba8)
    .unwrap();
    out
}

/// Resident memory of a process, in bytes (`VmRSS` of `/proc/<pid>/status`).
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The value of one Prometheus series on the API's `/metrics`.
async fn metric(http: &reqwest::Client, base: &str, series: &str) -> u64 {
    let text = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Every stored variant file under the gateway's local store, with its size.
fn stored_variants(data: &std::path::Path) -> Vec<(std::path::PathBuf, u64)> {
    fn walk(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, u64)>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if let Ok(m) = entry.metadata() {
                out.push((path, m.len()));
            }
        }
    }
    let mut out = Vec::new();
    walk(&data.join("mirror/objects/v"), &mut out);
    out
}

const BUDGET_MB: u64 = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mirror_renders_stay_within_the_image_memory_budget() {
    let origin = RunningOrigin::start().await;
    let original = noise_png(2200, 2200);
    assert!(original.len() > 19_000_000 && original.len() < 20 << 20, "{}", original.len());
    origin.origin.put("/bucket/big.png", original.clone(), "image/png");

    let tmp = tempfile::tempdir().unwrap();
    let mut e: HashMap<String, String> = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_MIRROR_ADDR".into(), "127.0.0.1:0".into());
    e.insert("HTTPDNS_MIRROR_MEMORY_MB".into(), "0".into());
    e.insert("HTTPDNS_MIRROR_IMAGE_MEMORY_MB".into(), BUDGET_MB.to_string());
    e.insert("HTTPDNS_MIRROR_IMAGE_WAIT_MS".into(), "60000".into());
    e.insert("HTTPDNS_MIRROR_VARIANT_MAX_STORE_BYTES".into(), (1 << 20).to_string());
    let server = Process::spawn(&e, tmp.path());
    let pid = server.child.id();
    let mirror = server.mirror.expect("mirror listener");
    let http = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let put = http
        .put(format!("{}/admin/v1/mirror/rules/img", server.base))
        .bearer_auth(TOKEN)
        .body(json!({"path_prefix": "/img", "origin": format!("{}/bucket", origin.url())}).to_string());
    assert!(put.send().await.unwrap().status().is_success());

    // The original is stored first, so the burst measures renders, not the fill.
    let bare = http.get(format!("http://{mirror}/img/big.png")).send().await.unwrap();
    assert_eq!(bare.status(), 200);
    assert_eq!(bare.bytes().await.unwrap().len(), original.len());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let baseline = rss(pid);

    // 150 requests at once: 30 different variants, each asked 5 times. Single flight alone
    // would still have 30 renders in flight, each holding the original and its pixels.
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            let deadline = Instant::now() + Duration::from_secs(300);
            while sampling.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
                peak = peak.max(rss(pid));
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        })
    };
    let mut tasks = Vec::new();
    for i in 0..150u32 {
        let url = format!("http://{mirror}/img/big.png?x-oss-process=image/resize,w_{}", 100 + i % 30);
        let http = http.clone();
        tasks.push(tokio::spawn(async move {
            let r = http.get(&url).timeout(Duration::from_secs(240)).send().await.unwrap();
            let status = r.status().as_u16();
            let retry_after = r.headers().contains_key("retry-after");
            let body = r.bytes().await.unwrap();
            (i, status, retry_after, body)
        }));
    }
    let mut ok = 0;
    for t in tasks {
        let (i, status, retry_after, body) = t.await.unwrap();
        match status {
            200 => {
                ok += 1;
                assert_eq!(dimensions(&body).0, 100 + i % 30);
            }
            503 => assert!(retry_after, "a 503 says when to retry"),
            other => panic!("request {i}: {other} {}", String::from_utf8_lossy(&body)),
        }
    }
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.join().unwrap();
    assert_eq!(ok, 150, "with a minute to wait for memory, every render gets done");
    // The bound: what the process held before, the budget, and room for 150 connections and
    // the allocator's slack. Without the budget each request held its own copy of the 19 MB
    // original (and its decoded pixels): gigabytes.
    let bound = baseline + (BUDGET_MB << 20) + (200 << 20);
    assert!(
        peak < bound,
        "peak RSS {} MiB, bound {} MiB (baseline {} MiB)",
        peak >> 20,
        bound >> 20,
        baseline >> 20
    );
    let renders = metric(&http, &server.base, "httpdns_mirror_renders_total{rule=\"img\"}").await;
    eprintln!(
        "burst: {ok} of 150 served, peak RSS {} MiB (baseline {} MiB), {renders} renders",
        peak >> 20,
        baseline >> 20
    );
    assert_eq!(renders, 30, "one render per variant, whatever the number of requests");

    // Served again from the store, without a render.
    let again = http
        .get(format!("http://{mirror}/img/big.png?x-oss-process=image/resize,w_105"))
        .send()
        .await
        .unwrap();
    assert_eq!(again.headers()["x-cache"], "HIT");
    assert_eq!(metric(&http, &server.base, "httpdns_mirror_renders_total{rule=\"img\"}").await, 30);

    // A variant over the store limit (1 MiB here) is served whole but not stored.
    let huge = "/img/big.png?x-oss-process=image/format,png";
    for round in 1..=2u64 {
        let r = http.get(format!("http://{mirror}{huge}")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["x-cache"], "MISS", "round {round}: never stored");
        let body = r.bytes().await.unwrap();
        assert!(body.len() > 1 << 20);
        assert_eq!(dimensions(&body), (2200, 2200));
        assert_eq!(
            metric(&http, &server.base, "httpdns_mirror_renders_total{rule=\"img\"}").await,
            30 + round
        );
    }
    assert_eq!(
        metric(&http, &server.base, "httpdns_mirror_variants_not_stored_total{rule=\"img\"}").await,
        2
    );
    let stored = stored_variants(tmp.path());
    assert_eq!(stored.len(), 30, "the thirty thumbnails, nothing else: {stored:?}");
    assert!(stored.iter().all(|(_, len)| *len < 1 << 20), "{stored:?}");
    assert_eq!(origin.origin.requests("/bucket/big.png"), 1, "the original was fetched once");
}
