//! Configuration: a TOML file (`--config FILE`) and `HTTPDNS_*` environment variables, the
//! environment winning. The external form ([`FileConfig`]) is strict serde; [`Config`] is the
//! validated internal form the process runs on.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use httpdns_api::dnspod::format::FormatOptions;
use httpdns_api::events::EventSettings;
use httpdns_catalog::LiveSettings;
use httpdns_core::score::Weights;
use httpdns_core::snapshot::Policy;
use httpdns_core::{DomainName, Token};
use httpdns_geo::{GeoConfig, IspMap};
use serde::Deserialize;

/// Every environment variable the binary reads, with its meaning. Documented in
/// `docs/configuration.md`; a test keeps the two in step.
pub const ENV_VARS: &[(&str, &str)] = &[
    ("HTTPDNS_API_ADDR", "HTTP listener: HTTPDNS, admin, metrics, health (`off` disables)"),
    ("HTTPDNS_MIRROR_ADDR", "HTTP listener of the mirroring gateway (`off` disables)"),
    ("HTTPDNS_DNS_ADDR", "plain DNS listener, UDP and TCP (`off` disables)"),
    ("HTTPDNS_DATA_DIR", "directory of the SQLite file, stored objects and generated secrets"),
    ("HTTPDNS_DATABASE_URL", "sqlite://PATH or postgres://..."),
    ("HTTPDNS_ADMIN_TOKEN", "bearer token of the admin API"),
    ("HTTPDNS_ALLOW_PRIVATE_NODE_IPS", "accept private and loopback node addresses (true/false)"),
    ("HTTPDNS_UPSTREAMS", "upstream DNS servers, ip:port,ip:port, or off"),
    ("HTTPDNS_GEOIP_CITY_DB", "path of a GeoIP2/GeoLite2 City database"),
    ("HTTPDNS_GEOIP_ASN_DB", "path of a GeoLite2 ASN database"),
    ("HTTPDNS_CONFIG_SIGNING_KEY", "Ed25519 seed (base64 or hex, 32 bytes) signing config documents"),
    ("HTTPDNS_AUTH_REQUIRED", "answer authenticated requests only (true/false)"),
    (
        "HTTPDNS_TRUSTED_PROXIES",
        "CIDRs whose X-Forwarded-For / X-Real-IP and PROXY protocol headers are believed, comma-separated",
    ),
    ("HTTPDNS_SYNC_INTERVAL_MS", "how often the snapshot follows the database, in ms"),
    ("HTTPDNS_CONTROL_TICK_MS", "how often the policy controller and guarded rollouts decide, in ms (default 60000)"),
    ("HTTPDNS_STALLED_TIMEOUT_MS", "a request being answered that moves no body byte this long is closed, in ms"),
    ("HTTPDNS_BODY_TIMEOUT_MS", "the longest gap between two reads of a request body, in ms"),
    ("HTTPDNS_BODY_DEADLINE_MS", "the longest a whole request body may take to arrive, in ms"),
    ("HTTPDNS_LOG_FORMAT", "text or json"),
    ("HTTPDNS_POLICY_AUTO", "the policy controller changes places by itself (true/false, default true)"),
    ("HTTPDNS_POLICY_RAMP", "the recovery's shares of httpdnsRate, comma-separated (default 0.01,0.05,0.25,1)"),
    ("HTTPDNS_POLICY_STEP_SECONDS", "how long each recovery step holds, in seconds (default 300)"),
    ("HTTPDNS_POLICY_MIN_REQUESTS", "request events a policy decision needs (default 100)"),
    (
        "HTTPDNS_CLIENT_RATE_LIMIT_QPS",
        "requests per second per client address on the unauthenticated endpoints (`off`: none, the default)",
    ),
    (
        "HTTPDNS_MIRROR_STORE",
        "where the mirror keeps copies: `local` (under the data directory) or `s3://BUCKET[/PREFIX]`",
    ),
    ("HTTPDNS_MIRROR_S3_ENDPOINT", "S3-compatible endpoint URL (MinIO, Ceph, OSS...); unset: AWS"),
    ("HTTPDNS_MIRROR_S3_REGION", "S3 region (default us-east-1)"),
    (
        "HTTPDNS_MIRROR_MEMORY_MB",
        "MiB of small stored bodies (up to 1 MiB each) the mirror keeps in memory; 0 turns it off",
    ),
    (
        "HTTPDNS_MIRROR_MAX_BYTES",
        "byte cap of the mirror's copies on the local disk (`50G`, `512M`, bytes; least recently used copies go first); unset or `off`: no cap",
    ),
    (
        "HTTPDNS_MIRROR_SENDFILE",
        "plain (unencrypted) connections send local copies' bodies above 64 KiB held in memory from their files with sendfile(2) (true/false, default true)",
    ),
    (
        "HTTPDNS_ALLOW_LOCAL_ORIGINS",
        "accept mirror origins (and redirect hops) on loopback, link-local and unspecified addresses (true/false)",
    ),
    ("HTTPDNS_API_TLS_ADDR", "HTTPS listener of everything on the API listener, h2 and http/1.1 (`off` disables)"),
    ("HTTPDNS_MIRROR_TLS_ADDR", "HTTPS listener of the mirroring gateway (`off` disables)"),
    ("HTTPDNS_DOT_ADDR", "DNS over TLS listener, RFC 7858 (`off` disables)"),
    ("HTTPDNS_TLS_CERT", "PEM certificate chains of the TLS listeners (several chains: chosen by SNI)"),
    ("HTTPDNS_TLS_KEY", "PEM private keys of the chains in HTTPDNS_TLS_CERT"),
    (
        "HTTPDNS_METRICS_ADDR",
        "a listener of its own for /metrics; when on, the API listener no longer serves /metrics (`off`: the default)",
    ),
    (
        "HTTPDNS_MAX_CONNECTIONS",
        "open TCP connections at most, all listeners together (default: half the descriptor limit, at most 50000)",
    ),
    (
        "HTTPDNS_MAX_CONNECTIONS_PER_ADDR",
        "open TCP connections from one client address at most; trusted proxies are exempt (default 512)",
    ),
    (
        "HTTPDNS_HEADER_TIMEOUT_MS",
        "time from accept (or from a request's first byte) to a complete request head, TLS handshake included",
    ),
    ("HTTPDNS_IDLE_TIMEOUT_MS", "how long an HTTP connection is kept alive between requests"),
    (
        "HTTPDNS_PUBLIC_ADDRS",
        "this replica's public entry points (`ip` or `ip:port`, comma-separated) announced in /ss and /conf",
    ),
    (
        "HTTPDNS_ALLOW_DEMO_SECRETS",
        "start even with the placeholder secrets shipped in deploy/ (true/false; local demos only)",
    ),
    (
        "HTTPDNS_MIRROR_IMAGE_MEMORY_MB",
        "MiB all image renders in flight may hold together (original, pixels, output), reserved before the original is read",
    ),
    ("HTTPDNS_MIRROR_IMAGE_WAIT_MS", "how long a render waits for image memory before its request gets a 503"),
    (
        "HTTPDNS_MIRROR_VARIANT_MAX_STORE_BYTES",
        "image variants larger than this are served but not stored",
    ),
];

