//! [`Engine`]: a question's names, families and client in, explicit per-name and per-family
//! outcomes out, for the HTTP front-ends (`/d`, `/resolve`, `/v2/d`, the account routes).
//!
//! One snapshot per request (managed answers, classification and labels all come from the
//! same [`Published`]), and the names that are not managed here are resolved upstream
//! concurrently, each family of each name at once.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use httpdns_core::schedule::ClientAttrs;
use httpdns_core::snapshot::client_seed;
use httpdns_core::{ClientView, DomainName, Family};
use httpdns_geo::Geo;
use httpdns_live::Published;
use httpdns_upstream::Upstream;
use prometheus::Registry;

use crate::family::{family, FamilyAnswer, Found};
use crate::metrics::AnswerMetrics;
use crate::outcome::{Endpoint, Outcome};
use crate::tally::DomainTally;

/// What a front-end asks.
#[derive(Debug, Clone, Copy)]
pub struct Question<'a> {
    pub names: &'a [DomainName],
    pub v4: bool,
    pub v6: bool,
    /// The client the answer is for (`ip=`/`cip=`, else the connection's).
    pub client: IpAddr,
    /// What the client says of itself (app version, tags), for domains' rules.
    pub attrs: &'a ClientAttrs,
}

/// The attributes a request states: an app version (read leniently, see
/// [`ClientAttrs::parse_version`]) and comma-separated tag lists.
pub fn client_attrs<'a>(app_version: Option<&str>, tags: impl IntoIterator<Item = &'a str>) -> ClientAttrs {
    let mut attrs =
        ClientAttrs { app_version: app_version.and_then(ClientAttrs::parse_version), tags: Vec::new() };
    for list in tags {
        attrs.add_tags(list);
    }
    attrs
}

/// What was found for one name: each family asked for, and the name's outcome (the better of
/// its families').
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameAnswer {
    pub v4: Option<FamilyAnswer>,
    pub v6: Option<FamilyAnswer>,
    pub outcome: Outcome,
    /// The managed domain's TTL, when managed (for empty families that still need one).
    pub domain_ttl: Option<u32>,
}

impl NameAnswer {
    pub fn family(&self, fam: Family) -> Option<&FamilyAnswer> {
        match fam {
            Family::V4 => self.v4.as_ref(),
            Family::V6 => self.v6.as_ref(),
        }
    }

    /// The smallest TTL among the families that have addresses.
    pub fn ttl(&self) -> Option<u32> {
        [&self.v4, &self.v6].into_iter().flatten().filter(|f| !f.ips.is_empty()).map(|f| f.ttl).min()
    }
}

/// The answers of one request.
#[derive(Debug)]
pub struct Answers {
    pub view: ClientView,
    pub names: Vec<NameAnswer>,
    /// The snapshot the answers came from (carrier labels of nodes).
    pub snapshot: Arc<Published>,
}

impl Answers {
    pub fn outcomes(&self) -> Vec<Outcome> {
        self.names.iter().map(|n| n.outcome).collect()
    }

    /// Whether a name that is not managed here could not be resolved upstream.
    pub fn upstream_failed(&self) -> bool {
        self.names.iter().any(|n| n.outcome == Outcome::UpstreamError)
    }

    /// The carrier of a node answered, when it is one of ours.
    pub fn isp_of(&self, ip: IpAddr) -> Option<String> {
        self.snapshot.snapshot.node_by_ip(ip).map(|n| n.spec.isp.to_string())
    }
}

/// The families of unmanaged names that the upstream resolver is to answer, by name index;
/// for an alias, the name to ask instead and the alias's TTL.
type Pending = Vec<(usize, Family, Option<(DomainName, u32)>)>;

/// The answer engine: classification, the snapshot's choice, the upstream resolver, and the
/// counts of what it answered. Shared behind an `Arc` by every front-end.
#[derive(Debug)]
pub struct Engine {
    geo: Arc<Geo>,
    upstream: Arc<Upstream>,
    metrics: AnswerMetrics,
    tally: Arc<DomainTally>,
}

impl Engine {
    /// An engine classifying with `geo`, asking `upstream` for names not managed here,
    /// counting managed names in `tally` (shared with the DNS front-ends) and its series in
    /// `registry`.
    pub fn new(geo: Arc<Geo>, upstream: Arc<Upstream>, tally: Arc<DomainTally>, registry: &Registry) -> Self {
        Self { geo, upstream, metrics: AnswerMetrics::new(registry), tally }
    }

