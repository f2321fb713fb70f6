//! The DNSPod text format (`reference/httpdns-api.md` §1.3), in the form the official SDKs
//! parse (the default) or exactly as the document shows it.
//!
//! ```text
//! single   = [qname "." ":"] v4part ["-" v6part] ["|" clientip]
//! part     = ip *( ";" ip ) ["," ttl]  |  "0" ["," ttl]      ; "0": no record of this family
//! batch    = line *( "\n" line )
//! line     = qname "." ":" part ["-" part] ["|" clientip]
//! ```
//!
//! **SDK form** (the default). The Tencent SDKs parse each line with regular expressions that
//! need every element (`ResponseParser.java`: `(.*)\.:(.*),(.*)\|(.*)` per batch line,
//! `(.*),(.*)-(.*),(.*)\|(.*)` for both families): so every batch line carries its own
//! `|clientip`, and with `ttl=1` a family without records is written `0,<ttl>`, which the
//! pattern matches and the SDK then drops as an invalid address — the other family survives.
//! Names are echoed exactly as they were asked (the SDKs match them by string equality).
//!
//! **Document form** (`[dnspod] document_form = true`): `|clientip` once after the last batch
//! line (or on every line with `cip_every_line`), and a bare `0` for a family without records.
//!
//! Either way, a single name with no record at all and no `query=1` is answered with an empty
//! body ("没有记录，则返回空字符串"), which the SDKs take as "fall back to LocalDNS".

use std::borrow::Cow;
use std::io::Write;
use std::net::IpAddr;

use super::params::{DRequest, QType};

/// TTL written after the `0` of a family without records when nothing better is known.
pub const EMPTY_PART_TTL: u32 = 30;

/// The addresses of one family for one name (borrowed from the answer engine's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Part<'a> {
    pub ips: Cow<'a, [IpAddr]>,
    pub ttl: u32,
}

/// What was found for one name, and how to echo it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameAnswer<'a> {
    /// The name as the client wrote it (without a trailing dot).
    pub name: &'a str,
    pub v4: Part<'a>,
    pub v6: Part<'a>,
}

/// Options that are deployment choices, not request parameters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FormatOptions {
    /// The document's exact form instead of what the SDKs parse.
    pub document_form: bool,
    /// In the document form, `|clientip` on every batch line (always so in the SDK form).
    pub cip_every_line: bool,
}

impl FormatOptions {
    /// The document's form, byte for byte.
    pub fn document() -> Self {
        Self { document_form: true, cip_every_line: false }
    }
}

/// Writes an address. IPv4 by hand into a stack buffer, pushed at once: this is the answer
/// path's hottest formatting, where `core::fmt` and then an `itoa` call and a push per octet
/// showed in its profile (docs/benchmarks.md); IPv6 through `Display`.
fn push_ip(out: &mut Vec<u8>, ip: &IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            let mut buf = [0u8; 15];
            let mut n = 0;
            for (i, &octet) in v4.octets().iter().enumerate() {
                if i > 0 {
                    buf[n] = b'.';
                    n += 1;
                }
                if octet >= 100 {
                    buf[n] = b'0' + octet / 100;
                    n += 1;
                }
                if octet >= 10 {
                    buf[n] = b'0' + octet / 10 % 10;
                    n += 1;
                }
                buf[n] = b'0' + octet % 10;
                n += 1;
            }
            out.extend_from_slice(&buf[..n]);
        }
        IpAddr::V6(_) => {
            let _ = write!(out, "{ip}");
        }
    }
}

fn push_u32(out: &mut Vec<u8>, n: u32) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

fn write_part(out: &mut Vec<u8>, part: &Part<'_>, other: &Part<'_>, ttl: bool, opts: FormatOptions) {
    if part.ips.is_empty() {
        out.push(b'0');
        if ttl && !opts.document_form {
            // The SDK's pattern needs `,ttl` here; the TTL says how long "nothing" holds.
            let t = [part.ttl, other.ttl].into_iter().find(|t| *t > 0).unwrap_or(EMPTY_PART_TTL);
            out.push(b',');
            push_u32(out, t);
        }
        return;
    }
    for (i, ip) in part.ips.iter().enumerate() {
        if i > 0 {
            out.push(b';');
        }
        push_ip(out, ip);
    }
    if ttl {
        out.push(b',');
        push_u32(out, part.ttl);
    }
}