/// The secrets checked against the shipped placeholders (see [`crate::demo_secrets`]), besides
/// the ones in [`ENV_VARS`]: the S3 key the mirror's object store reads from the environment.
pub const SECRET_ENV_VARS: &[&str] =
    &["HTTPDNS_ADMIN_TOKEN", "HTTPDNS_CONFIG_SIGNING_KEY", "HTTPDNS_DATABASE_URL", "AWS_SECRET_ACCESS_KEY"];

/// Where the mirror keeps its copies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MirrorStore {
    /// `<data dir>/mirror/store` (see `httpdns_mirror::layout`).
    Local,
    /// An S3-compatible bucket, credentials from `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`.
    S3 { bucket: String, prefix: String, endpoint: Option<String>, region: String },
}

/// Where names that are not managed here are resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstreams {
    /// The system's resolvers (`/etc/resolv.conf`).
    System,
    Servers(Vec<SocketAddr>),
    /// No upstream resolution (`off`): such names get empty answers, and REFUSED over DNS.
    Off,
}

/// A listener address, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listen {
    Off,
    At(SocketAddr),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub api_addr: Listen,
    pub mirror_addr: Listen,
    pub dns_addr: Listen,
    pub data_dir: PathBuf,
    pub database_url: String,
    pub admin_token: Option<String>,
    /// The config signing key's text; `None`: generated into the data directory.
    pub config_signing_key: Option<String>,
    pub allow_private_node_ips: bool,
    pub upstreams: Upstreams,
    pub policy: Policy,
    pub geo: GeoConfig,
    pub sync_interval: Duration,
    /// How often guarded rollouts (and the policy controller) decide.
    pub control_tick: Duration,
    pub dnspod: FormatOptions,
    pub log_format: LogFormat,
    /// How long in-flight requests may take to finish after a shutdown signal.
    pub shutdown_grace: Duration,
    pub live: LiveSettings,
    /// The client event intake (`[events]`).
    pub events: EventSettings,
    /// The policy controller (`HTTPDNS_POLICY_*`, `HTTPDNS_CONTROL_TICK_MS`: policy_env.rs).
    pub policy_controller: httpdns_policy::Settings,
    /// Only authenticated requests are answered (DNSPod `id=`, Alibaba signed endpoints).
    pub auth_required: bool,
    /// Proxies whose forwarding headers are believed.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Cache and timeout settings of upstream resolution (servers: `upstreams`).
    pub upstream_timeout: Duration,
    pub upstream_min_ttl: u32,
    pub upstream_max_ttl: u32,
    pub upstream_negative_ttl: u32,
    pub upstream_stale: Duration,
    pub mirror_store: MirrorStore,
    /// Bytes of small bodies the mirror keeps in memory (0: none).
    pub mirror_memory: u64,
    /// Byte cap of the local store's copies (`HTTPDNS_MIRROR_MAX_BYTES`); `None`: no cap.
    pub mirror_max_bytes: Option<u64>,
    /// Plain HTTP/1.1 sends large bodies in memory from their files (`httpdns_net::sendfile`).
    pub mirror_sendfile: bool,
    /// Image variants: memory budget, its wait, the store limit (and the render budgets).
    pub mirror_images: httpdns_mirror::ImageSettings,
    /// Per-address limit of unauthenticated calls: requests per second and burst.
    pub client_rate_limit: Option<(f64, f64)>,
    /// Mirror origins on loopback, link-local or unspecified addresses are accepted.
    pub allow_local_origins: bool,
    /// This replica's public entry points, announced in `/ss` and `/conf`.
    pub public_addrs: Vec<httpdns_api::service_ips::ServiceAddr>,
    pub api_tls_addr: Listen,
    pub mirror_tls_addr: Listen,
    pub dot_addr: Listen,
    /// Certificate chains and keys of the TLS listeners (set when any TLS listener is on).
    pub tls: Option<TlsFiles>,
    pub metrics_addr: Listen,
    /// Connection caps; `None` fields: derived from the descriptor limit at start.
    pub max_connections: Option<usize>,
    pub max_connections_per_addr: Option<usize>,
    /// Connection timeouts of the HTTP listeners and of DNS over TCP and TLS.
    pub http_timeouts: httpdns_net::Timeouts,
    pub dns_timeouts: httpdns_net::Timeouts,
    /// The settings that hold a shipped placeholder secret; non-empty only when
    /// `HTTPDNS_ALLOW_DEMO_SECRETS` is on (otherwise loading fails), so start-up can warn.
    pub demo_secrets: Vec<&'static str>,
}

