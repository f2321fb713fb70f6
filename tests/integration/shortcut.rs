//! The API listener answers `GET /d` and the config center's `GET` through a shortcut before
//! the router (`httpdns_api::shortcut`). The routed handlers answer the same requests on a
//! listener without it (and serve `POST` and `HEAD` everywhere): both must give the same
//! status, headers and body, whatever the request.

use std::sync::Arc;

use httpdns_auth::{encrypt, Alg};
use httpdns_core::cidr::CidrTable;
use httpdns_net::http::HttpListener;
use httpdns_net::{ConnLimits, ConnRegistry, NetMetrics, Timeouts};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::{Db, Server};

/// Serves `state` through the router alone on a loopback port of its own.
async fn routed_only(state: httpdns_api::AppState, shutdown: &CancellationToken) -> String {
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
    let router = httpdns_api::router_with(state, true);
    tokio::spawn(httpdns_net::http::serve(listener, settings, router, shutdown.clone()));
    format!("http://{addr}")
}

/// Status, every header but `date`, and body.
async fn fetch(
    http: &reqwest::Client,
    url: &str,
    etag: Option<&str>,
) -> (u16, Vec<(String, String)>, String) {
    let mut req = http.get(url);
    if let Some(e) = etag {
        req = req.header("if-none-match", e);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let mut headers: Vec<(String, String)> = resp
        .headers()
        .iter()
        .filter(|(k, _)| *k != "date")
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("<binary>").to_owned()))
        .collect();
    headers.sort();
    (status, headers, resp.text().await.unwrap())
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
    let routed = routed_only(s.running().state.clone(), &shutdown).await;
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
    shutdown.cancel();
}
