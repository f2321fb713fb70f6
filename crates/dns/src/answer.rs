//! One DNS question answered from the snapshot.
//!
//! Managed names are answered authoritatively, chosen by the answer engine's step
//! (`httpdns_answer::family`) exactly as `/d` chooses: the client is
//! the EDNS Client Subnet address when the query carries one (echoed back with its scope), else
//! the peer. A/AAAA get the nodes' addresses; other types of a managed name, and families
//! without nodes, get NODATA with the zone's SOA, so resolvers cache the negative answer for
//! the domain's TTL. Each managed name is its own zone apex: SOA and NS questions are
//! answered with the configured name servers (`[dns] nameservers`, else `ns.<name>`), and
//! names below it that are not managed are NXDOMAIN (NODATA for empty non-terminals). A and AAAA questions for names that are not managed are handed back as a
//! [`Forward`] for the upstream resolver; other types of such names are REFUSED.

use std::net::IpAddr;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsCode, EdnsOption};
use hickory_proto::rr::rdata::{A, AAAA, HINFO, NS, SOA};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use httpdns_answer::Found;
use httpdns_core::schedule::NO_ATTRS;
use httpdns_core::snapshot::{client_seed, NodeHealth, Policy};
use httpdns_core::{ClientView, DomainName, Family, Snapshot};

pub use httpdns_upstream::MAX_UDP_PAYLOAD;

/// What the transport allows for the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// UDP: responses over the client's advertised size (512 without EDNS) are truncated.
    Udp,
    /// TCP: no size limit below 65,535.
    Stream,
    /// DNS over TLS and over HTTPS: as `Stream`, and responses to EDNS queries are padded
    /// to a multiple of [`PADDING_BLOCK`] bytes (RFC 7830, RFC 8467), so their length does
    /// not tell an observer which name was asked.
    Encrypted,
}

/// The block length responses are padded to on encrypted transports (RFC 8467 §4.1).
pub const PADDING_BLOCK: usize = 468;

/// A response and facts about it that HTTP caching needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub bytes: Vec<u8>,
    /// The response code (with its EDNS extension), for the metrics.
    pub rcode: ResponseCode,
    /// The smallest TTL in the answer and authority sections.
    pub min_ttl: Option<u32>,
    /// The answer depends on who asked (a managed name): shared caches must not keep it.
    pub client_dependent: bool,
}

/// The result of answering from the snapshot: a reply, or a question for the upstream
/// resolver (a name that is not managed here).
#[derive(Debug)]
pub enum Answer {
    Reply(Reply),
    Forward(Forward),
}

/// A question to resolve upstream, with the response prepared around it.
#[derive(Debug)]
pub struct Forward {
    pub name: DomainName,
    pub qtype: RecordType,
    pub client: IpAddr,
    response: Message,
    limit: usize,
    transport: Transport,
    /// When the question was an alias (`cname`) answered here: the owner of the records found
    /// upstream (the alias's target, already in the answer as a CNAME) and the alias's TTL.
    /// Boxed: a `Name` is large, and every forwarded answer but an alias's carries `None`.
    alias: Option<Box<(Name, u32)>>,
}

