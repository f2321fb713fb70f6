//! Answers for a managed name that is an alias (`cname` in its spec): the CNAME record, then
//! the target's records as RFC 1034 §4.3.2 has a server give them when it can: a target
//! managed here is answered from the snapshot for the same client (following further aliases
//! up to [`MAX_ALIASES`]); another name's A or AAAA is asked upstream with the client's subnet
//! (`Filled::Chase`, completed by [`crate::answer::Forward::finish`]). A question for the
//! CNAME itself, or for another type, gets the CNAME alone.

use std::net::IpAddr;

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CNAME};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use httpdns_core::model::DomainSpec;
use httpdns_core::snapshot::{client_seed, NodeHealth};
use httpdns_core::{ClientView, Family};

use crate::answer::{Context, Filled};

/// Largest number of aliases followed inside the snapshot, so a loop an operator made ends.
pub(crate) const MAX_ALIASES: usize = 8;

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
    let a = ctx.snapshot.resolve_domain(domain, family, &view, client_seed(client), ctx.health);
    for ip in a.ips {
        let rdata = match ip {
            IpAddr::V4(v4) => RData::A(A(v4)),
            IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
        };
        response.add_answer(Record::from_rdata(owner.clone(), a.ttl, rdata));
    }
    done(ttl.min(a.ttl), Some(bits))
}
