//! The deploy files (`deploy/`) checked without Docker: YAML parses, every environment name
//! exists in the binary's configuration (and every setting is documented in the env file),
//! ports and service names agree across compose, Prometheus and Grafana, and every metric the
//! dashboard and the alert rules use is exported by a running server.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use serde_json::json;
use serde_norway::Value;

use crate::support::{env, Db, Server};

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy").join(path)
}

fn yaml(path: &str) -> Value {
    let text = std::fs::read_to_string(deploy(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut v: Value =
        serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{path} is not valid YAML: {e}"));
    // Compose files share service settings through `<<: *anchor` merge keys.
    v.apply_merge().unwrap_or_else(|e| panic!("{path}: merge keys: {e}"));
    v
}

fn known_env() -> HashSet<&'static str> {
    httpdns_server::config::ENV_VARS.iter().map(|(k, _)| *k).collect()
}

/// `KEY=value` and `# KEY=value` lines of the env file.
fn env_file_keys(commented: bool) -> Vec<String> {
    std::fs::read_to_string(deploy("httpdns.env"))
        .unwrap()
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = if commented { l.trim_start_matches('#').trim() } else { l };
            if l.starts_with('#') {
                return None;
            }
            let (k, _) = l.split_once('=')?;
            k.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_').then(|| k.to_owned())
        })
        .collect()
}

#[test]
fn compose_env_and_ports_agree_with_the_binary() {
    let compose = yaml("docker-compose.yml");
    let known = known_env();
    // Every HTTPDNS_* name set anywhere is one the binary reads...
    let set = env_file_keys(false);
    for k in set.iter().filter(|k| k.starts_with("HTTPDNS_")) {
        assert!(known.contains(k.as_str()), "httpdns.env sets {k}, which the binary does not read");
    }
    let services = compose["services"].as_mapping().unwrap();
    for (name, svc) in services {
        if let Some(envs) = svc["environment"].as_mapping() {
            for k in envs.keys().filter_map(Value::as_str).filter(|k| k.starts_with("HTTPDNS_")) {
                assert!(known.contains(k), "service {name:?} sets {k}, which the binary does not read");
            }
        }
    }
    // ...and every setting of the binary is documented in the env file (set or commented).
    let documented: HashSet<String> = env_file_keys(true).into_iter().collect();
    for k in &known {
        assert!(documented.contains(*k), "{k} is not documented in deploy/httpdns.env");
    }
    // Secrets interpolated from .env exist there.
    let dotenv = std::fs::read_to_string(deploy(".env")).unwrap();
    let text = std::fs::read_to_string(deploy("docker-compose.yml")).unwrap();
    for var in text.split("${").skip(1).filter_map(|s| s.split('}').next()) {
        assert!(
            dotenv.lines().any(|l| l.starts_with(&format!("{var}="))),
            "${{{var}}} is not set in deploy/.env"
        );
    }

    // Two replicas on the same image, API/mirror/DNS container ports as the env file says.
    let listen_port = |key: &str| -> String {
        let line = std::fs::read_to_string(deploy("httpdns.env"))
            .unwrap()
            .lines()
            .find(|l| l.starts_with(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{key} set in httpdns.env"))
            .to_owned();
        line.rsplit(':').next().unwrap().to_owned()
    };
    let (api, mirror, dns) = (
        listen_port("HTTPDNS_API_ADDR"),
        listen_port("HTTPDNS_MIRROR_ADDR"),
        listen_port("HTTPDNS_DNS_ADDR"),
    );
    let dockerfile = std::fs::read_to_string(deploy("Dockerfile")).unwrap();
    assert!(
        dockerfile.contains(&format!("EXPOSE {api} {mirror} {dns}/udp {dns}/tcp")),
        "Dockerfile exposes the listeners"
    );
    assert!(dockerfile.contains(&format!("http://127.0.0.1:{api}/healthz")), "HEALTHCHECK uses the API port");
    let mut host_ports = BTreeSet::new();
    let mut replicas = Vec::new();
    for (name, svc) in services {
        let name = name.as_str().unwrap();
        for p in svc["ports"].as_sequence().into_iter().flatten() {
            let p = p.as_str().unwrap();
            let (host, container) = p.split_once(':').unwrap();
            let proto = container.split('/').nth(1).unwrap_or("tcp");
            assert!(host_ports.insert(format!("{host}/{proto}")), "host port {host}/{proto} published twice");
            if name.starts_with("httpdns-") {
                let c = container.split('/').next().unwrap();
                assert!(
                    [&api, &mirror, &dns].contains(&&c.to_owned()),
                    "{name} publishes {c}, not a listener port"
                );
            }
        }
        if name.starts_with("httpdns-") {
            replicas.push(name.to_owned());
            assert_eq!(svc["env_file"].as_str(), Some("httpdns.env"), "{name} uses httpdns.env");
            let db = svc["environment"]["HTTPDNS_DATABASE_URL"].as_str().unwrap();
            assert!(
                db.starts_with("postgres://") && db.contains("@postgres:5432/"),
                "{name} shares PostgreSQL: {db}"
            );
        }
    }
    assert!(replicas.len() >= 2, "at least two replicas: {replicas:?}");
    assert!(services.contains_key("postgres") && services["postgres"]["healthcheck"].is_mapping());
    assert!(!services["postgres"]["volumes"].is_null(), "PostgreSQL keeps its data in a volume");

    // The mirror's bucket is the one created by minio-init, at the endpoint of the minio service.
    let envfile = std::fs::read_to_string(deploy("httpdns.env")).unwrap();
    assert!(envfile.contains("HTTPDNS_MIRROR_S3_ENDPOINT=http://minio:9000"));
    let bucket = envfile.lines().find_map(|l| l.strip_prefix("HTTPDNS_MIRROR_STORE=s3://")).unwrap();
    let bucket = bucket.split('/').next().unwrap();
    assert!(text.contains(&format!("store/{bucket}")), "minio-init creates {bucket}");

    // Prometheus scrapes every replica on the API port; Grafana reads that Prometheus.
    let prom = yaml("prometheus/prometheus.yml");
    let targets: BTreeSet<String> = prom["scrape_configs"][0]["static_configs"][0]["targets"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect();
    let expected: BTreeSet<String> = replicas.iter().map(|r| format!("{r}:{api}")).collect();
    assert_eq!(targets, expected);
    assert_eq!(prom["scrape_configs"][0]["metrics_path"].as_str(), Some("/metrics"));
    assert_eq!(prom["rule_files"][0].as_str(), Some("/etc/prometheus/alerts.yml"));
    let prom_port =
        services["prometheus"]["ports"][0].as_str().unwrap().split(':').nth(1).unwrap().to_owned();
    let ds = yaml("grafana/provisioning/datasources/prometheus.yml");
    assert_eq!(ds["datasources"][0]["url"].as_str().unwrap(), format!("http://prometheus:{prom_port}"));
    let provider = yaml("grafana/provisioning/dashboards/httpdns.yml");
    let dash_dir = provider["providers"][0]["options"]["path"].as_str().unwrap();
    let grafana_volumes: Vec<&str> =
        services["grafana"]["volumes"].as_sequence().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(
        grafana_volumes.contains(&format!("./grafana/dashboards:{dash_dir}:ro").as_str()),
        "{grafana_volumes:?}"
    );
    let ds_uid = ds["datasources"][0]["uid"].as_str().unwrap();
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(deploy("grafana/dashboards/httpdns.json")).unwrap())
            .unwrap();
    for p in dashboard["panels"].as_array().unwrap() {
        assert_eq!(p["datasource"]["uid"], ds_uid, "panel {} uses the provisioned datasource", p["title"]);
    }
}

/// Metric names in PromQL expressions, without histogram suffixes.
fn metric_names(exprs: impl Iterator<Item = String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in exprs {
        let mut rest = e.as_str();
        while let Some(i) = rest.find("httpdns_") {
            let tail = &rest[i..];
            let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
            let name = &tail[..end];
            let base = ["_bucket", "_sum", "_count"].iter().fold(name, |n, s| n.strip_suffix(s).unwrap_or(n));
            out.insert(base.to_owned());
            rest = &tail[end..];
        }
    }
    out
}

/// Every metric the dashboard and the alert rules name.
pub(crate) fn used_metrics() -> BTreeSet<String> {
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(deploy("grafana/dashboards/httpdns.json")).unwrap())
            .unwrap();
    let mut exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter().map(|t| t["expr"].as_str().unwrap().to_owned()))
        .collect();
    let rules = yaml("prometheus/alerts.yml");
    for g in rules["groups"].as_sequence().unwrap() {
        for r in g["rules"].as_sequence().unwrap() {
            exprs.push(r["expr"].as_str().unwrap().to_owned());
        }
    }
    metric_names(exprs.into_iter())
}

