use super::*;

#[test]
fn alibaba_signature_vector() {
    // From docs/api.md (Alibaba's documented example).
    assert_eq!(sign("www.aliyun.com", "IAmASecret", 1534316400), "60c71e98b6d7fcbb366243e224eab457");
}

#[test]
fn parses_answers_and_drops_garbage_addresses() {
    let a = parse_answer(
        br#"{"dns":[{"host":"a.example.com","client_ip":"1.0.2.7","ips":["2.2.2.1","nonsense"],
                "ipsv6":["2402:4e00::1"],"ttl":60,"origin_ttl":60,"client_isp":"unicom",
                "ip_isp":{"2.2.2.1":"unicom","2402:4e00::1":"telecom"}}]}"#,
    )
    .unwrap();
    assert_eq!(a.ips, vec!["2.2.2.1".parse::<IpAddr>().unwrap(), "2402:4e00::1".parse().unwrap()]);
    assert_eq!(a.ttl, 60);
    assert_eq!(a.client_isp.as_deref(), Some("unicom"));
    assert_eq!(a.ip_isp.get(&"2402:4e00::1".parse().unwrap()).map(String::as_str), Some("telecom"));
    assert!(parse_answer(b"{}").is_err());
    assert!(parse_answer(br#"{"dns":[]}"#).is_err());
}

#[test]
fn parses_every_name_of_a_batch() {
    let all = parse_answers(
        br#"{"dns":[{"host":"WWW.example.com.","type":1,"ips":["1.1.1.1"],"ttl":60},
                {"host":"www.example.com","type":28,"ips":["2402:4e00::1"],"ttl":50},
                {"host":"b.example.com","type":1,"ips":[],"ttl":30},
                {"host":"b.example.com","type":28,"ips":[],"ttl":30}]}"#,
    )
    .unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].0, "www.example.com");
    assert_eq!(all[0].1.ips, vec!["1.1.1.1".parse::<IpAddr>().unwrap(), "2402:4e00::1".parse().unwrap()]);
    assert_eq!(all[0].1.ttl, 50, "the smaller TTL of a name's entries");
    assert_eq!((all[1].0.as_str(), all[1].1.ips.len(), all[1].1.ttl), ("b.example.com", 0, 30));
}

#[test]
fn parses_service_ips_with_ports() {
    let base: Url = "https://203.0.113.1:8443".parse().unwrap();
    let got = parse_service_ips(
        br#"{"service_ip":["203.0.113.7","bad","203.0.113.8"],"service_ip_port":[0,1,8080],
                "service_ipv6":["2001:db8::7"],"service_ipv6_port":[8443]}"#,
        &base,
    )
    .unwrap();
    let got: Vec<&str> = got.iter().map(Url::as_str).collect();
    assert_eq!(got, ["https://203.0.113.7/", "https://203.0.113.8:8080/", "https://[2001:db8::7]:8443/"]);
    assert!(parse_service_ips(b"[]", &base).is_err());
    assert!(parse_service_ips(br#"{"dns":[]}"#, &base).is_err(), "not a /ss answer");
}

/// A loopback service answering `/ss` with `ss` and `/resolve` with a fixed answer,
/// counting both.
async fn ss_server(ss: String) -> (Url, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let app = axum::Router::new().fallback(move |uri: http::Uri| {
        let (s, ss) = (s.clone(), ss.clone());
        async move {
            s.lock().push(uri.to_string());
            if uri.path().ends_with("/ss") {
                ss
            } else {
                r#"{"dns":[{"host":"a.example.com","ips":["1.1.1.1"],"ttl":60}]}"#.to_owned()
            }
        }
    });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (format!("http://{addr}").parse().unwrap(), seen)
}

#[tokio::test]
async fn service_ips_replace_the_list_and_keep_the_configured_ones_last() {
    // The replica the list names (another loopback server) and the bootstrap one.
    let (replica, replica_seen) = ss_server("{}".into()).await;
    let port = replica.port().unwrap();
    let ss = format!(r#"{{"service_ip":["127.0.0.1"],"service_ip_port":[{port}]}}"#);
    let (boot, boot_seen) = ss_server(ss).await;
    let svc = Service::new(ServiceOptions {
        servers: vec!["http://127.0.0.1:1".parse().unwrap(), boot.clone()],
        account: Some(Account { id: 100000, secret: "IAmASecret".into() }),
        ..Default::default()
    });
    // The dead first address is skipped for the bootstrap one.
    assert!(svc.query("a.example.com").await.is_ok());
    let list = svc.refresh_service_ips().await.unwrap();
    assert_eq!(list, vec![replica.clone(), "http://127.0.0.1:1".parse().unwrap(), boot.clone()]);
    assert!(boot_seen.lock().iter().any(|u| u == "/100000/ss"), "{:?}", boot_seen.lock());
    // Lookups now go to the replica first, with the families asked.
    let got = svc.query_many(&["a.example.com".into()], IpStack::V4).await.unwrap();
    assert_eq!(got["a.example.com"].server, replica.to_string());
    let asked = replica_seen.lock().last().cloned().unwrap();
    assert!(asked.contains("query=4&") && asked.contains("/100000/sign_resolve"), "{asked}");
    // A failed refresh keeps the list.
    let dead = Service::new(ServiceOptions {
        servers: vec!["http://127.0.0.1:1".parse().unwrap()],
        ..Default::default()
    });
    assert_eq!(dead.refresh_service_ips().await, None);
    assert_eq!(dead.servers().len(), 1);
}

#[tokio::test]
async fn a_refresh_ends_sniff_mode() {
    let (boot, _) = ss_server(r#"{"service_ip":[]}"#.into()).await;
    let svc = Service::new(ServiceOptions {
        servers: vec!["http://127.0.0.1:1".parse().unwrap(), boot.clone()],
        ..Default::default()
    });
    *svc.all_failed_at.lock() = Some((Instant::now(), Fault::Connect));
    assert_eq!(svc.query("a.example.com").await, Err(Unavailable::Sniffing(Fault::Connect)));
    // An empty list from /ss: the configured addresses, sniff mode over.
    assert_eq!(svc.refresh_service_ips().await.unwrap().len(), 2);
    assert!(svc.query("a.example.com").await.is_ok());
}

#[tokio::test]
async fn unreachable_addresses_enter_sniff_mode() {
    // Port 1 on loopback refuses at once.
    let svc = Service::new(ServiceOptions {
        servers: vec!["http://127.0.0.1:1".parse().unwrap()],
        sniff_interval: Duration::from_secs(30),
        ..Default::default()
    });
    assert!(matches!(svc.query("a.example.com").await, Err(Unavailable::Failed(Fault::Connect, _))));
    assert_eq!(svc.query("a.example.com").await, Err(Unavailable::Sniffing(Fault::Connect)));
}

#[tokio::test]
async fn a_name_failure_is_not_a_server_failure() {
    let app = axum::Router::new().fallback(|| async {
        (
            http::StatusCode::BAD_GATEWAY,
            r#"{"code":"InternalError","error":"upstream DNS resolution failed"}"#,
        )
    });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    let svc = Service::new(ServiceOptions {
        servers: vec![format!("http://{addr}").parse().unwrap()],
        ..Default::default()
    });
    assert!(matches!(svc.query("broken.example.com").await, Err(Unavailable::Refused(_))));
    // Not sniffing: the next name is asked.
    assert!(matches!(svc.query("other.example.com").await, Err(Unavailable::Refused(_))));
}
