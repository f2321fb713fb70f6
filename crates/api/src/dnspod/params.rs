//! Parsing of `/d` parameters into a request that cannot hold invalid values.
//!
//! Pure and total: any byte string in, a [`DRequest`] or a [`ParamError`] out. Fuzzed by a
//! proptest harness below.

use std::net::IpAddr;

use httpdns_core::name::NameError;
use httpdns_core::DomainName;

/// At most this many names in one `dn=a,b,...` (DNSPod: "同时支持最大域名个数为8个").
pub const MAX_BATCH: usize = 8;

/// Which records are asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QType {
    A,
    Aaaa,
    /// A and AAAA (`type=addrs`).
    Addrs,
}

/// A validated `/d` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DRequest {
    pub names: Vec<DomainName>,
    /// Each name as the client wrote it, without a trailing dot: what the answer echoes (the
    /// SDKs look their names up in the answer by string equality).
    pub echo: Vec<String>,
    /// The Unix time after which the request is void, when `dn` ends with `;<seconds>` (the
    /// Tencent iOS SDK appends it before encrypting, so a captured request cannot be replayed
    /// for long).
    pub expiry: Option<u64>,
    /// `dn` held a comma: answer in the batch format even for one name.
    pub batch: bool,
    /// The `ip=` parameter when present and a valid address.
    pub ip: Option<IpAddr>,
    /// `ip=` was present, non-empty and not an address (the peer address is used instead).
    pub ip_invalid: bool,
    pub ttl: bool,
    pub clientip: bool,
    pub query: bool,
    pub qtype: QType,
}

/// Why `/d` parameters were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    #[error("missing dn: the domain name to resolve")]
    MissingDn,
    #[error("dn holds more than {MAX_BATCH} names")]
    TooManyNames,
    #[error("dn {name:?} is not a valid domain name: {reason}")]
    BadName { name: String, reason: NameError },
    #[error("type must be a, aaaa or addrs")]
    BadType,
}

impl ParamError {
    /// The parameter at fault.
    pub fn field(&self) -> &'static str {
        match self {
            ParamError::BadType => "type",
            _ => "dn",
        }
    }

    /// The Alibaba-style code.
    pub fn code(&self) -> &'static str {
        match self {
            ParamError::MissingDn => "MissingArgument",
            ParamError::TooManyNames => "TooManyHosts",
            ParamError::BadName { .. } => "InvalidHost",
            ParamError::BadType => "InvalidArgument",
        }
    }
}

/// Parses decoded `(key, value)` pairs. The first occurrence of a key wins; unknown keys
/// (`sdk`, `id`, `alg`, `timeout`, ...) are ignored, as the official SDKs send them.
pub fn parse<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<DRequest, ParamError> {
    let (mut dn, mut ip, mut ttl, mut clientip, mut query, mut qtype) = (None, None, None, None, None, None);
    for (k, v) in pairs {
        let slot = match k {
            "dn" => &mut dn,
            "ip" => &mut ip,
            "ttl" => &mut ttl,
            "clientip" => &mut clientip,
            "query" => &mut query,
            "type" => &mut qtype,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(v);
        }
    }
    let dn = dn.filter(|d| !d.is_empty()).ok_or(ParamError::MissingDn)?;
    let (dn, expiry) = match dn.rsplit_once(';') {
        Some((names, t)) if !t.is_empty() && t.len() <= 12 && t.bytes().all(|b| b.is_ascii_digit()) => {
            (names, t.parse::<u64>().ok())
        }
        _ => (dn, None),
    };
    if dn.is_empty() {
        return Err(ParamError::MissingDn);
    }
    let count = dn.bytes().filter(|&b| b == b',').count() + 1;
    let batch = count > 1;
    if count > MAX_BATCH {
        return Err(ParamError::TooManyNames);
    }
    let mut names = Vec::with_capacity(count);
    let mut echo = Vec::with_capacity(count);
    for part in dn.split(',') {
        let name =
            DomainName::parse(part).map_err(|reason| ParamError::BadName { name: truncate(part), reason })?;
        names.push(name);
        // A valid name holds nothing the text format gives a meaning to (`,` `;` `:` `|` `-`
        // between parts are not in names' positions, newlines cannot pass the parser).
        echo.push(part.strip_suffix('.').unwrap_or(part).to_owned());
    }
    let qtype = match qtype {
        None | Some("") => QType::A,
        Some(t) if t.eq_ignore_ascii_case("a") => QType::A,
        Some(t) if t.eq_ignore_ascii_case("aaaa") => QType::Aaaa,
        Some(t) if t.eq_ignore_ascii_case("addrs") => QType::Addrs,
        Some(_) => return Err(ParamError::BadType),
    };
    let (ip, ip_invalid) = match ip {
        None | Some("") => (None, false),
        Some(s) => match s.parse::<IpAddr>() {
            Ok(a) => (Some(a.to_canonical()), false),
            Err(_) => (None, true),
        },
    };
    Ok(DRequest {
        names,
        echo,
        expiry,
        batch,
        ip,
        ip_invalid,
        ttl: ttl == Some("1"),
        clientip: clientip == Some("1"),
        // DNSPod: "批量域名查询情况下，此参数固定取值为1".
        query: query == Some("1") || batch,
        qtype,
    })
}

