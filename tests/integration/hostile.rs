//! Hostile and impatient clients against the real binary (issue: hostile and failing clients).
//! Each test here failed before its fix.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{env, Db, Process};
use crate::upstream::{fake_upstream, Seen};

/// A client that hangs up while its name is being resolved upstream must not leave the name
/// poisoned: the next client gets the answer as soon as the upstream gives it.
#[tokio::test]
async fn a_client_that_hangs_up_mid_lookup_poisons_nothing() {
    let seen: Seen = Arc::default();
    let (up, _task) =
        fake_upstream("127.0.0.1:0".parse().unwrap(), 300, Duration::from_millis(1500), seen.clone()).await;
    let tmp = tempfile::tempdir().unwrap();
    let mut e = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_UPSTREAMS".into(), up.to_string());
    let p = Process::spawn(&e, tmp.path());

    for (route, name) in [("/d?dn=", "slow.partner.example"), ("/resolve?host=", "slow2.partner.example")] {
        let url = format!("{}{route}{name}&ip=1.0.2.7", p.base);
        let impatient = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().unwrap();
        assert!(impatient.get(&url).send().await.is_err(), "the first client gives up");
        let started = Instant::now();
        let patient = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
        let resp = patient.get(&url).send().await.expect("the next client is answered");
        let body = resp.text().await.unwrap();
        assert!(body.contains("9.9.9.1"), "{route}: {body}");
        assert!(
            started.elapsed() < Duration::from_millis(1500),
            "{route}: the second client joined the query already out ({:?})",
            started.elapsed()
        );
        // And a third, later one is answered from the cache.
        let started = Instant::now();
        let body = patient.get(&url).send().await.unwrap().text().await.unwrap();
        assert!(body.contains("9.9.9.1") && started.elapsed() < Duration::from_millis(500), "{body}");
        let asked = seen.lock().unwrap().iter().filter(|(n, _)| n == &format!("{name}.")).count();
        assert_eq!(asked, 1, "{route}: one upstream query for all three clients");
    }
}
