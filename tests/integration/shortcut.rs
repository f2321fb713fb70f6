//! The API listener answers `GET /d` and the config center's `GET` through a shortcut before
//! the router (`httpdns_api::shortcut`). The routed handlers answer the same requests on a
//! listener without it (and serve `POST` and `HEAD` everywhere): both must give the same
//! status, headers and body, whatever the request.

use std::sync::Arc;

use axum::http::{HeaderMap, Method, Uri};
use httpdns_auth::{encrypt, Alg};
use httpdns_core::cidr::CidrTable;
use httpdns_net::http::{Answer, Head, HttpListener, Shortcut as _};
use httpdns_net::{ConnLimits, ConnRegistry, NetMetrics, Timeouts};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::origin::RunningOrigin;
use crate::support::{env, Db, Server};

/// Serves `router` alone on a loopback port of its own.
fn routed_only(router: axum::Router, shutdown: &CancellationToken) -> String {
    let listener = httpdns_net::bind_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    let none = Arc::new(CidrTable::new([]));
    let settings = HttpListener {
        registry: ConnRegistry::new(ConnLimits::for_descriptors(4096), none.clone()),
        metrics: NetMetrics::new(&prometheus::Registry::new()).listener("routed"),
        timeouts: Timeouts::default(),
        trusted_proxies: none,
        tls: None,
    };
    tokio::spawn(httpdns_net::http::serve(listener, settings, router, shutdown.clone()));
    format!("http://{addr}")
}

/// Status, every header but `date`, and body.
async fn fetch(
    http: &reqwest::Client,
    url: &str,
    etag: Option<&str>,
) -> (u16, Vec<(String, String)>, String) {
    let with: Vec<(&str, &str)> = etag.map(|e| ("if-none-match", e)).into_iter().collect();
    fetch_with(http, url, &with).await
}

/// [`fetch`] with request headers.
async fn fetch_with(
    http: &reqwest::Client,
    url: &str,
    with: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, String) {
    let mut req = http.get(url);
    for (k, v) in with {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let mut headers: Vec<(String, String)> = resp
        .headers()
        .iter()
        // Clocks: `date`, and a copy's `age` in whole seconds, may tick between two fetches.
        .filter(|(k, _)| *k != "date" && *k != "age")
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("<binary>").to_owned()))
        .collect();
    headers.sort();
    (status, headers, String::from_utf8_lossy(&resp.bytes().await.unwrap()).into_owned())
}

