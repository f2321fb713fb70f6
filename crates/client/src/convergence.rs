//! Host convergence (seed `000` §2): `https://image.xxx.com/a.jpg` becomes
//! `https://<current host>/image/a.jpg` when the device is inside the `rate` of the
//! `mergeHostConfigs` entry for `image.xxx.com`, with the config center's documented bucket
//! (`httpdns_config::rollout`), so client and server agree on every device.
//!
//! Unlike the seed's `replaceFirst` on the URL string, this works on the parsed URL: a host
//! name that also appears in the path or query is not touched, and the port is part of the
//! match.

use httpdns_config::{rollout, ConfigDocument};
use reqwest::Url;

/// A request the failover logic may move between hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converged {
    /// The URL as the app asked for it (used when every host is down).
    pub original: Url,
    /// Path (with the prefix) and query on the unified hosts.
    pub path_and_query: String,
}

impl Converged {
    /// The URL on `host` (`cdn.xxx.com`, `cdn.xxx.com:8443`, `2400:3200::1`,
    /// `[2400:3200::1]:443`), same scheme as the original.
    pub fn on_host(&self, host: &str) -> Option<Url> {
        let host = match host.parse::<std::net::Ipv6Addr>() {
            Ok(ip) => format!("[{ip}]"),
            Err(_) => host.to_owned(),
        };
        Url::parse(&format!("{}://{}{}", self.original.scheme(), host, self.path_and_query)).ok()
    }
}

/// `host[:port]` of a URL in the config document's canonical form: lowercase, IPv6 bracketed
/// only before a port. With `default_port`, a URL without a port also gets its scheme's
/// default (so `cdn.xxx.com:443` in a document matches `https://cdn.xxx.com/`).
pub fn authority(url: &Url) -> Option<String> {
    authority_with(url, url.port())
}

fn authority_with(url: &Url, port: Option<u16>) -> Option<String> {
    Some(match (url.host()?, port) {
        (url::Host::Domain(d), None) => d.to_ascii_lowercase(),
        (url::Host::Domain(d), Some(p)) => format!("{}:{p}", d.to_ascii_lowercase()),
        (url::Host::Ipv4(ip), None) => ip.to_string(),
        (url::Host::Ipv4(ip), Some(p)) => format!("{ip}:{p}"),
        (url::Host::Ipv6(ip), None) => ip.to_string(),
        (url::Host::Ipv6(ip), Some(p)) => format!("[{ip}]:{p}"),
    })
}

/// The forms of a URL's authority a document entry may use: as written, and with the default
/// port spelled out when the URL has none.
fn authorities(url: &Url) -> Vec<String> {
    let mut v: Vec<String> = authority(url).into_iter().collect();
    if url.port().is_none() {
        v.extend(authority_with(url, url.port_or_known_default()));
    }
    v
}

/// How `url` is routed under `doc` for `device_id`: `Some` when it goes through the unified
/// host list (converged now, or already addressed to one of the hosts), `None` when it is left
/// alone.
pub fn converge(doc: &ConfigDocument, device_id: &str, url: &Url) -> Option<Converged> {
    // The global switch: outside it, the device uses the URLs as the app wrote them.
    if !doc.convergence_enabled(device_id) || !matches!(url.scheme(), "http" | "https") {
        return None;
    }
    let auths = authorities(url);
    let path_and_query = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    };
    for m in &doc.merge_host_configs {
        let host = m.host.to_string();
        if auths.contains(&host) {
            if !rollout::enabled(&host, device_id, m.rate.get()) {
                return None;
            }
            return Some(Converged {
                original: url.clone(),
                path_and_query: format!("{}{path_and_query}", m.path_prefix),
            });
        }
    }
    doc.host_list_config
        .iter()
        .any(|h| auths.contains(&h.host.to_string()))
        .then(|| Converged { original: url.clone(), path_and_query })
}

