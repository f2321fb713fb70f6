//! The PROXY protocol header (HAProxy's spec, v1 text and v2 binary) that load balancers put
//! in front of a TCP stream to pass on the client's address. Pure: bytes in, a verdict out.
//! Only connections from configured proxy addresses are ever parsed; see the listeners.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The v2 signature.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The longest v1 line, CRLF included.
pub const V1_MAX: usize = 107;
/// Longest v2 address block accepted (TLVs included); real headers are far smaller.
pub const V2_MAX_BODY: usize = 512;

/// What the first bytes of a stream are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// Need more bytes to tell.
    Incomplete,
    /// Not a PROXY header: the stream starts with the client's own bytes.
    NotProxy,
    /// A header of `len` bytes; `source` is the client (`None`: `LOCAL`/`UNKNOWN`, keep the
    /// connection's own address).
    Header { len: usize, source: Option<SocketAddr> },
    /// Starts like a PROXY header but is not a valid one: the connection is refused.
    Invalid(&'static str),
}

/// Parses the start of a stream.
pub fn parse(buf: &[u8]) -> Parsed {
    const V1_PREFIX: &[u8] = b"PROXY ";
    let short_prefix = |sig: &[u8]| buf.len() < sig.len() && sig.starts_with(buf);
    if short_prefix(V1_PREFIX) || short_prefix(&V2_SIGNATURE) {
        return Parsed::Incomplete;
    }
    if buf.starts_with(V1_PREFIX) {
        return parse_v1(buf);
    }
    if buf.starts_with(&V2_SIGNATURE) {
        return parse_v2(buf);
    }
    Parsed::NotProxy
}

fn parse_v1(buf: &[u8]) -> Parsed {
    let Some(end) = buf.windows(2).take(V1_MAX - 1).position(|w| w == b"\r\n") else {
        return if buf.len() >= V1_MAX { Parsed::Invalid("v1 line too long") } else { Parsed::Incomplete };
    };
    let Ok(line) = std::str::from_utf8(&buf[..end]) else { return Parsed::Invalid("v1 line is not text") };
    let parts: Vec<&str> = line.split(' ').collect();
    let len = end + 2;
    match parts.as_slice() {
        ["PROXY", "UNKNOWN", ..] => Parsed::Header { len, source: None },
        ["PROXY", family @ ("TCP4" | "TCP6"), src, dst, sport, dport] => {
            let (Ok(src), Ok(_dst)) = (src.parse::<IpAddr>(), dst.parse::<IpAddr>()) else {
                return Parsed::Invalid("v1 address");
            };
            if (*family == "TCP4") != src.is_ipv4() {
                return Parsed::Invalid("v1 address family");
            }
            let port = |p: &str| {
                (!p.is_empty()
                    && p.len() <= 5
                    && p.bytes().all(|b| b.is_ascii_digit())
                    && !(p.len() > 1 && p.starts_with('0')))
                .then(|| p.parse::<u16>().ok())
                .flatten()
            };
            match (port(sport), port(dport)) {
                (Some(sp), Some(_)) => Parsed::Header { len, source: Some(SocketAddr::new(src, sp)) },
                _ => Parsed::Invalid("v1 port"),
            }
        }
        _ => Parsed::Invalid("v1 line"),
    }
}

