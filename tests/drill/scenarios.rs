//! The faults of the drill table, one function each. Each returns its report row and panics
//! (failing the drill) when a promise is broken.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use httpdns_client::{CdnClient, ClientOptions, EventOptions, LocalDns, Path, Route};
use serde_json::json;

use crate::topology::{self, Topology, LB_503, LB_INVALID, LB_PASS, LB_WRONG_ISP};
use crate::Row;

/// Requests per scenario.
const N: usize = 40;

pub(crate) async fn run_all() -> Vec<Row> {
    let t = Topology::start().await;
    let mut rows = Vec::new();
    macro_rules! run {
        ($f:ident) => {{
            let row = $f(&t).await;
            crate::print_row(&row);
            rows.push(row);
        }};
    }
    run!(baseline);
    run!(service_503);
    run!(service_not_listening);
    run!(invalid_ips);
    run!(wrong_isp);
    run!(half_the_nodes_dead);
    run!(unified_host_5xx);
    run!(unified_host_refused);
    run!(all_hosts_down);
    run!(origin_down);
    run!(revival);
    run!(config_publish_mid_run);
    run!(offline_device);
    run!(fleet_view);
    for row in crate::places::run(&t).await {
        crate::print_row(&row);
        rows.push(row);
    }
    rows
}

fn options(t: &Topology, device: &str) -> ClientOptions {
    let mut o = ClientOptions { device_id: device.into(), ..Default::default() };
    o.resolver.service.servers = vec![t.lb_url().parse().unwrap()];
    o.resolver.service.timeout = Duration::from_secs(1);
    o.resolver.local_dns = LocalDns::Servers(vec![t.local.addrs["dns"]]);
    o.resolver.local_timeout = Duration::from_secs(1);
    o.resolver.allow_private = true;
    o.config.url =
        Some(format!("{}/app/config-center/module-config?module=cdn", t.server.base()).parse().unwrap());
    o.config.public_key = Some(t.public_key.clone());
    o.connect_timeout = Duration::from_secs(1);
    o.request_timeout = Duration::from_secs(5);
    o.network_probe_port = t.public.addr.port();
    o.network_probe_timeout = Duration::from_millis(300);
    o.revive_interval = Some(Duration::from_millis(300));
    o.config_interval = Some(Duration::from_millis(200));
    // Every request and every HTTPDNS answer reported (a phone samples 1%), straight to the
    // service: the load balancer's faults are the drill's, not the reporting's.
    o.events = Some(EventOptions {
        url: Some(format!("{}/app/events", t.server.base()).parse().unwrap()),
        request_sample_rate: 1.0,
        localdns_sample_rate: 1.0,
        ..Default::default()
    });
    o
}

/// A client with the current config document.
async fn client(t: &Topology, device: &str) -> CdnClient {
    let c = CdnClient::new(options(t, device)).unwrap();
    c.config().refresh().await.expect("config fetched");
    t.reporters.lock().push(c.events().expect("reporting on").clone());
    c
}

/// What one user request saw.
struct Seen {
    ok: bool,
    host: String,
    route: Route,
    switched: bool,
    switch_time: Duration,
    total: Duration,
    paths: Vec<Path>,
    ips: Vec<IpAddr>,
    error: String,
}

/// `GET` object `i` through the client; ok = 200 with the right bytes.
async fn fetch(t: &Topology, c: &CdnClient, i: usize) -> Seen {
    let started = Instant::now();
    match c.get(&t.url(i)).await {
        Ok(f) => {
            let status = f.response.status();
            let (host, route, switched, switch_time) =
                (f.host.clone(), f.route, f.switched(), f.switch_time());
            let paths = f.attempts.iter().filter_map(|a| a.resolved.as_ref().map(|r| r.0)).collect();
            let ips =
                f.attempts.iter().filter_map(|a| a.resolved.as_ref()).flat_map(|r| r.1.clone()).collect();
            let attempts: Vec<_> = f.attempts.iter().map(|a| (a.url.clone(), a.outcome.clone())).collect();
            let body = f.response.bytes().await.unwrap_or_default();
            let ok = status == 200 && body.as_ref() == topology::object(i % topology::OBJECTS).as_slice();
            Seen {
                ok,
                host,
                route,
                switched,
                switch_time,
                total: started.elapsed(),
                paths,
                ips,
                error: format!("status {status}, attempts {attempts:?}"),
            }
        }
        Err(e) => Seen {
            ok: false,
            host: String::new(),
            route: Route::Direct,
            switched: false,
            switch_time: Duration::ZERO,
            total: started.elapsed(),
            paths: vec![],
            ips: vec![],
            error: e.to_string(),
        },
    }
}

