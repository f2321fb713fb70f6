//! The one answer engine of the HTTP front-ends: a request's names, families and client in,
//! explicit per-name and per-family outcomes out. `/d`, `/resolve`, the Alibaba account routes
//! and `/v2/d` are formatters around it.
//!
//! One snapshot load per request (managed answers, classification and labels all come from
//! the same snapshot), and the names that are not managed here are resolved upstream
//! concurrently, each family of each name at once.

use std::net::IpAddr;
use std::sync::Arc;

use httpdns_core::model::DomainSpec;
use httpdns_core::schedule::ClientAttrs;
use httpdns_core::snapshot::client_seed;
use httpdns_core::{ClientView, DomainName, Family, Snapshot};

use crate::metrics::{Endpoint, Outcome};
use crate::state::AppState;
use httpdns_catalog::Published;

/// What a front-end asks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Question<'a> {
    pub(crate) names: &'a [DomainName],
    pub v4: bool,
    pub v6: bool,
    /// The client the answer is for (`ip=`/`cip=`, else the connection's).
    pub(crate) client: IpAddr,
    /// What the client says of itself (app version, tags), for domains' rules.
    pub(crate) attrs: &'a ClientAttrs,
}

/// The attributes a request states: an app version (read leniently, see
/// [`ClientAttrs::parse_version`]) and comma-separated tag lists.
pub(crate) fn client_attrs<'a>(
    app_version: Option<&str>,
    tags: impl IntoIterator<Item = &'a str>,
) -> ClientAttrs {
    let mut attrs =
        ClientAttrs { app_version: app_version.and_then(ClientAttrs::parse_version), tags: Vec::new() };
    for list in tags {
        attrs.add_tags(list);
    }
    attrs
}

/// Largest number of aliases followed inside the snapshot (`cname` to a managed name that is
/// itself an alias), so a loop an operator made ends.
const MAX_ALIASES: usize = 8;

/// Where a name's answer comes from once aliases are followed: a domain of the snapshot, or a
/// name to ask upstream, each with the smallest TTL of the aliases that led there (which caps
/// the answer's).
enum Target<'s> {
    Managed(&'s DomainSpec, u32),
    Upstream(DomainName, u32),
    /// An alias loop, or longer than [`MAX_ALIASES`].
    Loop,
}

/// Follows `domain`'s aliases inside `snapshot`.
fn target<'s>(snapshot: &'s Snapshot, mut domain: &'s DomainSpec) -> Target<'s> {
    let mut ttl = u32::MAX;
    for _ in 0..MAX_ALIASES {
        let Some(alias) = &domain.cname else { return Target::Managed(domain, ttl) };
        ttl = ttl.min(domain.ttl);
        match snapshot.domain(alias) {
            Some(next) => domain = next,
            None => return Target::Upstream(alias.clone(), ttl),
        }
    }
    Target::Loop
}

/// The addresses of one family of one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FamilyAnswer {
    pub(crate) ips: Vec<IpAddr>,
    pub(crate) ttl: u32,
    pub(crate) outcome: Outcome,
}

impl FamilyAnswer {
    fn empty(outcome: Outcome) -> Self {
        Self { ips: Vec::new(), ttl: 0, outcome }
    }
}

/// What was found for one name: each family asked for, and the name's outcome (the better of
/// its families').
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NameAnswer {
    pub v4: Option<FamilyAnswer>,
    pub v6: Option<FamilyAnswer>,
    pub(crate) outcome: Outcome,
    /// The managed domain's TTL, when managed (for empty families that still need one).
    pub(crate) domain_ttl: Option<u32>,
}

impl NameAnswer {
    pub(crate) fn family(&self, fam: Family) -> Option<&FamilyAnswer> {
        match fam {
            Family::V4 => self.v4.as_ref(),
            Family::V6 => self.v6.as_ref(),
        }
    }

    /// The smallest TTL among the families that have addresses.
    pub(crate) fn ttl(&self) -> Option<u32> {
        [&self.v4, &self.v6].into_iter().flatten().filter(|f| !f.ips.is_empty()).map(|f| f.ttl).min()
    }
}

/// The answers of one request.
pub(crate) struct Answers {
    pub(crate) view: ClientView,
    pub(crate) names: Vec<NameAnswer>,
    /// The snapshot the answers came from (carrier labels of nodes).
    pub(crate) snapshot: Arc<Published>,
}

impl Answers {
    pub(crate) fn outcomes(&self) -> Vec<Outcome> {
        self.names.iter().map(|n| n.outcome).collect()
    }

    /// The `X-Httpdns-Status` value of these answers.
    pub(crate) fn status_header(&self) -> http::HeaderValue {
        match self.names.as_slice() {
            [one] => http::HeaderValue::from_static(one.outcome.as_str()),
            _ => crate::dnspod::status_header(&self.outcomes()),
        }
    }

    /// The carrier of a node answered, when it is one of ours.
    pub(crate) fn isp_of(&self, ip: IpAddr) -> Option<String> {
        self.snapshot.snapshot.node_by_ip(ip).map(|n| n.spec.isp.to_string())
    }

    /// Counts the answers of `names` (the question's) in the metrics of `endpoint`, and each
    /// managed one in its domain's figures (`httpdns_dns::tally`).
    pub(crate) fn count(
        &self,
        app: &AppState,
        endpoint: Endpoint,
        names: &[DomainName],
        started: std::time::Instant,
    ) {
        for n in &self.names {
            app.metrics.answer(endpoint, n.outcome);
        }
        let minute = httpdns_core::clock::unix_s() / 60;
        for name in names {
            if let Some((key, _)) = self.snapshot.snapshot.domain_entry(name.as_str()) {
                app.metrics.dns.domains.record(key, endpoint.label(), &self.view, minute);
            }
        }
        app.metrics.answer_time(endpoint, started.elapsed());
    }
}

