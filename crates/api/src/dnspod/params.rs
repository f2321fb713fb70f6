//! Parsing of `/d` parameters into a request that cannot hold invalid values.
//!
//! Pure and total: any byte string in, a [`DRequest`] or a [`ParamError`] out. Fuzzed by a
//! proptest harness below.

use std::borrow::Cow;
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
    /// The names the client wrote otherwise than as they are normalised (in capitals, say),
    /// by index, without a trailing dot: [`DRequest::echo`] reads them. Most clients write
    /// names as they are normalised, and then this holds nothing and costs no allocation.
    echoed: Vec<(usize, Box<str>)>,
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

impl DRequest {
    /// The `i`th name as the client wrote it, without a trailing dot: what the answer echoes
    /// (the SDKs look their names up in the answer by string equality).
    pub fn echo(&self, i: usize) -> &str {
        match self.echoed.iter().find(|(j, _)| *j == i) {
            Some((_, written)) => written,
            None => self.names[i].as_str(),
        }
    }
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

/// The parameters a `/d` request may carry that this server reads, each the first occurrence
/// of its key, decoded. Unknown keys (`sdk`, `timeout`, ...) are passed over, as the official
/// SDKs send them. Read in one pass into fixed slots: no list of pairs is kept.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Fields<'a> {
    pub dn: Option<Cow<'a, str>>,
    pub ip: Option<Cow<'a, str>>,
    pub ttl: Option<Cow<'a, str>>,
    pub clientip: Option<Cow<'a, str>>,
    pub query: Option<Cow<'a, str>>,
    pub qtype: Option<Cow<'a, str>>,
    /// The account of an encrypted request.
    pub id: Option<Cow<'a, str>>,
    /// The account's token, over HTTPS.
    pub token: Option<Cow<'a, str>>,
    /// The cipher of an encrypted request.
    pub alg: Option<Cow<'a, str>>,
}

impl<'a> Fields<'a> {
    /// Reads `pairs` in order: the first occurrence of a key wins.
    pub fn read(pairs: impl IntoIterator<Item = (Cow<'a, str>, Cow<'a, str>)>) -> Self {
        let mut f = Self::default();
        f.extend(pairs);
        f
    }

    /// Reads more pairs (a form body after the query string): keys already read keep their
    /// values.
    pub fn extend(&mut self, pairs: impl IntoIterator<Item = (Cow<'a, str>, Cow<'a, str>)>) {
        for (k, v) in pairs {
            let slot = match k.as_ref() {
                "dn" => &mut self.dn,
                "ip" => &mut self.ip,
                "ttl" => &mut self.ttl,
                "clientip" => &mut self.clientip,
                "query" => &mut self.query,
                "type" => &mut self.qtype,
                "id" => &mut self.id,
                "token" => &mut self.token,
                "alg" => &mut self.alg,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(v);
            }
        }
    }
}

/// Parses decoded `(key, value)` pairs: [`Fields::read`], then [`parse_fields`].
pub fn parse<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<DRequest, ParamError> {
    parse_fields(&Fields::read(pairs.into_iter().map(|(k, v)| (Cow::Borrowed(k), Cow::Borrowed(v)))))
}