/// The PEM files of the TLS listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// How often the files are checked for changes (SIGHUP reloads at once).
    pub reload_interval: Duration,
}

/// A configuration error, naming the setting.
#[derive(Debug, thiserror::Error)]
#[error("{setting}: {message}")]
pub struct ConfigError {
    pub setting: String,
    pub message: String,
}

pub(crate) fn err(setting: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError { setting: setting.into(), message: message.into() }
}

/// The TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    api_addr: Option<String>,
    mirror_addr: Option<String>,
    dns_addr: Option<String>,
    data_dir: Option<PathBuf>,
    database_url: Option<String>,
    admin_token: Option<String>,
    config_signing_key: Option<String>,
    allow_private_node_ips: Option<bool>,
    upstreams: Option<Vec<String>>,
    sync_interval_ms: Option<u64>,
    shutdown_grace_ms: Option<u64>,
    log_format: Option<String>,
    #[serde(default)]
    scoring: ScoringFile,
    #[serde(default)]
    geoip: GeoFile,
    #[serde(default)]
    dnspod: DnspodFile,
    #[serde(default)]
    live: LiveFile,
    #[serde(default)]
    events: EventsFile,
    auth_required: Option<bool>,
    trusted_proxies: Option<Vec<String>>,
    #[serde(default)]
    upstream: UpstreamFile,
    #[serde(default)]
    mirror: MirrorFile,
    #[serde(default)]
    dns: DnsFile,
    #[serde(default)]
    rate_limit: RateLimitFile,
    allow_local_origins: Option<bool>,
    public_addrs: Option<Vec<String>>,
    api_tls_addr: Option<String>,
    mirror_tls_addr: Option<String>,
    dot_addr: Option<String>,
    metrics_addr: Option<String>,
    #[serde(default)]
    tls: TlsFile,
    #[serde(default)]
    limits: LimitsFile,
    allow_demo_secrets: Option<bool>,
}

/// `[tls]`: the certificate files of the TLS listeners.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    reload_interval_ms: Option<u64>,
}

/// `[limits]`: connection caps and timeouts of the TCP listeners.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsFile {
    max_connections: Option<usize>,
    max_connections_per_addr: Option<usize>,
    header_timeout_ms: Option<u64>,
    idle_timeout_ms: Option<u64>,
    stalled_timeout_ms: Option<u64>,
    body_timeout_ms: Option<u64>,
    body_deadline_ms: Option<u64>,
    dns_idle_timeout_ms: Option<u64>,
}

/// `[rate_limit]`: the per-address limit of unauthenticated calls.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RateLimitFile {
    client_qps: Option<f64>,
    client_burst: Option<f64>,
}

/// `[dns]`: how managed names present themselves as zones.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DnsFile {
    #[serde(default)]
    nameservers: Vec<String>,
    hostmaster: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MirrorFile {
    store: Option<String>,
    s3_endpoint: Option<String>,
    s3_region: Option<String>,
    memory_mb: Option<u64>,
    /// `HTTPDNS_MIRROR_MAX_BYTES` in the file: `"50G"`.
    max_bytes: Option<String>,
    sendfile: Option<bool>,
    image_memory_mb: Option<u64>,
    image_wait_ms: Option<u64>,
    variant_max_store_bytes: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpstreamFile {
    timeout_ms: Option<u64>,
    min_ttl: Option<u32>,
    max_ttl: Option<u32>,
    negative_ttl: Option<u32>,
    stale_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LiveFile {
    refresh_interval_ms: Option<u64>,
    report_fresh_ms: Option<u64>,
    report_decay_ms: Option<u64>,
    feedback_flush_ms: Option<u64>,
    feedback_min_clients: Option<usize>,
    feedback_client_ttl_ms: Option<u64>,
    feedback_failure_penalty_ms: Option<f64>,
    feedback_rate_per_client: Option<f64>,
    feedback_burst: Option<f64>,
    feedback_max_batch: Option<usize>,
    probe_workers: Option<usize>,
}

/// `[events]`: the client event intake (docs/observability.md).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsFile {
    flush_ms: Option<u64>,
    retention_hours: Option<u64>,
    max_batch: Option<usize>,
    max_body_bytes: Option<usize>,
    max_age_hours: Option<u64>,
    rate_per_client: Option<f64>,
    burst: Option<f64>,
    max_label_pairs: Option<usize>,
    alert_rate: Option<f64>,
    alert_min_requests: Option<f64>,
    alert_min_reports: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScoringFile {
    weights: Option<Weights>,
    band: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GeoFile {
    city_db: Option<PathBuf>,
    asn_db: Option<PathBuf>,
    reload_interval_ms: Option<u64>,
    /// AS number (as a string key) to ISP token, added to the shipped defaults.
    #[serde(default)]
    asn_isp: BTreeMap<String, String>,
    /// Lowercase substring of the AS organisation to ISP token.
    #[serde(default)]
    org_isp: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DnspodFile {
    cip_every_line: Option<bool>,
    document_form: Option<bool>,
}

fn parse_listen(setting: &str, value: &str) -> Result<Listen, ConfigError> {
    if value.eq_ignore_ascii_case("off") {
        return Ok(Listen::Off);
    }
    value
        .parse::<SocketAddr>()
        .map(Listen::At)
        .map_err(|_| err(setting, format!("{value:?} is not ip:port or off")))
}

pub(crate) fn parse_bool(setting: &str, value: &str) -> Result<bool, ConfigError> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        _ => Err(err(setting, format!("{value:?} is not true or false"))),
    }
}

/// Parses a CIDR or a bare address (a /32 or /128).
fn parse_cidr(setting: &str, value: &str) -> Result<ipnet::IpNet, ConfigError> {
    let v = value.trim();
    v.parse::<ipnet::IpNet>()
        .or_else(|_| v.parse::<IpAddr>().map(ipnet::IpNet::from))
        .map(|n| n.trunc())
        .map_err(|_| err(setting, format!("{v:?} is not a CIDR or an address")))
}

/// Parses `ip:port` or a bare IP (port 53).
fn parse_upstream(setting: &str, value: &str) -> Result<SocketAddr, ConfigError> {
    let v = value.trim();
    if let Ok(sa) = v.parse::<SocketAddr>() {
        return Ok(sa);
    }
    if let Ok(ip) = v.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, 53));
    }
    Err(err(setting, format!("{v:?} is not ip:port")))
}