/// The metric families a `/metrics` text exposes.
pub(crate) fn exported(metrics: &str) -> BTreeSet<String> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn every_metric_of_the_dashboard_and_alerts_is_exported() {
    let used = used_metrics();
    assert!(used.len() >= 15, "{used:?}");

    // A server with every role on, some answers and a mirror rule, scraped as Prometheus does.
    let tmp = tempfile::tempdir().unwrap();
    let mut e = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_MIRROR_ADDR".into(), "127.0.0.1:0".into());
    let s = Server::start_with(e, None).await;
    s.seed().await;
    s.put_ok(
        "/admin/v1/mirror/rules/image",
        json!({"path_prefix": "/image", "origin": "http://127.0.0.1:9"}),
    )
    .await;
    s.put_ok(
        "/admin/v1/config/cdn",
        json!({"mergeHostConfigs": [], "hostListConfig": [{"host": "cdn.example.com", "rate": 1}],
            "reviveProbeInterval": 600000, "configRequestInterval": 600000, "publicIpList": []}),
    )
    .await;
    s.text("/d?dn=www.example.com&ip=1.0.2.7").await;
    let metrics = s.text("/metrics").await;
    let exported = exported(&metrics);
    let missing: Vec<&String> = used.iter().filter(|m| !exported.contains(*m)).collect();
    assert!(missing.is_empty(), "used by deploy/ but not exported: {missing:?}\nexported: {exported:?}");
    assert!(
        metrics.contains(r#"httpdns_answers_by_client_total{isp="unicom",region="shanghai"} 1"#),
        "{metrics}"
    );
}
