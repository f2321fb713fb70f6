//! The common question answered straight on the wire.
//!
//! Nearly every query a busy server sees is one A or AAAA question for a managed name that has
//! addresses for the client, with or without EDNS (and its client subnet). Parsing that into a
//! `hickory_proto` message and serialising the response back costs several allocations and more
//! than the answer itself; here the question is read in place and the response written into one
//! buffer. Anything else — another type or class, a name not managed here, a family without
//! addresses, an EDNS option other than client subnet, cookie and padding, a response too big for
//! the transport, an encrypted transport (which pads) — returns `None` and takes the general path
//! in [`crate::answer`], whose output this matches byte for byte (the tests below compare both).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::op::ResponseCode;
use httpdns_core::snapshot::{client_seed, NodeHealth};
use httpdns_core::{ClientView, Family};

use crate::answer::{Context, Reply, Transport, MAX_UDP_PAYLOAD};

const HEADER: usize = 12;
const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const TYPE_OPT: u16 = 41;
const CLASS_IN: u16 = 1;
const OPTION_SUBNET: u16 = 8;
/// Options the general path reads and leaves out of the response: safe to skip here.
const OPTION_COOKIE: u16 = 10;
const OPTION_PADDING: u16 = 12;
/// Name servers may not exceed this in wire form (RFC 1035 §3.1).
const MAX_WIRE_NAME: usize = 255;

/// The EDNS part of a query, as far as the response depends on it.
struct Edns {
    payload: u16,
    dnssec_ok: bool,
    subnet: Option<Subnet>,
}

#[derive(Clone, Copy)]
struct Subnet {
    addr: IpAddr,
    source: u8,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// The answer to `query` when it is the common case, else `None`.
pub(crate) fn try_answer<H: NodeHealth, C: Fn(IpAddr) -> (ClientView, u8)>(
    query: &[u8],
    peer: IpAddr,
    transport: Transport,
    ctx: &Context<'_, H, C>,
) -> Option<Reply> {
    if transport == Transport::Encrypted || query.len() < HEADER {
        return None;
    }
    // A query (QR clear), opcode QUERY, one question and nothing but an optional OPT.
    if query[2] & 0xF8 != 0 || u16_at(query, 4)? != 1 || u16_at(query, 6)? != 0 || u16_at(query, 8)? != 0 {
        return None;
    }
    let additional = u16_at(query, 10)?;
    if additional > 1 {
        return None;
    }

    // The question name: plain labels (a query has nothing earlier to point at), spelled the
    // way `DomainName` accepts without further mapping.
    // Lowercased into a buffer on the stack: the name is only looked up, and a managed name
    // is a valid `DomainName`, so one that is not simply finds nothing.
    let mut at = HEADER;
    let mut buf = [0u8; MAX_WIRE_NAME];
    let mut len_text = 0;
    loop {
        let len = usize::from(*query.get(at)?);
        at += 1;
        if len == 0 {
            break;
        }
        if len > 63 || at - HEADER + len > MAX_WIRE_NAME {
            return None;
        }
        let label = query.get(at..at + len)?;
        if !label.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_') {
            return None;
        }
        if len_text > 0 {
            buf[len_text] = b'.';
            len_text += 1;
        }
        for (slot, c) in buf[len_text..len_text + len].iter_mut().zip(label) {
            *slot = c.to_ascii_lowercase();
        }
        len_text += len;
        at += len;
    }
    if at - HEADER > MAX_WIRE_NAME || len_text == 0 {
        return None;
    }
    let name = std::str::from_utf8(&buf[..len_text]).ok()?;
    let family = match u16_at(query, at)? {
        TYPE_A => Family::V4,
        TYPE_AAAA => Family::V6,
        _ => return None,
    };
    if u16_at(query, at + 2)? != CLASS_IN {
        return None;
    }
    let question_end = at + 4;

    let edns = if additional == 1 { Some(read_opt(query, question_end)?) } else { None };
    if edns.is_none() && query.len() != question_end {
        return None;
    }

