//! Configuration: a TOML file (`--config FILE`) and `HTTPDNS_*` environment variables, the
//! environment winning. The external form ([`FileConfig`]) is strict serde; [`Config`] is the
//! validated internal form the process runs on.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use httpdns_api::dnspod::format::FormatOptions;
use httpdns_catalog::LiveSettings;
use httpdns_core::score::Weights;
use httpdns_core::snapshot::Policy;
use httpdns_events::EventSettings;
use httpdns_geo::GeoConfig;
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
    ("HTTPDNS_POLICY_MIN_REPORTS", "raw event reports those requests must rest on (default 20)"),
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

mod load;
mod parse;
mod sections;

pub(crate) use parse::parse_bool;

#[cfg(test)]
mod tests;