/// Asserts that vendor `v` served `s`, saying what happened otherwise.
#[track_caller]
fn served_by(t: &Topology, s: &Seen, v: usize) {
    assert_eq!(
        t.vendor_of(&s.host),
        Some(v),
        "expected vendor {v}: host {:?}, ok {}, {}",
        s.host,
        s.ok,
        s.error
    );
}

fn row(fault: &'static str, what: &'static str) -> Row {
    Row { fault, requests: 0, failed: 0, switched: 0, times: vec![], what, note: String::new() }
}

fn count(r: &mut Row, s: &Seen) {
    r.requests += 1;
    if !s.ok {
        r.failed += 1;
        eprintln!("drill: {} request failed: {}", r.fault, s.error);
    }
    if s.switched {
        r.switched += 1;
    }
}

async fn baseline(t: &Topology) -> Row {
    let mut r = row("none (baseline)", "request time");
    let c = client(t, "device-0001").await;
    for i in 0..N {
        let s = fetch(t, &c, i).await;
        assert_eq!(s.route, Route::Unified);
        served_by(t, &s, 0);
        count(&mut r, &s);
        r.times.push(s.total);
    }
    assert_eq!(r.switched, 0);
    r.note = "primary host, HTTPDNS answers; first request fills the mirror".into();
    r
}

/// The service behind its load balancer answers 503, or nothing listens: LocalDNS answers.
async fn service_down(t: &Topology, fault: &'static str) -> Row {
    let mut r = row(fault, "request time");
    let c = client(t, "device-0002").await;
    for i in 0..N {
        // A new network each time: nothing cached, every request needs a resolution.
        c.resolver().set_network(&format!("net-{fault}-{i}"));
        let s = fetch(t, &c, i).await;
        assert_eq!(s.paths.first(), Some(&Path::LocalDns), "{fault}: LocalDNS answered");
        count(&mut r, &s);
        r.times.push(s.total);
    }
    r.switched = r.requests;
    r.note = "every resolution fell back to LocalDNS (after the first, sniff mode skips the service)".into();
    r
}

async fn service_503(t: &Topology) -> Row {
    t.lb_mode.store(LB_503, Ordering::SeqCst);
    let r = service_down(t, "HTTPDNS answers 503").await;
    t.lb_mode.store(LB_PASS, Ordering::SeqCst);
    r
}

async fn service_not_listening(t: &Topology) -> Row {
    t.lb.stop();
    let r = service_down(t, "HTTPDNS not listening").await;
    t.lb.restart().await;
    r
}