    // An alias (`cname`) is a CNAME answer: the general path's.
    let (key, domain) = ctx.snapshot.domain_entry(name).filter(|(_, d)| d.cname.is_none())?;
    let client = edns.as_ref().and_then(|e| e.subnet).map_or(peer, |s| s.addr);
    let (view, bits) = (ctx.classify)(client);
    let answer = ctx.snapshot.resolve_domain(domain, family, &view, client_seed(client), ctx.health);
    if answer.ips.is_empty() {
        return None;
    }
    // Counted only once answered here: a question the general path takes over counts there.
    ctx.count(key, &view);

    let rdlen: usize = if family == Family::V4 { 4 } else { 16 };
    let mut out = Vec::with_capacity(question_end + answer.ips.len() * (12 + rdlen) + 32);
    out.extend_from_slice(&query[..2]);
    // QR, AA, RD copied; CD copied; everything else clear, NOERROR.
    out.push(0x80 | 0x04 | (query[2] & 0x01));
    out.push(query[3] & 0x10);
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&u16::try_from(answer.ips.len()).ok()?.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(&u16::from(edns.is_some()).to_be_bytes());
    // The question as asked, case included (resolvers check it, RFC 7766 §10 / 0x20).
    out.extend_from_slice(&query[HEADER..question_end]);
    for ip in &answer.ips {
        match (ip, family) {
            (IpAddr::V4(a), Family::V4) => address_record(&mut out, TYPE_A, answer.ttl, &a.octets()),
            (IpAddr::V6(a), Family::V6) => address_record(&mut out, TYPE_AAAA, answer.ttl, &a.octets()),
            _ => return None,
        }
    }
    if let Some(e) = &edns {
        // Our OPT: root owner, the payload we use, extended rcode 0, version 0, DO echoed.
        out.push(0);
        out.extend_from_slice(&TYPE_OPT.to_be_bytes());
        out.extend_from_slice(&MAX_UDP_PAYLOAD.to_be_bytes());
        out.extend_from_slice(&[0, 0, if e.dnssec_ok { 0x80 } else { 0 }, 0]);
        match e.subnet {
            None => out.extend_from_slice(&0u16.to_be_bytes()),
            Some(s) => {
                // The scope is the prefix that decided the answer (as in the general path).
                let mapped = matches!(s.addr, IpAddr::V6(a) if a.to_ipv4_mapped().is_some());
                let scope = if mapped && bits > 0 { bits.saturating_add(96).min(128) } else { bits };
                let (family_code, octets): (u16, Vec<u8>) = match s.addr {
                    IpAddr::V4(a) => (1, a.octets().to_vec()),
                    IpAddr::V6(a) => (2, a.octets().to_vec()),
                };
                let n = usize::from(s.source).div_ceil(8);
                let option_len = u16::try_from(4 + n).ok()?;
                out.extend_from_slice(&(option_len + 4).to_be_bytes());
                out.extend_from_slice(&OPTION_SUBNET.to_be_bytes());
                out.extend_from_slice(&option_len.to_be_bytes());
                out.extend_from_slice(&family_code.to_be_bytes());
                out.push(s.source);
                out.push(scope);
                out.extend_from_slice(octets.get(..n)?);
            }
        }
    }
    let limit = match transport {
        Transport::Udp => usize::from(edns.as_ref().map_or(512, |e| e.payload.clamp(512, MAX_UDP_PAYLOAD))),
        Transport::Stream | Transport::Encrypted => usize::from(u16::MAX),
    };
    if out.len() > limit {
        // Truncation has its own rules: the general path applies them.
        return None;
    }
    Some(Reply {
        bytes: out,
        rcode: ResponseCode::NoError,
        min_ttl: Some(domain.ttl),
        client_dependent: true,
    })
}