fn mirror_store(
    store: Option<String>,
    endpoint: Option<String>,
    region: Option<String>,
) -> Result<MirrorStore, ConfigError> {
    let store = store.unwrap_or_else(|| "local".into());
    if store == "local" {
        return Ok(MirrorStore::Local);
    }
    let Some(rest) = store.strip_prefix("s3://") else {
        return Err(err("HTTPDNS_MIRROR_STORE", "must be local or s3://BUCKET[/PREFIX]"));
    };
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let bucket_ok = (3..=63).contains(&bucket.len())
        && bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if !bucket_ok {
        return Err(err("HTTPDNS_MIRROR_STORE", format!("{bucket:?} is not an S3 bucket name")));
    }
    if let Some(e) = &endpoint {
        if !(e.starts_with("http://") || e.starts_with("https://")) {
            return Err(err("HTTPDNS_MIRROR_S3_ENDPOINT", "must be an http:// or https:// URL"));
        }
    }
    Ok(MirrorStore::S3 {
        bucket: bucket.to_owned(),
        prefix: prefix.trim_matches('/').to_owned(),
        endpoint,
        region: region.unwrap_or_else(|| "us-east-1".into()),
    })
}

impl Config {
    /// Builds the configuration from an optional TOML text and an environment lookup
    /// (a function, so tests need not touch the process environment).
    pub fn load(file: Option<&str>, env: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let file: FileConfig = match file {
            Some(text) => toml::from_str(text).map_err(|e| err("config file", e.to_string()))?,
            None => FileConfig::default(),
        };
        let env = |k: &str| env(k).filter(|v| !v.is_empty() || k == "HTTPDNS_ADMIN_TOKEN");

        let listen = |key: &str, file_v: Option<String>, default: &str| -> Result<Listen, ConfigError> {
            match env(key) {
                Some(v) => parse_listen(key, &v),
                None => parse_listen(
                    &key.trim_start_matches("HTTPDNS_").to_lowercase(),
                    file_v.as_deref().unwrap_or(default),
                ),
            }
        };
        let api_addr = listen("HTTPDNS_API_ADDR", file.api_addr, "127.0.0.1:8080")?;
        let mirror_addr = listen("HTTPDNS_MIRROR_ADDR", file.mirror_addr, "127.0.0.1:8081")?;
        let dns_addr = listen("HTTPDNS_DNS_ADDR", file.dns_addr, "127.0.0.1:1053")?;

        let data_dir =
            env("HTTPDNS_DATA_DIR").map(PathBuf::from).or(file.data_dir).unwrap_or_else(|| "./data".into());
        let database_url = env("HTTPDNS_DATABASE_URL")
            .or(file.database_url)
            .unwrap_or_else(|| format!("sqlite://{}", data_dir.join("httpdns.db").display()));
        if !(database_url.starts_with("sqlite:")
            || database_url.starts_with("postgres://")
            || database_url.starts_with("postgresql://"))
        {
            return Err(err("HTTPDNS_DATABASE_URL", "must start with sqlite:// or postgres://"));
        }
        // Placeholders first: a shipped secret is refused as such, before its format is checked.
        let allow_demo_secrets = match env("HTTPDNS_ALLOW_DEMO_SECRETS") {
            Some(v) => parse_bool("HTTPDNS_ALLOW_DEMO_SECRETS", &v)?,
            None => file.allow_demo_secrets.unwrap_or(false),
        };
        let demo_secrets = placeholder_secrets(
            env("HTTPDNS_ADMIN_TOKEN").or(file.admin_token.clone()).as_deref(),
            env("HTTPDNS_CONFIG_SIGNING_KEY").or(file.config_signing_key.clone()).as_deref(),
            &database_url,
            env("AWS_SECRET_ACCESS_KEY").as_deref(),
        );
        if let Some(first) = demo_secrets.first().filter(|_| !allow_demo_secrets) {
            let others = &demo_secrets[1..];
            let also =
                if others.is_empty() { String::new() } else { format!(" (so do {})", others.join(", ")) };
            return Err(err(
                *first,
                format!(
                    "holds a placeholder shipped with httpdns{also}: anyone can read it. Set a secret \
                     of your own (openssl rand -hex 24; the signing key: openssl rand -base64 32), or \
                     HTTPDNS_ALLOW_DEMO_SECRETS=true for a local demo"
                ),
            ));
        }

        let admin_token = env("HTTPDNS_ADMIN_TOKEN").or(file.admin_token);
        if let Some(t) = &admin_token {
            if t.len() < 16 || !t.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(err(
                    "HTTPDNS_ADMIN_TOKEN",
                    "must be at least 16 printable characters without spaces",
                ));
            }
        }
        let config_signing_key = env("HTTPDNS_CONFIG_SIGNING_KEY").or(file.config_signing_key);
        if let Some(k) = &config_signing_key {
            httpdns_config::Signer::from_text(k).map_err(|e| err("HTTPDNS_CONFIG_SIGNING_KEY", e))?;
        }
        let allow_private_node_ips = match env("HTTPDNS_ALLOW_PRIVATE_NODE_IPS") {
            Some(v) => parse_bool("HTTPDNS_ALLOW_PRIVATE_NODE_IPS", &v)?,
            None => file.allow_private_node_ips.unwrap_or(false),
        };
        let upstreams = match env("HTTPDNS_UPSTREAMS") {
            Some(v) if v.trim().eq_ignore_ascii_case("off") => Upstreams::Off,
            Some(v) => Upstreams::Servers(
                v.split(',').map(|u| parse_upstream("HTTPDNS_UPSTREAMS", u)).collect::<Result<_, _>>()?,
            ),
            None => match file.upstreams {
                None => Upstreams::System,
                Some(list) if list.iter().any(|u| u.trim().eq_ignore_ascii_case("off")) => Upstreams::Off,
                Some(list) => Upstreams::Servers(
                    list.iter().map(|u| parse_upstream("upstreams", u)).collect::<Result<_, _>>()?,
                ),
            },
        };

