//! Single values of the configuration: addresses, flags, CIDRs and the mirror's store.

use std::net::{IpAddr, SocketAddr};

use super::{err, ConfigError, Listen, MirrorStore};

pub(super) fn parse_listen(setting: &str, value: &str) -> Result<Listen, ConfigError> {
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
pub(super) fn parse_cidr(setting: &str, value: &str) -> Result<ipnet::IpNet, ConfigError> {
    let v = value.trim();
    v.parse::<ipnet::IpNet>()
        .or_else(|_| v.parse::<IpAddr>().map(ipnet::IpNet::from))
        .map(|n| n.trunc())
        .map_err(|_| err(setting, format!("{v:?} is not a CIDR or an address")))
}

/// Parses `ip:port` or a bare IP (port 53).
pub(super) fn parse_upstream(setting: &str, value: &str) -> Result<SocketAddr, ConfigError> {
    let v = value.trim();
    if let Ok(sa) = v.parse::<SocketAddr>() {
        return Ok(sa);
    }
    if let Ok(ip) = v.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, 53));
    }
    Err(err(setting, format!("{v:?} is not ip:port")))
}

pub(super) fn mirror_store(
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
