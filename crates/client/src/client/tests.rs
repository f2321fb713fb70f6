//! `/feedback` reports of the connections a client opens, against loopback servers: a
//! service that answers every name with 127.0.0.1 and collects reports, and a CDN host.
use super::*;
use serde_json::Value;

async fn serve(app: axum::Router) -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    addr
}

#[tokio::test]
async fn connections_are_reported_to_feedback() {
    let reports = Arc::new(Mutex::new(Vec::<(String, Value)>::new()));
    let r2 = reports.clone();
    let service = serve(axum::Router::new().fallback(move |uri: http::Uri, body: axum::body::Bytes| {
        let reports = r2.clone();
        async move {
            if uri.path() == "/feedback" {
                let v: Value = serde_json::from_slice(&body).unwrap();
                reports.lock().push((uri.query().unwrap_or("").to_owned(), v));
                return (http::StatusCode::ACCEPTED, String::new());
            }
            if uri.path().ends_with("/ss") {
                return (http::StatusCode::NOT_FOUND, String::new());
            }
            (http::StatusCode::OK, r#"{"dns":[{"ips":["127.0.0.1"],"ttl":600}]}"#.to_owned())
        }
    }))
    .await;
    let cdn = serve(axum::Router::new().fallback(|| async { "image" })).await;
    let mut o = ClientOptions { device_id: "d1".into(), events: None, ..Default::default() };
    o.resolver.service.servers = vec![format!("http://{service}").parse().unwrap()];
    o.resolver.service.account = Some(crate::Account { id: 100000, secret: "IAmASecret".into() });
    o.resolver.allow_private = true;
    o.resolver.local_dns = crate::LocalDns::Off;
    let client = CdnClient::new(o).unwrap();
    client.resolver().set_network("wifi:home");
    let port = cdn.port();
    for _ in 0..3 {
        let f = client.get(&format!("http://img.example.com:{port}/a.jpg")).await.unwrap();
        assert_eq!(f.response.text().await.unwrap(), "image");
    }
    // Nothing listens on port 1: a failed connection to the name's address.
    assert!(client.get("http://dead.example.com:1/a.jpg").await.is_err());
    // An IP literal is not a domain's node: no report.
    client.get(&format!("http://127.0.0.1:{port}/a.jpg")).await.unwrap();
    let feedback = client.feedback().unwrap();
    assert_eq!(feedback.flush().await.unwrap(), 2);
    let got = reports.lock().clone();
    assert_eq!(got.len(), 1, "one batch");
    let (query, body) = &got[0];
    assert!(query.starts_with("account=100000&t=") && query.contains("&s="), "signed: {query}");
    let list = body["reports"].as_array().unwrap();
    // Three requests, one connection (kept alive): one report for the live node.
    let ok = &list[0];
    assert_eq!(
        (ok["ip"].as_str(), ok["domain"].as_str(), ok["ok"].as_bool()),
        (Some("127.0.0.1"), Some("img.example.com"), Some(true))
    );
    assert!(ok["connect_ms"].as_u64().unwrap() < 2000);
    assert_eq!(ok["network"], "wifi");
    let failed = &list[1];
    assert_eq!(
        failed,
        &serde_json::json!({"ip": "127.0.0.1", "domain": "dead.example.com", "ok": false, "network": "wifi"})
    );
    // Off: no reporter, no layer.
    let client = CdnClient::new(ClientOptions { feedback: None, ..Default::default() }).unwrap();
    assert!(client.feedback().is_none());
}