#[tokio::test]
async fn the_shortcut_answers_exactly_as_the_router() {
    let s = Server::start(&Db::Sqlite).await;
    s.seed().await;
    s.put_ok("/admin/v1/accounts/42", json!({"secret": "dnspodpass"})).await;
    s.put_ok(
        "/admin/v1/config/cdn",
        json!({"mergeHostConfigs": [{"host": "image.xxx.com", "pathPrefix": "/image", "rate": 1}],
            "hostListConfig": [{"host": "cdn.xxx.com", "rate": 1}], "reviveProbeInterval": 600000,
            "configRequestInterval": 600000, "publicIpList": ["223.5.5.5"]}),
    )
    .await;
    let shutdown = CancellationToken::new();
    let routed = routed_only(httpdns_api::router_with(&s.running().api, true), &shutdown);
    let http = httpdns_test_support::http::client();

    let config = "/app/config-center/module-config?module=cdn";
    let etag = http
        .get(s.url(config))
        .send()
        .await
        .unwrap()
        .headers()
        .get("etag")
        .expect("a published module has an ETag")
        .to_str()
        .unwrap()
        .to_owned();
    let des = encrypt(Alg::Des, "dnspodpass", b"www.example.com").unwrap();
    let cases: Vec<(String, Option<&str>)> = vec![
        ("/d?dn=www.example.com&ip=1.0.1.7".into(), None),
        ("/d?dn=www.example.com&ip=1.0.2.7&ttl=1&clientip=1".into(), None),
        ("/d?dn=WWW.Example.COM.&ip=1.0.1.7&query=1".into(), None),
        ("/d?dn=www.example.com&ip=1.0.1.7&type=aaaa&ttl=1".into(), None),
        ("/d?dn=www.example.com&ip=1.0.1.7&type=addrs&ttl=1".into(), None),
        ("/d?dn=www.example.com,nx.example.org&ip=1.0.2.7&ttl=1".into(), None),
        ("/d?dn=nx.example.org".into(), None),
        ("/d?dn=www.example.com&ip=not-an-ip".into(), None),
        ("/d?dn=www%2Eexample%2Ecom&ip=1.0.1.7".into(), None),
        ("/d?dn=www.example.com;1".into(), None),
        ("/d?dn=-bad-.example.com".into(), None),
        ("/d?ip=1.0.1.7".into(), None),
        ("/d?dn=www.example.com&type=mx".into(), None),
        (format!("/d?dn={des}&id=42&ip=1.0.1.7&ttl=1"), None),
        ("/d?dn=87ae992c1321f299da3c0210a9900ae7&id=43".into(), None),
        ("/d?dn=www.example.com&token=secret".into(), None),
        (config.into(), Some(etag.as_str())),
        (config.into(), Some("\"other\"")),
        (config.into(), None),
        ("/app/config-center/module-config?module=nope".into(), None),
        ("/app/config-center/module-config".into(), None),
        ("/app/config-center/module-config?module=Bad%20Name".into(), None),
    ];
    for (path, etag) in &cases {
        let short = fetch(&http, &s.url(path), *etag).await;
        let router = fetch(&http, &format!("{routed}{path}"), *etag).await;
        assert_eq!(short, router, "{path} (If-None-Match {etag:?})");
    }
    // The cases reach what they are meant to: answers, a 304, and errors naming their field.
    let statuses: Vec<u16> = {
        let mut v = Vec::new();
        for (path, etag) in &cases {
            v.push(fetch(&http, &s.url(path), *etag).await.0);
        }
        v
    };
    assert_eq!(
        statuses,
        [
            200, 200, 200, 200, 200, 200, 200, 200, 200, 401, 400, 400, 400, 200, 401, 403, 304, 200, 200,
            404, 400, 400
        ]
    );
    assert_eq!(fetch(&http, &s.url(&cases[0].0), None).await.2, "1.1.1.1;1.1.1.2");

    // The shortcut itself: it answers a GET of either path, and leaves the rest to the router.
    let api = &s.running().api;
    let hot = httpdns_api::shortcut::HotRoutes { answers: api.answers.clone(), apps: api.apps.clone() };
    let headers = HeaderMap::new();
    let ask = |method: &Method, uri: &str| {
        let uri: Uri = uri.parse().unwrap();
        let head =
            Head { method, uri: &uri, headers: &headers, peer: "127.0.0.1:9".parse().unwrap(), secure: None };
        match hot.answer(&head) {
            None => None,
            Some(Answer::Ready(r)) => Some((r.status().as_u16(), r.into_body())),
            Some(Answer::Later(_)) => panic!("{uri}: nothing here is asked upstream"),
        }
    };
    assert_eq!(ask(&Method::GET, &cases[0].0), Some((200, "1.1.1.1;1.1.1.2".into())));
    assert_eq!(ask(&Method::GET, config).map(|r| r.0), Some(200));
    assert_eq!(ask(&Method::GET, "/d?ip=1.0.1.7").map(|r| r.0), Some(400));
    assert_eq!(ask(&Method::POST, &cases[0].0), None);
    assert_eq!(ask(&Method::HEAD, &cases[0].0), None);
    assert_eq!(ask(&Method::GET, "/resolve?host=www.example.com"), None);
    shutdown.cancel();
}