impl Forward {
    /// Completes the response with what the upstream resolver found: SERVFAIL when it failed,
    /// REFUSED when there is no upstream. (Other types than A and AAAA of names that are not
    /// managed are not forwarded and answer REFUSED.)
    pub fn finish(
        mut self,
        lookup: Result<httpdns_upstream::Lookup, httpdns_upstream::UpstreamError>,
    ) -> Reply {
        self.response.metadata.recursion_available = true;
        let mut min_ttl = self.alias.as_ref().map(|a| a.1);
        match lookup {
            Ok(l) => {
                self.response.metadata.response_code = l.rcode;
                // The owner name as the question spelled it: resolvers that randomise the
                // case of their questions (0x20, draft-vixie-dnsext-dns0x20) match answers by it.
                // After a CNAME, the records are the target's.
                let asked = match self.alias.as_deref() {
                    Some((owner, _)) => Some(owner.clone()),
                    None => self.response.queries.first().map(|q| q.name().clone()),
                };
                if let Some(qname) = asked.or_else(|| Name::from_ascii(format!("{}.", self.name)).ok()) {
                    for ip in &l.ips {
                        let rdata = match ip {
                            IpAddr::V4(v4) => RData::A(A(*v4)),
                            IpAddr::V6(v6) => RData::AAAA(AAAA(*v6)),
                        };
                        self.response.add_answer(Record::from_rdata(qname.clone(), l.ttl, rdata));
                    }
                }
                min_ttl = Some(min_ttl.map_or(l.ttl, |t: u32| t.min(l.ttl)));
            }
            // The CNAME is this server's to give whatever became of its target: NOERROR with
            // the alias alone, and the resolver chases the target itself (RFC 1034 §4.3.2).
            Err(_) if self.alias.is_some() => self.response.metadata.response_code = ResponseCode::NoError,
            // Without upstreams this server does not recurse: REFUSED, as an authoritative-only
            // server answers; an upstream failure is SERVFAIL.
            Err(httpdns_upstream::UpstreamError::NoServers) => {
                self.response.metadata.recursion_available = false;
                self.response.metadata.response_code = ResponseCode::Refused;
            }
            Err(_) => self.response.metadata.response_code = ResponseCode::ServFail,
        }
        let mut bytes = self.response.to_vec().unwrap_or_default();
        if bytes.len() > self.limit {
            self.response.answers.clear();
            self.response.metadata.truncation = true;
            bytes = self.response.to_vec().unwrap_or_default();
        }
        if self.transport == Transport::Encrypted {
            bytes = padded(&mut self.response, bytes);
        }
        // Upstream answers with a client subnet depend on it; without one they do not.
        Reply {
            bytes,
            rcode: self.response.metadata.response_code,
            min_ttl,
            client_dependent: httpdns_upstream::client_subnet(self.client).is_some(),
        }
    }
}

/// What answering needs besides the query.
pub struct Context<'a, H, C> {
    pub snapshot: &'a Snapshot,
    pub health: &'a H,
    /// Classifies a client address (operator networks, GeoIP): its view, and how many
    /// leading bits of the address decided it (see `httpdns_geo::classify_scoped`).
    pub classify: C,
    /// Where address questions of managed domains are counted, and the front-end's label.
    pub tally: Option<(&'a httpdns_answer::tally::DomainTally, &'static str)>,
}

impl<H, C> std::fmt::Debug for Context<'_, H, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The health view and the classifier are the caller's; the snapshot says which model.
        f.debug_struct("Context").field("revision", &self.snapshot.revision()).finish_non_exhaustive()
    }
}

impl<H, C> Context<'_, H, C> {
    /// Counts an address question for the domain resource `domain` (see [`crate::tally`]).
    pub(crate) fn count(&self, domain: &str, view: &ClientView) {
        if let Some((tally, frontend)) = self.tally {
            tally.record(domain, frontend, view, httpdns_core::clock::unix_s() / 60);
        }
    }
}

fn error_reply(id: u16, op_code: OpCode, code: ResponseCode) -> Vec<u8> {
    Message::error_msg(id, op_code, code).to_vec().unwrap_or_default()
}

/// Answers the DNS message in `query` from `peer`. Returns `None` only for input too short
/// to carry a message id, which gets no answer at all.
pub fn answer<H: NodeHealth, C: Fn(IpAddr) -> (ClientView, u8)>(
    query: &[u8],
    peer: IpAddr,
    transport: Transport,
    ctx: &Context<'_, H, C>,
) -> Option<Answer> {
    // The common question straight on the wire; the rest (and whatever it declines) here.
    if let Some(reply) = crate::fast::try_answer(query, peer, transport, ctx) {
        return Some(Answer::Reply(reply));
    }
    answer_general(query, peer, transport, ctx)
}

