//! Plain DNS (UDP, TCP) and DNS over HTTPS, with a Rust client and with `dig` when installed.

use std::net::{IpAddr, SocketAddr};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
use hickory_proto::rr::{RData, RecordType};
use httpdns_dns::build_query;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{Db, Server};

pub(crate) async fn dns_server() -> (Server, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let mut env = crate::support::env(tmp.path(), &Db::Sqlite);
    env.insert("HTTPDNS_DNS_ADDR".into(), "127.0.0.1:0".into());
    let s = Server::start_with(env, None).await;
    s.seed().await;
    (s, tmp)
}

fn ns_names(m: &Message) -> Vec<String> {
    m.answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::NS(ns) => Some(ns.0.to_ascii()),
            _ => None,
        })
        .collect()
}

/// `[dns] nameservers` and `hostmaster` are what NS and SOA answers name.
#[tokio::test]
async fn configured_name_servers_answer_ns_and_soa() {
    let tmp = tempfile::tempdir().unwrap();
    let mut env = crate::support::env(tmp.path(), &Db::Sqlite);
    env.insert("HTTPDNS_DNS_ADDR".into(), "127.0.0.1:0".into());
    let file = "[dns]\nnameservers = [\"ns1.dns.example.net\", \"NS2.dns.example.net.\"]\nhostmaster = \"ops.example.net\"\n";
    let s = Server::start_with(env, Some(file)).await;
    s.seed().await;
    let addr = s.dns.unwrap();
    let m = udp(addr, &build_query(1, "www.example.com.", RecordType::NS, None).unwrap()).await;
    assert_eq!(ns_names(&m), ["ns1.dns.example.net.", "ns2.dns.example.net."]);
    let m = udp(addr, &build_query(2, "www.example.com.", RecordType::SOA, None).unwrap()).await;
    let RData::SOA(soa) = &m.answers[0].data else { panic!("an SOA: {m:?}") };
    assert_eq!(soa.mname.to_ascii(), "ns1.dns.example.net.");
    assert_eq!(soa.rname.to_ascii(), "ops.example.net.");
    // Bad names are refused at start-up, naming the setting.
    let bad = httpdns_server::Config::load(Some("[dns]\nnameservers = [\"not a name\"]\n"), |_| None);
    assert!(bad.unwrap_err().to_string().starts_with("dns.nameservers"));
}

fn addresses(m: &Message) -> Vec<String> {
    m.answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0.to_string()),
            RData::AAAA(a) => Some(a.0.to_string()),
            _ => None,
        })
        .collect()
}

async fn udp(addr: SocketAddr, query: &[u8]) -> Message {
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.send_to(query, addr).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let (n, _) = tokio::time::timeout(std::time::Duration::from_secs(5), sock.recv_from(&mut buf))
        .await
        .unwrap()
        .unwrap();
    Message::from_vec(&buf[..n]).unwrap()
}

async fn tcp(addr: SocketAddr, query: &[u8]) -> Message {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut out = (query.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(query);
    s.write_all(&out).await.unwrap();
    let mut len = [0u8; 2];
    s.read_exact(&mut len).await.unwrap();
    let mut msg = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut msg).await.unwrap();
    Message::from_vec(&msg).unwrap()
}

fn subnet(ip: &str, prefix: u8) -> Option<(IpAddr, u8)> {
    Some((ip.parse().unwrap(), prefix))
}

