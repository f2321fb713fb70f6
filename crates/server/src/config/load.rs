//! [`Config::load`]: the file and the environment into the validated configuration, one section
//! at a time, in the order their settings are checked (the first bad setting is the one named).

use std::path::PathBuf;
use std::time::Duration;

use httpdns_api::dnspod::format::FormatOptions;
use httpdns_core::snapshot::Policy;
use httpdns_core::{DomainName, Token};
use httpdns_geo::{GeoConfig, IspMap};

use super::parse::{mirror_store, parse_bool, parse_cidr, parse_listen, parse_upstream};
use super::sections::{event_settings, live_settings, mirror_images, placeholder_secrets};
use super::{
    err, Config, ConfigError, DnsFile, FileConfig, GeoFile, LimitsFile, Listen, LogFormat, MirrorFile,
    MirrorStore, RateLimitFile, ScoringFile, TlsFile, TlsFiles, UpstreamFile, Upstreams,
};

/// The environment lookup: an empty value counts as unset (but for the admin token, where it
/// turns the admin API off).
type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

impl Config {
    /// Builds the configuration from an optional TOML text and an environment lookup
    /// (a function, so tests need not touch the process environment).
    pub fn load(file: Option<&str>, env: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let file: FileConfig = match file {
            Some(text) => toml::from_str(text).map_err(|e| err("config file", e.to_string()))?,
            None => FileConfig::default(),
        };
        let env = |k: &str| env(k).filter(|v| !v.is_empty() || k == "HTTPDNS_ADMIN_TOKEN");
        let env: Env<'_> = &env;

        let api_addr = listen(env, "HTTPDNS_API_ADDR", file.api_addr.as_deref(), "127.0.0.1:8080")?;
        let mirror_addr = listen(env, "HTTPDNS_MIRROR_ADDR", file.mirror_addr.as_deref(), "127.0.0.1:8081")?;
        let dns_addr = listen(env, "HTTPDNS_DNS_ADDR", file.dns_addr.as_deref(), "127.0.0.1:1053")?;

        let data_dir =
            env("HTTPDNS_DATA_DIR").map(PathBuf::from).or(file.data_dir).unwrap_or_else(|| "./data".into());
        let database_url = database_url(env, file.database_url, &data_dir)?;
        let secrets = Secrets::load(
            env,
            file.allow_demo_secrets,
            file.admin_token,
            file.config_signing_key,
            &database_url,
        )?;
        let allow_private_node_ips = match env("HTTPDNS_ALLOW_PRIVATE_NODE_IPS") {
            Some(v) => parse_bool("HTTPDNS_ALLOW_PRIVATE_NODE_IPS", &v)?,
            None => file.allow_private_node_ips.unwrap_or(false),
        };
        let upstreams = upstreams(env, file.upstreams)?;
        let policy = policy(&file.scoring, &file.dns, allow_private_node_ips)?;
        let geo = geo(env, file.geoip)?;

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
        let trusted_proxies = trusted_proxies(env, file.trusted_proxies)?;
        // The controller's tick is the rollouts' (`control_tick` below): one setting.
        let policy_controller = crate::policy_env::load(&env)?;
        let auth_required = match env("HTTPDNS_AUTH_REQUIRED") {
            Some(v) => parse_bool("HTTPDNS_AUTH_REQUIRED", &v)?,
            None => file.auth_required.unwrap_or(false),
        };

        let mirror = Mirror::load(env, file.mirror)?;
        let client_rate_limit = client_rate_limit(env, &file.rate_limit)?;
        let mirror_sendfile = match env("HTTPDNS_MIRROR_SENDFILE") {
            Some(v) => parse_bool("HTTPDNS_MIRROR_SENDFILE", &v)?,
            None => mirror.sendfile.unwrap_or(true),
        };
        let allow_local_origins = match env("HTTPDNS_ALLOW_LOCAL_ORIGINS") {
            Some(v) => parse_bool("HTTPDNS_ALLOW_LOCAL_ORIGINS", &v)?,
            None => file.allow_local_origins.unwrap_or(false),
        };
        let public_addrs = public_addrs(env, file.public_addrs)?;

        let api_tls_addr = listen(env, "HTTPDNS_API_TLS_ADDR", file.api_tls_addr.as_deref(), "off")?;
        let mirror_tls_addr = listen(env, "HTTPDNS_MIRROR_TLS_ADDR", file.mirror_tls_addr.as_deref(), "off")?;
        let dot_addr = listen(env, "HTTPDNS_DOT_ADDR", file.dot_addr.as_deref(), "off")?;
        let metrics_addr = listen(env, "HTTPDNS_METRICS_ADDR", file.metrics_addr.as_deref(), "off")?;
        let any_tls = [api_tls_addr, mirror_tls_addr, dot_addr].iter().any(|l| *l != Listen::Off);
        let tls = tls(env, any_tls, file.tls)?;
        let limits = Limits::load(env, &file.limits)?;
        let upstream = UpstreamTuning::load(&file.upstream)?;

        Ok(Self {
            allow_local_origins,
            public_addrs,
            api_tls_addr,
            mirror_tls_addr,
            dot_addr,
            tls,
            metrics_addr,
            max_connections: limits.max_connections,
            max_connections_per_addr: limits.max_connections_per_addr,
            http_timeouts: limits.http_timeouts,
            dns_timeouts: limits.dns_timeouts,
            demo_secrets: secrets.demo_secrets,
            client_rate_limit,
            mirror_store: mirror.store,
            mirror_memory: mirror.memory_mb << 20,
            mirror_max_bytes: mirror.max_bytes,
            mirror_sendfile,
            mirror_images: mirror.images,
            api_addr,
            mirror_addr,
            dns_addr,
            data_dir,
            database_url,
            admin_token: secrets.admin_token,
            config_signing_key: secrets.config_signing_key,
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
            upstream_timeout: upstream.timeout,
            upstream_min_ttl: upstream.min_ttl,
            upstream_max_ttl: upstream.max_ttl,
            upstream_negative_ttl: upstream.negative_ttl,
            upstream_stale: upstream.stale,
        })
    }
}

