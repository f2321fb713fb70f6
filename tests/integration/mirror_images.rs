//! Image variants on the real binary: the memory budget under a burst of renders of a large
//! original, one render per variant however many ask, huge variants served but not stored,
//! and styles and watermarks end to end.

use std::collections::HashMap;
use std::time::Duration;

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

/// A memory figure of a process, in bytes (`VmRSS`, `VmHWM`... of `/proc/<pid>/status`).
fn status_bytes(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Resident memory of a process, in bytes.
fn rss(pid: u32) -> u64 {
    status_bytes(pid, "VmRSS")
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
    walk(&data.join("mirror/store/v"), &mut out);
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
    let http = httpdns_test_support::http::client_builder().pool_max_idle_per_host(0).build().unwrap();
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
    // would still have 30 renders in flight, each holding the original and its pixels. The peak
    // is the kernel's high-water mark (`VmHWM`), reset to the current RSS first: sampling RSS
    // every 20 ms missed short peaks (and let this test pass or fail by chance).
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset the RSS high-water mark");
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
    let peak = status_bytes(pid, "VmHWM");
    assert_eq!(ok, 150, "with a minute to wait for memory, every render gets done");
    // The bound: what the process held before and the budget, which holds everything a render
    // takes (the allocator's retention included), and room for 150 connections. Without the
    // budget each request held its own copy of the 19 MB original (and its decoded pixels):
    // gigabytes. `tests/reliability/images.rs` holds the release binary to the budget alone.
    let bound = baseline + (BUDGET_MB << 20) + (16 << 20);
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

fn b64(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_styles_watermarks_and_reports_end_to_end() {
    let origin = RunningOrigin::start().await;
    origin.origin.put("/bucket/photo.png", crate::origin::png(400, 300), "image/png");
    let logo = image::RgbImage::from_pixel(20, 20, image::Rgb([0, 0, 255]));
    let mut logo_png = Vec::new();
    logo.write_to(&mut std::io::Cursor::new(&mut logo_png), image::ImageFormat::Png).unwrap();
    origin.origin.put("/bucket/marks/logo.png", logo_png, "image/png");
    let mut gif = Vec::new();
    {
        let mut encoder = image::codecs::gif::GifEncoder::new(&mut gif);
        for red in [0u8, 120, 240] {
            let frame = image::RgbaImage::from_pixel(8, 8, image::Rgba([red, 0, 0, 255]));
            encoder.encode_frame(image::Frame::new(frame)).unwrap();
        }
    }
    origin.origin.put("/bucket/anim.gif", gif, "image/gif");
    let tmp = tempfile::tempdir().unwrap();
    let mut e = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_MIRROR_ADDR".into(), "127.0.0.1:0".into());
    let server = crate::support::Server::start_with(e, None).await;
    server
        .put_ok(
            "/admin/v1/mirror/rules/img",
            json!({"path_prefix": "/img", "origin": format!("{}/bucket", origin.url())}),
        )
        .await;
    let get = |path: String| {
        let url = server.mirror_url(&path);
        let http = server.http.clone();
        async move { http.get(url).send().await.unwrap() }
    };

    // A style is an admin resource: validated (400 naming the field), stored, listed, used.
    let (status, body) =
        server.put("/admin/v1/mirror/styles/thumb", json!({"process": "image/resize,w_0"})).await;
    assert_eq!((status.as_u16(), body["field"].as_str()), (400, Some("process")), "{body}");
    let (status, body) =
        server.put("/admin/v1/mirror/styles/bad%20name", json!({"process": "image/resize,w_10"})).await;
    assert_eq!((status.as_u16(), body["field"].as_str()), (400, Some("name")), "{body}");
    let (status, _) = server
        .put("/admin/v1/mirror/styles/thumb", json!({"process": "image/resize,w_100/format,webp"}))
        .await;
    assert_eq!(status.as_u16(), 201);
    let (_, list) = server.admin(reqwest::Method::GET, "/admin/v1/mirror/styles", None).await;
    assert_eq!(list["items"][0]["name"], "thumb");
    let styled = get("/img/photo.png?x-oss-process=style/thumb".into()).await;
    assert_eq!(styled.status(), 200);
    assert_eq!(styled.headers()["content-type"], "image/webp");
    // `format,auto` is chosen per request, from `Accept`: a stored style cannot hold it.
    let (status, body) = server
        .put("/admin/v1/mirror/styles/auto", json!({"process": "image/resize,w_100/format,auto"}))
        .await;
    assert_eq!((status.as_u16(), body["field"].as_str()), (400, Some("process")), "{body}");
    assert_eq!(dimensions(&styled.bytes().await.unwrap()), (100, 75));
    // The style's variant is the chain's: the same chain spelled out is a stored hit.
    let spelled = get("/img/photo.png?x-oss-process=image/format,webp/resize,w_100".into()).await;
    assert_eq!(spelled.headers()["x-cache"], "HIT");
    // Changing the style changes what it serves at once, never a variant of the old chain.
    server.put_ok("/admin/v1/mirror/styles/thumb", json!({"process": "image/resize,w_50/format,png"})).await;
    let restyled = get("/img/photo.png?x-oss-process=style/thumb".into()).await;
    assert_eq!(restyled.headers()["content-type"], "image/png");
    assert_eq!(dimensions(&restyled.bytes().await.unwrap()), (50, 38));
    let unknown = get("/img/photo.png?x-oss-process=style/none".into()).await;
    assert_eq!(unknown.status(), 400);
    assert_eq!(unknown.json::<serde_json::Value>().await.unwrap()["field"], "style");
    let (status, _) = server.admin(reqwest::Method::DELETE, "/admin/v1/mirror/styles/thumb", None).await;
    assert_eq!(status.as_u16(), 204);
    assert_eq!(get("/img/photo.png?x-oss-process=style/thumb".into()).await.status(), 400);

    // An image watermark from the same bucket (fetched through the rule), bottom-right.
    let marked = get(format!(
        "/img/photo.png?x-oss-process=image/watermark,image_{},x_0,y_0/format,png",
        b64("marks/logo.png")
    ))
    .await;
    assert_eq!(marked.status(), 200);
    let img = image::load_from_memory(&marked.bytes().await.unwrap()).unwrap().to_rgb8();
    assert_eq!(img.get_pixel(390, 290), &image::Rgb([0, 0, 255]));
    assert_ne!(img.get_pixel(370, 270), &image::Rgb([0, 0, 255]));
    assert_eq!(origin.origin.requests("/bucket/marks/logo.png"), 1);
    let missing =
        get(format!("/img/photo.png?x-oss-process=image/watermark,image_{}", b64("marks/none.png"))).await;
    assert_eq!(missing.status(), 400);
    assert_eq!(missing.json::<serde_json::Value>().await.unwrap()["field"], "image");
    // A text watermark.
    let text =
        get(format!("/img/photo.png?x-oss-process=image/watermark,text_{},size_30", b64("水印 mark"))).await;
    assert_eq!(text.status(), 200);

    // Reports are JSON.
    let info = get("/img/photo.png?x-oss-process=image/info".into()).await;
    assert_eq!(info.headers()["content-type"], "application/json");
    let v: serde_json::Value = info.json().await.unwrap();
    assert_eq!(
        (v["ImageWidth"]["value"].as_str(), v["Format"]["value"].as_str()),
        (Some("400"), Some("png"))
    );
    // An animated GIF's frames are counted.
    let info = get("/img/anim.gif?x-oss-process=image/info".into()).await;
    assert_eq!(info.status(), 200);
    let v: serde_json::Value = info.json().await.unwrap();
    assert_eq!(
        (v["FrameCount"]["value"].as_str(), v["Format"]["value"].as_str()),
        (Some("3"), Some("gif")),
        "{v}"
    );
    let hue = get("/img/photo.png?x-oss-process=image/average-hue".into()).await;
    assert!(hue.json::<serde_json::Value>().await.unwrap()["RGB"].as_str().unwrap().starts_with("0x"));

    // Bad parameters name themselves; errors from the render name theirs.
    for (query, field) in [
        ("image/blur,r_51,s_1", "r"),
        // The campaign's case: the value is named, not the action.
        ("image/blur,r_0", "r"),
        ("image/crop,x_400", "x"),
        ("image/rotate,361", "rotate"),
        ("image/format,avif", "format"),
        ("image/bright,-101", "bright"),
    ] {
        let r = get(format!("/img/photo.png?x-oss-process={query}")).await;
        assert_eq!(r.status(), 400, "{query}");
        assert_eq!(r.json::<serde_json::Value>().await.unwrap()["field"], field, "{query}");
    }
    // A long chain (watermark text) is stored under a hash of its canonical form.
    let long = format!("image/watermark,text_{}/resize,w_120", b64(&"长".repeat(60)));
    assert_eq!(get(format!("/img/photo.png?x-oss-process={long}")).await.status(), 200);
    assert_eq!(get(format!("/img/photo.png?x-oss-process={long}")).await.headers()["x-cache"], "HIT");
    // The original is still the original.
    let bare = get("/img/photo.png".into()).await;
    assert_eq!(dimensions(&bare.bytes().await.unwrap()), (400, 300));
}

/// A gateway in this process with these image settings, and a rule `/img` on `origin`.
async fn image_gateway(
    origin: &RunningOrigin,
    settings: &[(&str, &str)],
) -> (crate::support::Server, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let mut e = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_MIRROR_ADDR".into(), "127.0.0.1:0".into());
    for (k, v) in settings {
        e.insert((*k).into(), (*v).into());
    }
    let server = crate::support::Server::start_with(e, None).await;
    server
        .put_ok(
            "/admin/v1/mirror/rules/img",
            json!({"path_prefix": "/img", "origin": format!("{}/bucket", origin.url())}),
        )
        .await;
    (server, tmp)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mirror_renders_refused_when_memory_is_short_and_kept_when_a_client_hangs_up() {
    let origin = RunningOrigin::start().await;
    // 1500×1500 random RGBA: 9 MB stored, 9 MB decoded.
    origin.origin.put("/bucket/big.png", noise_png(1500, 1500), "image/png");
    let renders = |server: &crate::support::Server| {
        let url = server.url("/metrics");
        let http = server.http.clone();
        async move {
            let text = http.get(url).send().await.unwrap().text().await.unwrap();
            text.lines()
                .find_map(|l| l.strip_prefix("httpdns_mirror_renders_total{rule=\"img\"} "))
                .map_or(0, |v| v.parse::<u64>().unwrap())
        }
    };

    // A render that needs more than the whole budget is refused, not run.
    let (server, _tmp) = image_gateway(&origin, &[("HTTPDNS_MIRROR_IMAGE_MEMORY_MB", "16")]).await;
    let r = server
        .http
        .get(server.mirror_url("/img/big.png?x-oss-process=image/resize,w_100"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("image memory budget"), "{body}");
    assert_eq!(renders(&server).await, 0);
    drop(server);

    // Room for one render (each of these estimates about 63 MB) and no wait: of two different
    // variants asked at once, one renders and the other is told to come back.
    let (server, _tmp) = image_gateway(
        &origin,
        &[("HTTPDNS_MIRROR_IMAGE_MEMORY_MB", "100"), ("HTTPDNS_MIRROR_IMAGE_WAIT_MS", "0")],
    )
    .await;
    assert_eq!(server.http.get(server.mirror_url("/img/big.png")).send().await.unwrap().status(), 200);
    let ask = |w: u32| {
        let url = server.mirror_url(&format!("/img/big.png?x-oss-process=image/blur,r_2,s_2/resize,w_{w}"));
        let http = server.http.clone();
        async move {
            let r = http.get(url).send().await.unwrap();
            (r.status().as_u16(), r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned()))
        }
    };
    let (a, b) = tokio::join!(ask(100), ask(101));
    let mut statuses = [a.clone(), b.clone()];
    statuses.sort();
    assert_eq!(statuses, [(200, None), (503, Some("1".to_owned()))], "{a:?} {b:?}");
    assert_eq!(renders(&server).await, 1);
    drop(server);

    // A client that hangs up does not cancel the render the others wait for.
    let (server, _tmp) = image_gateway(&origin, &[]).await;
    let url = server.mirror_url("/img/big.png?x-oss-process=image/blur,r_3,s_2/resize,w_120");
    let hung_up = server.http.get(&url).timeout(Duration::from_millis(150)).send().await;
    assert!(hung_up.is_err(), "the first client gave up before the render ended");
    let second = server.http.get(&url).send().await.unwrap();
    assert_eq!(second.status(), 200);
    let coalesced = second.headers().contains_key("x-cache-coalesced");
    let cache = second.headers()["x-cache"].to_str().unwrap().to_owned();
    assert_eq!(dimensions(&second.bytes().await.unwrap()).0, 120);
    assert!(coalesced || cache == "HIT", "joined the running render or read what it stored");
    assert_eq!(renders(&server).await, 1, "the abandoned render was not started again");
}