#[tokio::test]
async fn plain_dns_answers_like_d_with_client_subnet() {
    let (s, _tmp) = dns_server().await;
    let addr = s.dns.unwrap();
    // Telecom Beijing subnet, over UDP and TCP.
    let q = build_query(7, "www.example.com.", RecordType::A, subnet("1.0.1.0", 24)).unwrap();
    for m in [udp(addr, &q).await, tcp(addr, &q).await] {
        assert_eq!(m.metadata.id, 7);
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert!(m.metadata.authoritative);
        assert_eq!(addresses(&m), ["1.1.1.1", "1.1.1.2"]);
        assert_eq!(m.answers[0].ttl, 60);
        let Some(EdnsOption::Subnet(ecs)) = m.edns.as_ref().unwrap().option(EdnsCode::Subnet) else {
            panic!("ECS echoed")
        };
        assert_eq!((ecs.source_prefix(), ecs.scope_prefix()), (24, 24));
    }
    assert_eq!(s.text("/d?dn=www.example.com&ip=1.0.1.0").await, "1.1.1.1;1.1.1.2", "the same choice as /d");
    // Unicom Shanghai subnet.
    let q = build_query(8, "www.example.com.", RecordType::A, subnet("1.0.2.0", 24)).unwrap();
    assert_eq!(addresses(&udp(addr, &q).await), ["2.2.2.1", "2.2.2.2"]);
    // No subnet: the peer (127.0.0.1, unknown) gets every node by score.
    let q = build_query(9, "WWW.Example.COM.", RecordType::A, None).unwrap();
    let m = udp(addr, &q).await;
    assert_eq!(addresses(&m), ["2.2.2.1", "1.1.1.2", "1.1.1.1", "2.2.2.2"]);
    assert!(m.edns.is_none(), "no OPT without one in the query");
    // AAAA from IPv6 nodes.
    let q = build_query(10, "www.example.com.", RecordType::AAAA, None).unwrap();
    assert_eq!(addresses(&udp(addr, &q).await), ["2402:4e00::1"]);
    // Another type of a managed name: NODATA with the SOA; SOA itself answers.
    let q = build_query(11, "www.example.com.", RecordType::MX, None).unwrap();
    let m = udp(addr, &q).await;
    assert_eq!((m.metadata.response_code, m.answers.len()), (ResponseCode::NoError, 0));
    assert_eq!(m.authorities[0].record_type(), RecordType::SOA);
    let q = build_query(12, "www.example.com.", RecordType::SOA, None).unwrap();
    let m = udp(addr, &q).await;
    let RData::SOA(soa) = &m.answers[0].data else { panic!("an SOA: {m:?}") };
    assert_eq!(soa.mname.to_ascii(), "ns.www.example.com.", "without configured name servers");
    // NS: the zone's name servers, authoritatively.
    let q = build_query(14, "www.example.com.", RecordType::NS, None).unwrap();
    let m = udp(addr, &q).await;
    assert!(m.metadata.authoritative);
    assert_eq!(ns_names(&m), ["ns.www.example.com."]);
    // Below a managed name: NXDOMAIN with the zone's SOA; above a managed name (an empty
    // non-terminal): NODATA.
    let q = build_query(15, "nope.www.example.com.", RecordType::A, None).unwrap();
    let m = udp(addr, &q).await;
    assert_eq!((m.metadata.response_code, m.metadata.authoritative), (ResponseCode::NXDomain, true));
    assert_eq!(m.authorities[0].name.to_ascii(), "www.example.com.");
    assert_eq!(m.authorities[0].record_type(), RecordType::SOA);
    s.put_ok("/admin/v1/domains/a.b.www.example.com", serde_json::json!({"pool": "edge", "ttl": 30})).await;
    let q = build_query(16, "b.www.example.com.", RecordType::A, None).unwrap();
    let m = udp(addr, &q).await;
    assert_eq!((m.metadata.response_code, m.answers.len()), (ResponseCode::NoError, 0));
    assert_eq!(m.authorities[0].record_type(), RecordType::SOA);
    // Not managed: refused (no recursion).
    let q = build_query(13, "not-managed.example.org.", RecordType::A, None).unwrap();
    assert_eq!(udp(addr, &q).await.metadata.response_code, ResponseCode::Refused);
    // Garbage with an id: FORMERR.
    let m = udp(addr, &[0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xff]).await;
    assert_eq!((m.metadata.id, m.metadata.response_code), (0x1234, ResponseCode::FormErr));
}