        let weights = file.scoring.weights.unwrap_or_default();
        weights.validate().map_err(|e| err(e.field, e.message))?;
        let band = file.scoring.band.unwrap_or(0.01);
        if !(0.0..=1.0).contains(&band) {
            return Err(err("scoring.band", "must be from 0 to 1"));
        }
        let nameservers = file
            .dns
            .nameservers
            .iter()
            .map(|n| DomainName::parse(n).map_err(|e| err("dns.nameservers", format!("{n:?}: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let hostmaster = match &file.dns.hostmaster {
            None => None,
            Some(h) => Some(DomainName::parse(h).map_err(|e| err("dns.hostmaster", format!("{h:?}: {e}")))?),
        };
        let policy = Policy { weights, band, allow_private: allow_private_node_ips, nameservers, hostmaster };

        let mut asn = Vec::new();
        for (k, v) in &file.geoip.asn_isp {
            let n = k
                .trim_start_matches("AS")
                .parse::<u32>()
                .map_err(|_| err(format!("geoip.asn_isp.{k}"), "key must be an AS number"))?;
            asn.push((n, Token::parse(v).map_err(|e| err(format!("geoip.asn_isp.{k}"), e.to_string()))?));
        }
        let mut org = Vec::new();
        for (k, v) in &file.geoip.org_isp {
            org.push((
                k.clone(),
                Token::parse(v).map_err(|e| err(format!("geoip.org_isp.{k}"), e.to_string()))?,
            ));
        }
        let geo = GeoConfig {
            city_db: env("HTTPDNS_GEOIP_CITY_DB").map(PathBuf::from).or(file.geoip.city_db),
            asn_db: env("HTTPDNS_GEOIP_ASN_DB").map(PathBuf::from).or(file.geoip.asn_db),
            isp_map: IspMap::with_overrides(asn, org),
            reload_interval: Duration::from_millis(file.geoip.reload_interval_ms.unwrap_or(10_000).max(100)),
        };

        let sync_ms = match env("HTTPDNS_SYNC_INTERVAL_MS") {
            Some(v) => {
                v.parse::<u64>().map_err(|_| err("HTTPDNS_SYNC_INTERVAL_MS", "must be milliseconds"))?
            }
            None => file.sync_interval_ms.unwrap_or(1000),
        };
        if !(50..=600_000).contains(&sync_ms) {
            return Err(err("sync_interval_ms", "must be 50 to 600000"));
        }
        let control_tick_ms = match env("HTTPDNS_CONTROL_TICK_MS") {
            Some(v) => v
                .parse::<u64>()
                .ok()
                .filter(|n| (10..=3_600_000).contains(n))
                .ok_or_else(|| err("HTTPDNS_CONTROL_TICK_MS", "must be 10 to 3600000 milliseconds"))?,
            None => 60_000,
        };
        let log_format = match env("HTTPDNS_LOG_FORMAT").or(file.log_format).as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => return Err(err("HTTPDNS_LOG_FORMAT", format!("{other:?} is not text or json"))),
        };

        let live = live_settings(&file.live)?;
        let events = event_settings(&file.events)?;
        let trusted_proxies = match env("HTTPDNS_TRUSTED_PROXIES") {
            Some(v) => v
                .split(',')
                .map(|c| parse_cidr("HTTPDNS_TRUSTED_PROXIES", c))
                .collect::<Result<Vec<_>, _>>()?,
            None => file
                .trusted_proxies
                .unwrap_or_default()
                .iter()
                .map(|c| parse_cidr("trusted_proxies", c))
                .collect::<Result<Vec<_>, _>>()?,
        };
        // The controller's tick is the rollouts' (`control_tick` below): one setting.
        let policy_controller = crate::policy_env::load(&env)?;
        let auth_required = match env("HTTPDNS_AUTH_REQUIRED") {
            Some(v) => parse_bool("HTTPDNS_AUTH_REQUIRED", &v)?,
            None => file.auth_required.unwrap_or(false),
        };

        let mirror_images = mirror_images(
            &file.mirror,
            env("HTTPDNS_MIRROR_IMAGE_MEMORY_MB"),
            env("HTTPDNS_MIRROR_IMAGE_WAIT_MS"),
            env("HTTPDNS_MIRROR_VARIANT_MAX_STORE_BYTES"),
        )?;

        let mirror_store = mirror_store(
            env("HTTPDNS_MIRROR_STORE").or(file.mirror.store),
            env("HTTPDNS_MIRROR_S3_ENDPOINT").or(file.mirror.s3_endpoint),
            env("HTTPDNS_MIRROR_S3_REGION").or(file.mirror.s3_region),
        )?;

        let mirror_memory_mb = match env("HTTPDNS_MIRROR_MEMORY_MB") {
            Some(v) => v
                .trim()
                .parse::<u64>()
                .map_err(|_| err("HTTPDNS_MIRROR_MEMORY_MB", "must be a whole number of MiB"))?,
            None => file.mirror.memory_mb.unwrap_or(64),
        };
        if mirror_memory_mb > 1 << 20 {
            return Err(err("mirror.memory_mb", "must be at most 1048576 (1 TiB)"));
        }

        let mirror_max_bytes = match env("HTTPDNS_MIRROR_MAX_BYTES") {
            Some(v) => {
                httpdns_mirror::cap::parse_bytes(&v).map_err(|e| err("HTTPDNS_MIRROR_MAX_BYTES", e))?
            }
            None => match &file.mirror.max_bytes {
                Some(v) => httpdns_mirror::cap::parse_bytes(v).map_err(|e| err("mirror.max_bytes", e))?,
                None => None,
            },
        };
        if mirror_max_bytes.is_some() && !matches!(mirror_store, MirrorStore::Local) {
            return Err(err(
                "HTTPDNS_MIRROR_MAX_BYTES",
                "caps the local store only; an S3 store's copies follow the bucket's lifecycle rules",
            ));
        }

        let client_qps = match env("HTTPDNS_CLIENT_RATE_LIMIT_QPS") {
            Some(v) if v.trim().eq_ignore_ascii_case("off") => None,
            Some(v) => Some(
                v.trim()
                    .parse::<f64>()
                    .map_err(|_| err("HTTPDNS_CLIENT_RATE_LIMIT_QPS", "must be a number or off"))?,
            ),
            None => file.rate_limit.client_qps,
        };
        let client_rate_limit = match client_qps {
            None => None,
            Some(q) if q.is_finite() && q > 0.0 && q <= 1e6 => {
                let burst = file.rate_limit.client_burst.unwrap_or(q * 2.0);
                if !(burst.is_finite() && (1.0..=1e7).contains(&burst)) {
                    return Err(err("rate_limit.client_burst", "must be from 1 to 10000000"));
                }
                Some((q, burst))
            }
            Some(_) => {
                return Err(err("HTTPDNS_CLIENT_RATE_LIMIT_QPS", "must be above 0 and at most 1000000"))
            }
        };

        let mirror_sendfile = match env("HTTPDNS_MIRROR_SENDFILE") {
            Some(v) => parse_bool("HTTPDNS_MIRROR_SENDFILE", &v)?,
            None => file.mirror.sendfile.unwrap_or(true),
        };
        let allow_local_origins = match env("HTTPDNS_ALLOW_LOCAL_ORIGINS") {
            Some(v) => parse_bool("HTTPDNS_ALLOW_LOCAL_ORIGINS", &v)?,
            None => file.allow_local_origins.unwrap_or(false),
        };
        let public_addrs = match env("HTTPDNS_PUBLIC_ADDRS") {
            Some(v) => v.split(',').map(str::trim).filter(|a| !a.is_empty()).map(str::to_owned).collect(),
            None => file.public_addrs.unwrap_or_default(),
        };
        let public_addrs = public_addrs
            .iter()
            .map(|a| {
                a.parse().map_err(|e: httpdns_api::service_ips::BadServiceAddr| {
                    err("HTTPDNS_PUBLIC_ADDRS", e.to_string())
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let api_tls_addr = listen("HTTPDNS_API_TLS_ADDR", file.api_tls_addr, "off")?;
        let mirror_tls_addr = listen("HTTPDNS_MIRROR_TLS_ADDR", file.mirror_tls_addr, "off")?;
        let dot_addr = listen("HTTPDNS_DOT_ADDR", file.dot_addr, "off")?;
        let metrics_addr = listen("HTTPDNS_METRICS_ADDR", file.metrics_addr, "off")?;
        let tls_cert = env("HTTPDNS_TLS_CERT").map(PathBuf::from).or(file.tls.cert);
        let tls_key = env("HTTPDNS_TLS_KEY").map(PathBuf::from).or(file.tls.key);
        let any_tls = [api_tls_addr, mirror_tls_addr, dot_addr].iter().any(|l| *l != Listen::Off);
        let tls = match (any_tls, tls_cert, tls_key) {
            (false, _, _) => None,
            (true, None, _) => {
                return Err(err("HTTPDNS_TLS_CERT", "a TLS listener is on but no certificate file is set"))
            }
            (true, Some(_), None) => {
                return Err(err("HTTPDNS_TLS_KEY", "a TLS listener is on but no private key file is set"))
            }
            (true, Some(cert), Some(key)) => Some(TlsFiles {
                cert,
                key,
                reload_interval: Duration::from_millis(match file.tls.reload_interval_ms {
                    None => 10_000,
                    Some(t) if (100..=86_400_000).contains(&t) => t,
                    Some(_) => return Err(err("tls.reload_interval_ms", "must be 100 to 86400000")),
                }),
            }),
        };
        let count = |key: &str, file_v: Option<usize>, min: usize| -> Result<Option<usize>, ConfigError> {
            let v = match env(key) {
                Some(v) => Some(v.trim().parse::<usize>().map_err(|_| err(key, "must be a whole number"))?),
                None => file_v,
            };
            match v {
                Some(n) if !(min..=10_000_000).contains(&n) => {
                    Err(err(key, format!("must be {min} to 10000000")))
                }
                v => Ok(v),
            }
        };
        let max_connections = count("HTTPDNS_MAX_CONNECTIONS", file.limits.max_connections, 16)?;
        let max_connections_per_addr =
            count("HTTPDNS_MAX_CONNECTIONS_PER_ADDR", file.limits.max_connections_per_addr, 1)?;
        let millis = |key: &str,
                      env_key: Option<&str>,
                      file_v: Option<u64>,
                      default: u64|
         -> Result<Duration, ConfigError> {
            let v = match env_key.and_then(env) {
                Some(v) => v
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| err(env_key.unwrap_or(key), "must be milliseconds"))?,
                None => file_v.unwrap_or(default),
            };
            if !(100..=3_600_000).contains(&v) {
                return Err(err(env_key.unwrap_or(key), "must be 100 to 3600000 milliseconds"));
            }
            Ok(Duration::from_millis(v))
        };
        let defaults = httpdns_net::Timeouts::default();
        let http_timeouts = httpdns_net::Timeouts {
            header: millis(
                "limits.header_timeout_ms",
                Some("HTTPDNS_HEADER_TIMEOUT_MS"),
                file.limits.header_timeout_ms,
                defaults.header.as_millis() as u64,
            )?,
            idle: millis(
                "limits.idle_timeout_ms",
                Some("HTTPDNS_IDLE_TIMEOUT_MS"),
                file.limits.idle_timeout_ms,
                defaults.idle.as_millis() as u64,
            )?,
            stalled: millis(
                "limits.stalled_timeout_ms",
                Some("HTTPDNS_STALLED_TIMEOUT_MS"),
                file.limits.stalled_timeout_ms,
                defaults.stalled.as_millis() as u64,
            )?,
            body: millis(
                "limits.body_timeout_ms",
                Some("HTTPDNS_BODY_TIMEOUT_MS"),
                file.limits.body_timeout_ms,
                defaults.body.as_millis() as u64,
            )?,
            body_total: millis(
                "limits.body_deadline_ms",
                Some("HTTPDNS_BODY_DEADLINE_MS"),
                file.limits.body_deadline_ms,
                defaults.body_total.as_millis() as u64,
            )?,
        };
        // RFC 7766 §6.2.3: idle DNS connections are closed after seconds, not minutes.
        let dns_timeouts = httpdns_net::Timeouts {
            idle: millis("limits.dns_idle_timeout_ms", None, file.limits.dns_idle_timeout_ms, 10_000)?,
            ..http_timeouts
        };

        Ok(Self {
            allow_local_origins,
            public_addrs,
            api_tls_addr,
            mirror_tls_addr,
            dot_addr,
            tls,
            metrics_addr,
            max_connections,
            max_connections_per_addr,
            http_timeouts,
            dns_timeouts,
            demo_secrets,
            client_rate_limit,
            mirror_store,
            mirror_memory: mirror_memory_mb << 20,
            mirror_max_bytes,
            mirror_sendfile,
            mirror_images,
            api_addr,
            mirror_addr,
            dns_addr,
            data_dir,
            database_url,
            admin_token,
            config_signing_key,
            allow_private_node_ips,
            upstreams,
            policy,
            geo,
            sync_interval: Duration::from_millis(sync_ms),
            control_tick: Duration::from_millis(control_tick_ms),
            policy_controller: httpdns_policy::Settings {
                tick: Duration::from_millis(control_tick_ms),
                ..policy_controller
            },
            dnspod: FormatOptions {
                document_form: file.dnspod.document_form.unwrap_or(false),
                cip_every_line: file.dnspod.cip_every_line.unwrap_or(false),
            },
            log_format,
            shutdown_grace: Duration::from_millis(file.shutdown_grace_ms.unwrap_or(10_000)),
            live,
            events,
            auth_required,
            trusted_proxies,
            upstream_timeout: Duration::from_millis(match file.upstream.timeout_ms {
                None => 2000,
                Some(t) if (10..=30_000).contains(&t) => t,
                Some(_) => return Err(err("upstream.timeout_ms", "must be 10 to 30000")),
            }),
            upstream_min_ttl: file.upstream.min_ttl.unwrap_or(10),
            upstream_max_ttl: match file.upstream.max_ttl {
                Some(m) if m < file.upstream.min_ttl.unwrap_or(10) => {
                    return Err(err("upstream.max_ttl", "must be at least min_ttl"))
                }
                m => m.unwrap_or(86_400),
            },
            upstream_negative_ttl: file.upstream.negative_ttl.unwrap_or(60),
            upstream_stale: Duration::from_millis(file.upstream.stale_ms.unwrap_or(86_400_000)),
        })
    }
}

/// The secret settings whose values are shipped placeholders, in a fixed order.
fn placeholder_secrets(
    admin_token: Option<&str>,
    signing_key: Option<&str>,
    database_url: &str,
    s3_secret: Option<&str>,
) -> Vec<&'static str> {
    use crate::demo_secrets::{database_password, is_placeholder, is_placeholder_signing_key};
    let mut found = Vec::new();
    if admin_token.is_some_and(is_placeholder) {
        found.push("HTTPDNS_ADMIN_TOKEN");
    }
    if signing_key.is_some_and(is_placeholder_signing_key) {
        found.push("HTTPDNS_CONFIG_SIGNING_KEY");
    }
    if database_password(database_url).is_some_and(|p| is_placeholder(&p)) {
        found.push("HTTPDNS_DATABASE_URL");
    }
    if s3_secret.is_some_and(is_placeholder) {
        found.push("AWS_SECRET_ACCESS_KEY");
    }
    found
}

/// The image settings of the mirror: `HTTPDNS_MIRROR_IMAGE_MEMORY_MB` (default 1024, 16 to
/// 1048576), `HTTPDNS_MIRROR_IMAGE_WAIT_MS` (default 5000, 0 to 60000) and
/// `HTTPDNS_MIRROR_VARIANT_MAX_STORE_BYTES` (default 8 MiB, 0 stores none), or their
/// `[mirror]` keys. One render needs its estimated peak within the budget, so the budget also
/// bounds the largest image that can be processed (about 650 MiB for a 50 M-pixel original).
fn mirror_images(
    file: &MirrorFile,
    memory_mb: Option<String>,
    wait_ms: Option<String>,
    max_store: Option<String>,
) -> Result<httpdns_mirror::ImageSettings, ConfigError> {
    let number = |setting: &str, v: Option<String>, file: Option<u64>, default: u64, min: u64, max: u64| {
        let n = match v {
            Some(v) => v.trim().parse::<u64>().map_err(|_| err(setting, "must be a whole number"))?,
            None => file.unwrap_or(default),
        };
        if !(min..=max).contains(&n) {
            return Err(err(setting, format!("must be {min} to {max}")));
        }
        Ok(n)
    };
    let defaults = httpdns_mirror::ImageSettings::default();
    let memory_mb =
        number("HTTPDNS_MIRROR_IMAGE_MEMORY_MB", memory_mb, file.image_memory_mb, 1024, 16, 1 << 20)?;
    let wait_ms = number("HTTPDNS_MIRROR_IMAGE_WAIT_MS", wait_ms, file.image_wait_ms, 5000, 0, 60_000)?;
    let max_store = number(
        "HTTPDNS_MIRROR_VARIANT_MAX_STORE_BYTES",
        max_store,
        file.variant_max_store_bytes,
        defaults.max_store_bytes,
        0,
        1 << 40,
    )?;
    Ok(httpdns_mirror::ImageSettings {
        memory_bytes: memory_mb << 20,
        memory_wait: Duration::from_millis(wait_ms),
        max_store_bytes: max_store,
        ..defaults
    })
}

fn event_settings(f: &EventsFile) -> Result<EventSettings, ConfigError> {
    let d = EventSettings::default();
    fn within<T: PartialOrd + Copy + std::fmt::Display>(
        field: &str,
        v: Option<T>,
        default: T,
        min: T,
        max: T,
    ) -> Result<T, ConfigError> {
        match v {
            None => Ok(default),
            Some(x) if x >= min && x <= max => Ok(x),
            Some(_) => Err(err(format!("events.{field}"), format!("must be {min} to {max}"))),
        }
    }
    let hours = |field: &str, v: Option<u64>, default: Duration, max: u64| {
        within(field, v, default.as_secs() / 3600, 1, max).map(|h| Duration::from_secs(h * 3600))
    };
    let rate = within("rate_per_client", f.rate_per_client, d.rate_per_client, 0.001, 1e6)?;
    let retention = hours("retention_hours", f.retention_hours, d.retention, 24 * 366)?;
    let max_age = hours("max_age_hours", f.max_age_hours, d.max_age, 24 * 30)?;
    Ok(EventSettings {
        flush_interval: Duration::from_millis(within(
            "flush_ms",
            f.flush_ms,
            d.flush_interval.as_millis() as u64,
            100,
            60_000,
        )?),
        retention,
        max_batch: within("max_batch", f.max_batch, d.max_batch, 1, 10_000)?,
        max_body_bytes: within("max_body_bytes", f.max_body_bytes, d.max_body_bytes, 1024, 64 << 20)?,
        max_age,
        rate_per_client: rate,
        burst: within("burst", f.burst, d.burst, 1.0, 1e6)?,
        max_label_pairs: within("max_label_pairs", f.max_label_pairs, d.max_label_pairs, 1, 100_000)?,
        alert_rate: within("alert_rate", f.alert_rate, d.alert_rate, 0.0001, 1.0)?,
        alert_min_requests: within(
            "alert_min_requests",
            f.alert_min_requests,
            d.alert_min_requests,
            0.0,
            1e12,
        )?,
        alert_min_reports: within("alert_min_reports", f.alert_min_reports, d.alert_min_reports, 0.0, 1e12)?,
    })
}

fn live_settings(f: &LiveFile) -> Result<LiveSettings, ConfigError> {
    let d = LiveSettings::default();
    let ms = |field: &str,
              v: Option<u64>,
              default: Duration,
              min: u64,
              max: u64|
     -> Result<Duration, ConfigError> {
        match v {
            None => Ok(default),
            Some(x) if (min..=max).contains(&x) => Ok(Duration::from_millis(x)),
            Some(_) => Err(err(format!("live.{field}"), format!("must be {min} to {max} milliseconds"))),
        }
    };
    let mut feedback = d.feedback;
    if let Some(n) = f.feedback_min_clients {
        if !(1..=100).contains(&n) {
            return Err(err("live.feedback_min_clients", "must be 1 to 100"));
        }
        feedback.min_clients = n;
    }
    feedback.client_ttl_ms = ms(
        "feedback_client_ttl_ms",
        f.feedback_client_ttl_ms,
        Duration::from_millis(feedback.client_ttl_ms),
        1000,
        86_400_000,
    )?
    .as_millis() as u64;
    if let Some(p) = f.feedback_failure_penalty_ms {
        if !(p.is_finite() && (0.0..=60_000.0).contains(&p)) {
            return Err(err("live.feedback_failure_penalty_ms", "must be 0 to 60000"));
        }
        feedback.failure_penalty_ms = p;
    }
    let positive = |field: &str, v: Option<f64>, default: f64| -> Result<f64, ConfigError> {
        match v {
            None => Ok(default),
            Some(x) if x.is_finite() && x > 0.0 => Ok(x),
            Some(_) => Err(err(format!("live.{field}"), "must be a number > 0")),
        }
    };
    Ok(LiveSettings {
        refresh_interval: ms("refresh_interval_ms", f.refresh_interval_ms, d.refresh_interval, 50, 600_000)?,
        report_fresh: ms("report_fresh_ms", f.report_fresh_ms, d.report_fresh, 0, 86_400_000)?,
        report_decay: ms("report_decay_ms", f.report_decay_ms, d.report_decay, 0, 86_400_000)?,
        feedback_flush: ms("feedback_flush_ms", f.feedback_flush_ms, d.feedback_flush, 100, 3_600_000)?,
        feedback,
        feedback_rate: positive("feedback_rate_per_client", f.feedback_rate_per_client, d.feedback_rate)?,
        feedback_burst: positive("feedback_burst", f.feedback_burst, d.feedback_burst)?,
        feedback_max_batch: match f.feedback_max_batch {
            None => d.feedback_max_batch,
            Some(n) if (1..=10_000).contains(&n) => n,
            Some(_) => return Err(err("live.feedback_max_batch", "must be 1 to 10000")),
        },
        probe_workers: match f.probe_workers {
            None => d.probe_workers,
            Some(n) if (1..=4096).contains(&n) => n,
            Some(_) => return Err(err("live.probe_workers", "must be 1 to 4096")),
        },
    })
}

#[cfg(test)]
mod tests;
