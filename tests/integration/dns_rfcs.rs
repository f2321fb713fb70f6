//! DNS by the RFCs, seen by real peers (`dig`, `kdig`, `drill`, dnspython) on UDP, TCP and
//! DoH: the DO bit echoed (RFC 3225), BADVERS for EDNS versions above 0 (RFC 6891), the client
//! subnet scope at the prefix that decided the answer (RFC 7871 §7.2.1), ANY as RFC 8482, zone
//! transfers refused, CD echoed (also in the JSON API), the drafts' DoH content type.
//!
//! Only 127.0.0.1 is contacted: the names asked are managed here and answered from data.

use serde_json::Value;

use crate::dns::dns_server;

/// Runs a peer (bounded by `timeout`) off the test's runtime, which serves the server.
async fn run(program: &str, args: Vec<String>) -> Option<String> {
    let program = program.to_owned();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new("timeout").arg("20").arg(&program).args(&args).output().ok()?;
        // Both streams: kdig reports a refused transfer on stderr.
        Some(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    })
    .await
    .unwrap()
}

fn have(program: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn args(port: u16, extra: &[&str]) -> Vec<String> {
    let mut v = vec!["@127.0.0.1".to_owned(), "-p".to_owned(), port.to_string()];
    v.extend(extra.iter().map(|s| (*s).to_owned()));
    v
}

/// The EDNS, header flag and section lines of `dig` and `kdig` output, as asserted below.
fn line_with<'a>(out: &'a str, needle: &str) -> Option<&'a str> {
    out.lines().find(|l| l.contains(needle))
}