/// The mirror listener's shortcut (`httpdns_mirror::HotHits`) serves hits whose body is in
/// memory; the router serves everything else, and the same hits when it is alone.
#[tokio::test]
async fn mirror_hits_from_the_shortcut_equal_the_routers() {
    let origin = RunningOrigin::start().await;
    let body: Vec<u8> = (0..1000u32).map(|i| b'a' + (i % 26) as u8).collect();
    origin.origin.put("/o/r.txt", body.clone(), "text/plain");
    origin.origin.put("/o/img.png", crate::origin::png(8, 8), "image/png");
    let tmp = tempfile::tempdir().unwrap();
    let mut env = env(tmp.path(), &Db::Sqlite);
    env.insert("HTTPDNS_MIRROR_ADDR".into(), "127.0.0.1:0".into());
    let s = Server::start_with(env, None).await;
    let rule = json!({"path_prefix": "/r", "origin": format!("{}/o", origin.url()), "image_process": true});
    s.put_ok("/admin/v1/mirror/rules/r", rule).await;
    let http = httpdns_test_support::http::client();
    // The variant too: rendered once, then stored, on both sides alike.
    for path in ["/r/r.txt", "/r/img.png", "/r/img.png?x-oss-process=image/resize,w_4"] {
        let mut stored = false;
        for _ in 0..150 {
            let r = http.get(s.mirror_url(path)).send().await.unwrap();
            if r.headers().get("x-cache").is_some_and(|v| v == "HIT") {
                stored = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(stored, "{path} is stored");
    }
    let shutdown = CancellationToken::new();
    let routed = routed_only(httpdns_mirror::router(s.running().mirror.clone()), &shutdown);
    let full = http.get(s.mirror_url("/r/r.txt")).send().await.unwrap();
    let etag = full.headers()["etag"].to_str().unwrap().to_owned();
    let modified = full.headers()["last-modified"].to_str().unwrap().to_owned();
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("/r/r.txt", vec![]),
        ("/r/r.txt", vec![("range", "bytes=0-9")]),
        ("/r/r.txt", vec![("range", "bytes=990-")]),
        ("/r/r.txt", vec![("range", "bytes=-5")]),
        ("/r/r.txt", vec![("range", "bytes=5000-6000")]),
        // Several ranges: the whole object (RFC 9110 lets a server ignore Range).
        ("/r/r.txt", vec![("range", "bytes=0-1,5-6")]),
        ("/r/r.txt", vec![("if-none-match", etag.as_str())]),
        ("/r/r.txt", vec![("if-none-match", "\"other\"")]),
        ("/r/r.txt", vec![("if-modified-since", modified.as_str())]),
        ("/r/r.txt", vec![("if-range", etag.as_str()), ("range", "bytes=3-4")]),
        ("/r/r.txt", vec![("if-range", "\"old\""), ("range", "bytes=3-4")]),
        ("/r/r.txt?a=1", vec![]),
        ("/r/img.png", vec![]),
        ("/r/img.png?x-oss-process=image/resize,w_4", vec![]),
        ("/r/nothing-here.txt", vec![]),
        ("/r/%2e%2e/secret", vec![]),
        ("/elsewhere/r.txt", vec![]),
    ];
    let hits = || async {
        let text = http.get(s.url("/metrics")).send().await.unwrap().text().await.unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("httpdns_mirror_requests_total{result=\"hit\",rule=\"r\"} "))
            .map_or(0.0, |v| v.parse::<f64>().unwrap())
    };
    let hits_before = hits().await;
    let mut statuses = Vec::new();
    for (path, with) in &cases {
        let short = fetch_with(&http, &s.mirror_url(path), with).await;
        let router = fetch_with(&http, &format!("{routed}{path}"), with).await;
        assert_eq!(short.0, router.0, "{path} {with:?}");
        assert_eq!(short.2, router.2, "{path} {with:?}");
        assert_eq!(short.1, router.1, "{path} {with:?}");
        statuses.push(short.0);
    }
    assert_eq!(
        statuses,
        [200, 206, 206, 206, 416, 200, 304, 200, 304, 206, 200, 200, 200, 200, 404, 404, 404]
    );
    // Each request is counted once, whichever side answered it: the 12 of r.txt and the one of
    // img.png are hits, on both listeners.
    assert_eq!(hits().await - hits_before, 26.0);

    // The shortcut itself: a stored copy in memory, and nothing else.
    let hot = httpdns_mirror::HotHits(s.running().mirror.clone());
    let ask = |method: &Method, uri: &str, headers: &HeaderMap| {
        let uri: Uri = uri.parse().unwrap();
        let head = Head { method, uri: &uri, headers, peer: "127.0.0.1:9".parse().unwrap(), secure: None };
        match hot.answer(&head) {
            None => None,
            Some(Answer::Ready(r)) => {
                Some((r.status().as_u16(), r.headers()["x-cache"].clone(), r.into_body()))
            }
            Some(Answer::Later(_)) => panic!("{uri}: a hit never waits"),
        }
    };
    let none = HeaderMap::new();
    let (status, cache, got) = ask(&Method::GET, "/r/r.txt", &none).expect("a hit in memory");
    assert_eq!((status, cache.to_str().unwrap(), &got[..]), (200, "HIT", &body[..]));
    let mut range = HeaderMap::new();
    range.insert("range", "bytes=-5".parse().unwrap());
    assert_eq!(
        ask(&Method::GET, "/r/r.txt", &range).map(|r| (r.0, r.2)),
        Some((206, body[995..].to_vec().into()))
    );
    range.insert("range", "bytes=5000-6000".parse().unwrap());
    assert!(ask(&Method::GET, "/r/r.txt", &range).is_none(), "a range that cannot be met");
    assert!(ask(&Method::HEAD, "/r/r.txt", &none).is_none());
    assert!(ask(&Method::GET, "/r/nothing-here.txt", &none).is_none());
    assert!(ask(&Method::GET, "/r/img.png?x-oss-process=image/resize,w_4", &none).is_none());
    assert!(ask(&Method::GET, "/elsewhere/r.txt", &none).is_none());
    shutdown.cancel();
}
