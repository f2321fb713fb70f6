//! Pre-resolve, `/ss`, the IP stack and the allow/deny lists, against a loopback service
//! that answers `/resolve` for whatever names it is asked and `/ss` with a set list.
use super::*;
use crate::localdns::LocalDns;
use crate::service::ServiceOptions;
use crate::stack::{FixedStack, IpStackDetector};
use std::sync::atomic::AtomicUsize;

struct Fake {
    url: String,
    /// Every request's path and query.
    log: Arc<Mutex<Vec<String>>>,
    /// `/resolve` answers 503 while set.
    down: Arc<AtomicBool>,
    ss: Arc<Mutex<String>>,
}

impl Fake {
    fn count(&self, f: impl Fn(&str) -> bool) -> usize {
        self.log.lock().iter().filter(|u| f(u)).count()
    }
    fn resolves(&self) -> Vec<String> {
        self.log.lock().iter().filter(|u| u.starts_with("/resolve")).cloned().collect()
    }
}

/// Host `i` of a request gets `2.2.2.<i+1>` and `2402:4e00::<i+1>`, in the batch form when
/// several are asked.
async fn fake() -> Fake {
    let log = Arc::new(Mutex::new(Vec::new()));
    let down = Arc::new(AtomicBool::new(false));
    let ss = Arc::new(Mutex::new(r#"{"service_ip":[]}"#.to_owned()));
    let (l2, d2, s2) = (log.clone(), down.clone(), ss.clone());
    let app = axum::Router::new().fallback(move |uri: http::Uri| {
        let (log, down, ss) = (l2.clone(), d2.clone(), s2.clone());
        async move {
            log.lock().push(uri.to_string());
            if uri.path().ends_with("/ss") {
                return (http::StatusCode::OK, ss.lock().clone());
            }
            if down.load(Ordering::SeqCst) {
                return (http::StatusCode::SERVICE_UNAVAILABLE, "down".to_owned());
            }
            let q: HashMap<String, String> =
                url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes()).into_owned().collect();
            let hosts: Vec<&str> = q["host"].split(',').collect();
            let mut entries = Vec::new();
            for (i, h) in hosts.iter().enumerate() {
                let (v4, v6) = (format!("2.2.2.{}", i + 1), format!("2402:4e00::{}", i + 1));
                if hosts.len() == 1 {
                    entries.push(serde_json::json!({"host": h, "ips": [v4], "ipsv6": [v6], "ttl": 600}));
                } else {
                    entries.push(serde_json::json!({"host": h, "type": 1, "ips": [v4], "ttl": 600}));
                    entries.push(serde_json::json!({"host": h, "type": 28, "ips": [v6], "ttl": 600}));
                }
            }
            (http::StatusCode::OK, serde_json::json!({ "dns": entries }).to_string())
        }
    });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    Fake { url: format!("http://{addr}"), log, down, ss }
}

fn opts(f: &Fake, stack: IpStack) -> ResolverOptions {
    let mut o = ResolverOptions::default();
    o.service.servers = vec![f.url.parse().unwrap()];
    o.local_dns = LocalDns::Off;
    o.ip_stack = Arc::new(FixedStack(stack));
    o.refresh_service_ips = true;
    o
}

#[track_caller]
fn until(mut f: impl FnMut() -> bool) -> impl std::future::Future<Output = ()> {
    let at = std::panic::Location::caller();
    async move {
        for _ in 0..500 {
            if f() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("condition of {at} not reached");
    }
}

#[tokio::test]
async fn pre_resolve_asks_five_names_per_request_and_fills_the_cache() {
    let f = fake().await;
    let mut o = opts(&f, IpStack::Dual);
    o.refresh_service_ips = false;
    o.deny_hosts = vec!["skip.example.com".into()];
    let r = Resolver::new(o);
    let mut names: Vec<String> = (0..12).map(|i| format!("h{i}.example.com")).collect();
    names.extend(["H0.example.com.".into(), "10.0.0.1".into(), "a..b".into(), "skip.example.com".into()]);
    assert_eq!(r.pre_resolve(&names).await, 12);
    let asked = f.resolves();
    assert_eq!(asked.len(), 3, "{asked:?}");
    let sizes: Vec<usize> = asked
        .iter()
        .map(|u| {
            let q: HashMap<String, String> =
                url::form_urlencoded::parse(u.split_once('?').unwrap().1.as_bytes()).into_owned().collect();
            q["host"].split(',').count()
        })
        .collect();
    assert_eq!(sizes, [5, 5, 2]);
    // Every name is in the cache with its own batch entry's addresses.
    let h6 = r.resolve("h6.example.com").await.unwrap();
    assert_eq!(h6.path, Path::Cache);
    assert_eq!(h6.ips, vec!["2.2.2.2".parse::<IpAddr>().unwrap(), "2402:4e00::2".parse().unwrap()]);
    assert_eq!(r.resolve("h11.example.com").await.unwrap().path, Path::Cache);
    // Fresh names are not asked again.
    assert_eq!(r.pre_resolve(&names).await, 0);
    assert_eq!(f.resolves().len(), 3);
}

#[tokio::test]
async fn the_stack_decides_the_families_asked_and_the_order() {
    let f = fake().await;
    for (stack, query, first) in [
        (IpStack::V4, "query=4&", "2.2.2.1"),
        (IpStack::V6, "query=6&", "2402:4e00::1"),
        (IpStack::Dual, "query=4%2C6&", "2.2.2.1"),
        (IpStack::None, "query=4%2C6&", "2.2.2.1"),
    ] {
        let mut o = opts(&f, stack);
        o.refresh_service_ips = false;
        let r = Resolver::new(o);
        assert_eq!(r.stack(), stack);
        let a = r.resolve("a.example.com").await.unwrap();
        assert_eq!(a.ips[0], first.parse::<IpAddr>().unwrap(), "{stack:?}");
        assert!(f.resolves().last().unwrap().contains(query), "{stack:?}: {:?}", f.resolves());
        // From the cache too.
        assert_eq!(r.resolve("a.example.com").await.unwrap().ips, a.ips);
    }
}

#[tokio::test]
async fn allow_and_deny_lists_keep_names_off_httpdns() {
    let f = fake().await;
    let mut o = opts(&f, IpStack::Dual);
    o.refresh_service_ips = false;
    o.local_dns = LocalDns::System;
    o.allow_private = true;
    o.deny_hosts = vec!["localhost".into(), "*.internal.example.com".into()];
    let r = Resolver::new(o);
    assert!(!r.uses_httpdns("a.internal.example.com"));
    assert!(r.uses_httpdns("internal.example.com"), "*.suffix is the names under it");
    assert!(r.uses_httpdns("xinternal.example.com"));
    let l = r.resolve("localhost").await.unwrap();
    assert_eq!(l.path, Path::LocalDns);
    assert!(l.ips.iter().all(IpAddr::is_loopback));
    assert!(l.service_error.unwrap().contains("allow/deny"));
    assert!(f.resolves().is_empty(), "the service is not asked");
    // A denied name LocalDNS cannot answer is an error, not a service lookup.
    assert!(r.resolve("x.internal.example.com").await.is_err());
    assert!(f.resolves().is_empty());

    // An allow list: only its names use HTTPDNS.
    let mut o = opts(&f, IpStack::Dual);
    o.refresh_service_ips = false;
    o.local_dns = LocalDns::System;
    o.allow_private = true;
    o.allow_hosts = vec!["*.example.com".into()];
    let r = Resolver::new(o);
    assert_eq!(r.resolve("localhost").await.unwrap().path, Path::LocalDns);
    assert_eq!(r.resolve("a.example.com").await.unwrap().path, Path::HttpDns);
    assert_eq!(f.resolves().len(), 1);
}

/// `/ss` at start, then every 8 hours (paused clock).
#[tokio::test(start_paused = true)]
async fn service_ips_at_start_and_every_eight_hours() {
    let f = fake().await;
    let replica = fake().await;
    let port = replica.url.rsplit(':').next().unwrap().to_owned();
    *f.ss.lock() = format!(r#"{{"service_ip":["127.0.0.1"],"service_ip_port":[{port}]}}"#);
    let mut o = opts(&f, IpStack::Dual);
    o.pre_resolve = vec!["a.example.com".into(), "b.example.com".into()];
    let r = Resolver::new(o);
    let task = r.start();
    // `/ss` is asked of the addresses in use: the replica once the list names it.
    let ss = || f.count(|u| u == "/ss") + replica.count(|u| u == "/ss");
    until(|| ss() == 1).await;
    // The list from /ss, the configured address last; pre-resolve went to the replica.
    until(|| r.cached_addresses("b.example.com").is_some()).await;
    let list: Vec<String> = r.service_addresses().iter().map(|u| u.to_string()).collect();
    assert_eq!(list, [format!("{}/", replica.url), format!("{}/", f.url)]);
    assert_eq!(replica.resolves().len(), 1, "one batch of two");
    assert!(f.resolves().is_empty());
    tokio::time::advance(Duration::from_secs(8 * 3600 - 60)).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(ss(), 1);
    tokio::time::advance(Duration::from_secs(60)).await;
    until(|| ss() == 2).await;
    assert_eq!(replica.count(|u| u == "/ss"), 1);
    tokio::time::advance(Duration::from_secs(8 * 3600)).await;
    until(|| ss() == 3).await;
    task.abort();
}

#[tokio::test]
async fn a_network_change_refreshes_the_list_and_re_resolves_the_names_in_use() {
    let f = fake().await;
    let stacks = Arc::new(AtomicUsize::new(0));
    #[derive(Debug)]
    struct Counting(Arc<AtomicUsize>);
    impl IpStackDetector for Counting {
        fn stack(&self) -> IpStack {
            // IPv4 first, IPv6-only after the change.
            if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
                IpStack::V4
            } else {
                IpStack::V6
            }
        }
    }
    let mut o = opts(&f, IpStack::Dual);
    o.ip_stack = Arc::new(Counting(stacks.clone()));
    o.pre_resolve = vec!["p.example.com".into()];
    let r = Resolver::new(o);
    r.set_network("wifi:home");
    until(|| r.cached_addresses("p.example.com").is_some()).await;
    assert_eq!(r.resolve("a.example.com").await.unwrap().path, Path::HttpDns);
    let before = f.count(|u| u == "/ss");
    assert_eq!(before, 1);
    r.set_network("cellular");
    assert_eq!(r.stack(), IpStack::V6, "detected again");
    until(|| f.count(|u| u == "/ss") == 2).await;
    until(|| r.cached_addresses("a.example.com").is_some() && r.cached_addresses("p.example.com").is_some())
        .await;
    let last = f.resolves().last().cloned().unwrap();
    assert!(last.contains("query=6&"), "{last}");
    let a = r.resolve("a.example.com").await.unwrap();
    assert_eq!(a.path, Path::Cache);
    assert!(a.ips[0].is_ipv6() && a.ips[1].is_ipv4(), "IPv6 first on IPv6 only: {:?}", a.ips);
}

#[tokio::test]
async fn every_address_failing_refreshes_the_list() {
    let f = fake().await;
    f.down.store(true, Ordering::SeqCst);
    let r = Resolver::new(opts(&f, IpStack::Dual));
    assert!(r.resolve("a.example.com").await.is_err());
    until(|| f.count(|u| u == "/ss") == 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The refresh ended sniff mode: the next lookup asks the service again.
    f.down.store(false, Ordering::SeqCst);
    assert_eq!(r.resolve("a.example.com").await.unwrap().path, Path::HttpDns);
    // With refreshing off, nothing is asked.
    let g = fake().await;
    g.down.store(true, Ordering::SeqCst);
    let mut o = opts(&g, IpStack::Dual);
    o.refresh_service_ips = false;
    let r = Resolver::new(o);
    assert!(r.resolve("a.example.com").await.is_err());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(g.count(|u| u.ends_with("/ss")), 0);
}

/// The resolution policy's pre-resolve list is resolved when the policy arrives (one batch
/// request), and its timeout is what each service request gets.
#[tokio::test]
async fn a_policy_pre_resolves_its_hosts_and_sets_the_timeout() {
    let f = fake().await;
    let mut o = opts(&f, IpStack::Dual);
    o.refresh_service_ips = false;
    let r = Resolver::new(o);
    let hosts = vec!["p1.example.com".to_owned(), "p2.example.com".to_owned()];
    r.set_policy(Decision {
        timeout: Some(Duration::from_millis(700)),
        pre_resolve_hosts: hosts.clone(),
        ..Decision::default()
    });
    until(|| r.cached_addresses("p2.example.com").is_some()).await;
    assert_eq!(f.resolves().len(), 1, "one batch: {:?}", f.resolves());
    assert_eq!(r.inner.service.timeout(), Duration::from_millis(700));
    r.set_policy(Decision::default());
    assert_eq!(r.inner.service.timeout(), ServiceOptions::default().timeout, "cleared with the policy");
}