/// [`answer`] through a parsed message, for every kind of question.
pub(crate) fn answer_general<H: NodeHealth, C: Fn(IpAddr) -> (ClientView, u8)>(
    query: &[u8],
    peer: IpAddr,
    transport: Transport,
    ctx: &Context<'_, H, C>,
) -> Option<Answer> {
    if query.len() < 12 {
        return None;
    }
    let id = u16::from_be_bytes([query[0], query[1]]);
    let plain = |code| {
        Some(Answer::Reply(Reply {
            bytes: error_reply(id, OpCode::Query, code),
            rcode: code,
            min_ttl: None,
            client_dependent: false,
        }))
    };
    let Ok(request) = Message::from_vec(query) else { return plain(ResponseCode::FormErr) };
    if request.metadata.message_type != MessageType::Query {
        return None;
    }
    if request.metadata.op_code != OpCode::Query {
        return Some(Answer::Reply(Reply {
            bytes: error_reply(id, request.metadata.op_code, ResponseCode::NotImp),
            rcode: ResponseCode::NotImp,
            min_ttl: None,
            client_dependent: false,
        }));
    }
    let [question] = request.queries.as_slice() else { return plain(ResponseCode::FormErr) };

    let mut response = Message::response(id, OpCode::Query);
    response.metadata.recursion_desired = request.metadata.recursion_desired;
    // CD is copied into the response (RFC 4035 §3.2.2).
    response.metadata.checking_disabled = request.metadata.checking_disabled;
    response.add_query(question.clone());

    // EDNS: answer with our own OPT when asked with one (version 0, RFC 6891 §6.1.3), echoing
    // the DO bit (RFC 3225 §3) and the client subnet (RFC 7871 §7.2.1, scope set below).
    let subnet = request.edns.as_ref().and_then(|e| match e.option(EdnsCode::Subnet) {
        Some(EdnsOption::Subnet(s)) => Some(*s),
        _ => None,
    });
    if let Some(asked) = &request.edns {
        let mut edns = Edns::new();
        edns.set_max_payload(MAX_UDP_PAYLOAD);
        edns.set_version(0);
        edns.set_dnssec_ok(asked.flags().dnssec_ok);
        response.set_edns(edns);
        if asked.version() > 0 {
            // A version this server does not speak: BADVERS, nothing else (RFC 6891 §6.1.3).
            response.metadata.response_code = ResponseCode::BADVERS;
            let bytes = response.to_vec().ok()?;
            return Some(Answer::Reply(Reply {
                bytes,
                rcode: ResponseCode::BADVERS,
                min_ttl: None,
                client_dependent: false,
            }));
        }
    }

    // RFC 7871 §6: an address with bits set past its source prefix is malformed (FORMERR);
    // using it would classify, and echo, a client the resolver did not mean.
    if subnet.is_some_and(|s| !zero_past(s.addr(), s.source_prefix())) {
        return plain(ResponseCode::FormErr);
    }
    let client = subnet.map_or(peer, |s| s.addr());
    let limit = match transport {
        Transport::Stream | Transport::Encrypted => usize::from(u16::MAX),
        Transport::Udp => {
            usize::from(request.edns.as_ref().map_or(512, |e| e.max_payload().clamp(512, MAX_UDP_PAYLOAD)))
        }
    };
    // Zone transfers are not offered: the zones are computed per client (RFC 5936 §4.2).
    if matches!(question.query_type(), RecordType::AXFR | RecordType::IXFR) {
        return plain_refused(response, transport);
    }
    let (code, client_dependent, min_ttl, scope) = match fill(&mut response, question, client, ctx) {
        Filled::Done { code, scope, ttl } => (code, scope.is_some(), ttl, scope.unwrap_or(0)),
        Filled::NotManaged(name) => {
            let qtype = question.query_type();
            if matches!(qtype, RecordType::A | RecordType::AAAA) {
                echo_source_scope(subnet, &mut response);
                return Some(Answer::Forward(Forward {
                    name,
                    qtype,
                    client,
                    response,
                    limit,
                    transport,
                    alias: None,
                }));
            }
            (ResponseCode::Refused, false, None, 0)
        }
        Filled::Chase { target, owner, ttl } => {
            echo_source_scope(subnet, &mut response);
            let qtype = question.query_type();
            let alias = Some(Box::new((owner, ttl)));
            return Some(Answer::Forward(Forward {
                name: target,
                qtype,
                client,
                response,
                limit,
                transport,
                alias,
            }));
        }
    };
    if let (Some(s), Some(edns)) = (subnet, response.edns.as_mut()) {
        // The scope is the prefix that decided the answer (RFC 7871 §7.2.1): 0 for answers
        // that are the same for everyone, and longer than the source when the client's prefix
        // was not specific enough (the resolver then asks with the longer one). The classifier
        // counts an IPv4-mapped address in IPv4 bits; the option speaks of its IPv6 form.
        let mapped = matches!(s.addr(), IpAddr::V6(a) if a.to_ipv4_mapped().is_some());
        let scope = if mapped && scope > 0 { scope.saturating_add(96).min(128) } else { scope };
        edns.options_mut().insert(EdnsOption::Subnet(ClientSubnet::new(s.addr(), s.source_prefix(), scope)));
    }
    response.metadata.response_code = code;

    let mut bytes = response.to_vec().ok()?;
    if bytes.len() > limit {
        // Too big for UDP: the header and question with TC set, so the client retries over TCP.
        response.answers.clear();
        response.authorities.clear();
        response.metadata.truncation = true;
        bytes = response.to_vec().ok()?;
    }
    if transport == Transport::Encrypted {
        bytes = padded(&mut response, bytes);
    }
    Some(Answer::Reply(Reply { bytes, rcode: code, min_ttl, client_dependent }))
}