    pub fn geo(&self) -> &Arc<Geo> {
        &self.geo
    }

    pub fn upstream(&self) -> &Arc<Upstream> {
        &self.upstream
    }

    pub fn tally(&self) -> &Arc<DomainTally> {
        &self.tally
    }

    /// Answers `q`: managed names from `published`, the others from the upstream resolver.
    ///
    /// The caller loads the snapshot once per request and authenticates against the same one,
    /// so the account it checked and the answer it gets come from one revision.
    pub async fn answer(&self, published: Arc<Published>, q: Question<'_>) -> Answers {
        let (view, mut names, pending) = self.managed(&published, q);
        // Every upstream question at once: a batch waits for its slowest name, not their sum.
        let lookups = pending.iter().map(|(i, fam, alias)| {
            let name = alias.as_ref().map_or(&q.names[*i], |(n, _)| n);
            self.ask_upstream(name, *fam, q.client)
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
        self.finish(view, names, published)
    }

    /// [`Engine::answer`] without waiting: `None` when a name needs the upstream resolver.
    pub fn answer_local(&self, published: &Arc<Published>, q: Question<'_>) -> Option<Answers> {
        let (view, names, pending) = self.managed(published, q);
        pending.is_empty().then(|| self.finish(view, names, published.clone()))
    }

    /// Counts `answers` (of the question's `names`) under `endpoint`, each managed name in its
    /// domain's figures ([`crate::tally`]), and the time since `started`.
    pub fn count(&self, answers: &Answers, endpoint: Endpoint, names: &[DomainName], started: Instant) {
        for n in &answers.names {
            self.metrics.answer(endpoint, n.outcome);
        }
        let minute = httpdns_core::clock::unix_s() / 60;
        for name in names {
            if let Some((key, _)) = answers.snapshot.snapshot.domain_entry(name.as_str()) {
                self.tally.record(key, endpoint.label(), &answers.view, minute);
            }
        }
        self.metrics.answer_time(endpoint, started.elapsed());
    }

    /// The managed names' answers from the snapshot, and what is left for the upstream.
    fn managed(&self, published: &Published, q: Question<'_>) -> (ClientView, Vec<NameAnswer>, Pending) {
        let snapshot = &published.snapshot;
        let view = httpdns_geo::classify(snapshot, &self.geo, q.client);
        let seed = client_seed(q.client);
        let families = [(Family::V4, q.v4), (Family::V6, q.v6)];
        let upstream = self.upstream.is_configured();
        let mut names = Vec::with_capacity(q.names.len());
        let mut pending = Vec::new();
        for (i, name) in q.names.iter().enumerate() {
            // One lookup of the name for both families.
            let domain = snapshot.domain(name);
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
                let found = match domain {
                    Some(domain) => {
                        match family(snapshot, &published.health, domain, fam, &view, q.attrs, seed) {
                            Found::Managed(f) => f,
                            Found::Upstream(alias, ttl) => {
                                if upstream {
                                    pending.push((i, fam, Some((alias, ttl))));
                                }
                                FamilyAnswer::empty(Outcome::UpstreamError)
                            }
                            Found::Loop => FamilyAnswer::empty(Outcome::NoHealthyNode),
                        }
                    }
                    None => {
                        if upstream {
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
    fn finish(&self, view: ClientView, mut names: Vec<NameAnswer>, snapshot: Arc<Published>) -> Answers {
        self.metrics.client_answer(&view);
        for n in &mut names {
            n.outcome = [&n.v4, &n.v6]
                .into_iter()
                .flatten()
                .map(|f| f.outcome)
                .reduce(Outcome::better)
                .unwrap_or(Outcome::NotManaged);
        }
        Answers { view, names, snapshot }
    }

    /// One family of a name that is not managed here, from the upstream resolver.
    async fn ask_upstream(&self, name: &DomainName, fam: Family, client: IpAddr) -> FamilyAnswer {
        let qtype = match fam {
            Family::V4 => hickory_proto::rr::RecordType::A,
            Family::V6 => hickory_proto::rr::RecordType::AAAA,
        };
        match self.upstream.lookup(name, qtype, client).await {
            Ok(l) => FamilyAnswer {
                ips: l.ips,
                ttl: l.ttl,
                outcome: if l.stale { Outcome::UpstreamStale } else { Outcome::Upstream },
            },
            Err(_) => FamilyAnswer::empty(Outcome::UpstreamError),
        }
    }
}