/// A listener's address: the environment's `key`, else the file's value, else `default`.
fn listen(env: Env<'_>, key: &str, file_v: Option<&str>, default: &str) -> Result<Listen, ConfigError> {
    match env(key) {
        Some(v) => parse_listen(key, &v),
        None => parse_listen(&key.trim_start_matches("HTTPDNS_").to_lowercase(), file_v.unwrap_or(default)),
    }
}

fn database_url(
    env: Env<'_>,
    file_v: Option<String>,
    data_dir: &std::path::Path,
) -> Result<String, ConfigError> {
    let database_url = env("HTTPDNS_DATABASE_URL")
        .or(file_v)
        .unwrap_or_else(|| format!("sqlite://{}", data_dir.join("httpdns.db").display()));
    if !(database_url.starts_with("sqlite:")
        || database_url.starts_with("postgres://")
        || database_url.starts_with("postgresql://"))
    {
        return Err(err("HTTPDNS_DATABASE_URL", "must start with sqlite:// or postgres://"));
    }
    Ok(database_url)
}

/// The admin token and the signing key, after the check for shipped placeholders.
struct Secrets {
    demo_secrets: Vec<&'static str>,
    admin_token: Option<String>,
    config_signing_key: Option<String>,
}

impl Secrets {
    fn load(
        env: Env<'_>,
        allow_demo_secrets: Option<bool>,
        admin_token: Option<String>,
        config_signing_key: Option<String>,
        database_url: &str,
    ) -> Result<Self, ConfigError> {
        // Placeholders first: a shipped secret is refused as such, before its format is checked.
        let allow_demo_secrets = match env("HTTPDNS_ALLOW_DEMO_SECRETS") {
            Some(v) => parse_bool("HTTPDNS_ALLOW_DEMO_SECRETS", &v)?,
            None => allow_demo_secrets.unwrap_or(false),
        };
        let demo_secrets = placeholder_secrets(
            env("HTTPDNS_ADMIN_TOKEN").or(admin_token.clone()).as_deref(),
            env("HTTPDNS_CONFIG_SIGNING_KEY").or(config_signing_key.clone()).as_deref(),
            database_url,
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

        let admin_token = env("HTTPDNS_ADMIN_TOKEN").or(admin_token);
        if let Some(t) = &admin_token {
            if t.len() < 16 || !t.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(err(
                    "HTTPDNS_ADMIN_TOKEN",
                    "must be at least 16 printable characters without spaces",
                ));
            }
        }
        let config_signing_key = env("HTTPDNS_CONFIG_SIGNING_KEY").or(config_signing_key);
        if let Some(k) = &config_signing_key {
            httpdns_config::Signer::from_text(k).map_err(|e| err("HTTPDNS_CONFIG_SIGNING_KEY", e))?;
        }
        Ok(Self { demo_secrets, admin_token, config_signing_key })
    }
}