pub(crate) enum Filled {
    /// The response code, the smallest TTL, and for answers that depend on the client, how
    /// many leading bits of its address decided them.
    Done {
        code: ResponseCode,
        scope: Option<u8>,
        ttl: Option<u32>,
    },
    NotManaged(DomainName),
    /// An alias whose target is not managed here: the CNAME records are in the answer; the
    /// target's addresses are to be asked upstream for the client.
    Chase {
        target: DomainName,
        owner: Name,
        ttl: u32,
    },
}

impl Filled {
    fn same_for_all(code: ResponseCode, ttl: Option<u32>) -> Self {
        Self::Done { code, scope: None, ttl }
    }
}

/// Echoes the client subnet with the source prefix as its scope: an answer asked upstream is
/// chosen for (at most) the source prefix.
fn echo_source_scope(subnet: Option<ClientSubnet>, response: &mut Message) {
    if let (Some(s), Some(edns)) = (subnet, response.edns.as_mut()) {
        edns.options_mut().insert(EdnsOption::Subnet(ClientSubnet::new(
            s.addr(),
            s.source_prefix(),
            s.source_prefix(),
        )));
    }
}

/// Whether every bit of `addr` past the first `prefix` is zero.
fn zero_past(addr: IpAddr, prefix: u8) -> bool {
    match addr {
        IpAddr::V4(a) => prefix >= 32 || a.to_bits() & (u32::MAX >> prefix) == 0,
        IpAddr::V6(a) => prefix >= 128 || a.to_bits() & (u128::MAX >> prefix) == 0,
    }
}

/// REFUSED for the question in `response`, keeping its header and OPT.
fn plain_refused(mut response: Message, transport: Transport) -> Option<Answer> {
    response.metadata.response_code = ResponseCode::Refused;
    let mut bytes = response.to_vec().ok()?;
    if transport == Transport::Encrypted {
        bytes = padded(&mut response, bytes);
    }
    Some(Answer::Reply(Reply { bytes, rcode: ResponseCode::Refused, min_ttl: None, client_dependent: false }))
}