#[tokio::test]
async fn dig_kdig_and_drill_see_the_rfc_behaviour() {
    for tool in ["dig", "kdig", "drill"] {
        if !have(tool) {
            httpdns_test_support::skipped(
                "DNS RFC tests",
                &format!("{tool} is not installed (apt-get install bind9-dnsutils knot-dnsutils ldnsutils)"),
            );
            return;
        }
    }
    let (s, _tmp) = dns_server().await;
    let port = s.dns.unwrap().port();

    for transport in ["+notcp", "+tcp"] {
        // DO echoed.
        let out = run("dig", args(port, &[transport, "www.example.com", "A", "+dnssec"])).await.unwrap();
        let edns = line_with(&out, "; EDNS:").unwrap_or_else(|| panic!("{out}"));
        assert!(edns.contains("version: 0, flags: do;"), "{transport}: {out}");
        // Without DO, no DO.
        let out = run("dig", args(port, &[transport, "www.example.com", "A"])).await.unwrap();
        assert!(line_with(&out, "; EDNS:").is_some_and(|l| !l.contains(" do")), "{out}");
        // EDNS version 1: BADVERS, answered at version 0, no answer.
        let out =
            run("dig", args(port, &[transport, "www.example.com", "+edns=1", "+noednsneg"])).await.unwrap();
        assert!(out.contains("status: BADVERS"), "{transport}: {out}");
        assert!(line_with(&out, "; EDNS:").is_some_and(|l| l.contains("version: 0")), "{out}");
        assert!(out.contains("ANSWER: 0"), "{out}");
        // The client subnet scope is the operator network's /24, not the client's /32.
        let out =
            run("dig", args(port, &[transport, "www.example.com", "+subnet=1.0.2.7/32"])).await.unwrap();
        assert!(out.contains("; CLIENT-SUBNET: 1.0.2.7/32/24"), "{transport}: {out}");
        // ANY: one HINFO (RFC 8482 §4.2).
        let out = run("dig", args(port, &[transport, "www.example.com", "ANY", "+short"])).await.unwrap();
        assert_eq!(out.trim(), "\"RFC8482\" \"\"", "{transport}");
        // CD echoed.
        let out = run("dig", args(port, &[transport, "www.example.com", "A", "+cd"])).await.unwrap();
        let flags = line_with(&out, ";; flags:").unwrap_or_else(|| panic!("{out}"));
        assert!(flags.contains(" cd"), "{transport}: {out}");
    }
    // AXFR (always TCP): refused.
    let out = run("dig", args(port, &["www.example.com", "AXFR"])).await.unwrap();
    assert!(out.contains("Transfer failed"), "{out}");

    // kdig (Knot): the same facts in its own words.
    let out = run("kdig", args(port, &["www.example.com", "A", "+dnssec"])).await.unwrap();
    assert!(line_with(&out, ";; Version: 0; flags: do;").is_some(), "{out}");
    let out = run("kdig", args(port, &["+tcp", "www.example.com", "A", "+edns=1"])).await.unwrap();
    assert!(out.contains("status: BADVERS"), "{out}");
    let out = run("kdig", args(port, &["www.example.com", "A", "+subnet=1.0.2.7/32"])).await.unwrap();
    assert!(out.contains("CLIENT-SUBNET: 1.0.2.7/32/24"), "{out}");
    // A /16 that holds two operator networks is not specific enough: the scope says /24, the
    // prefix that decides (RFC 7871 §7.2.1: a scope longer than the source).
    let out = run("kdig", args(port, &["www.example.com", "A", "+subnet=1.0.0.0/16"])).await.unwrap();
    assert!(out.contains("CLIENT-SUBNET: 1.0.0.0/16/24"), "{out}");
    // An answer that is the same for every client has scope 0.
    let out = run("kdig", args(port, &["www.example.com", "SOA", "+subnet=1.0.2.7/32"])).await.unwrap();
    assert!(out.contains("CLIENT-SUBNET: 1.0.2.7/32/0"), "{out}");
    let out = run("kdig", args(port, &["www.example.com", "AXFR"])).await.unwrap();
    assert!(out.contains("REFUSED"), "{out}");

    // drill (ldns).
    let out = run("drill", args(port, &["www.example.com", "ANY"])).await.unwrap();
    assert!(out.contains("rcode: NOERROR"), "{out}");
    assert!(line_with(&out, "HINFO").is_some_and(|l| l.contains("\"RFC8482\"")), "{out}");
    let out = run("drill", args(port, &["-D", "www.example.com", "A"])).await.unwrap();
    assert!(line_with(&out, "; EDNS:").is_some_and(|l| l.contains("do")), "{out}");
    let out = run("drill", args(port, &["-t", "www.example.com", "IXFR"])).await.unwrap();
    assert!(out.contains("rcode: REFUSED"), "{out}");

    // Every front-end is counted by response code, with its latency.
    let metrics = s.text("/metrics").await;
    let count = |labels: &str| -> u64 {
        let key = format!("httpdns_dns_queries_total{{{labels}}} ");
        metrics.lines().find_map(|l| l.strip_prefix(&key)).map_or(0, |v| v.trim().parse().unwrap())
    };
    assert!(count(r#"frontend="udp",rcode="noerror""#) >= 8, "{metrics}");
    assert!(count(r#"frontend="tcp",rcode="noerror""#) >= 5, "{metrics}");
    assert_eq!(count(r#"frontend="udp",rcode="badvers""#), 1, "{metrics}");
    assert_eq!(count(r#"frontend="tcp",rcode="badvers""#), 2, "dig and kdig: {metrics}");
    assert_eq!(count(r#"frontend="tcp",rcode="refused""#), 3, "dig and kdig AXFR, drill IXFR: {metrics}");
    assert!(metrics.contains(r#"httpdns_dns_query_duration_seconds_count{frontend="udp"}"#), "{metrics}");
}

#[tokio::test]
async fn dnspython_sees_the_rfc_behaviour_on_udp_tcp_and_doh() {
    let have = std::process::Command::new("python3")
        .args(["-c", "import dns.query, sys; sys.exit(0 if dns.query.have_doh else 1)"])
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        httpdns_test_support::skipped("dnspython RFC tests", "python3 with dnspython[doh] is not installed");
        return;
    }
    let (s, _tmp) = dns_server().await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/dns_rfc_peer.py").to_owned();
    let out = run("python3", vec![script, s.dns.unwrap().port().to_string(), s.base.clone()]).await.unwrap();
    let r: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    for t in ["udp", "tcp", "doh"] {
        let c = &r[t];
        assert_eq!((&c["do"]["do"], &c["do"]["edns"]), (&true.into(), &0.into()), "{t}: {r}");
        assert_eq!(c["badvers"]["rcode"], "BADVERS", "{t}: {r}");
        assert_eq!(c["badvers"]["edns"], 0, "answered at the version this server speaks: {r}");
        assert_eq!(c["badvers"]["answer"], serde_json::json!([]), "{t}: {r}");
        assert_eq!(c["scope_32"]["scope"], 24, "{t}: {r}");
        assert_eq!(c["scope_16"]["scope"], 24, "not specific enough: {t}: {r}");
        assert_eq!(c["scope_mapped"]["scope"], 120, "an IPv4-mapped subnet in IPv6 bits: {t}: {r}");
        assert_eq!(c["bits_past_prefix"]["rcode"], "FORMERR", "{t}: {r}");
        assert_eq!(c["scope_soa"]["scope"], 0, "{t}: {r}");
        assert_eq!(
            c["any"]["answer"],
            serde_json::json!(["www.example.com. HINFO \"RFC8482\" \"\""]),
            "{t}: {r}"
        );
        assert_eq!(c["cd"]["cd"], true, "{t}: {r}");
    }
    assert_eq!(r["axfr"], "REFUSED", "{r}");
    let legacy = &r["udpwireformat"];
    assert_eq!((&legacy["status"], &legacy["rcode"]), (&200.into(), &"NOERROR".into()), "{r}");
    assert_eq!(legacy["answer"].as_array().unwrap().len(), 4, "{r}");
    let metrics = s.text("/metrics").await;
    assert!(metrics.contains(r#"httpdns_dns_queries_total{frontend="doh",rcode="badvers"} 1"#), "{metrics}");
}

#[tokio::test]
async fn the_json_api_echoes_cd_and_answers_any() {
    let (s, _tmp) = dns_server().await;
    for path in ["/resolve?name=www.example.com&cd=1&do=1", "/dns-query?name=www.example.com&cd=true&do=true"]
    {
        let body: Value = s
            .http
            .get(s.url(path))
            .header("accept", "application/dns-json")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!((&body["Status"], &body["CD"]), (&0.into(), &true.into()), "{path}: {body}");
        assert_eq!(body["Answer"].as_array().map(Vec::len), Some(4), "{path}: {body}");
    }
    let body: Value = s.get("/resolve?name=www.example.com").await.json().await.unwrap();
    assert_eq!(body["CD"], false, "{body}");
    let body: Value = s.get("/resolve?name=www.example.com&type=ANY").await.json().await.unwrap();
    assert_eq!(body["Answer"][0]["type"], 13, "HINFO: {body}");
    let metrics = s.text("/metrics").await;
    assert!(
        metrics.contains(r#"httpdns_dns_queries_total{frontend="doh_json",rcode="noerror"} 4"#),
        "{metrics}"
    );
}