/// Checks the fields of a request (after [`crate::dnspod::authenticate`] has decrypted them).
pub fn parse_fields(f: &Fields<'_>) -> Result<DRequest, ParamError> {
    let [dn, ip, ttl, clientip, query, qtype] =
        [&f.dn, &f.ip, &f.ttl, &f.clientip, &f.query, &f.qtype].map(|v| v.as_deref());
    let dn = dn.filter(|d| !d.is_empty()).ok_or(ParamError::MissingDn)?;
    // One pass for the commas and the last `;` (the expiry), then one search per name for its
    // end: this runs for every `/d` request.
    let (mut commas, mut semicolon) = (0, None);
    for (i, b) in dn.bytes().enumerate() {
        match b {
            b',' => commas += 1,
            b';' => semicolon = Some(i),
            _ => {}
        }
    }
    let (dn, expiry) = match semicolon {
        Some(at) => {
            let t = &dn[at + 1..];
            if !t.is_empty() && t.len() <= 12 && t.bytes().all(|b| b.is_ascii_digit()) {
                // The commas counted were all before it.
                (&dn[..at], t.parse::<u64>().ok())
            } else {
                (dn, None)
            }
        }
        None => (dn, None),
    };
    if dn.is_empty() {
        return Err(ParamError::MissingDn);
    }
    let count = commas + 1;
    let batch = count > 1;
    if count > MAX_BATCH {
        return Err(ParamError::TooManyNames);
    }
    let mut names = Vec::with_capacity(count);
    let mut echoed = Vec::new();
    let mut rest = Some(dn);
    while let Some(text) = rest {
        let part = match text.bytes().position(|b| b == b',') {
            Some(at) => {
                rest = Some(&text[at + 1..]);
                &text[..at]
            }
            None => {
                rest = None;
                text
            }
        };
        let name =
            DomainName::parse(part).map_err(|reason| ParamError::BadName { name: truncate(part), reason })?;
        // A valid name holds nothing the text format gives a meaning to (`,` `;` `:` `|` `-`
        // between parts are not in names' positions, newlines cannot pass the parser).
        let written = part.strip_suffix('.').unwrap_or(part);
        if written != name.as_str() {
            echoed.push((names.len(), written.into()));
        }
        names.push(name);
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
        Some(s) => match parse_ip(s) {
            Some(a) => (Some(a.to_canonical()), false),
            None => (None, true),
        },
    };
    Ok(DRequest {
        names,
        echoed,
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

/// `s` as an address: a dotted quad by hand ([`dotted_quad`]: the `ip=` of nearly every `/d`,
/// where the standard parser cost about 180 instructions), anything else by the standard parser.
pub(crate) fn parse_ip(s: &str) -> Option<IpAddr> {
    dotted_quad(s.as_bytes()).map(IpAddr::V4).or_else(|| s.parse().ok())
}

/// A dotted quad as `Ipv4Addr::from_str` reads it: four decimal octets of one to three digits
/// without a leading zero, each at most 255. `None` for anything else, which the standard
/// parser then reads (so this decides speed, never meaning).
fn dotted_quad(s: &[u8]) -> Option<std::net::Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut i = 0;
    for (n, octet) in octets.iter_mut().enumerate() {
        if n > 0 {
            if s.get(i) != Some(&b'.') {
                return None;
            }
            i += 1;
        }
        let start = i;
        let mut value = 0u32;
        while i < s.len() && i - start < 3 && s[i].is_ascii_digit() {
            value = value * 10 + u32::from(s[i] - b'0');
            i += 1;
        }
        if i == start || (i - start > 1 && s[start] == b'0') {
            return None;
        }
        *octet = u8::try_from(value).ok()?;
    }
    (i == s.len()).then_some(std::net::Ipv4Addr::from(octets))
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
        assert_eq!((r.echo(0), r.echo(1)), ("a.com", "B.com"));
        assert_eq!(r.expiry, Some(1_700_000_600));
        assert!(r.batch);
        let r = p("dn=a.com.;1700000600").unwrap();
        assert_eq!((r.echo(0), r.batch), ("a.com", false));
        assert_eq!(p("dn=;1700000600"), Err(ParamError::MissingDn));
        assert!(matches!(p("dn=a.com;x"), Err(ParamError::BadName { .. })));
    }

    #[test]
    fn dotted_quads_edge_cases() {
        for s in [
            "0.0.0.0",
            "255.255.255.255",
            "1.0.1.7",
            "01.2.3.4",
            "1.2.3.04",
            "00.0.0.0",
            "1.2.3.4.",
            "256.1.1.1",
            "1.2.3",
            "1..2.3",
            "1.2.3.4 ",
            " 1.2.3.4",
            "1234.1.1.1",
            "1.2.3.4.5",
            "",
        ] {
            assert_eq!(dotted_quad(s.as_bytes()), s.parse().ok(), "{s:?}");
        }
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

        /// The dotted-quad reader agrees with the standard parser on anything like an address.
        #[test]
        fn dotted_quads_read_as_the_standard_parser_does(s in "[0-9.]{0,17}|(0?[0-9]{1,2}\\.){3}0?[0-9]{1,2}|([0-9]{1,4}\\.){3}[0-9]{1,4}|(0|[1-9][0-9]{0,2})(\\.(0|[1-9][0-9]{0,2})){3}.?") {
            proptest::prop_assert_eq!(dotted_quad(s.as_bytes()), s.parse::<std::net::Ipv4Addr>().ok(), "{:?}", s);
            proptest::prop_assert_eq!(parse_ip(&s), s.parse::<IpAddr>().ok(), "{:?}", s);
        }

        /// Names split, checked and echoed as the straightforward reading of `dn` does.
        #[test]
        fn names_read_as_split_and_parsed(dn in "([a-zA-Z0-9\\-]{1,5}\\.?){1,3}(,([a-zA-Z0-9\\-]{1,5}\\.?){1,3}){0,9}(;[0-9]{0,3})?") {
            let plain = match dn.rsplit_once(';') {
                Some((names, t)) if !t.is_empty() => names,
                _ => dn.as_str(),
            };
            let want: Result<Vec<DomainName>, _> = plain.split(',').map(DomainName::parse).collect();
            match parse([("dn", dn.as_str())]) {
                Ok(r) => {
                    proptest::prop_assert_eq!(Ok(r.names.clone()), want);
                    proptest::prop_assert_eq!(r.batch, plain.contains(','));
                    for (i, part) in plain.split(',').enumerate() {
                        proptest::prop_assert_eq!(r.echo(i), part.strip_suffix('.').unwrap_or(part));
                    }
                }
                Err(ParamError::TooManyNames) => proptest::prop_assert!(plain.split(',').count() > MAX_BATCH),
                Err(ParamError::BadName { .. }) => {
                    proptest::prop_assert!(plain.split(',').count() <= MAX_BATCH && want.is_err());
                }
                Err(e) => proptest::prop_assert!(false, "{e}"),
            }
        }

        #[test]
        fn never_panics_on_any_dn(dn in "[a-zA-Z0-9.,_\\-\u{80}-\u{10ffff}]{0,300}") {
            let _ = parse([("dn", dn.as_str()), ("type", "addrs")]);
        }
    }
}
