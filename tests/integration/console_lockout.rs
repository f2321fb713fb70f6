//! Console sign-in budgets: failures from an address lock that address out, but a browser that
//! signed in before (its device cookie) keeps a budget of its own, so others failing at its
//! address (a shared NAT, an attacker) cannot lock the right token out of it.

use serde_json::json;

use crate::support::{Db, Server, TOKEN};

#[tokio::test]
async fn failures_at_an_address_do_not_lock_out_a_browser_that_signed_in_before() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_with(crate::support::env(tmp.path(), &Db::Sqlite), None).await;
    let http = httpdns_test_support::http::client();
    let sign_in = |token: &str, device: Option<&str>| {
        let mut req = http.post(s.url("/console/session")).json(&json!({"token": token}));
        if let Some(d) = device {
            req = req.header("cookie", format!("httpdns_console_device={d}"));
        }
        req.send()
    };
    // The operator's browser signs in once and keeps its device cookie.
    let first = sign_in(TOKEN, None).await.unwrap();
    assert_eq!(first.status(), 200);
    let device = first
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| c.strip_prefix("httpdns_console_device="))
        .and_then(|c| c.split(';').next())
        .expect("a device cookie")
        .to_owned();
    // Someone else at the same address guesses until the address is out of tries.
    let mut codes = Vec::new();
    for i in 0..12 {
        codes.push(sign_in(&format!("wrong-token-{i:04}-0123456789"), None).await.unwrap().status().as_u16());
    }
    assert!(codes[..10].iter().all(|c| *c == 401) && codes[10..].iter().all(|c| *c == 429), "{codes:?}");
    // Without its device cookie even the right token waits; with it, the operator signs in.
    assert_eq!(sign_in(TOKEN, None).await.unwrap().status(), 429);
    assert_eq!(sign_in(TOKEN, Some(&device)).await.unwrap().status(), 200);
    // A forged device cookie is no device: the address's budget applies.
    let forged = format!("d1.{}.{}", "0".repeat(32), "0".repeat(64));
    assert_eq!(sign_in(TOKEN, Some(&forged)).await.unwrap().status(), 429);
    // The device's own budget: its failures lock only it.
    let mut codes = Vec::new();
    for i in 0..11 {
        codes.push(
            sign_in(&format!("wrong-token-{i:04}-0123456789"), Some(&device))
                .await
                .unwrap()
                .status()
                .as_u16(),
        );
    }
    assert_eq!(codes.last(), Some(&429), "{codes:?}");
    assert_eq!(sign_in(TOKEN, Some(&device)).await.unwrap().status(), 429);
}
