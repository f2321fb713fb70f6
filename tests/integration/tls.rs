//! TLS on every front-end, with real clients: curl (HTTPS `/d`, Tencent's `token=` mode,
//! `--doh-url`), openssl s_client (TLS 1.2 and 1.3, ALPN, SNI), kdig (`+tls`, `+https`),
//! dig (`+https`), dnspython (DoT, DoH), and a reload seen by new connections while old ones
//! keep working. Certificates come from a test CA made with openssl.
//!
//! Only loopback is contacted: the one name resolved for curl to connect to answers 127.0.0.1.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::support::{Db, Server};

/// A CA and leaves signed by it, written by the openssl command line.
pub(crate) struct TestCa {
    pub(crate) dir: PathBuf,
}

impl TestCa {
    pub(crate) fn new(dir: &Path) -> Self {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "30",
                "-subj",
                "/CN=httpdns test CA",
            ],
        );
        Self { dir: dir.to_owned() }
    }

    pub(crate) fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// Writes `<stem>.pem` and `<stem>.key`: a leaf for `sans` (`DNS:x`, `IP:y`) valid `days`.
    pub(crate) fn leaf(&self, stem: &str, cn: &str, sans: &str, days: u32) -> (PathBuf, PathBuf) {
        let ext = self.dir.join(format!("{stem}.ext"));
        std::fs::write(
            &ext,
            format!("subjectAltName={sans}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"),
        )
        .unwrap();
        let (key, csr, pem) = (format!("{stem}.key"), format!("{stem}.csr"), format!("{stem}.pem"));
        openssl(
            &self.dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={cn}"),
            ],
        );
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                &days.to_string(),
                "-extfile",
                &ext.display().to_string(),
            ],
        );
        (self.dir.join(pem), self.dir.join(key))
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Runs a peer, bounded, off the test's runtime (which serves the server): stdout and stderr.
async fn run(program: &str, args: Vec<String>) -> (bool, String) {
    let program = program.to_owned();
    tokio::task::spawn_blocking(move || {
        let out = Command::new("timeout").arg("20").arg(&program).args(&args).output().expect("runs");
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    })
    .await
    .unwrap()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

pub(crate) fn have_all(tools: &[&str]) -> bool {
    tools.iter().all(|t| {
        Command::new("sh").args(["-c", &format!("command -v {t}")]).output().is_ok_and(|o| o.status.success())
    })
}

/// A server with every TLS listener on, certificates for `dns.test` (and 127.0.0.1, for
/// clients without SNI) and, second in the file, `cdn.test` for the mirror's name.
async fn tls_server(tmp: &Path) -> (Server, TestCa, PathBuf, PathBuf) {
    let ca = TestCa::new(tmp);
    let (dns_pem, dns_key) = ca.leaf("dns", "dns.test", "DNS:dns.test,DNS:localhost,IP:127.0.0.1", 20);
    let (cdn_pem, cdn_key) = ca.leaf("cdn", "cdn.test", "DNS:cdn.test,DNS:*.cdn.test", 20);
    let (cert, key) = (tmp.join("served.pem"), tmp.join("served.key"));
    let cat = |a: &Path, b: &Path| {
        format!("{}{}", std::fs::read_to_string(a).unwrap(), std::fs::read_to_string(b).unwrap())
    };
    std::fs::write(&cert, cat(&dns_pem, &cdn_pem)).unwrap();
    std::fs::write(&key, cat(&dns_key, &cdn_key)).unwrap();
    let mut env = crate::support::env(tmp, &Db::Sqlite);
    for k in [
        "HTTPDNS_API_TLS_ADDR",
        "HTTPDNS_MIRROR_TLS_ADDR",
        "HTTPDNS_DOT_ADDR",
        "HTTPDNS_DNS_ADDR",
        "HTTPDNS_MIRROR_ADDR",
    ] {
        env.insert(k.into(), "127.0.0.1:0".into());
    }
    env.insert("HTTPDNS_TLS_CERT".into(), cert.display().to_string());
    env.insert("HTTPDNS_TLS_KEY".into(), key.display().to_string());
    env.insert("HTTPDNS_ALLOW_PRIVATE_NODE_IPS".into(), "true".into());
    let s = Server::start_with(env, Some("[tls]\nreload_interval_ms = 100\n")).await;
    s.seed().await;
    (s, ca, cert, key)
}

#[tokio::test]
async fn https_dot_and_doh_with_curl_openssl_kdig_dig_and_dnspython() {
    if !have_all(&["curl", "openssl", "kdig", "dig"]) {
        httpdns_test_support::skipped("TLS tests", "curl, openssl, kdig or dig is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (s, ca, _, _) = tls_server(tmp.path()).await;
    let r = s.running();
    let (api, mirror, dot) = (r.api_tls_addr.unwrap(), r.mirror_tls_addr.unwrap(), r.dot_addr.unwrap());
    let ca_file = ca.ca().display().to_string();

    // curl: HTTPS /d over HTTP/2 (ALPN), verified against the test CA by IP address.
    let (ok, out) = run(
        "curl",
        strings(&[
            "-sS",
            "--http2",
            "--cacert",
            &ca_file,
            "-w",
            "\n%{http_version}",
            &format!("https://{api}/d?dn=www.example.com&ip=1.0.2.7"),
        ]),
    )
    .await;
    assert!(ok, "{out}");
    assert_eq!(out.lines().collect::<Vec<_>>(), ["2.2.2.1;2.2.2.2", "2"], "{out}");
    // HTTP/1.1 still works, by name (SNI dns.test).
    let (ok, out) = run(
        "curl",
        strings(&[
            "-sS",
            "--http1.1",
            "--cacert",
            &ca_file,
            "--resolve",
            &format!("dns.test:{}:127.0.0.1", api.port()),
            "-w",
            "\n%{http_version}",
            &format!("https://dns.test:{}/d?dn=www.example.com&ip=1.0.1.7", api.port()),
        ]),
    )
    .await;
    assert!(ok, "{out}");
    assert_eq!(out.lines().collect::<Vec<_>>(), ["1.1.1.1;1.1.1.2", "1.1"], "{out}");

    // Tencent's HTTPS mode: token= with plain parameters, over HTTPS only.
    s.put_ok("/admin/v1/accounts/42", json!({"secret": "dnspodpass", "token": "tencent-https-token-1234"}))
        .await;
    let path = "/d?dn=www.example.com&token=tencent-https-token-1234&ip=1.0.2.7";
    let (ok, out) =
        run("curl", strings(&["-sS", "--cacert", &ca_file, &format!("https://{api}{path}")])).await;
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "2.2.2.1;2.2.2.2", "{out}");
    let plain = s.get(path).await;
    assert_eq!(plain.status(), 403, "a token is refused over plain HTTP");
    assert_eq!(plain.json::<Value>().await.unwrap()["field"], "token");
    let (_, out) = run(
        "curl",
        strings(&[
            "-sS",
            "--cacert",
            &ca_file,
            &format!("https://{api}/d?dn=www.example.com&token=wrong-token-0123456789"),
        ]),
    )
    .await;
    assert!(out.contains("InvalidAccount"), "{out}");

    // A token as Tencent's console issues it (a number) works as issued; wrong tries are
    // budgeted per address: past 10 a minute, token requests are refused unread (429), the
    // right token too (else a guesser would learn which guess is right).
    s.put_ok("/admin/v1/accounts/43", json!({"secret": "dnspodpass", "token": "8086421"})).await;
    let https = |path: String| {
        let ca_file = ca_file.clone();
        async move {
            run(
                "curl",
                strings(&[
                    "-sS",
                    "-w",
                    "\n%{http_code}",
                    "--cacert",
                    &ca_file,
                    &format!("https://{api}{path}"),
                ]),
            )
            .await
            .1
        }
    };
    let out = https("/d?dn=www.example.com&token=8086421&ip=1.0.2.7".into()).await;
    assert_eq!(out.lines().collect::<Vec<_>>(), ["2.2.2.1;2.2.2.2", "200"], "{out}");
    let mut codes = Vec::new();
    for guess in 0..12 {
        let out = https(format!("/d?dn=www.example.com&token={}", 8_000_000 + guess)).await;
        codes.push(out.lines().last().unwrap_or("").to_owned());
    }
    assert!(codes[..8].iter().all(|c| c == "401"), "{codes:?}");
    assert_eq!(codes.last().map(String::as_str), Some("429"), "{codes:?}");
    let out = https("/d?dn=www.example.com&token=8086421&ip=1.0.2.7".into()).await;
    assert!(out.ends_with("429") && out.contains("Throttled"), "{out}");
    // Too few digits for a token: refused at the admin API, naming the field.
    let (status, body) = s
        .admin(
            reqwest::Method::PUT,
            "/admin/v1/accounts/44",
            Some(json!({"secret": "dnspodpass", "token": "12345"})),
        )
        .await;
    assert_eq!((status.as_u16(), body["field"].as_str()), (400, Some("token")), "{body}");

    // curl --doh-url over HTTPS: it resolves `loopback.test` through us and then connects to
    // the answer, which is 127.0.0.1 (the API's plain listener).
    s.put_ok(
        "/admin/v1/nodes/self",
        json!({"ip": "127.0.0.1", "pool": "self", "isp": "telecom", "region": "beijing",
            "bandwidth_mbps": 100, "load_pct": 10, "latency_ms": 1, "enabled": true}),
    )
    .await;
    s.put_ok("/admin/v1/domains/loopback.test", json!({"pool": "self", "ttl": 30})).await;
    let api_port = s.base.rsplit(':').next().unwrap().to_owned();
    let (ok, out) = run(
        "curl",
        strings(&[
            "-sS",
            "--cacert",
            &ca_file,
            "--doh-url",
            &format!("https://localhost:{}/dns-query", api.port()),
            &format!("http://loopback.test:{api_port}/healthz"),
        ]),
    )
    .await;
    assert!(ok && out.contains("ok"), "curl --doh-url: {out}");

    // openssl s_client: TLS 1.3 and 1.2, ALPN h2, the chain verified.
    for (version, want) in [("-tls1_3", "New, TLSv1.3"), ("-tls1_2", "New, TLSv1.2")] {
        let (_, out) = run(
            "openssl",
            strings(&[
                "s_client",
                "-connect",
                &api.to_string(),
                version,
                "-alpn",
                "h2,http/1.1",
                "-CAfile",
                &ca_file,
                "-servername",
                "dns.test",
            ]),
        )
        .await;
        assert!(out.contains(want), "{version}: {out}");
        assert!(out.contains("ALPN protocol: h2"), "{version}: {out}");
        assert!(out.contains("Verify return code: 0 (ok)"), "{version}: {out}");
    }
    // SNI picks the mirror's certificate on the mirror's TLS listener (wildcard too).
    for name in ["cdn.test", "img.cdn.test"] {
        let (_, out) = run(
            "openssl",
            strings(&[
                "s_client",
                "-connect",
                &mirror.to_string(),
                "-servername",
                name,
                "-CAfile",
                &ca_file,
                "-brief",
            ]),
        )
        .await;
        assert!(out.contains("CN = cdn.test") || out.contains("CN=cdn.test"), "{name}: {out}");
        assert!(out.contains("Verification: OK"), "{name}: {out}");
    }
    // The mirror over HTTPS: a copy filled from a real origin.
    let origin = crate::origin::RunningOrigin::start().await;
    origin.origin.put("/o/hello.txt", b"hello over tls".to_vec(), "text/plain");
    s.put_ok(
        "/admin/v1/mirror/rules/files",
        json!({"path_prefix": "/files", "origin": format!("{}/o", origin.url())}),
    )
    .await;
    let (ok, out) = run(
        "curl",
        strings(&[
            "-sS",
            "--cacert",
            &ca_file,
            "--resolve",
            &format!("cdn.test:{}:127.0.0.1", mirror.port()),
            &format!("https://cdn.test:{}/files/hello.txt", mirror.port()),
        ]),
    )
    .await;
    assert!(ok, "{out}");
    assert_eq!(out, "hello over tls", "the mirror over HTTPS");

    // kdig: DNS over TLS (with padding, RFC 8467) and DoH over HTTPS.
    let (ok, out) = run(
        "kdig",
        strings(&[
            "@127.0.0.1",
            "-p",
            &dot.port().to_string(),
            "+tls-ca",
            &format!("+tls-ca={ca_file}"),
            "+tls-hostname=dns.test",
            "+padding",
            "+subnet=1.0.2.7/32",
            "www.example.com",
            "A",
        ]),
    )
    .await;
    assert!(ok, "{out}");
    assert!(out.contains("2.2.2.1") && out.contains("2.2.2.2"), "kdig +tls: {out}");
    assert!(out.contains("PADDING:"), "padded on TLS: {out}");
    assert!(out.contains("CLIENT-SUBNET: 1.0.2.7/32/24"), "{out}");
    let (ok, out) = run(
        "kdig",
        strings(&[
            "@127.0.0.1",
            "-p",
            &api.port().to_string(),
            &format!("+tls-ca={ca_file}"),
            "+tls-hostname=dns.test",
            "+https=/dns-query",
            "www.example.com",
            "A",
            "+subnet=1.0.1.7/32",
        ]),
    )
    .await;
    assert!(ok, "{out}");
    assert!(
        out.contains("1.1.1.1") && out.contains("1.1.1.2") && out.contains("HTTP session (HTTP/2"),
        "kdig +https: {out}"
    );
    // dig (BIND 9.18): DoH over HTTPS, and DoT.
    let (ok, out) = run(
        "dig",
        strings(&[
            "@127.0.0.1",
            "-p",
            &api.port().to_string(),
            "+https",
            &format!("+tls-ca={ca_file}"),
            "+tls-hostname=dns.test",
            "www.example.com",
            "A",
            "+short",
            "+subnet=1.0.2.7/32",
        ]),
    )
    .await;
    assert!(ok, "{out}");
    assert_eq!(out.lines().collect::<Vec<_>>(), ["2.2.2.1", "2.2.2.2"], "dig +https: {out}");
    let (ok, out) = run(
        "dig",
        strings(&[
            "@127.0.0.1",
            "-p",
            &dot.port().to_string(),
            "+tls",
            &format!("+tls-ca={ca_file}"),
            "+tls-hostname=dns.test",
            "www.example.com",
            "A",
            "+short",
            "+subnet=1.0.1.7/32",
        ]),
    )
    .await;
    assert!(ok, "{out}");
    assert_eq!(out.lines().collect::<Vec<_>>(), ["1.1.1.1", "1.1.1.2"], "dig +tls: {out}");
    // An unverifiable server is refused by the client: the test CA is what makes it work.
    let (ok, out) = run("curl", strings(&["-sS", &format!("https://{api}/healthz")])).await;
    assert!(!ok && out.contains("(60)"), "curl without the CA refuses the certificate: {out}");

    // dnspython: DoT and DoH over HTTPS, verified.
    let script = r#"
import json, ssl, sys
import dns.message, dns.query, dns.edns
ca, dot, api = sys.argv[1], int(sys.argv[2]), sys.argv[3]
q = lambda: dns.message.make_query("www.example.com", "A", use_edns=0, options=[dns.edns.ECSOption("1.0.2.7", 32)])
addrs = lambda r: sorted(rr.address for s in r.answer for rr in s)
ctx = ssl.create_default_context(cafile=ca)
t = dns.query.tls(q(), "127.0.0.1", port=dot, ssl_context=ctx, server_hostname="dns.test", timeout=5)
h = dns.query.https(q(), f"https://{api}/dns-query", verify=ca, timeout=5)
pad = any(o.otype == dns.edns.OptionType.PADDING for o in t.options)
print(json.dumps({"dot": addrs(t), "doh": addrs(h), "dot_padded": pad}))
"#;
    let (ok, out) = run(
        "python3",
        vec!["-c".into(), script.into(), ca_file.clone(), dot.port().to_string(), api.to_string()],
    )
    .await;
    assert!(ok, "{out}");
    let r: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(r["dot"], json!(["2.2.2.1", "2.2.2.2"]), "{r}");
    assert_eq!(r["doh"], json!(["2.2.2.1", "2.2.2.2"]), "{r}");
    assert_eq!(r["dot_padded"], true, "{r}");

    // Every one of these was counted on its front-end.
    let metrics = s.text("/metrics").await;
    for f in ["dot", "doh"] {
        assert!(
            metrics.contains(&format!("httpdns_dns_queries_total{{frontend=\"{f}\",rcode=\"noerror\"}}")),
            "{metrics}"
        );
    }
    // The leaves' expiry, for the alert in deploy/prometheus/alerts.yml.
    let (_, end) = run(
        "openssl",
        strings(&[
            "x509",
            "-noout",
            "-enddate",
            "-dateopt",
            "iso_8601",
            "-in",
            &tmp.path().join("dns.pem").display().to_string(),
        ]),
    )
    .await;
    assert!(end.starts_with("notAfter="), "{end}");
    let expiry_line = metrics
        .lines()
        .find(|l| l.starts_with(r#"httpdns_tls_certificate_expiry_seconds{name="dns.test"}"#))
        .unwrap_or_else(|| panic!("{metrics}"));
    let expiry: i64 = expiry_line.rsplit(' ').next().unwrap().parse().unwrap();
    let now = httpdns_core::clock::unix_s() as i64;
    assert!((expiry - now - 20 * 86_400).abs() < 3600, "20 days from now: {expiry_line}");
}

#[tokio::test]
async fn a_new_certificate_reaches_new_connections_and_a_broken_one_is_not_served() {
    let have = Command::new("python3").args(["-c", "import dns.message"]).status().is_ok_and(|s| s.success());
    if !have || !have_all(&["openssl"]) {
        httpdns_test_support::skipped(
            "TLS reload test",
            "python3 with dnspython, or openssl, is not installed",
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (s, ca, cert, key) = tls_server(tmp.path()).await;
    let dot = s.running().dot_addr.unwrap();
    let (new_pem, new_key) = ca.leaf("renewed", "dns.test", "DNS:dns.test,IP:127.0.0.1", 60);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/tls_reload_peer.py");
    let p = |x: &Path| x.display().to_string();
    let (ok, out) = run(
        "python3",
        vec![script.into(), dot.port().to_string(), p(&ca.ca()), p(&cert), p(&key), p(&new_pem), p(&new_key)],
    )
    .await;
    assert!(ok, "{out}");
    let r: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    let answer = json!(["1.1.1.1", "1.1.1.2", "2.2.2.1", "2.2.2.2"]);
    assert_ne!(r["new_serial"], r["old_serial"], "a new connection got the renewed certificate: {r}");
    assert_eq!(r["new_answer"], answer, "{r}");
    assert_eq!(r["old_connection_after_reload"], answer, "the old connection still answers: {r}");
    assert_eq!(r["old_connection_serial"], r["old_serial"], "{r}");
    assert_eq!(r["after_broken_serial"], r["new_serial"], "a broken file is not served: {r}");
    assert_eq!(r["after_broken_answer"], answer, "{r}");
    let metrics = s.text("/metrics").await;
    let errors: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("httpdns_tls_reload_errors_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(errors >= 1, "the broken file was counted: {metrics}");
    let ready = s.get("/readyz").await;
    assert_eq!(ready.status(), 200, "still ready with the certificate in service");
    // The expiry metric follows the renewed leaf (60 days).
    let line = metrics
        .lines()
        .find(|l| l.starts_with(r#"httpdns_tls_certificate_expiry_seconds{name="dns.test"}"#))
        .unwrap_or_else(|| panic!("{metrics}"));
    let expiry: i64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    let now = httpdns_core::clock::unix_s() as i64;
    assert!((expiry - now - 60 * 86_400).abs() < 3600, "{line}");
}

/// The served certificate's serial at `addr` for SNI `dns.test`, as openssl sees it.
async fn served_serial(addr: std::net::SocketAddr, ca: &Path) -> String {
    let cmd = format!(
        "openssl s_client -connect {addr} -servername dns.test -CAfile {} </dev/null 2>/dev/null | openssl x509 -noout -serial",
        ca.display()
    );
    let (_, out) = run("sh", vec!["-c".into(), cmd]).await;
    out.trim().to_owned()
}

/// On the real binary: with file polling set to an hour, a renewed certificate is served only
/// after SIGHUP; an idle DNS-over-TLS connection is closed after the DNS idle timeout.
#[tokio::test]
async fn sighup_reloads_certificates_and_idle_dot_connections_are_closed() {
    if !have_all(&["openssl", "python3"]) {
        httpdns_test_support::skipped("TLS SIGHUP test", "openssl or python3 is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ca = TestCa::new(tmp.path());
    let (pem, key) = ca.leaf("dns", "dns.test", "DNS:dns.test,IP:127.0.0.1", 20);
    let (cert, served_key) = (tmp.path().join("served.pem"), tmp.path().join("served.key"));
    std::fs::copy(&pem, &cert).unwrap();
    std::fs::copy(&key, &served_key).unwrap();
    let mut env = crate::support::env(tmp.path(), &Db::Sqlite);
    env.insert("HTTPDNS_DOT_ADDR".into(), "127.0.0.1:0".into());
    env.insert("HTTPDNS_API_TLS_ADDR".into(), "127.0.0.1:0".into());
    env.insert("HTTPDNS_TLS_CERT".into(), cert.display().to_string());
    env.insert("HTTPDNS_TLS_KEY".into(), served_key.display().to_string());
    let config = tmp.path().join("httpdns.toml");
    std::fs::write(&config, "[limits]\ndns_idle_timeout_ms = 500\n\n[tls]\nreload_interval_ms = 3600000\n")
        .unwrap();
    let p = crate::support::Process::spawn_with_args(
        &env,
        tmp.path(),
        &["--config", config.to_str().unwrap(), "serve"],
    );
    let mut dot = None;
    for _ in 0..100 {
        dot = p.addr_of("dot");
        if dot.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let dot = dot.expect("the DoT listener is logged");
    let first = served_serial(dot, &ca.ca()).await;
    assert!(first.starts_with("serial="), "{first}");

    // A DoT connection idle after its first answer: closed by the server after about 500 ms
    // (before the first message the header timeout applies, as on every listener).
    let script = r#"
import socket, ssl, sys, time
ctx = ssl.create_default_context(cafile=sys.argv[1])
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=10), server_hostname="dns.test")
import dns.message, struct
wire = dns.message.make_query("www.example.com", "A").to_wire()
s.sendall(struct.pack("!H", len(wire)) + wire)
n = struct.unpack("!H", s.recv(2))[0]
got = b""
while len(got) < n:
    got += s.recv(n - len(got))
t = time.monotonic()
try:
    data = s.recv(1)
except (ConnectionError, ssl.SSLError):
    data = b""
print("%s %.3f" % ("closed" if data == b"" else "data", time.monotonic() - t))
"#;
    let (ok, out) = run(
        "python3",
        vec!["-c".into(), script.into(), ca.ca().display().to_string(), dot.port().to_string()],
    )
    .await;
    assert!(ok, "{out}");
    let (what, secs) = out.trim().split_once(' ').unwrap();
    let secs: f64 = secs.parse().unwrap();
    assert_eq!(what, "closed", "{out}");
    assert!((0.3..5.0).contains(&secs), "closed after the idle timeout: {out}");

    // Renewed files: not seen until the signal (the poll is an hour away)...
    let (new_pem, new_key) = ca.leaf("renewed", "dns.test", "DNS:dns.test,IP:127.0.0.1", 60);
    std::fs::copy(&new_key, &served_key).unwrap();
    std::fs::copy(&new_pem, &cert).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(served_serial(dot, &ca.ca()).await, first);
    let pid = p.child.id().to_string();
    assert!(Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    let mut now = String::new();
    for _ in 0..50 {
        now = served_serial(dot, &ca.ca()).await;
        if now != first {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(now.starts_with("serial=") && now != first, "SIGHUP reloaded: {first} -> {now}");
    assert_eq!(p.terminate().code(), Some(0), "still serving, and stops cleanly");
}
