//! Answers for a managed name that is an alias (`cname` in its spec): the CNAME record, then
//! the target's records as RFC 1034 §4.3.2 has a server give them when it can: a target
//! managed here is answered from the snapshot for the same client (following further aliases
//! up to [`MAX_ALIASES`]); another name's A or AAAA is asked upstream with the client's subnet
//! (`Filled::Chase`, completed by [`crate::answer::Forward::finish`]). A question for the
//! CNAME itself gets the CNAME alone; another type follows the aliases inside the snapshot and
//! ends without records (nodes have addresses only), and is not asked upstream.

use std::net::IpAddr;

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::rdata::CNAME;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use httpdns_core::model::DomainSpec;
use httpdns_core::snapshot::NodeHealth;
use httpdns_core::{ClientView, Family};

use crate::answer::{engine_records, Context, Filled};

// The engine's bound on a chain of aliases followed inside the snapshot, so `/d` and DNS end
// a loop an operator made at the same length.
use httpdns_answer::MAX_ALIASES;

pub(crate) fn fill<'s, H: NodeHealth, C: Fn(IpAddr) -> (ClientView, u8)>(
    response: &mut Message,
    question: &Query,
    client: IpAddr,
    mut domain: &'s DomainSpec,
    ctx: &Context<'s, H, C>,
) -> Filled {
    let qtype = question.query_type();
    let done =
        |ttl: u32, scope: Option<u8>| Filled::Done { code: ResponseCode::NoError, scope, ttl: Some(ttl) };
    // The owner as the question spelled it (0x20 case randomisation), then each target.
    let mut owner = question.name().clone();
    let mut ttl = u32::MAX;
    for _ in 0..MAX_ALIASES {
        let Some(alias) = &domain.cname else { break };
        let Ok(target) = Name::from_ascii(format!("{alias}.")) else {
            return Filled::Done { code: ResponseCode::ServFail, scope: None, ttl: None };
        };
        response.add_answer(Record::from_rdata(owner, domain.ttl, RData::CNAME(CNAME(target.clone()))));
        ttl = ttl.min(domain.ttl);
        owner = target;
        if qtype == RecordType::CNAME {
            return done(ttl, None);
        }
        match ctx.snapshot.domain(alias) {
            Some(next) => domain = next,
            None if matches!(qtype, RecordType::A | RecordType::AAAA) => {
                return Filled::Chase { target: alias.clone(), owner, ttl };
            }
            None => return done(ttl, None),
        }
    }
    let family = match qtype {
        RecordType::A => Family::V4,
        RecordType::AAAA => Family::V6,
        // A loop (the chain still ends in an alias), or a type nodes do not have.
        _ => return done(ttl, None),
    };
    if domain.cname.is_some() {
        return done(ttl, None);
    }
    let (view, bits) = (ctx.classify)(client);
    // The chain ends in a domain with addresses: the engine's step chooses them, as for `/d`.
    let Some((records, found_ttl)) = engine_records(ctx, domain, family, &view, client, &owner) else {
        return done(ttl, None);
    };
    for record in records {
        response.add_answer(record);
    }
    done(ttl.min(found_ttl), Some(bits))
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::Message;
    use httpdns_core::model::NodeSpec;
    use httpdns_core::snapshot::{AllUp, Model, Policy};
    use httpdns_core::{DomainName, Snapshot, Token};

    use super::*;
    use crate::answer::{answer, build_query, Answer, Transport};

    fn snapshot() -> Snapshot {
        let tok = |s: &str| Token::parse(s).unwrap();
        let node = NodeSpec {
            ip: "1.1.1.1".parse().unwrap(),
            pool: tok("edge"),
            isp: tok("telecom"),
            region: tok("beijing"),
            bandwidth_mbps: 100.0,
            load_pct: 10.0,
            latency_ms: 5.0,
            enabled: true,
        };
        let alias = |to: &str| {
            let mut d = DomainSpec::pooled(tok("edge"), 30, 4);
            d.pool = None;
            d.cname = Some(DomainName::parse(to).unwrap());
            d
        };
        let model = Model {
            nodes: vec![("n1".into(), node)],
            domains: vec![
                (DomainName::parse("www.example.com").unwrap(), DomainSpec::pooled(tok("edge"), 60, 4)),
                (DomainName::parse("a.example.com").unwrap(), alias("b.example.com")),
                (DomainName::parse("b.example.com").unwrap(), alias("www.example.com")),
                (DomainName::parse("loop1.example.com").unwrap(), alias("loop2.example.com")),
                (DomainName::parse("loop2.example.com").unwrap(), alias("loop1.example.com")),
                (DomainName::parse("out.example.com").unwrap(), alias("cdn.vendor.example")),
            ],
            ..Model::default()
        };
        Snapshot::build(model, Policy::default(), 1)
    }

    fn ask(name: &str, qtype: RecordType) -> Answer {
        let snap = snapshot();
        let ctx = Context {
            snapshot: &snap,
            health: &AllUp,
            classify: |_| (ClientView::default(), 0),
            tally: None,
        };
        let q = build_query(1, name, qtype, None).unwrap();
        answer(&q, "203.0.113.9".parse().unwrap(), Transport::Udp, &ctx).unwrap()
    }

    fn records(a: Answer) -> Vec<String> {
        let Answer::Reply(r) = a else { panic!("not answered here") };
        let m = Message::from_vec(&r.bytes).unwrap();
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        m.answers.iter().map(|r| format!("{} {} {}", r.name, r.ttl, r.data)).collect()
    }

    #[test]
    fn a_chain_inside_the_snapshot_ends_in_the_target_records() {
        assert_eq!(
            records(ask("a.example.com.", RecordType::A)),
            [
                "a.example.com. 30 b.example.com.",
                "b.example.com. 30 www.example.com.",
                "www.example.com. 60 1.1.1.1",
            ]
        );
        assert_eq!(records(ask("a.example.com.", RecordType::CNAME)), ["a.example.com. 30 b.example.com."]);
        // Another type follows the chain too (RFC 1034 §4.3.2), and ends with no records.
        assert_eq!(records(ask("a.example.com.", RecordType::TXT)).len(), 2);
    }

    #[test]
    fn a_loop_ends_after_the_bound_with_the_aliases_alone() {
        let got = records(ask("loop1.example.com.", RecordType::A));
        assert_eq!(got.len(), MAX_ALIASES);
        assert!(got.iter().all(|r| r.contains(" 30 loop")), "{got:?}");
    }

    #[test]
    fn a_target_elsewhere_is_forwarded_for_the_client() {
        let Answer::Forward(f) = ask("out.example.com.", RecordType::A) else { panic!("not forwarded") };
        assert_eq!((f.name.as_str(), f.qtype), ("cdn.vendor.example", RecordType::A));
        // Without an upstream the CNAME alone stands, NOERROR.
        let r = f.finish(Err(httpdns_upstream::UpstreamError::NoServers));
        let m = Message::from_vec(&r.bytes).unwrap();
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert_eq!(m.answers.len(), 1);
    }
}