fn write_parts(out: &mut Vec<u8>, req: &DRequest, a: &NameAnswer<'_>, opts: FormatOptions) {
    match req.qtype {
        QType::A => write_part(out, &a.v4, &a.v6, req.ttl, opts),
        QType::Aaaa => write_part(out, &a.v6, &a.v4, req.ttl, opts),
        QType::Addrs => {
            write_part(out, &a.v4, &a.v6, req.ttl, opts);
            out.push(b'-');
            write_part(out, &a.v6, &a.v4, req.ttl, opts);
        }
    }
}

fn has_any(req: &DRequest, a: &NameAnswer<'_>) -> bool {
    match req.qtype {
        QType::A => !a.v4.ips.is_empty(),
        QType::Aaaa => !a.v6.ips.is_empty(),
        QType::Addrs => !a.v4.ips.is_empty() || !a.v6.ips.is_empty(),
    }
}

/// Formats the body for `answers` (one per requested name, in order): ASCII text, as bytes
/// because bytes are what is sent (and nothing then checks them as UTF-8 again).
pub fn format(req: &DRequest, answers: &[NameAnswer<'_>], client: IpAddr, opts: FormatOptions) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 * answers.len());
    if !req.batch {
        let Some(a) = answers.first() else { return out };
        if !req.query && !has_any(req, a) {
            return out;
        }
        if req.query {
            out.extend_from_slice(a.name.as_bytes());
            out.extend_from_slice(b".:");
        }
        write_parts(&mut out, req, a, opts);
        if req.clientip {
            out.push(b'|');
            push_ip(&mut out, &client);
        }
        return out;
    }
    let every_line = !opts.document_form || opts.cip_every_line;
    for (i, a) in answers.iter().enumerate() {
        if i > 0 {
            out.push(b'\n');
        }
        out.extend_from_slice(a.name.as_bytes());
        out.extend_from_slice(b".:");
        write_parts(&mut out, req, a, opts);
        if req.clientip && (every_line || i + 1 == answers.len()) {
            out.push(b'|');
            push_ip(&mut out, &client);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::params::parse;
    use super::*;

    fn req(q: &str) -> DRequest {
        let pairs: Vec<(String, String)> = form_urlencoded::parse(q.as_bytes()).into_owned().collect();
        parse(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))).unwrap()
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn ans(name: &'static str, v4: &[&str], ttl4: u32, v6: &[&str], ttl6: u32) -> NameAnswer<'static> {
        NameAnswer {
            name,
            v4: Part { ips: ips(v4).into(), ttl: ttl4 },
            v6: Part { ips: ips(v6).into(), ttl: ttl6 },
        }
    }

    const CIP: &str = "1.2.3.4";
    const TENCENT4: [&str; 3] = ["2.3.3.4", "2.3.3.5", "2.3.3.6"];

    /// The document's form (`[dnspod] document_form = true`).
    fn check(query: &str, answers: &[NameAnswer<'_>], expect: &str) {
        let body =
            String::from_utf8(format(&req(query), answers, CIP.parse().unwrap(), FormatOptions::document()))
                .unwrap();
        assert_eq!(body, expect, "{query}");
    }

    /// The default form, the one the official SDKs parse.
    fn sdk(query: &str, answers: &[NameAnswer<'_>], expect: &str) {
        let body =
            String::from_utf8(format(&req(query), answers, CIP.parse().unwrap(), FormatOptions::default()))
                .unwrap();
        assert_eq!(body, expect, "{query}");
    }

    #[test]
    fn sdk_form_completes_every_line_and_every_family() {
        sdk(
            "dn=a.com,b.com&clientip=1&ttl=1",
            &[ans("a.com", &["1.1.1.1"], 60, &[], 0), ans("b.com", &["2.2.2.2", "2.2.2.3"], 120, &[], 0)],
            "a.com.:1.1.1.1,60|1.2.3.4\nb.com.:2.2.2.2;2.2.2.3,120|1.2.3.4",
        );
        // Dual stack without AAAA: the IPv4 answer survives the SDK's pattern.
        sdk(
            "dn=a.com&type=addrs&clientip=1&ttl=1",
            &[ans("a.com", &["5.5.5.5"], 60, &[], 0)],
            "5.5.5.5,60-0,60|1.2.3.4",
        );
        sdk(
            "dn=a.com&type=addrs&clientip=1&ttl=1",
            &[ans("a.com", &[], 0, &["2400:3200::1"], 90)],
            "0,90-2400:3200::1,90|1.2.3.4",
        );
        // A batch name with nothing at all still has a complete line.
        sdk(
            "dn=a.com,none.com&type=addrs&clientip=1&ttl=1",
            &[ans("a.com", &["1.1.1.1"], 60, &["2400:3200::1"], 60), ans("none.com", &[], 0, &[], 0)],
            "a.com.:1.1.1.1,60-2400:3200::1,60|1.2.3.4\nnone.com.:0,30-0,30|1.2.3.4",
        );
        // Without ttl=1 there is no TTL to write: the document's bare 0.
        sdk("dn=a.com&type=addrs&query=1", &[ans("a.com", &["1.1.1.1"], 60, &[], 0)], "a.com.:1.1.1.1-0");
        // Names are echoed as asked.
        sdk(
            "dn=WWW.Example.com&query=1",
            &[ans("WWW.Example.com", &["1.1.1.1"], 60, &[], 0)],
            "WWW.Example.com.:1.1.1.1",
        );
    }

    // Every example of reference/httpdns-api.md §1.3, in the document's form.

    #[test]
    fn a_no_options() {
        check(
            "dn=cloud.tencent.com",
            &[ans("cloud.tencent.com", &TENCENT4, 120, &[], 0)],
            "2.3.3.4;2.3.3.5;2.3.3.6",
        );
    }

    #[test]
    fn ttl() {
        check(
            "dn=cloud.tencent.com&ttl=1",
            &[ans("cloud.tencent.com", &TENCENT4, 120, &[], 0)],
            "2.3.3.4;2.3.3.5;2.3.3.6,120",
        );
    }

    #[test]
    fn clientip_ip_ttl() {
        check(
            "dn=cloud.tencent.com&clientip=1&ip=1.2.3.4&ttl=1",
            &[ans("cloud.tencent.com", &["12.3.3.4", "2.3.3.5", "2.3.3.6"], 120, &[], 0)],
            "12.3.3.4;2.3.3.5;2.3.3.6,120|1.2.3.4",
        );
    }

    #[test]
    fn addrs_clientip_ttl() {
        check(
            "dn=cloud.tencent.com&type=addrs&clientip=1&ttl=1",
            &[ans(
                "cloud.tencent.com",
                &TENCENT4,
                120,
                &["2402:4e00:123:4567::2345", "2403:4e00:123:4567::2346"],
                120,
            )],
            "2.3.3.4;2.3.3.5;2.3.3.6,120-2402:4e00:123:4567::2345;2403:4e00:123:4567::2346,120|1.2.3.4",
        );
    }

    #[test]
    fn query_clientip_ttl() {
        check(
            "dn=cloud.tencent.com&query=1&clientip=1&ttl=1",
            &[ans("cloud.tencent.com", &TENCENT4, 120, &[], 0)],
            "cloud.tencent.com.:2.3.3.4;2.3.3.5;2.3.3.6,120|1.2.3.4",
        );
    }

    #[test]
    fn batch_clientip_ttl() {
        check(
            "dn=cloud.tencent.com,www.qq.com,www.dnspod.cn&clientip=1&ttl=1",
            &[
                ans("cloud.tencent.com", &TENCENT4, 120, &[], 0),
                ans("www.qq.com", &["3.3.3.4", "3.3.3.5", "3.3.3.6"], 180, &[], 0),
                ans("www.dnspod.cn", &["4.3.3.4", "4.3.3.5", "4.3.3.6"], 60, &[], 0),
            ],
            "cloud.tencent.com.:2.3.3.4;2.3.3.5;2.3.3.6,120\nwww.qq.com.:3.3.3.4;3.3.3.5;3.3.3.6,180\n\
             www.dnspod.cn.:4.3.3.4;4.3.3.5;4.3.3.6,60|1.2.3.4",
        );
    }

    #[test]
    fn no_record_plain_a_is_empty() {
        check("dn=cloud.tencent.com", &[ans("cloud.tencent.com", &[], 0, &[], 0)], "");
        check("dn=cloud.tencent.com&ttl=1&clientip=1", &[ans("cloud.tencent.com", &[], 0, &[], 0)], "");
    }

    #[test]
    fn no_record_addrs_query_uses_zero_markers() {
        check(
            "dn=cloud.tencent.com&type=addrs&query=1&ip=1.2.3.4&clientip=1",
            &[ans("cloud.tencent.com", &[], 0, &[], 0)],
            "cloud.tencent.com.:0-0|1.2.3.4",
        );
        check(
            "dn=cloud.tencent.com&type=addrs&query=1&ip=1.2.3.4&clientip=1",
            &[ans("cloud.tencent.com", &["2.3.4.5", "3.3.3.3"], 60, &[], 0)],
            "cloud.tencent.com.:2.3.4.5;3.3.3.3-0|1.2.3.4",
        );
    }

    #[test]
    fn batch_with_a_missing_domain() {
        check(
            "dn=cloud.tencent.com,nothing.example.com",
            &[ans("cloud.tencent.com", &TENCENT4, 120, &[], 0), ans("nothing.example.com", &[], 0, &[], 0)],
            "cloud.tencent.com.:2.3.3.4;2.3.3.5;2.3.3.6\nnothing.example.com.:0",
        );
    }

    #[test]
    fn sdk_batch_dual_stack_line() {
        // The line in the Tencent SDK's ResponseParser comment.
        let body = format(
            &req("dn=www.qq.com&type=addrs&ttl=1&clientip=1"),
            &[ans("www.qq.com", &["120.14.67.201"], 120, &["2402:4e00:1011:1414:0:9226:71a3:83d2"], 120)],
            "127.0.0.1".parse().unwrap(),
            FormatOptions::document(),
        );
        assert_eq!(
            String::from_utf8(body).unwrap(),
            "120.14.67.201,120-2402:4e00:1011:1414:0:9226:71a3:83d2,120|127.0.0.1"
        );
    }

    #[test]
    fn aaaa_only_and_cip_on_every_line() {
        check(
            "dn=a.example.com&type=aaaa&ttl=1&clientip=1",
            &[ans("a.example.com", &["1.1.1.1"], 60, &["2400:3200::1"], 60)],
            "2400:3200::1,60|1.2.3.4",
        );
        let body = format(
            &req("dn=a.example.com,b.example.com&clientip=1"),
            &[ans("a.example.com", &["1.1.1.1"], 60, &[], 0), ans("b.example.com", &["2.2.2.2"], 60, &[], 0)],
            CIP.parse().unwrap(),
            FormatOptions { document_form: true, cip_every_line: true },
        );
        assert_eq!(
            String::from_utf8(body).unwrap(),
            "a.example.com.:1.1.1.1|1.2.3.4\nb.example.com.:2.2.2.2|1.2.3.4"
        );
    }

    proptest::proptest! {
        /// Addresses are written as their `Display` writes them.
        #[test]
        fn addresses_write_as_display_does(v4 in proptest::prelude::any::<[u8; 4]>(), v6 in proptest::prelude::any::<[u16; 8]>()) {
            for ip in [IpAddr::from(v4), IpAddr::from(v6)] {
                let mut out = b"x".to_vec();
                push_ip(&mut out, &ip);
                proptest::prop_assert_eq!(String::from_utf8(out).unwrap(), format!("x{ip}"));
            }
        }
    }
}