/// The better of two outcomes (the order of [`Outcome::ALL`]).
pub(crate) fn better(a: Outcome, b: Outcome) -> Outcome {
    if a.rank() <= b.rank() {
        a
    } else {
        b
    }
}

/// Answers `q`: managed names from `snapshot`, the others from the upstream resolver.
///
/// The caller loads the snapshot once per request and authenticates against the same one, so
/// the account it checked and the answer it gets come from one revision.
pub(crate) async fn answer(app: &AppState, snapshot: Arc<Published>, q: Question<'_>) -> Answers {
    let (view, mut names, pending) = managed(app, &snapshot, q);
    // Every upstream question at once: a batch waits for its slowest name, not their sum.
    let lookups = pending.iter().map(|(i, fam, alias)| {
        let name = alias.as_ref().map_or(&q.names[*i], |(n, _)| n);
        upstream(app, name, *fam, q.client)
    });
    let found = futures_util::future::join_all(lookups).await;
    for ((i, fam, alias), mut f) in pending.into_iter().zip(found) {
        if let Some((_, ttl)) = alias {
            // The alias's own TTL bounds how long its target's addresses may be kept.
            f.ttl = f.ttl.min(ttl);
        }
        match fam {
            Family::V4 => names[i].v4 = Some(f),
            Family::V6 => names[i].v6 = Some(f),
        }
    }
    finish(app, view, names, snapshot)
}

/// [`answer`] without waiting: `None` when a name needs the upstream resolver.
pub(crate) fn answer_local(app: &AppState, snapshot: &Arc<Published>, q: Question<'_>) -> Option<Answers> {
    let (view, names, pending) = managed(app, snapshot, q);
    pending.is_empty().then(|| finish(app, view, names, snapshot.clone()))
}

/// The families of unmanaged names that the upstream resolver is to answer, by name index;
/// for an alias, the name to ask instead and the alias's TTL.
type Pending = Vec<(usize, Family, Option<(DomainName, u32)>)>;

/// The managed names' answers from the snapshot, and what is left for the upstream.
fn managed(app: &AppState, snapshot: &Published, q: Question<'_>) -> (ClientView, Vec<NameAnswer>, Pending) {
    let view = httpdns_geo::classify(snapshot, &app.geo, q.client);
    let seed = client_seed(q.client);
    let families = [(Family::V4, q.v4), (Family::V6, q.v6)];
    let mut names = Vec::with_capacity(q.names.len());
    let mut pending = Vec::new();
    for (i, name) in q.names.iter().enumerate() {
        // One lookup of the name for both families.
        let domain = snapshot.snapshot.domain(name);
        let mut answer = NameAnswer {
            v4: None,
            v6: None,
            outcome: Outcome::NotManaged,
            domain_ttl: domain.map(|d| d.ttl),
        };
        for (fam, wanted) in families {
            if !wanted {
                continue;
            }
            let resolve = |domain: &DomainSpec| {
                let a = snapshot.snapshot.resolve_for(domain, fam, &view, q.attrs, seed, &snapshot.health);
                FamilyAnswer { ips: a.ips, ttl: a.ttl, outcome: Outcome::from_status(a.status) }
            };
            let found = match domain {
                Some(domain) if domain.cname.is_none() => resolve(domain),
                Some(domain) => match target(&snapshot.snapshot, domain) {
                    Target::Managed(d, ttl) => {
                        let mut f = resolve(d);
                        f.ttl = f.ttl.min(ttl);
                        f
                    }
                    Target::Upstream(alias, ttl) => {
                        if app.upstream.is_configured() {
                            pending.push((i, fam, Some((alias, ttl))));
                        }
                        FamilyAnswer::empty(Outcome::UpstreamError)
                    }
                    Target::Loop => FamilyAnswer::empty(Outcome::NoHealthyNode),
                },
                None => {
                    if app.upstream.is_configured() {
                        pending.push((i, fam, None));
                    }
                    FamilyAnswer::empty(Outcome::NotManaged)
                }
            };
            match fam {
                Family::V4 => answer.v4 = Some(found),
                Family::V6 => answer.v6 = Some(found),
            }
        }
        names.push(answer);
    }
    (view, names, pending)
}

/// Each name's outcome from its families', and the client counted.
fn finish(app: &AppState, view: ClientView, mut names: Vec<NameAnswer>, snapshot: Arc<Published>) -> Answers {
    app.metrics.client_answer(&view);
    for n in &mut names {
        n.outcome = [&n.v4, &n.v6]
            .into_iter()
            .flatten()
            .map(|f| f.outcome)
            .reduce(better)
            .unwrap_or(Outcome::NotManaged);
    }
    Answers { view, names, snapshot }
}

/// One family of a name that is not managed here, from the upstream resolver.
async fn upstream(app: &AppState, name: &DomainName, fam: Family, client: IpAddr) -> FamilyAnswer {
    let qtype = match fam {
        Family::V4 => hickory_proto::rr::RecordType::A,
        Family::V6 => hickory_proto::rr::RecordType::AAAA,
    };
    match app.upstream.lookup(name, qtype, client).await {
        Ok(l) => FamilyAnswer {
            ips: l.ips,
            ttl: l.ttl,
            outcome: if l.stale { Outcome::UpstreamStale } else { Outcome::Upstream },
        },
        Err(_) => FamilyAnswer::empty(Outcome::UpstreamError),
    }
}