#[tokio::test]
async fn dns_over_https_wire_and_json() {
    let (s, _tmp) = dns_server().await;
    let q = build_query(0, "www.example.com.", RecordType::A, subnet("1.0.2.0", 24)).unwrap();
    // RFC 8484 GET.
    let resp = s.get(&format!("/dns-query?dns={}", URL_SAFE_NO_PAD.encode(&q))).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/dns-message");
    assert_eq!(resp.headers()["cache-control"], "private, max-age=60");
    let m = Message::from_vec(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(addresses(&m), ["2.2.2.1", "2.2.2.2"]);
    // RFC 8484 POST.
    let resp = s
        .http
        .post(s.url("/dns-query"))
        .header("content-type", "application/dns-message")
        .body(q.clone())
        .send()
        .await
        .unwrap();
    let m = Message::from_vec(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(addresses(&m), ["2.2.2.1", "2.2.2.2"]);
    // Media types compare without case, parameters aside (RFC 9110 §8.3.1); a prefix of the
    // type is not the type.
    for ct in ["Application/DNS-Message", "application/dns-message; charset=binary"] {
        let resp =
            s.http.post(s.url("/dns-query")).header("content-type", ct).body(q.clone()).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{ct}");
        assert_eq!(
            addresses(&Message::from_vec(&resp.bytes().await.unwrap()).unwrap()),
            ["2.2.2.1", "2.2.2.2"]
        );
    }
    for ct in ["text/plain", "application/dns-messagex"] {
        let resp =
            s.http.post(s.url("/dns-query")).header("content-type", ct).body(q.clone()).send().await.unwrap();
        assert_eq!(resp.status(), 415, "{ct}");
    }
    // JSON API.
    let resp = s
        .http
        .get(s.url("/dns-query?name=www.example.com&type=A&edns_client_subnet=1.0.1.0/24"))
        .header("accept", "application/dns-json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "application/dns-json");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["Status"], 0);
    assert_eq!(body["Question"][0], serde_json::json!({"name": "www.example.com.", "type": 1}));
    let data: Vec<&str> =
        body["Answer"].as_array().unwrap().iter().map(|a| a["data"].as_str().unwrap()).collect();
    assert_eq!(data, ["1.1.1.1", "1.1.1.2"]);
    assert_eq!(body["Answer"][0]["TTL"], 60);
    let body: Value = s.get("/dns-query?name=nope.example.org&type=AAAA").await.json().await.unwrap();
    assert_eq!(body["Status"], 5, "REFUSED");
    for (path, field) in [
        ("/dns-query", "dns"),
        ("/dns-query?dns=***", "dns"),
        ("/dns-query?name=a.com&type=BOGUS", "type"),
        ("/dns-query?name=a.com&edns_client_subnet=1.2.3.4/40", "edns_client_subnet"),
    ] {
        let resp = s.get(path).await;
        assert_eq!(resp.status(), 400, "{path}");
        assert_eq!(resp.json::<Value>().await.unwrap()["field"], field, "{path}");
    }
}

/// `dig` from bind9-dnsutils, when installed (CI installs it).
fn dig(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("dig").args(args).output().ok()?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test]
async fn dig_over_udp_tcp_subnet_and_http() {
    let (s, _tmp) = dns_server().await;
    let addr = s.dns.unwrap();
    let port = addr.port().to_string();
    if dig(&["-v"]).is_none() {
        httpdns_test_support::skipped("dig tests", "dig is not installed (apt-get install bind9-dnsutils)");
        return;
    }
    // dig blocks, and the server runs on this test's runtime: run dig off it.
    let blocking = move |args: Vec<String>| async move {
        tokio::task::spawn_blocking(move || {
            dig(&args.iter().map(String::as_str).collect::<Vec<_>>()).unwrap()
        })
        .await
        .unwrap()
    };
    let out = blocking(vec![
        "@127.0.0.1".into(),
        "-p".into(),
        port.clone(),
        "www.example.com".into(),
        "A".into(),
        "+short".into(),
        "+subnet=1.0.2.0/24".into(),
    ])
    .await;
    assert_eq!(out.lines().collect::<Vec<_>>(), ["2.2.2.1", "2.2.2.2"]);
    let out = blocking(vec![
        "@127.0.0.1".into(),
        "-p".into(),
        port.clone(),
        "www.example.com".into(),
        "+short".into(),
        "+tcp".into(),
        "+subnet=1.0.1.0/24".into(),
    ])
    .await;
    assert_eq!(out.lines().collect::<Vec<_>>(), ["1.1.1.1", "1.1.1.2"]);
    let out = blocking(vec![
        "@127.0.0.1".into(),
        "-p".into(),
        port.clone(),
        "www.example.com".into(),
        "AAAA".into(),
        "+short".into(),
    ])
    .await;
    assert_eq!(out.trim(), "2402:4e00::1");
    let api_port = s.base.rsplit(':').next().unwrap().to_owned();
    let out = blocking(vec![
        "@127.0.0.1".into(),
        "-p".into(),
        api_port,
        "+http-plain".into(),
        "www.example.com".into(),
        "+short".into(),
        "+subnet=1.0.2.0/24".into(),
    ])
    .await;
    assert_eq!(out.lines().collect::<Vec<_>>(), ["2.2.2.1", "2.2.2.2"], "dig +http-plain against /dns-query");
}

/// dnspython (`dns.query.udp`, `.tcp`, `.https` GET and POST) against the real listeners, when
/// it is installed (CI installs it with pip).
#[tokio::test]
async fn dnspython_over_udp_tcp_and_https() {
    let have = std::process::Command::new("python3")
        .args(["-c", "import dns.query, sys; sys.exit(0 if dns.query.have_doh else 1)"])
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        httpdns_test_support::skipped(
            "dnspython tests",
            "python3 with dnspython[doh] is not installed (pip install \"dnspython[doh]\")",
        );
        return;
    }
    let (s, _tmp) = dns_server().await;
    let port = s.dns.unwrap().port().to_string();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/dnspython_peer.py");
    let base = s.base.clone();
    // The peer blocks, and the server runs on this test's runtime: run it off it.
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3").args([script, &port, &base]).output().unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let addrs = |case: &str| r[case]["addrs"].clone();
    assert_eq!(addrs("udp_unicom"), serde_json::json!(["2.2.2.1", "2.2.2.2"]), "{r}");
    assert_eq!(r["udp_unicom"]["scope"], 24, "the client subnet scope is echoed: {r}");
    assert_eq!(r["udp_unicom"]["aa"], true, "{r}");
    assert_eq!(addrs("tcp_telecom"), serde_json::json!(["1.1.1.1", "1.1.1.2"]), "{r}");
    assert_eq!(addrs("udp_aaaa"), serde_json::json!(["2402:4e00::1"]), "{r}");
    assert_eq!(addrs("https_post"), serde_json::json!(["2.2.2.1", "2.2.2.2"]), "{r}");
    assert_eq!(addrs("https_get"), serde_json::json!(["1.1.1.1", "1.1.1.2"]), "{r}");
    assert_eq!(r["https_post"]["rcode"], "NOERROR");
    assert_eq!(r["https_get"]["scope"], 24, "{r}");
    // Below a managed name: it does not exist, authoritatively.
    assert_eq!(
        (&r["udp_below_apex"]["rcode"], &r["udp_below_apex"]["aa"]),
        (&"NXDOMAIN".into(), &true.into()),
        "{r}"
    );
    // Not managed, and upstream resolution is off in this test: REFUSED, not a made-up answer.
    assert_eq!(r["udp_unmanaged"]["rcode"], "REFUSED", "{r}");
}