/// Bounds what an error message echoes of the input.
fn truncate(s: &str) -> String {
    let mut end = s.len().min(80);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(q: &str) -> Result<DRequest, ParamError> {
        let pairs: Vec<(String, String)> = form_urlencoded::parse(q.as_bytes()).into_owned().collect();
        parse(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }

    #[test]
    fn official_sdk_query_strings_parse() {
        let r = p("dn=www.qq.com&ip=&clientip=1&ttl=1&id=123&type=addrs&alg=des&sdk=1_4.9.0").unwrap();
        assert_eq!(r.names[0].as_str(), "www.qq.com");
        assert_eq!(
            (r.ip, r.ip_invalid, r.ttl, r.clientip, r.query, r.qtype),
            (None, false, true, true, false, QType::Addrs)
        );
        let r = p("dn=WWW.DNSPod.cn.&type=AAAA").unwrap();
        assert_eq!(r.names[0].as_str(), "www.dnspod.cn");
        assert_eq!(r.qtype, QType::Aaaa);
    }

    #[test]
    fn batch_implies_query() {
        let r = p("dn=a.com,b.com").unwrap();
        assert!(r.batch && r.query);
        assert_eq!(r.names.len(), 2);
        assert!(p(&format!("dn={}", ["a.com"; 8].join(","))).is_ok());
        assert_eq!(p(&format!("dn={}", ["a.com"; 9].join(","))), Err(ParamError::TooManyNames));
    }

    #[test]
    fn bad_input() {
        assert_eq!(p("dn="), Err(ParamError::MissingDn));
        assert_eq!(p("ttl=1"), Err(ParamError::MissingDn));
        assert!(matches!(p("dn=a..b"), Err(ParamError::BadName { .. })));
        assert!(matches!(p("dn=a.com,"), Err(ParamError::BadName { .. })));
        assert!(matches!(p(&format!("dn={}", "a".repeat(300))), Err(ParamError::BadName { .. })));
        assert_eq!(p("dn=a.com&type=mx"), Err(ParamError::BadType));
        let r = p("dn=a.com&ip=not-an-ip").unwrap();
        assert!(r.ip.is_none() && r.ip_invalid);
        let r = p("dn=a.com&ip=::ffff:1.2.3.4").unwrap();
        assert_eq!(r.ip, Some("1.2.3.4".parse().unwrap()));
    }

    #[test]
    fn the_ios_sdk_expiry_suffix_is_taken_off() {
        let r = p("dn=a.com,B.com;1700000600").unwrap();
        assert_eq!(r.names.iter().map(|n| n.as_str()).collect::<Vec<_>>(), ["a.com", "b.com"]);
        assert_eq!(r.echo, ["a.com", "B.com"]);
        assert_eq!(r.expiry, Some(1_700_000_600));
        assert!(r.batch);
        let r = p("dn=a.com.;1700000600").unwrap();
        assert_eq!((r.echo[0].as_str(), r.batch), ("a.com", false));
        assert_eq!(p("dn=;1700000600"), Err(ParamError::MissingDn));
        assert!(matches!(p("dn=a.com;x"), Err(ParamError::BadName { .. })));
    }

    #[test]
    fn first_occurrence_wins() {
        let r = p("dn=a.com&dn=b.com&ttl=1&ttl=0").unwrap();
        assert_eq!(r.names[0].as_str(), "a.com");
        assert!(r.ttl);
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_any_query(q in ".*") {
            let _ = p(&q);
        }

        #[test]
        fn never_panics_on_any_dn(dn in "[a-zA-Z0-9.,_\\-\u{80}-\u{10ffff}]{0,300}") {
            let _ = parse([("dn", dn.as_str()), ("type", "addrs")]);
        }
    }
}