async fn invalid_ips(t: &Topology) -> Row {
    // The server refuses such nodes, so it can never answer them.
    for ip in ["0.0.0.0", "255.255.255.255", "224.0.0.1", "240.0.0.1"] {
        let (status, body) = t
            .admin(
                &t.server.base(),
                axum::http::Method::PUT,
                "/admin/v1/nodes/bad",
                Some(json!({"ip": ip, "pool": "a",
                "isp": "unicom", "region": "shanghai"})),
            )
            .await;
        assert_eq!(status, 400, "{ip}: {body}");
        assert_eq!(body["field"], "ip");
    }
    // A corrupted answer in the path: the client drops every invalid address.
    t.lb_mode.store(LB_INVALID, Ordering::SeqCst);
    let mut r = row("invalid IPs in answers", "request time");
    let c = client(t, "device-0003").await;
    let mut dropped = 0;
    for i in 0..N {
        c.resolver().set_network(&format!("net-invalid-{i}"));
        let res = c.resolver().resolve("cdn-a.drill.test").await.unwrap();
        // From the service: just now, or by the re-resolve a network change starts on a task
        // of its own (which may win the race and fill the cache first).
        assert!(matches!(res.path, Path::HttpDns | Path::Cache), "{res:?}");
        assert!(
            res.ips.iter().all(|ip| httpdns_core::ip::classify(*ip) != httpdns_core::ip::IpClass::Invalid),
            "{res:?}"
        );
        dropped += res.dropped.len();
        let s = fetch(t, &c, i).await;
        assert!(s.ips.iter().all(|ip| !ip.is_unspecified() && !ip.is_multicast()), "{:?}", s.ips);
        count(&mut r, &s);
        r.times.push(s.total);
    }
    t.lb_mode.store(LB_PASS, Ordering::SeqCst);
    assert_eq!(dropped, N * 6, "four IPv4 and two IPv6 invalid addresses per answer");
    // A hijacking LocalDNS answering private addresses for a public name: dropped too.
    let mut o = options(t, "device-0003");
    o.resolver.allow_private = false;
    o.resolver.service.servers = vec!["http://127.0.0.1:1".parse().unwrap()];
    let strict = httpdns_client::Resolver::new(o.resolver);
    let err = strict.resolve("hijacked.drill.test").await.unwrap_err().to_string();
    assert!(err.contains("no usable address"), "{err}");
    r.note =
        format!("{dropped} of {dropped} invalid addresses dropped (100%); hijacked private answers refused");
    r
}