fn upstreams(env: Env<'_>, file_v: Option<Vec<String>>) -> Result<Upstreams, ConfigError> {
    Ok(match env("HTTPDNS_UPSTREAMS") {
        Some(v) if v.trim().eq_ignore_ascii_case("off") => Upstreams::Off,
        Some(v) => Upstreams::Servers(
            v.split(',').map(|u| parse_upstream("HTTPDNS_UPSTREAMS", u)).collect::<Result<_, _>>()?,
        ),
        None => match file_v {
            None => Upstreams::System,
            Some(list) if list.iter().any(|u| u.trim().eq_ignore_ascii_case("off")) => Upstreams::Off,
            Some(list) => Upstreams::Servers(
                list.iter().map(|u| parse_upstream("upstreams", u)).collect::<Result<_, _>>()?,
            ),
        },
    })
}

/// `[scoring]` and `[dns]`: the answering policy of the snapshot.
fn policy(scoring: &ScoringFile, dns: &DnsFile, allow_private: bool) -> Result<Policy, ConfigError> {
    let weights = scoring.weights.unwrap_or_default();
    weights.validate().map_err(|e| err(e.field, e.message))?;
    let band = scoring.band.unwrap_or(0.01);
    if !(0.0..=1.0).contains(&band) {
        return Err(err("scoring.band", "must be from 0 to 1"));
    }
    let nameservers = dns
        .nameservers
        .iter()
        .map(|n| DomainName::parse(n).map_err(|e| err("dns.nameservers", format!("{n:?}: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let hostmaster = match &dns.hostmaster {
        None => None,
        Some(h) => Some(DomainName::parse(h).map_err(|e| err("dns.hostmaster", format!("{h:?}: {e}")))?),
    };
    Ok(Policy { weights, band, allow_private, nameservers, hostmaster })
}

/// `[geoip]`: the databases and the carrier overrides.
fn geo(env: Env<'_>, file: GeoFile) -> Result<GeoConfig, ConfigError> {
    let mut asn = Vec::new();
    for (k, v) in &file.asn_isp {
        let n = k
            .trim_start_matches("AS")
            .parse::<u32>()
            .map_err(|_| err(format!("geoip.asn_isp.{k}"), "key must be an AS number"))?;
        asn.push((n, Token::parse(v).map_err(|e| err(format!("geoip.asn_isp.{k}"), e.to_string()))?));
    }
    let mut org = Vec::new();
    for (k, v) in &file.org_isp {
        org.push((k.clone(), Token::parse(v).map_err(|e| err(format!("geoip.org_isp.{k}"), e.to_string()))?));
    }
    Ok(GeoConfig {
        city_db: env("HTTPDNS_GEOIP_CITY_DB").map(PathBuf::from).or(file.city_db),
        asn_db: env("HTTPDNS_GEOIP_ASN_DB").map(PathBuf::from).or(file.asn_db),
        isp_map: IspMap::with_overrides(asn, org),
        reload_interval: Duration::from_millis(file.reload_interval_ms.unwrap_or(10_000).max(100)),
    })
}

fn trusted_proxies(env: Env<'_>, file_v: Option<Vec<String>>) -> Result<Vec<ipnet::IpNet>, ConfigError> {
    match env("HTTPDNS_TRUSTED_PROXIES") {
        Some(v) => v.split(',').map(|c| parse_cidr("HTTPDNS_TRUSTED_PROXIES", c)).collect(),
        None => file_v.unwrap_or_default().iter().map(|c| parse_cidr("trusted_proxies", c)).collect(),
    }
}

/// `[mirror]`: the store, its memory and its cap, and the image settings.
struct Mirror {
    images: httpdns_mirror::ImageSettings,
    store: MirrorStore,
    memory_mb: u64,
    max_bytes: Option<u64>,
    /// The file's `sendfile` (the environment's is read after the rate limit).
    sendfile: Option<bool>,
}

impl Mirror {
    fn load(env: Env<'_>, file: MirrorFile) -> Result<Self, ConfigError> {
        let images = mirror_images(
            &file,
            env("HTTPDNS_MIRROR_IMAGE_MEMORY_MB"),
            env("HTTPDNS_MIRROR_IMAGE_WAIT_MS"),
            env("HTTPDNS_MIRROR_VARIANT_MAX_STORE_BYTES"),
        )?;

        let store = mirror_store(
            env("HTTPDNS_MIRROR_STORE").or(file.store),
            env("HTTPDNS_MIRROR_S3_ENDPOINT").or(file.s3_endpoint),
            env("HTTPDNS_MIRROR_S3_REGION").or(file.s3_region),
        )?;

        let memory_mb = match env("HTTPDNS_MIRROR_MEMORY_MB") {
            Some(v) => v
                .trim()
                .parse::<u64>()
                .map_err(|_| err("HTTPDNS_MIRROR_MEMORY_MB", "must be a whole number of MiB"))?,
            None => file.memory_mb.unwrap_or(64),
        };
        if memory_mb > 1 << 20 {
            return Err(err("mirror.memory_mb", "must be at most 1048576 (1 TiB)"));
        }

        let max_bytes = match env("HTTPDNS_MIRROR_MAX_BYTES") {
            Some(v) => {
                httpdns_mirror::cap::parse_bytes(&v).map_err(|e| err("HTTPDNS_MIRROR_MAX_BYTES", e))?
            }
            None => match &file.max_bytes {
                Some(v) => httpdns_mirror::cap::parse_bytes(v).map_err(|e| err("mirror.max_bytes", e))?,
                None => None,
            },
        };
        if max_bytes.is_some() && !matches!(store, MirrorStore::Local) {
            return Err(err(
                "HTTPDNS_MIRROR_MAX_BYTES",
                "caps the local store only; an S3 store's copies follow the bucket's lifecycle rules",
            ));
        }
        Ok(Self { images, store, memory_mb, max_bytes, sendfile: file.sendfile })
    }
}

/// `[rate_limit]`: the per-client rate and burst, `None` when off.
fn client_rate_limit(env: Env<'_>, file: &RateLimitFile) -> Result<Option<(f64, f64)>, ConfigError> {
    let client_qps = match env("HTTPDNS_CLIENT_RATE_LIMIT_QPS") {
        Some(v) if v.trim().eq_ignore_ascii_case("off") => None,
        Some(v) => Some(
            v.trim()
                .parse::<f64>()
                .map_err(|_| err("HTTPDNS_CLIENT_RATE_LIMIT_QPS", "must be a number or off"))?,
        ),
        None => file.client_qps,
    };
    Ok(match client_qps {
        None => None,
        Some(q) if q.is_finite() && q > 0.0 && q <= 1e6 => {
            let burst = file.client_burst.unwrap_or(q * 2.0);
            if !(burst.is_finite() && (1.0..=1e7).contains(&burst)) {
                return Err(err("rate_limit.client_burst", "must be from 1 to 10000000"));
            }
            Some((q, burst))
        }
        Some(_) => return Err(err("HTTPDNS_CLIENT_RATE_LIMIT_QPS", "must be above 0 and at most 1000000")),
    })
}

fn public_addrs(
    env: Env<'_>,
    file_v: Option<Vec<String>>,
) -> Result<Vec<httpdns_api::service_ips::ServiceAddr>, ConfigError> {
    let public_addrs = match env("HTTPDNS_PUBLIC_ADDRS") {
        Some(v) => v.split(',').map(str::trim).filter(|a| !a.is_empty()).map(str::to_owned).collect(),
        None => file_v.unwrap_or_default(),
    };
    public_addrs
        .iter()
        .map(|a| {
            a.parse().map_err(|e: httpdns_api::service_ips::BadServiceAddr| {
                err("HTTPDNS_PUBLIC_ADDRS", e.to_string())
            })
        })
        .collect()
}

/// `[tls]`: the certificate files, required when any TLS listener is on.
fn tls(env: Env<'_>, any_tls: bool, file: TlsFile) -> Result<Option<TlsFiles>, ConfigError> {
    let tls_cert = env("HTTPDNS_TLS_CERT").map(PathBuf::from).or(file.cert);
    let tls_key = env("HTTPDNS_TLS_KEY").map(PathBuf::from).or(file.key);
    Ok(match (any_tls, tls_cert, tls_key) {
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
            reload_interval: Duration::from_millis(match file.reload_interval_ms {
                None => 10_000,
                Some(t) if (100..=86_400_000).contains(&t) => t,
                Some(_) => return Err(err("tls.reload_interval_ms", "must be 100 to 86400000")),
            }),
        }),
    })
}

/// `[limits]`: the connection caps and the timeouts of the TCP listeners.
struct Limits {
    max_connections: Option<usize>,
    max_connections_per_addr: Option<usize>,
    http_timeouts: httpdns_net::Timeouts,
    dns_timeouts: httpdns_net::Timeouts,
}

impl Limits {
    fn load(env: Env<'_>, file: &LimitsFile) -> Result<Self, ConfigError> {
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
        let max_connections = count("HTTPDNS_MAX_CONNECTIONS", file.max_connections, 16)?;
        let max_connections_per_addr =
            count("HTTPDNS_MAX_CONNECTIONS_PER_ADDR", file.max_connections_per_addr, 1)?;
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
                file.header_timeout_ms,
                defaults.header.as_millis() as u64,
            )?,
            idle: millis(
                "limits.idle_timeout_ms",
                Some("HTTPDNS_IDLE_TIMEOUT_MS"),
                file.idle_timeout_ms,
                defaults.idle.as_millis() as u64,
            )?,
            stalled: millis(
                "limits.stalled_timeout_ms",
                Some("HTTPDNS_STALLED_TIMEOUT_MS"),
                file.stalled_timeout_ms,
                defaults.stalled.as_millis() as u64,
            )?,
            body: millis(
                "limits.body_timeout_ms",
                Some("HTTPDNS_BODY_TIMEOUT_MS"),
                file.body_timeout_ms,
                defaults.body.as_millis() as u64,
            )?,
            body_total: millis(
                "limits.body_deadline_ms",
                Some("HTTPDNS_BODY_DEADLINE_MS"),
                file.body_deadline_ms,
                defaults.body_total.as_millis() as u64,
            )?,
        };
        // RFC 7766 §6.2.3: idle DNS connections are closed after seconds, not minutes.
        let dns_timeouts = httpdns_net::Timeouts {
            idle: millis("limits.dns_idle_timeout_ms", None, file.dns_idle_timeout_ms, 10_000)?,
            ..http_timeouts
        };
        Ok(Self { max_connections, max_connections_per_addr, http_timeouts, dns_timeouts })
    }
}

/// `[upstream]`: the timeout and the TTL bounds of upstream answers.
struct UpstreamTuning {
    timeout: Duration,
    min_ttl: u32,
    max_ttl: u32,
    negative_ttl: u32,
    stale: Duration,
}

impl UpstreamTuning {
    fn load(file: &UpstreamFile) -> Result<Self, ConfigError> {
        Ok(Self {
            timeout: Duration::from_millis(match file.timeout_ms {
                None => 2000,
                Some(t) if (10..=30_000).contains(&t) => t,
                Some(_) => return Err(err("upstream.timeout_ms", "must be 10 to 30000")),
            }),
            min_ttl: file.min_ttl.unwrap_or(10),
            max_ttl: match file.max_ttl {
                Some(m) if m < file.min_ttl.unwrap_or(10) => {
                    return Err(err("upstream.max_ttl", "must be at least min_ttl"))
                }
                m => m.unwrap_or(86_400),
            },
            negative_ttl: file.negative_ttl.unwrap_or(60),
            stale: Duration::from_millis(file.stale_ms.unwrap_or(86_400_000)),
        })
    }
}