/// The unified hosts this device uses, in order: `hostListConfig` entries whose `rate`
/// includes the device; none when the global switch leaves the device out.
pub fn host_list(doc: &ConfigDocument, device_id: &str) -> Vec<String> {
    if !doc.convergence_enabled(device_id) {
        return Vec::new();
    }
    doc.host_list_config
        .iter()
        .map(|h| h.host.to_string())
        .zip(doc.host_list_config.iter().map(|h| h.rate.get()))
        .filter(|(host, rate)| rollout::enabled(host, device_id, *rate))
        .map(|(host, _)| host)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> ConfigDocument {
        serde_json::from_str(
            r#"{"mergeHostConfigs": [
                {"host": "image.xxx.com", "pathPrefix": "/image", "rate": 1},
                {"host": "product.xxx.com", "pathPrefix": "/product", "rate": 0.5},
                {"host": "community.xxx.com", "pathPrefix": "/community", "rate": 0.1},
                {"host": "img.xxx.com:8443", "pathPrefix": "/img8443", "rate": 1}],
              "hostListConfig": [{"host": "cdn.xxx.com", "rate": 1}, {"host": "cdn-ss.xxx.com", "rate": 1},
                                 {"host": "cdn-bak.xxx.com", "rate": 0}],
              "reviveProbeInterval": 600000, "configRequestInterval": 600000, "configVersion": 3,
              "publicIpList": ["223.5.5.5"]}"#,
        )
        .unwrap()
    }

    #[test]
    fn the_global_switch_turns_the_whole_feature_off_per_device() {
        let url: Url = "https://image.xxx.com/a.jpg".parse().unwrap();
        let mut d = doc();
        // Switch buckets (docs/config-center.md): device-0001 1077, device-0002 3703.
        d.convergence_rate = Some(serde_json::from_str("0.2").unwrap());
        assert!(converge(&d, "device-0001", &url).is_some());
        assert_eq!(host_list(&d, "device-0001"), ["cdn.xxx.com", "cdn-ss.xxx.com"]);
        // Outside the switch: no rewrite, no unified hosts, even for URLs already on one.
        assert_eq!(converge(&d, "device-0002", &url), None);
        assert_eq!(converge(&d, "device-0002", &"https://cdn.xxx.com/image/a.jpg".parse().unwrap()), None);
        assert!(host_list(&d, "device-0002").is_empty());
        d.convergence_rate = Some(serde_json::from_str("0").unwrap());
        assert_eq!(converge(&d, "device-0001", &url), None);
        d.convergence_rate = None;
        assert!(converge(&d, "device-0002", &url).is_some(), "absent: on for every device");
    }

    #[test]
    fn rewrites_with_the_documented_buckets() {
        let d = doc();
        // docs/config-center.md vectors: a1b2c3d4e5f6 is in image (9171 < 10000), out of
        // product at 0.5 (6936) and out of community at 0.1 (1618).
        let dev = "a1b2c3d4e5f6";
        let c = converge(&d, dev, &"https://image.xxx.com/a/b.jpg?x=1".parse().unwrap()).unwrap();
        assert_eq!(c.path_and_query, "/image/a/b.jpg?x=1");
        assert_eq!(c.on_host("cdn.xxx.com").unwrap().as_str(), "https://cdn.xxx.com/image/a/b.jpg?x=1");
        assert_eq!(c.on_host("127.0.0.1:9000").unwrap().as_str(), "https://127.0.0.1:9000/image/a/b.jpg?x=1");
        assert!(converge(&d, dev, &"https://product.xxx.com/p.json".parse().unwrap()).is_none());
        assert!(converge(&d, dev, &"https://community.xxx.com/c.png".parse().unwrap()).is_none());
        // The host name elsewhere in the URL is not rewritten (the seed's replaceFirst would).
        let c = converge(&d, dev, &"https://IMAGE.xxx.com/image.xxx.com/x.jpg".parse().unwrap()).unwrap();
        assert_eq!(c.path_and_query, "/image/image.xxx.com/x.jpg");
        // Ports are part of the match.
        assert!(converge(&d, dev, &"https://img.xxx.com/x.jpg".parse().unwrap()).is_none());
        assert!(converge(&d, dev, &"https://img.xxx.com:8443/x.jpg".parse().unwrap()).is_some());
        // A URL already on a unified host fails over too; other hosts are left alone.
        let c = converge(&d, dev, &"https://cdn-ss.xxx.com/image/a.jpg".parse().unwrap()).unwrap();
        assert_eq!(c.path_and_query, "/image/a.jpg");
        assert!(converge(&d, dev, &"https://other.com/a.jpg".parse().unwrap()).is_none());
        assert!(converge(&d, dev, &"ftp://image.xxx.com/a.jpg".parse().unwrap()).is_none());
    }

    #[test]
    fn ipv6_hosts_and_default_ports() {
        let d: ConfigDocument = serde_json::from_str(
            r#"{"mergeHostConfigs": [{"host": "img.xxx.com:443", "pathPrefix": "/img", "rate": 1},
                                    {"host": "2400:3200::1", "pathPrefix": "/v6", "rate": 1}],
              "hostListConfig": [{"host": "2400:3200::2", "rate": 1}, {"host": "[2400:3200::3]:8443", "rate": 1}],
              "reviveProbeInterval": 600000, "configRequestInterval": 600000}"#,
        )
        .unwrap();
        let c = converge(&d, "dev", &"https://img.xxx.com/a.jpg".parse().unwrap())
            .expect("443 is https's default");
        assert_eq!(c.path_and_query, "/img/a.jpg");
        assert!(converge(&d, "dev", &"http://img.xxx.com/a.jpg".parse().unwrap()).is_none(), "80 is not 443");
        let c = converge(&d, "dev", &"https://[2400:3200::1]/a.jpg".parse().unwrap()).expect("IPv6 entry");
        let hosts = host_list(&d, "dev");
        assert_eq!(hosts, ["2400:3200::2", "[2400:3200::3]:8443"]);
        assert_eq!(c.on_host(&hosts[0]).unwrap().as_str(), "https://[2400:3200::2]/v6/a.jpg");
        assert_eq!(c.on_host(&hosts[1]).unwrap().as_str(), "https://[2400:3200::3]:8443/v6/a.jpg");
        assert_eq!(
            authority(&"https://[2400:3200::2]:8443/x".parse().unwrap()).unwrap(),
            "[2400:3200::2]:8443"
        );
    }

    #[test]
    fn host_list_honours_rates() {
        assert_eq!(host_list(&doc(), "device-0001"), ["cdn.xxx.com", "cdn-ss.xxx.com"]);
    }
}