async fn wrong_isp(t: &Topology) -> Row {
    // The server answers a Unicom client with Unicom nodes only.
    let body: serde_json::Value = t
        .http
        .get(format!("{}/resolve?host=cdn-a.drill.test&ip=127.0.0.1&labels=1", t.server.base()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ips: Vec<&str> =
        body["dns"][0]["ips"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(!ips.is_empty() && !ips.contains(&"127.0.0.15"), "server prefers same-carrier nodes: {body}");
    assert_eq!(body["dns"][0]["client_isp"], "unicom");
    // An answer with a Telecom node slipped in: the client filters it by its label.
    t.lb_mode.store(LB_WRONG_ISP, Ordering::SeqCst);
    let foreign = t.vendors[0].nodes.iter().find(|n| n.ip.to_string() == "127.0.0.15").unwrap();
    let before = foreign.hits.load(Ordering::SeqCst);
    let mut r = row("wrong-ISP nodes", "request time");
    let c = client(t, "device-0004").await;
    for i in 0..N {
        c.resolver().set_network(&format!("net-isp-{i}"));
        let s = fetch(t, &c, i).await;
        assert!(!s.ips.contains(&"127.0.0.15".parse().unwrap()), "{:?}", s.ips);
        count(&mut r, &s);
        r.times.push(s.total);
    }
    t.lb_mode.store(LB_PASS, Ordering::SeqCst);
    assert_eq!(foreign.hits.load(Ordering::SeqCst), before, "no request reached the other carrier's node");
    r.note =
        "server answers same-carrier nodes; a foreign node in the answer is dropped by the client".into();
    r
}

async fn half_the_nodes_dead(t: &Topology) -> Row {
    let a = &t.vendors[0];
    let dead: Vec<_> = a
        .nodes
        .iter()
        .filter(|n| ["127.0.0.13", "127.0.0.14"].contains(&n.ip.to_string().as_str()))
        .collect();
    let c = client(t, "device-0005").await;
    // Cache the answer with all four Unicom nodes first, then kill half of them.
    let before = c.resolver().resolve("cdn-a.drill.test").await.unwrap();
    assert_eq!(before.ips.len(), 4, "{before:?}");
    for n in &dead {
        n.standin.stop();
    }
    let mut r = row("half the nodes dead", "request time");
    for i in 0..N {
        let s = fetch(t, &c, i).await;
        assert_eq!(
            t.vendor_of(&s.host),
            Some(0),
            "the same host, its live nodes: host {:?}, {}",
            s.host,
            s.error
        );
        count(&mut r, &s);
        r.times.push(s.total);
    }
    // The server's health checks take the dead ones out of answers (interval 200 ms × 2).
    let started = Instant::now();
    loop {
        let text = t
            .http
            .get(format!("{}/d?dn=cdn-a.drill.test&ip=127.0.0.1", t.server.base()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if !text.contains("127.0.0.13") && !text.contains("127.0.0.14") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "dead nodes leave answers: {text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left = started.elapsed();
    for n in &dead {
        n.standin.restart().await;
    }
    r.note = format!(
        "the connector skips refused nodes; the server dropped them from answers {} ms later",
        left.as_millis()
    );
    r
}

/// Fresh clients (cold host state) meet a failing primary host, `N` times.
async fn primary_fails(t: &Topology, fault: &'static str) -> Row {
    let mut r = row(fault, "switch-over");
    for i in 0..N {
        let c = client(t, &format!("device-1{i:03}")).await;
        let s = fetch(t, &c, i).await;
        served_by(t, &s, 1);
        assert!(s.switched);
        count(&mut r, &s);
        r.times.push(s.switch_time);
        // The primary is now disabled: the next request goes straight to the second host.
        let s = fetch(t, &c, i + 1).await;
        assert!(!s.switched && t.vendor_of(&s.host) == Some(1));
        count(&mut r, &s);
        let states = c.host_states();
        assert!(states[0].1, "primary disabled: {states:?}");
    }
    r
}

async fn unified_host_5xx(t: &Topology) -> Row {
    t.vendors[0].set_5xx(true);
    let mut r = primary_fails(t, "unified host answers 5xx").await;
    t.vendors[0].set_5xx(false);
    r.note = "first request switches to the next host; later ones go there directly".into();
    r
}

async fn unified_host_refused(t: &Topology) -> Row {
    t.vendors[0].stop();
    let mut r = primary_fails(t, "unified host refuses connections").await;
    t.vendors[0].restart().await;
    r.note = "network check (public address answers) allows disabling the host".into();
    r
}

async fn all_hosts_down(t: &Topology) -> Row {
    t.vendors[0].set_5xx(true);
    t.vendors[1].stop();
    t.vendors[2].set_5xx(true);
    let mut r = row("all unified hosts down", "switch-over");
    for i in 0..N / 2 {
        let c = client(t, &format!("device-2{i:03}")).await;
        let s = fetch(t, &c, i).await;
        assert_eq!(s.route, Route::Original, "the original URL is used");
        count(&mut r, &s);
        r.times.push(s.switch_time);
        let s = fetch(t, &c, i + 1).await;
        assert_eq!(s.route, Route::Original);
        assert!(!s.switched, "every host disabled: straight to the original URL");
        count(&mut r, &s);
    }
    t.vendors[0].set_5xx(false);
    t.vendors[1].restart().await;
    t.vendors[2].set_5xx(false);
    r.note = "three hosts tried, then the pre-convergence URL".into();
    r
}

async fn origin_down(t: &Topology) -> Row {
    let mirror = format!("http://{}", t.server.addrs["mirror"]);
    for i in 0..topology::OBJECTS {
        t.origin.origin.mode(&format!("/bucket/img/{i}.jpg"), crate::origin::Mode::Status(503));
    }
    let mut r = row("origin down", "request time");
    // Copies filled earlier keep being served.
    let c = client(t, "device-0006").await;
    for i in 0..N {
        let s = fetch(t, &c, i).await;
        served_by(t, &s, 0);
        count(&mut r, &s);
        r.times.push(s.total);
    }
    // A key never fetched: a clear 502 with a JSON body, and nothing stored.
    let key = topology::OBJECTS - 1;
    let resp = t.http.get(format!("{mirror}/image/img/{key}.jpg")).send().await.unwrap();
    assert_eq!(resp.status(), 502);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(body["code"].is_string(), "{body}");
    for i in 0..topology::OBJECTS {
        t.origin.origin.mode(&format!("/bucket/img/{i}.jpg"), crate::origin::Mode::Normal);
    }
    // Once the origin is back (the gateway may hold its failure briefly), the key is fetched
    // from the origin, whole: no failed answer was stored as the object.
    let before = t.origin.origin.requests(&format!("/bucket/img/{key}.jpg"));
    let recovered = Instant::now();
    loop {
        let resp = t.http.get(format!("{mirror}/image/img/{key}.jpg")).send().await.unwrap();
        if resp.status() == 200 {
            assert_eq!(resp.bytes().await.unwrap().as_ref(), topology::object(key).as_slice());
            break;
        }
        assert!(recovered.elapsed() < Duration::from_secs(10), "the gateway recovers: {}", resp.status());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        t.origin.origin.requests(&format!("/bucket/img/{key}.jpg")) > before,
        "fetched again, not served from a bad copy"
    );
    r.note = format!(
        "stored copies served; a miss is 502 with a JSON body; after recovery the miss is filled in {} ms",
        recovered.elapsed().as_millis()
    );
    r
}

async fn revival(t: &Topology) -> Row {
    let mut r = row("revival of the primary", "back on primary");
    for round in 0..5 {
        let c = client(t, &format!("device-3{round:03}")).await;
        let _bg = c.start().await;
        t.vendors[0].set_5xx(true);
        let s = fetch(t, &c, round).await;
        served_by(t, &s, 1);
        count(&mut r, &s);
        t.vendors[0].set_5xx(false);
        let restored = Instant::now();
        let mut i = 0;
        loop {
            let s = fetch(t, &c, i).await;
            count(&mut r, &s);
            if t.vendor_of(&s.host) == Some(0) {
                break;
            }
            assert!(restored.elapsed() < Duration::from_secs(10), "the primary comes back");
            i += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        r.times.push(restored.elapsed());
    }
    r.note = "HEAD probe every 300 ms (drill setting; the document's minimum is 10 s) re-enables it".into();
    r
}

async fn config_publish_mid_run(t: &Topology) -> Row {
    let c = client(t, "device-0007").await;
    let _bg = c.start().await;
    let mut r = row("config publish changes the host list", "publish to use");
    let stop_at = Instant::now() + Duration::from_millis(2500);
    let mut published = None;
    let mut first_on_c = None;
    let mut i = 0;
    while Instant::now() < stop_at {
        if published.is_none() && i == 20 {
            t.publish(&[2, 0, 1]).await;
            published = Some(Instant::now());
        }
        let s = fetch(t, &c, i).await;
        count(&mut r, &s);
        if let (Some(p), None, Some(2)) = (published, first_on_c, t.vendor_of(&s.host)) {
            first_on_c = Some(p.elapsed());
        }
        if published.is_none() {
            served_by(t, &s, 0);
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = first_on_c.expect("the new first host is used");
    r.times.push(took);
    t.publish(&[0, 1, 2]).await;
    r.note = format!("config polled every 200 ms; {} requests, none failed", r.requests);
    r
}

async fn offline_device(t: &Topology) -> Row {
    let mut r = row("network check fails (no public address answers)", "request time");
    let c = client(t, "device-0008").await;
    t.public.stop();
    t.vendors[0].stop();
    // The primary refuses and the network check fails: the host is not disabled (the seed's
    // rule for an offline device), and the request still tries the next host, since the check
    // itself may be what is blocked.
    let s = fetch(t, &c, 1).await;
    served_by(t, &s, 1);
    count(&mut r, &s);
    r.times.push(s.total);
    let states = c.host_states();
    assert!(!states[0].1, "a failed network check does not disable the host: {states:?}");
    t.public.restart().await;
    t.vendors[0].restart().await;
    let s = fetch(t, &c, 2).await;
    served_by(t, &s, 0);
    count(&mut r, &s);
    r.note = "the host stays enabled; the next host served; the primary serves again once back".into();
    r
}

/// The faults as the fleet saw them: every client's events sent, then the fleet view and the
/// shipped 1% rule (promtool, on the counters the server exported) must name what was injected
/// for the drill's carrier and region (unicom, shanghai).
async fn fleet_view(t: &Topology) -> Row {
    let mut r = row("fleet view of the faults (events)", "flush to summary");
    let api = t.server.base();
    // The server started with the drill: every counter was zero (a few batches of the clients
    // with background tasks may have gone already; the rest go now).
    let before = std::collections::HashMap::new();
    let started = Instant::now();
    // The LocalDNS comparisons run on tasks of their own: give the last ones a moment.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reporters = t.reporters.lock().clone();
    let mut sent = 0;
    for rep in &reporters {
        // As a client's own loop would: retry a refused-for-now batch after a pause (bounded).
        let mut tries = 0;
        loop {
            match rep.flush().await {
                Ok(n) => {
                    sent += n;
                    break;
                }
                Err(e) if tries < 20 => {
                    tries += 1;
                    eprintln!("drill: events not sent yet ({e}); retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("events sent: {e} {:?}", rep.stats()),
            }
        }
    }
    let (status, v) = t.admin(&api, reqwest::Method::GET, "/admin/v1/events/summary?window=1h", None).await;
    assert_eq!(status, 200, "{v}");
    r.times.push(started.elapsed());
    let place = v["rates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["isp"] == "unicom" && p["region"] == "shanghai")
        .unwrap_or_else(|| panic!("unicom/shanghai in {v}"))
        .clone();
    let rows = v["events"].as_array().unwrap();
    let has = |event: &str, reason: &str| {
        rows.iter().any(|e| e["event"] == event && e["reason"] == reason && e["isp"] == "unicom")
    };
    // HTTPDNS answering 503, then not listening: the two fallback reasons.
    assert!(has("dns_fallback", "HTTPDNS_ERROR"), "{v}");
    assert!(has("dns_fallback", "HTTPDNS_UNREACHABLE"), "{v}");
    // A unified host answering 5xx, one refusing connections; the primary revived.
    assert!(has("host_switch", "5xx"), "{v}");
    assert!(has("host_switch", "connect_error"), "{v}");
    assert!(has("host_revive", "revived"), "{v}");
    assert_eq!(place["alert"], true, "{place}");
    assert!(
        ["HTTPDNS_ERROR", "HTTPDNS_UNREACHABLE"]
            .contains(&place["top_fallback_reason"].as_str().unwrap_or("")),
        "{place}"
    );

    // The shipped rule, evaluated by promtool on the server's counters before and after.
    let after = crate::promtool::app_samples(
        &t.http.get(format!("{api}/metrics")).send().await.unwrap().text().await.unwrap(),
    );
    let expected = crate::promtool::fallback_alerts(&after);
    assert!(
        expected.iter().any(|e| e.labels["isp"] == "unicom" && e.labels["reason"] == "HTTPDNS_ERROR"),
        "the 503 fault is past 1%: {:?}",
        expected.iter().map(|e| (&e.labels, e.value)).collect::<Vec<_>>()
    );
    let checked =
        crate::promtool::check(t.dir(), &[before, after], "0", "HttpdnsAppFallbackRateHigh", &expected, &[]);
    if let Err(report) = checked {
        panic!("{report}");
    }
    let (status, map) = t.admin(&api, reqwest::Method::GET, "/admin/v1/localdns/map?window=1h", None).await;
    assert_eq!(status, 200, "{map}");
    let reports = map["map"].as_array().unwrap().iter().map(|p| p["reports"].as_f64().unwrap()).sum::<f64>();
    assert!(reports > 0.0, "LocalDNS comparisons reported: {map}");
    r.requests = sent;
    let alerts: Vec<String> =
        expected.iter().map(|e| format!("{} {:.1}%", e.labels["reason"], e.value * 100.0)).collect();
    r.note = format!(
        "{sent} events from {} clients; unicom/shanghai fallback rate {}, alerts: {}; LocalDNS reports {reports}",
        reporters.len(),
        place["fallback_rate"],
        alerts.join(", ")
    );
    r
}
