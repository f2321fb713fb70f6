//! A CDN host as written in the config document: a domain name or an IP literal, with an
//! optional port (`cdn.example.com`, `cdn.example.com:8443`, `127.0.0.1:9000`,
//! `[2400:3200::1]:443`). Stored and served in canonical form (lowercase punycode names,
//! compressed IPv6, brackets only when a port follows an IPv6 address).

use std::fmt;
use std::net::IpAddr;

use httpdns_core::DomainName;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum HostName {
    Domain(DomainName),
    Ip(IpAddr),
}

/// A validated host with an optional port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Host {
    name: HostName,
    port: Option<u16>,
}

impl Host {
    pub fn parse(input: &str) -> Result<Self, String> {
        let bad_port = |p: &str| format!("port {p:?} must be 1 to 65535");
        let parse_port = |p: &str| match p.parse::<u16>() {
            Ok(n) if n > 0 && !p.starts_with('+') => Ok(n),
            _ => Err(bad_port(p)),
        };
        if input.is_empty() {
            return Err("host is empty".into());
        }
        if let Some(rest) = input.strip_prefix('[') {
            let (addr, after) = rest.split_once(']').ok_or("unclosed '[' in host")?;
            let ip: std::net::Ipv6Addr =
                addr.parse().map_err(|_| format!("{addr:?} is not an IPv6 address"))?;
            let port = match after {
                "" => None,
                p => Some(parse_port(p.strip_prefix(':').ok_or("expected ':port' after ']'")?)?),
            };
            return Ok(Self { name: HostName::Ip(IpAddr::V6(ip)), port });
        }
        if let Ok(ip) = input.parse::<IpAddr>() {
            return Ok(Self { name: HostName::Ip(ip), port: None });
        }
        let (name, port) = match input.rsplit_once(':') {
            Some((n, p)) => (n, Some(parse_port(p)?)),
            None => (input, None),
        };
        if let Ok(ip) = name.parse::<std::net::Ipv4Addr>() {
            return Ok(Self { name: HostName::Ip(IpAddr::V4(ip)), port });
        }
        if name.contains(':') {
            return Err("an IPv6 address with a port must be written [address]:port".into());
        }
        let domain = DomainName::parse(name).map_err(|e| format!("{name:?} is not a host name: {e}"))?;
        if domain.labels().count() < 2 && domain.as_str() != "localhost" {
            return Err(format!("{name:?} is not a fully qualified host name"));
        }
        Ok(Self { name: HostName::Domain(domain), port })
    }

    pub fn port(&self) -> Option<u16> {
        self.port
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.name, self.port) {
            (HostName::Domain(d), None) => write!(f, "{d}"),
            (HostName::Domain(d), Some(p)) => write!(f, "{d}:{p}"),
            (HostName::Ip(ip), None) => write!(f, "{ip}"),
            (HostName::Ip(IpAddr::V4(ip)), Some(p)) => write!(f, "{ip}:{p}"),
            (HostName::Ip(IpAddr::V6(ip)), Some(p)) => write!(f, "[{ip}]:{p}"),
        }
    }
}

impl serde::Serialize for Host {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Host {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(input: &str, canonical: &str) {
        assert_eq!(Host::parse(input).unwrap().to_string(), canonical, "{input}");
    }

    #[test]
    fn accepts_names_and_literals_with_ports() {
        ok("cdn.xxx.com", "cdn.xxx.com");
        ok("CDN.XXX.com", "cdn.xxx.com");
        ok("cdn.xxx.com:8443", "cdn.xxx.com:8443");
        ok("127.0.0.1:9000", "127.0.0.1:9000");
        ok("1.2.3.4", "1.2.3.4");
        ok("2400:3200:0::1", "2400:3200::1");
        ok("[2400:3200::1]:443", "[2400:3200::1]:443");
        ok("[::1]", "::1");
        ok("localhost:8080", "localhost:8080");
    }

    #[test]
    fn refuses_garbage() {
        for bad in [
            "",
            "cdn",
            "a..b.com",
            "cdn.xxx.com:0",
            "cdn.xxx.com:70000",
            "cdn.xxx.com:",
            "cdn.xxx.com:+80",
            "http://cdn.xxx.com",
            "cdn.xxx.com/path",
            "[::1",
            "[::1]x",
            "[1.2.3.4]:80",
            "2400::1:99999",
            "a b.com",
        ] {
            assert!(Host::parse(bad).is_err(), "{bad:?}");
        }
    }
}