/// Fills the answer for one question of a managed name.
fn fill<H: NodeHealth, C: Fn(IpAddr) -> (ClientView, u8)>(
    response: &mut Message,
    question: &Query,
    client: IpAddr,
    ctx: &Context<'_, H, C>,
) -> Filled {
    if question.query_class() != DNSClass::IN {
        return Filled::same_for_all(ResponseCode::Refused, None);
    }
    let qname = question.name().clone();
    let Ok(name) = DomainName::parse(&qname.to_ascii()) else {
        return Filled::same_for_all(ResponseCode::Refused, None);
    };
    let Some((key, domain)) = ctx.snapshot.domain_entry(name.as_str()) else {
        // Below a managed name (its own zone apex here) this server is the authority: the
        // name does not exist (NXDOMAIN), or exists only as the parent of a managed name
        // (NODATA). Either way with the zone's SOA, so resolvers cache the answer.
        let Some((apex, spec)) = ctx.snapshot.enclosing_domain(&name) else {
            return Filled::NotManaged(name);
        };
        response.metadata.authoritative = true;
        let Ok(apex) = Name::from_ascii(format!("{apex}.")) else {
            return Filled::same_for_all(ResponseCode::ServFail, None);
        };
        response.add_authority(soa(&apex, spec.ttl, ctx.snapshot.revision(), ctx.snapshot.policy()));
        let code = if ctx.snapshot.has_managed_below(&name) {
            ResponseCode::NoError
        } else {
            ResponseCode::NXDomain
        };
        return Filled::same_for_all(code, Some(spec.ttl));
    };
    response.metadata.authoritative = true;
    if domain.cname.is_some() && !matches!(question.query_type(), RecordType::SOA | RecordType::NS) {
        if matches!(question.query_type(), RecordType::A | RecordType::AAAA) {
            ctx.count(key, &(ctx.classify)(client).0);
        }
        return crate::alias::fill(response, question, client, domain, ctx);
    }
    let ttl = domain.ttl;
    let family = match question.query_type() {
        RecordType::A => Some(Family::V4),
        RecordType::AAAA => Some(Family::V6),
        _ => None,
    };
    let policy = ctx.snapshot.policy();
    match question.query_type() {
        RecordType::SOA => {
            response.add_answer(soa(&qname, ttl, ctx.snapshot.revision(), policy));
            return Filled::same_for_all(ResponseCode::NoError, Some(ttl));
        }
        RecordType::NS => {
            for ns in nameservers(&qname, policy) {
                response.add_answer(Record::from_rdata(qname.clone(), NS_TTL, RData::NS(NS(ns))));
            }
            return Filled::same_for_all(ResponseCode::NoError, Some(NS_TTL.min(ttl)));
        }
        RecordType::ANY => {
            // RFC 8482 §4.2: one synthesised HINFO instead of every record of the name.
            let hinfo = HINFO::new("RFC8482".to_string(), String::new());
            response.add_answer(Record::from_rdata(qname.clone(), ttl, RData::HINFO(hinfo)));
            return Filled::same_for_all(ResponseCode::NoError, Some(ttl));
        }
        _ => {}
    }
    let mut answered = false;
    let mut scope = None;
    if let Some(family) = family {
        let (view, bits) = (ctx.classify)(client);
        scope = Some(bits);
        ctx.count(key, &view);
        if let Some((records, _)) = engine_records(ctx, domain, family, &view, client, &qname) {
            for record in records {
                response.add_answer(record);
                answered = true;
            }
        }
    }
    if !answered {
        // NODATA: the name exists, nothing of this type; the SOA tells how long to remember.
        response.add_authority(soa(&qname, ttl, ctx.snapshot.revision(), policy));
    }
    Filled::Done { code: ResponseCode::NoError, scope, ttl: Some(ttl) }
}

/// One family of a managed `domain` by the engine's step, as `/d` takes it (DNS questions
/// state no app attributes), as address records owned by `owner`, with their TTL; `None` when
/// the engine has no managed answer. The general path and the alias chase both answer this way.
pub(crate) fn engine_records<H: NodeHealth, C>(
    ctx: &Context<'_, H, C>,
    domain: &httpdns_core::model::DomainSpec,
    family: Family,
    view: &ClientView,
    client: IpAddr,
    owner: &Name,
) -> Option<(Vec<Record>, u32)> {
    let Found::Managed(a) = httpdns_answer::family(
        ctx.snapshot,
        ctx.health,
        domain,
        family,
        view,
        &NO_ATTRS,
        client_seed(client),
    ) else {
        return None;
    };
    let records = a
        .ips
        .into_iter()
        .map(|ip| {
            let rdata = match ip {
                IpAddr::V4(v4) => RData::A(A(v4)),
                IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
            };
            Record::from_rdata(owner.clone(), a.ttl, rdata)
        })
        .collect();
    Some((records, a.ttl))
}