/// An A or AAAA record whose owner is the question's name (a pointer to it at offset 12).
fn address_record(out: &mut Vec<u8>, rtype: u16, ttl: u32, address: &[u8]) {
    out.extend_from_slice(&[0xC0, 0x0C]);
    out.extend_from_slice(&rtype.to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    out.extend_from_slice(&ttl.to_be_bytes());
    out.extend_from_slice(&(address.len() as u16).to_be_bytes());
    out.extend_from_slice(address);
}

/// The OPT record at `at`, which must end the message; `None` for anything the general path
/// should judge (another record, a version or extended code, an option not known here, a
/// malformed or non-zero-padded client subnet).
fn read_opt(query: &[u8], at: usize) -> Option<Edns> {
    if *query.get(at)? != 0 || u16_at(query, at + 1)? != TYPE_OPT {
        return None;
    }
    let payload = u16_at(query, at + 3)?;
    let (ext_rcode, version) = (*query.get(at + 5)?, *query.get(at + 6)?);
    if ext_rcode != 0 || version != 0 {
        return None;
    }
    let dnssec_ok = query.get(at + 7)? & 0x80 != 0;
    let rdlen = usize::from(u16_at(query, at + 9)?);
    let mut pos = at + 11;
    if query.len() != pos + rdlen {
        return None;
    }
    let mut subnet = None;
    while pos < query.len() {
        let code = u16_at(query, pos)?;
        let len = usize::from(u16_at(query, pos + 2)?);
        let data = query.get(pos + 4..pos + 4 + len)?;
        match code {
            OPTION_SUBNET if subnet.is_none() => subnet = Some(read_subnet(data)?),
            OPTION_COOKIE | OPTION_PADDING => {}
            _ => return None,
        }
        pos += 4 + len;
    }
    Some(Edns { payload, dnssec_ok, subnet })
}

/// An RFC 7871 option body, only when well-formed: the address in exactly as many bytes as its
/// source prefix needs, every bit past the prefix zero.
fn read_subnet(data: &[u8]) -> Option<Subnet> {
    let family = u16_at(data, 0)?;
    let source = *data.get(2)?;
    let bytes = data.get(4..)?;
    if bytes.len() != usize::from(source).div_ceil(8) {
        return None;
    }
    let addr = match family {
        1 if source <= 32 => {
            let mut o = [0u8; 4];
            o[..bytes.len()].copy_from_slice(bytes);
            let a = Ipv4Addr::from(o);
            (source >= 32 || a.to_bits() & (u32::MAX >> source) == 0).then_some(IpAddr::V4(a))?
        }
        2 if source <= 128 => {
            let mut o = [0u8; 16];
            o[..bytes.len()].copy_from_slice(bytes);
            let a = Ipv6Addr::from(o);
            (source >= 128 || a.to_bits() & (u128::MAX >> source) == 0).then_some(IpAddr::V6(a))?
        }
        _ => return None,
    };
    Some(Subnet { addr, source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::{answer_general, build_query_with, Answer, QueryFlags};
    use hickory_proto::rr::RecordType;
    use httpdns_core::model::{DomainSpec, NodeSpec, PoolSpec};
    use httpdns_core::snapshot::{AllUp, Model, Policy};
    use httpdns_core::{DomainName, Snapshot, Token};
    use proptest::prelude::*;

    fn snapshot() -> Snapshot {
        let tok = |s: &str| Token::parse(s).unwrap();
        let node = |ip: &str, isp: &str| NodeSpec {
            ip: ip.parse().unwrap(),
            pool: tok("edge"),
            isp: tok(isp),
            region: tok("beijing"),
            bandwidth_mbps: 1000.0,
            load_pct: 10.0,
            latency_ms: 5.0,
            enabled: true,
        };
        let mut nodes: Vec<(String, NodeSpec)> =
            (1..=6).map(|i| (format!("v4-{i}"), node(&format!("1.1.1.{i}"), "telecom"))).collect();
        nodes.extend((1..=3).map(|i| (format!("v6-{i}"), node(&format!("2402:4e00::{i}"), "unicom"))));
        let spec = |max| DomainSpec::pooled(tok("edge"), 60, max);
        let model = Model {
            nodes,
            pools: vec![(tok("edge"), PoolSpec::default())],
            domains: vec![
                (DomainName::parse("www.example.com").unwrap(), spec(2)),
                (DomainName::parse("img.example.com").unwrap(), spec(8)),
            ],
            ..Model::default()
        };
        Snapshot::build(model, Policy::default(), 7)
    }

    /// Classifies like GeoIP would, with a scope that depends on the address.
    fn classify(ip: IpAddr) -> (ClientView, u8) {
        let isp = |s: &str| Some(Token::parse(s).unwrap());
        match ip.to_canonical() {
            IpAddr::V4(a) if a.octets()[0] == 1 => {
                (ClientView { isp: isp("telecom"), ..Default::default() }, 8)
            }
            IpAddr::V4(_) => (ClientView::default(), 16),
            IpAddr::V6(_) => (ClientView { isp: isp("unicom"), ..Default::default() }, 32),
        }
    }

    fn both(query: &[u8], peer: IpAddr, transport: Transport) -> (Option<Reply>, Option<Answer>) {
        let snap = snapshot();
        let ctx = Context { snapshot: &snap, health: &AllUp, classify, tally: None };
        (try_answer(query, peer, transport, &ctx), answer_general(query, peer, transport, &ctx))
    }

    fn general_reply(a: Option<Answer>) -> Reply {
        match a {
            Some(Answer::Reply(r)) => r,
            other => panic!("the general path did not reply: {other:?}"),
        }
    }

    #[test]
    fn common_queries_take_the_fast_path_and_match_the_general_one() {
        let peer: IpAddr = "203.0.113.9".parse().unwrap();
        // (name, type, client subnet, DO and CD)
        type Case = (&'static str, RecordType, Option<(IpAddr, u8)>, bool);
        let cases: Vec<Case> = vec![
            ("www.example.com.", RecordType::A, None, false),
            ("WwW.ExAmPlE.cOm.", RecordType::A, None, false),
            ("img.example.com.", RecordType::A, Some(("1.2.3.0".parse().unwrap(), 24)), false),
            ("img.example.com.", RecordType::AAAA, Some(("2001:db8::".parse().unwrap(), 56)), true),
            ("www.example.com.", RecordType::A, Some(("::ffff:1.2.3.0".parse().unwrap(), 120)), false),
            ("www.example.com.", RecordType::A, Some(("0.0.0.0".parse().unwrap(), 0)), false),
        ];
        for (name, qtype, subnet, dnssec_ok) in cases {
            let flags = QueryFlags { dnssec_ok, checking_disabled: dnssec_ok };
            let q = build_query_with(0x1234, name, qtype, subnet, flags).unwrap();
            for transport in [Transport::Udp, Transport::Stream] {
                let (fast, general) = both(&q, peer, transport);
                let fast = fast.unwrap_or_else(|| {
                    panic!("{name} {qtype} {subnet:?}: not on the fast path; general: {general:?}")
                });
                assert_eq!(fast, general_reply(general), "{name} {qtype} {subnet:?} {transport:?}");
            }
        }
    }

    #[test]
    fn everything_else_is_left_to_the_general_path() {
        let peer: IpAddr = "203.0.113.9".parse().unwrap();
        let q = |name, qtype| build_query_with(1, name, qtype, None, QueryFlags::default()).unwrap();
        let snap = snapshot();
        let ctx = Context { snapshot: &snap, health: &AllUp, classify, tally: None };
        for query in [
            q("www.example.com.", RecordType::MX),
            q("www.example.com.", RecordType::SOA),
            q("other.example.", RecordType::A),
            q("a.www.example.com.", RecordType::A),
        ] {
            assert!(try_answer(&query, peer, Transport::Udp, &ctx).is_none());
        }
        // Encrypted transports pad, which is the general path's work.
        let aaaa = q("www.example.com.", RecordType::AAAA);
        assert!(try_answer(&aaaa, peer, Transport::Udp, &ctx).is_some());
        assert!(try_answer(&aaaa, peer, Transport::Encrypted, &ctx).is_none());
        // Bytes after the question are not a message the fast path understands.
        let mut trailing = q("www.example.com.", RecordType::A);
        trailing.push(0);
        assert!(try_answer(&trailing, peer, Transport::Udp, &ctx).is_none());
    }

    /// Where the question of `q` ends (its name is plain labels).
    fn question_end(q: &[u8]) -> usize {
        let mut at = HEADER;
        while q[at] != 0 {
            at += 1 + usize::from(q[at]);
        }
        at + 5
    }

    fn wire_name(labels: &[String]) -> String {
        labels.iter().map(|l| format!("{l}.")).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// Whatever the fast path answers, the general path answers with the same bytes.
        #[test]
        fn the_fast_path_agrees_with_the_general_one(
            pick in 0usize..4,
            upper in proptest::collection::vec(any::<bool>(), 0..20),
            qtype in prop_oneof![Just(RecordType::A), Just(RecordType::AAAA), Just(RecordType::TXT)],
            subnet in proptest::option::of((any::<u32>(), 0u8..=32, any::<bool>(), any::<u128>(), 0u8..=128)),
            dnssec_ok in any::<bool>(),
            cd in any::<bool>(),
            rd in any::<bool>(),
            payload in prop_oneof![Just(None), (0u16..4096).prop_map(Some)],
            cookie in any::<bool>(),
            id in any::<u16>(),
            peer in any::<u32>(),
            stream in any::<bool>(),
        ) {
            let names = [
                vec!["www".to_string(), "example".into(), "com".into()],
                vec!["img".to_string(), "example".into(), "com".into()],
                vec!["nope".to_string(), "example".into(), "com".into()],
                vec!["x".to_string(), "www".into(), "example".into(), "com".into()],
            ];
            let mut name = wire_name(&names[pick]);
            // Random case, as resolvers using 0x20 send it.
            name = name.chars().zip(upper.iter().chain(std::iter::repeat(&false))).map(|(c, &u)| if u { c.to_ascii_uppercase() } else { c }).collect();
            let subnet = subnet.map(|(v4, p4, v6, a6, p6)| {
                if v6 {
                    let a = if p6 >= 128 { a6 } else { a6 & !(u128::MAX >> p6) };
                    (IpAddr::V6(Ipv6Addr::from(a)), p6)
                } else {
                    let a = if p4 >= 32 { v4 } else { v4 & !(u32::MAX >> p4) };
                    (IpAddr::V4(Ipv4Addr::from(a)), p4)
                }
            });
            let flags = QueryFlags { dnssec_ok, checking_disabled: cd };
            let mut q = build_query_with(id, &name, qtype, subnet, flags).unwrap();
            if !rd {
                q[2] &= !0x01;
            }
            if u16_at(&q, 10) == Some(1) {
                // The OPT follows the question: its class is the payload, then the TTL (4
                // bytes), RDLEN and the options, which end the message.
                let opt = question_end(&q);
                if let Some(p) = payload {
                    q[opt + 3..opt + 5].copy_from_slice(&p.to_be_bytes());
                }
                if cookie {
                    let rdlen = u16_at(&q, opt + 9).unwrap() + 12;
                    q[opt + 9..opt + 11].copy_from_slice(&rdlen.to_be_bytes());
                    q.extend_from_slice(&[0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]);
                }
            }
            let peer = IpAddr::V4(Ipv4Addr::from(peer));
            let transport = if stream { Transport::Stream } else { Transport::Udp };
            let (fast, general) = both(&q, peer, transport);
            // A managed name asked for A or AAAA always has an answer here, small enough for
            // 512 bytes: every such query must take the fast path.
            prop_assert_eq!(fast.is_some(), pick < 2 && qtype != RecordType::TXT);
            if let Some(fast) = fast {
                prop_assert_eq!(fast, general_reply(general));
            }
        }
    }
}
