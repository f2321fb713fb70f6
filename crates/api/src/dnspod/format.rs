//! The DNSPod text format (`reference/httpdns-api.md` §1.3), byte for byte.
//!
//! ```text
//! single   = [qname "." ":"] v4part ["-" v6part] ["|" clientip]
//! part     = ip *( ";" ip ) ["," ttl]  |  "0"            ; "0": no record of this family
//! batch    = line *( "\n" line ) ["|" clientip]          ; clientip after the last line
//! line     = qname "." ":" part ["-" part]
//! ```
//!
//! A single name with no record at all and no `query=1` is answered with an empty body
//! ("没有记录，则返回空字符串"), which the SDKs take as "fall back to LocalDNS".

use std::fmt::Write;
use std::net::IpAddr;

use httpdns_core::DomainName;

use super::params::{DRequest, QType};

/// The addresses of one family for one name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Part {
    pub ips: Vec<IpAddr>,
    pub ttl: u32,
}

/// What was found for one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameAnswer<'a> {
    pub name: &'a DomainName,
    pub v4: Part,
    pub v6: Part,
}

/// Options that are deployment choices, not request parameters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FormatOptions {
    /// Append `|clientip` to every batch line instead of only the last one. The official
    /// Tencent Android SDK's batch regex expects it on each line, while the documentation shows
    /// it once; this switch serves that SDK.
    pub cip_every_line: bool,
}

fn write_part(out: &mut String, part: &Part, ttl: bool) {
    if part.ips.is_empty() {
        out.push('0');
        return;
    }
    for (i, ip) in part.ips.iter().enumerate() {
        if i > 0 {
            out.push(';');
        }
        let _ = write!(out, "{ip}");
    }
    if ttl {
        let _ = write!(out, ",{}", part.ttl);
    }
}

fn write_parts(out: &mut String, req: &DRequest, a: &NameAnswer<'_>) {
    match req.qtype {
        QType::A => write_part(out, &a.v4, req.ttl),
        QType::Aaaa => write_part(out, &a.v6, req.ttl),
        QType::Addrs => {
            write_part(out, &a.v4, req.ttl);
            out.push('-');
            write_part(out, &a.v6, req.ttl);
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

/// Formats the body for `answers` (one per requested name, in order).
pub fn format(req: &DRequest, answers: &[NameAnswer<'_>], client: IpAddr, opts: FormatOptions) -> String {
    let mut out = String::with_capacity(64 * answers.len());
    if !req.batch {
        let Some(a) = answers.first() else { return out };
        if !req.query && !has_any(req, a) {
            return out;
        }
        if req.query {
            let _ = write!(out, "{}.:", a.name);
        }
        write_parts(&mut out, req, a);
        if req.clientip {
            let _ = write!(out, "|{client}");
        }
        return out;
    }
    for (i, a) in answers.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = write!(out, "{}.:", a.name);
        write_parts(&mut out, req, a);
        if req.clientip && (opts.cip_every_line || i + 1 == answers.len()) {
            let _ = write!(out, "|{client}");
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

    fn ans(name: &str, v4: &[&str], ttl4: u32, v6: &[&str], ttl6: u32) -> NameAnswer<'static> {
        NameAnswer {
            // Leaked: a handful of tiny names in a test process.
            name: Box::leak(Box::new(DomainName::parse(name).unwrap())),
            v4: Part { ips: ips(v4), ttl: ttl4 },
            v6: Part { ips: ips(v6), ttl: ttl6 },
        }
    }

    const CIP: &str = "1.2.3.4";
    const TENCENT4: [&str; 3] = ["2.3.3.4", "2.3.3.5", "2.3.3.6"];

    fn check(query: &str, answers: &[NameAnswer], expect: &str) {
        let body = format(&req(query), answers, CIP.parse().unwrap(), FormatOptions::default());
        assert_eq!(body, expect, "{query}");
    }

    // Every example of reference/httpdns-api.md §1.3.

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
            FormatOptions::default(),
        );
        assert_eq!(body, "120.14.67.201,120-2402:4e00:1011:1414:0:9226:71a3:83d2,120|127.0.0.1");
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
            FormatOptions { cip_every_line: true },
        );
        assert_eq!(body, "a.example.com.:1.1.1.1|1.2.3.4\nb.example.com.:2.2.2.2|1.2.3.4");
    }
}