/// `bytes` (the serialised `response`) padded to a multiple of [`PADDING_BLOCK`] with an
/// EDNS Padding option, when the response carries EDNS (only EDNS queries get it: a response
/// may not add an OPT the query lacked, RFC 6891 §7).
fn padded(response: &mut Message, bytes: Vec<u8>) -> Vec<u8> {
    let Some(edns) = response.edns.as_mut() else { return bytes };
    // The option adds its 4-byte header and `pad` zero bytes.
    let pad = (PADDING_BLOCK - (bytes.len() + 4) % PADDING_BLOCK) % PADDING_BLOCK;
    edns.options_mut().insert(EdnsOption::Unknown(u16::from(EdnsCode::Padding), vec![0; pad]));
    response.to_vec().unwrap_or(bytes)
}

/// TTL of NS records: name servers change rarely.
const NS_TTL: u32 = 3600;

/// `label.<apex>`, or the apex itself when that is too long.
fn under(apex: &Name, label: &str) -> Name {
    Name::from_ascii(label).ok().and_then(|l| l.append_domain(apex).ok()).unwrap_or_else(|| apex.clone())
}

fn fqdn(name: &DomainName) -> Option<Name> {
    Name::from_ascii(format!("{name}.")).ok()
}

/// The name servers of a managed name: configured, else `ns.<name>`.
fn nameservers(apex: &Name, policy: &Policy) -> Vec<Name> {
    let configured: Vec<Name> = policy.nameservers.iter().filter_map(fqdn).collect();
    if configured.is_empty() {
        vec![under(apex, "ns")]
    } else {
        configured
    }
}

/// The SOA of a managed name, which is its own zone apex here.
pub(crate) fn soa(apex: &Name, ttl: u32, revision: i64, policy: &Policy) -> Record {
    let mname = nameservers(apex, policy).swap_remove(0);
    let rname = policy.hostmaster.as_ref().and_then(fqdn).unwrap_or_else(|| under(apex, "hostmaster"));
    let soa = SOA::new(mname, rname, revision.clamp(0, i64::from(u32::MAX)) as u32, 3600, 600, 86_400, ttl);
    Record::from_rdata(apex.clone(), ttl, RData::SOA(soa))
}

/// Header flags of a query built by [`build_query_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryFlags {
    /// The EDNS DO bit (RFC 3225): DNSSEC records wanted.
    pub dnssec_ok: bool,
    /// CD: checking disabled.
    pub checking_disabled: bool,
}

/// Builds a query message (for the JSON API and tests).
pub fn build_query(id: u16, name: &str, qtype: RecordType, subnet: Option<(IpAddr, u8)>) -> Option<Vec<u8>> {
    build_query_with(id, name, qtype, subnet, QueryFlags::default())
}

/// [`build_query`] with header flags.
pub fn build_query_with(
    id: u16,
    name: &str,
    qtype: RecordType,
    subnet: Option<(IpAddr, u8)>,
    flags: QueryFlags,
) -> Option<Vec<u8>> {
    let mut m = Message::new(id, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.metadata.checking_disabled = flags.checking_disabled;
    m.add_query(Query::query(Name::from_ascii(name).ok()?, qtype));
    if subnet.is_some() || flags.dnssec_ok {
        let mut edns = Edns::new();
        edns.set_max_payload(MAX_UDP_PAYLOAD);
        edns.set_dnssec_ok(flags.dnssec_ok);
        if let Some((addr, prefix)) = subnet {
            edns.options_mut().insert(EdnsOption::Subnet(ClientSubnet::new(addr, prefix, 0)));
        }
        m.set_edns(edns);
    }
    m.to_vec().ok()
}