fn parse_v2(buf: &[u8]) -> Parsed {
    if buf.len() < 16 {
        return Parsed::Incomplete;
    }
    let (ver_cmd, family) = (buf[12], buf[13]);
    if ver_cmd >> 4 != 2 {
        return Parsed::Invalid("v2 version");
    }
    let body = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if body > V2_MAX_BODY {
        return Parsed::Invalid("v2 header too long");
    }
    let len = 16 + body;
    if buf.len() < len {
        return Parsed::Incomplete;
    }
    let addr = &buf[16..len];
    match ver_cmd & 0x0f {
        0 => Parsed::Header { len, source: None }, // LOCAL: the proxy's own connection
        1 => match family >> 4 {
            0 => Parsed::Header { len, source: None }, // UNSPEC
            1 if addr.len() >= 12 => {
                let ip = Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]);
                let port = u16::from_be_bytes([addr[8], addr[9]]);
                Parsed::Header { len, source: Some(SocketAddr::new(IpAddr::V4(ip), port)) }
            }
            2 if addr.len() >= 36 => {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(&addr[..16]);
                let port = u16::from_be_bytes([addr[32], addr[33]]);
                Parsed::Header {
                    len,
                    source: Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(octets)), port)),
                }
            }
            3 => Parsed::Header { len, source: None }, // AF_UNIX: no IP to use
            _ => Parsed::Invalid("v2 address block"),
        },
        _ => Parsed::Invalid("v2 command"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v2(cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
        let mut b = V2_SIGNATURE.to_vec();
        b.push(0x20 | cmd);
        b.push(fam);
        b.extend_from_slice(&(body.len() as u16).to_be_bytes());
        b.extend_from_slice(body);
        b
    }

    #[test]
    fn v1() {
        let h = b"PROXY TCP4 1.0.2.7 10.0.0.1 56324 443\r\nGET / HTTP/1.1\r\n";
        assert_eq!(parse(h), Parsed::Header { len: 39, source: Some("1.0.2.7:56324".parse().unwrap()) });
        let h = b"PROXY TCP6 2402:4e00::1 ::1 1 80\r\n";
        assert_eq!(
            parse(h),
            Parsed::Header { len: h.len(), source: Some("[2402:4e00::1]:1".parse().unwrap()) }
        );
        assert_eq!(parse(b"PROXY UNKNOWN\r\n"), Parsed::Header { len: 15, source: None });
        assert_eq!(parse(b"PROXY TCP4 1.0.2.7 10.0.0.1 5"), Parsed::Incomplete);
        assert_eq!(parse(b"PRO"), Parsed::Incomplete);
        for bad in [
            &b"PROXY TCP4 ::1 10.0.0.1 1 2\r\n"[..],
            b"PROXY TCP4 1.2.3.4 10.0.0.1 65536 2\r\n",
            b"PROXY TCP4 1.2.3.4 10.0.0.1 01 2\r\n",
            b"PROXY TCP4 1.2.3.4 10.0.0.1 1\r\n",
            b"PROXY UDP4 1.2.3.4 10.0.0.1 1 2\r\n",
            b"PROXY TCP4  1.2.3.4 10.0.0.1 1 2\r\n",
        ] {
            assert!(matches!(parse(bad), Parsed::Invalid(_)), "{:?}", String::from_utf8_lossy(bad));
        }
        let long = [&b"PROXY "[..], &[b'x'; 120]].concat();
        assert!(matches!(parse(&long), Parsed::Invalid(_)));
    }

    #[test]
    fn v2_headers() {
        let body = [1, 0, 2, 7, 10, 0, 0, 1, 0xdc, 0x04, 0x01, 0xbb];
        let h = v2(1, 0x11, &body);
        assert_eq!(parse(&h), Parsed::Header { len: 28, source: Some("1.0.2.7:56324".parse().unwrap()) });
        assert_eq!(parse(&h[..20]), Parsed::Incomplete);
        let mut b6 = vec![0u8; 36];
        b6[..16].copy_from_slice(&"2402:4e00::1".parse::<Ipv6Addr>().unwrap().octets());
        b6[32..34].copy_from_slice(&8080u16.to_be_bytes());
        assert_eq!(
            parse(&v2(1, 0x21, &b6)),
            Parsed::Header { len: 52, source: Some("[2402:4e00::1]:8080".parse().unwrap()) }
        );
        assert_eq!(parse(&v2(0, 0x00, &[])), Parsed::Header { len: 16, source: None });
        // TLVs after the addresses are skipped with the header.
        let with_tlv = v2(1, 0x11, &[&body[..], &[0x04, 0x00, 0x01, 0xff]].concat());
        assert_eq!(
            parse(&with_tlv),
            Parsed::Header { len: 32, source: Some("1.0.2.7:56324".parse().unwrap()) }
        );
        assert!(matches!(parse(&v2(1, 0x11, &body[..8])), Parsed::Invalid(_)));
        assert!(matches!(parse(&v2(2, 0x11, &body)), Parsed::Invalid(_)));
        let mut wrong_version = v2(1, 0x11, &body);
        wrong_version[12] = 0x11;
        assert!(matches!(parse(&wrong_version), Parsed::Invalid(_)));
    }

    #[test]
    fn ordinary_traffic_is_not_a_header() {
        assert_eq!(parse(b"GET /d?dn=a HTTP/1.1\r\n"), Parsed::NotProxy);
        assert_eq!(parse(&[0x00, 0x1d, 0x12, 0x34]), Parsed::NotProxy); // a DNS-over-TCP length
        assert_eq!(parse(b"PROXYX"), Parsed::NotProxy);
    }

    proptest! {
        #[test]
        fn never_panics_and_lengths_fit(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            if let Parsed::Header { len, .. } = parse(&bytes) {
                prop_assert!(len <= bytes.len());
            }
        }

        #[test]
        fn never_panics_near_signatures(tail in proptest::collection::vec(any::<u8>(), 0..80), v in 0u8..2) {
            let mut b = if v == 0 { b"PROXY ".to_vec() } else { V2_SIGNATURE.to_vec() };
            b.extend(tail);
            if let Parsed::Header { len, .. } = parse(&b) {
                prop_assert!(len <= b.len());
            }
        }
    }
}
