//! Resolution of names that are not managed here, through upstream DNS servers.
//!
//! * EDNS Client Subnet toward the upstream from the client's address (/24 for IPv4, /56 for
//!   IPv6), never for private addresses, so CDNs behind those names still see the region.
//! * A cache keyed by name, type and that subnet, honouring TTLs within configured clamps.
//! * One upstream query for many concurrent askers of the same key.
//! * Refresh ahead: an entry asked for after 75% of its TTL is refreshed in the background.
//! * Serve-stale (RFC 8767): when every upstream fails, an expired entry younger than the stale
//!   window is answered with a 30 s TTL.
//! * Negative caching of NXDOMAIN and NODATA.
//! * Answers pass the same address filter as managed ones.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, ResponseCode};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};
use hickory_proto::rr::{Name, RData, RecordType};
use httpdns_core::ip::{classify, IpClass};
use httpdns_core::DomainName;
use httpdns_flight::SingleFlight;

/// The UDP payload this server advertises and uses at most (the DNS flag day 2020 value):
/// what upstream queries offer, and what `httpdns_dns` answers with.
pub const MAX_UDP_PAYLOAD: u16 = 1232;

/// TTL given to a stale answer (RFC 8767 recommends 30 s).
pub const STALE_TTL: u32 = 30;

/// Settings of upstream resolution.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    pub servers: Vec<SocketAddr>,
    /// Per server and attempt.
    pub timeout: Duration,
    pub min_ttl: u32,
    pub max_ttl: u32,
    /// TTL of NXDOMAIN and NODATA answers without an SOA.
    pub negative_ttl: u32,
    /// How long after expiry an entry may still be served when upstreams fail.
    pub stale_for: Duration,
    /// Serve private and loopback addresses found upstream (intranets, tests).
    pub allow_private: bool,
    /// Entries kept at most.
    pub max_entries: usize,
    /// Distinct queries in flight at most; beyond it new names fail at once (serve-stale
    /// still answers), so a flood of random names cannot hold unbounded tasks and sockets.
    pub max_in_flight: usize,
    /// Lookups waiting for an upstream answer at most, joined flights included: a flood of
    /// one name over UDP (a task per packet) then fails at once beyond it instead of holding
    /// a task per packet for the whole wait.
    pub max_waiting: usize,
}

impl UpstreamConfig {
    pub fn new(servers: Vec<SocketAddr>) -> Self {
        Self {
            servers,
            timeout: Duration::from_secs(2),
            min_ttl: 10,
            max_ttl: 86_400,
            negative_ttl: 60,
            stale_for: Duration::from_secs(86_400),
            allow_private: false,
            max_entries: 100_000,
            max_in_flight: 4096,
            max_waiting: 16_384,
        }
    }
}

/// An upstream answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    pub ips: Vec<IpAddr>,
    /// Remaining TTL.
    pub ttl: u32,
    /// TTL as the upstream gave it (clamped).
    pub origin_ttl: u32,
    pub rcode: ResponseCode,
    /// Served from an expired entry because upstreams failed.
    pub stale: bool,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    #[error("no upstream servers configured")]
    NoServers,
    #[error("every upstream failed: {0}")]
    Failed(String),
    /// Every upstream failed; the last one asked gave no answer (shared by a flight's waiters).
    #[error("every upstream failed: {server}: {source}")]
    Exchange {
        server: SocketAddr,
        #[source]
        source: Arc<httpdns_exchange::ExchangeError>,
    },
    #[error("too many upstream queries in flight")]
    Busy,
}

/// Equal when they say the same: the exchange's error has no equality of its own.
impl PartialEq for UpstreamError {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Failed(a), Self::Failed(b)) => a == b,
            (Self::Exchange { server: a, source: x }, Self::Exchange { server: b, source: y }) => {
                a == b && x.to_string() == y.to_string()
            }
            (Self::NoServers, Self::NoServers) | (Self::Busy, Self::Busy) => true,
            _ => false,
        }
    }
}

impl Eq for UpstreamError {}

/// One lookup counted in [`Upstream::waiting`] while it lives; `count` includes it.
struct Waiting<'a> {
    counter: &'a std::sync::atomic::AtomicUsize,
    count: usize,
}

impl<'a> Waiting<'a> {
    fn enter(counter: &'a std::sync::atomic::AtomicUsize) -> Self {
        let count = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        Self { counter, count }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    name: DomainName,
    qtype: u16,
    subnet: Option<(IpAddr, u8)>,
}

#[derive(Debug)]
struct Entry {
    ips: Vec<IpAddr>,
    rcode: ResponseCode,
    ttl: u32,
    fetched: Instant,
}

impl Entry {
    fn ttl(&self) -> Duration {
        Duration::from_secs(u64::from(self.ttl))
    }
}

type Fetched = Result<Arc<Entry>, UpstreamError>;

/// The upstream resolver with its cache; share it behind an `Arc`.
pub struct Upstream {
    cfg: UpstreamConfig,
    /// Answers by name, type and subnet, kept until they are past serving stale; bounded in
    /// entries, evicting the least useful (`quick_cache`'s CLOCK-Pro).
    cache: quick_cache::sync::Cache<Key, Arc<Entry>>,
    /// Queries in flight. Each runs on a task of its own, so a client that hangs up while its
    /// query is out neither cancels it nor leaves the others waiting for it.
    inflight: SingleFlight<Key, Fetched>,
    queries: std::sync::atomic::AtomicU64,
    /// Lookups waiting for a flight now (see [`UpstreamConfig::max_waiting`]).
    waiting: std::sync::atomic::AtomicUsize,
    /// Lookups by result, in the order of [`CACHE_RESULTS`].
    results: [std::sync::atomic::AtomicU64; 5],
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("servers", &self.cfg.servers)
            .field("cached", &self.cache.len())
            .field("in_flight", &self.inflight.len())
            .finish()
    }
}

/// How a lookup was answered: fresh from the cache, fetched by it, fetched by another lookup
/// it waited for, an expired answer after the upstreams failed, or an error.
pub const CACHE_RESULTS: [&str; 5] = ["hit", "miss", "coalesced", "stale", "error"];
const HIT: usize = 0;
const MISS: usize = 1;
const COALESCED: usize = 2;
const STALE: usize = 3;
const ERROR: usize = 4;

/// The subnet sent to upstreams for a client: /24 or /56 of a public address, none otherwise.
pub fn client_subnet(client: IpAddr) -> Option<(IpAddr, u8)> {
    if classify(client) != IpClass::Public {
        return None;
    }
    Some(match client.to_canonical() {
        IpAddr::V4(a) => (IpAddr::V4(std::net::Ipv4Addr::from_bits(a.to_bits() & 0xffff_ff00)), 24),
        IpAddr::V6(a) => (IpAddr::V6(std::net::Ipv6Addr::from_bits(a.to_bits() & !((1u128 << 72) - 1))), 56),
    })
}

impl Upstream {
    pub fn new(cfg: UpstreamConfig) -> Self {
        Self {
            cache: quick_cache::sync::Cache::new(cfg.max_entries.max(16)),
            cfg,
            inflight: SingleFlight::new(),
            queries: 0.into(),
            waiting: 0.into(),
            results: Default::default(),
        }
    }

    pub fn is_configured(&self) -> bool {
        !self.cfg.servers.is_empty()
    }

    /// Lookups so far by result, labelled as in [`CACHE_RESULTS`].
    pub fn cache_counts(&self) -> [(&'static str, u64); 5] {
        std::array::from_fn(|i| {
            (CACHE_RESULTS[i], self.results[i].load(std::sync::atomic::Ordering::Relaxed))
        })
    }

    fn count(&self, result: usize) {
        self.results[result].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Queries sent upstream so far.
    pub fn queries_sent(&self) -> u64 {
        self.queries.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Upstream queries in flight now.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// The longest a lookup waits for its query: every server, over UDP then TCP, twice over
    /// (the query bounds itself; this bound is the safety net, with room for a busy machine).
    fn wait_bound(&self) -> Duration {
        self.cfg.timeout * 4 * self.cfg.servers.len().max(1) as u32 + Duration::from_secs(1)
    }

    /// The addresses cached for `name` and `client`'s subnet, A and AAAA, fresh or within the
    /// stale window; never queries. What the upstreams said for that name and subnet, for
    /// judging another resolver's answer (the LocalDNS map).
    pub fn peek(&self, name: &DomainName, client: IpAddr) -> Vec<IpAddr> {
        let now = Instant::now();
        let subnet = client_subnet(client);
        [RecordType::A, RecordType::AAAA]
            .into_iter()
            .filter_map(|t| self.cache.get(&Key { name: name.clone(), qtype: u16::from(t), subnet }))
            .filter(|e| now.duration_since(e.fetched) < e.ttl() + self.cfg.stale_for)
            .flat_map(|e| e.ips.clone())
            .collect()
    }

    /// Resolves `name` (`A` or `AAAA`) for `client`. Bounded in time by
    /// [`UpstreamConfig::timeout`] per server and transport, whoever started the query.
    pub async fn lookup(
        self: &Arc<Self>,
        name: &DomainName,
        qtype: RecordType,
        client: IpAddr,
    ) -> Result<Lookup, UpstreamError> {
        if self.cfg.servers.is_empty() {
            return Err(UpstreamError::NoServers);
        }
        let key = Key { name: name.clone(), qtype: u16::from(qtype), subnet: client_subnet(client) };
        let now = Instant::now();
        let cached = self.cache.get(&key);
        if let Some(e) = &cached {
            let age = now.duration_since(e.fetched);
            let ttl = e.ttl();
            if age < ttl {
                // Refresh ahead, so popular names never expire for their askers.
                if age * 4 >= ttl * 3 {
                    let (me, key) = (self.clone(), key.clone());
                    self.inflight.spawn(key.clone(), move || me.fetch_and_keep(key));
                }
                self.count(HIT);
                return Ok(lookup_of(e, ttl.saturating_sub(age).as_secs() as u32, false));
            }
        }
        let waiting = Waiting::enter(&self.waiting);
        let result = if self.inflight.len() >= self.cfg.max_in_flight && !self.inflight.contains(&key) {
            // A flood of distinct names: fail fast (stale answers still serve) rather than
            // hold a task and a socket per name.
            Err(UpstreamError::Busy)
        } else if waiting.count > self.cfg.max_waiting {
            // A flood of one name: joining its flight is cheap, but each joiner is a task
            // held until the answer; beyond the bound, fail fast as well.
            Err(UpstreamError::Busy)
        } else {
            let me = self.clone();
            let fetch_key = key.clone();
            match self.inflight.run(key, self.wait_bound(), move || me.fetch_and_keep(fetch_key)).await {
                Ok(shared) => shared.value.map(|e| (e, shared.joined)),
                Err(e) => Err(UpstreamError::Failed(e.to_string())),
            }
        };
        match result {
            Ok((e, joined)) => {
                self.count(if joined { COALESCED } else { MISS });
                Ok(lookup_of(&e, e.ttl, false))
            }
            Err(err) => match cached {
                Some(e) if now.duration_since(e.fetched) < e.ttl() + self.cfg.stale_for => {
                    self.count(STALE);
                    Ok(lookup_of(&e, STALE_TTL, true))
                }
                _ => {
                    self.count(ERROR);
                    Err(err)
                }
            },
        }
    }

    /// Queries the upstreams and keeps a successful answer (the work of one flight).
    /// (See [`Waiting`] for the count of lookups waiting on flights.)
    async fn fetch_and_keep(self: Arc<Self>, key: Key) -> Fetched {
        let entry = Arc::new(self.fetch(&key).await?);
        self.cache.insert(key, entry.clone());
        Ok(entry)
    }

    async fn fetch(&self, key: &Key) -> Result<Entry, UpstreamError> {
        let name =
            Name::from_ascii(format!("{}.", key.name)).map_err(|e| UpstreamError::Failed(e.to_string()))?;
        let qtype = RecordType::from(key.qtype);
        let mut last = UpstreamError::Failed(String::new());
        for server in &self.cfg.servers {
            self.queries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match self.exchange(*server, &name, qtype, key.subnet).await {
                Ok(m)
                    if matches!(m.metadata.response_code, ResponseCode::NoError | ResponseCode::NXDomain) =>
                {
                    return Ok(self.entry_of(&m, qtype));
                }
                Ok(m) => last = UpstreamError::Failed(format!("{server}: {}", m.metadata.response_code)),
                Err(e) => last = UpstreamError::Exchange { server: *server, source: Arc::new(e) },
            }
        }
        Err(last)
    }

    fn entry_of(&self, m: &Message, qtype: RecordType) -> Entry {
        let mut ips = Vec::new();
        let mut ttl = u32::MAX;
        for r in &m.answers {
            let ip = match (&r.data, qtype) {
                (RData::A(a), RecordType::A) => IpAddr::V4(a.0),
                (RData::AAAA(a), RecordType::AAAA) => IpAddr::V6(a.0),
                _ => continue,
            };
            ttl = ttl.min(r.ttl);
            let ok = match classify(ip) {
                IpClass::Public => true,
                IpClass::Private => self.cfg.allow_private,
                IpClass::Invalid => false,
            };
            if ok && !ips.contains(&ip) {
                ips.push(ip);
            }
        }
        if ips.is_empty() {
            // Negative: the SOA's minimum when given (RFC 2308), else the configured TTL.
            ttl = m
                .authorities
                .iter()
                .find_map(|r| match &r.data {
                    RData::SOA(s) => Some(s.minimum.min(r.ttl)),
                    _ => None,
                })
                .unwrap_or(self.cfg.negative_ttl);
        }
        Entry {
            ips,
            rcode: m.metadata.response_code,
            ttl: ttl.clamp(self.cfg.min_ttl, self.cfg.max_ttl),
            fetched: Instant::now(),
        }
    }

    async fn exchange(
        &self,
        server: SocketAddr,
        name: &Name,
        qtype: RecordType,
        subnet: Option<(IpAddr, u8)>,
    ) -> Result<Message, httpdns_exchange::ExchangeError> {
        let mut edns = Edns::new();
        edns.set_max_payload(MAX_UDP_PAYLOAD);
        if let Some((addr, prefix)) = subnet {
            edns.options_mut().insert(EdnsOption::Subnet(ClientSubnet::new(addr, prefix, 0)));
        }
        let q = httpdns_exchange::Question { name: name.clone(), qtype, edns: Some(edns) };
        httpdns_exchange::exchange(server, &q, self.cfg.timeout).await
    }
}

fn lookup_of(e: &Entry, ttl: u32, stale: bool) -> Lookup {
    Lookup { ips: e.ips.clone(), ttl: ttl.max(1), origin_ttl: e.ttl, rcode: e.rcode, stale }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_subnets() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(client_subnet(ip("1.2.3.4")), Some((ip("1.2.3.0"), 24)));
        assert_eq!(client_subnet(ip("2408:8000:1234:5678::1")), Some((ip("2408:8000:1234:5600::"), 56)));
        assert_eq!(client_subnet(ip("10.1.2.3")), None);
        assert_eq!(client_subnet(ip("127.0.0.1")), None);
    }
}

#[cfg(test)]
mod flight_tests {
    use super::*;
    use hickory_proto::op::{MessageType, OpCode};
    use tokio::net::UdpSocket;

    /// An upstream that answers every A question with 9.9.9.1 after `delay`.
    async fn slow_upstream(delay: Duration) -> SocketAddr {
        use hickory_proto::rr::{rdata::A, Record};
        let sock = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let addr = sock.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let Ok((n, from)) = sock.recv_from(&mut buf).await else { return };
                let Ok(q) = Message::from_vec(&buf[..n]) else { continue };
                let sock = sock.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let mut r = Message::new(q.metadata.id, MessageType::Response, OpCode::Query);
                    let question = q.queries[0].clone();
                    r.add_query(question.clone());
                    r.add_answer(Record::from_rdata(
                        question.name().clone(),
                        60,
                        RData::A(A([9, 9, 9, 1].into())),
                    ));
                    let _ = sock.send_to(&r.to_vec().unwrap(), from).await;
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn many_concurrent_askers_share_one_query() {
        let up = slow_upstream(Duration::from_millis(200)).await;
        let upstream = Arc::new(Upstream::new(UpstreamConfig {
            timeout: Duration::from_millis(300),
            ..UpstreamConfig::new(vec![up])
        }));
        let name = DomainName::parse("c.partner.example").unwrap();
        let client: IpAddr = "1.0.2.9".parse().unwrap();
        let tasks: Vec<_> = (0..200)
            .map(|_| {
                let (u, n) = (upstream.clone(), name.clone());
                tokio::spawn(async move { u.lookup(&n, RecordType::A, client).await })
            })
            .collect();
        for t in tasks {
            let got = t.await.unwrap();
            assert_eq!(got.map(|l| l.ips), Ok(vec!["9.9.9.1".parse::<IpAddr>().unwrap()]));
        }
        assert_eq!(upstream.queries_sent(), 1);
    }

    /// A flood of one name: beyond `max_waiting` askers fail at once instead of each holding
    /// a task for the whole wait; the ones within it share the single query.
    #[tokio::test]
    async fn waiting_askers_are_bounded() {
        let up = slow_upstream(Duration::from_millis(300)).await;
        let upstream = Arc::new(Upstream::new(UpstreamConfig {
            timeout: Duration::from_millis(500),
            max_waiting: 50,
            ..UpstreamConfig::new(vec![up])
        }));
        let name = DomainName::parse("flood.partner.example").unwrap();
        let client: IpAddr = "1.0.2.9".parse().unwrap();
        let tasks: Vec<_> = (0..200)
            .map(|_| {
                let (u, n) = (upstream.clone(), name.clone());
                tokio::spawn(async move { u.lookup(&n, RecordType::A, client).await })
            })
            .collect();
        let (mut answered, mut busy) = (0, 0);
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => answered += 1,
                Err(UpstreamError::Busy) => busy += 1,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!((answered, busy), (50, 150));
        assert_eq!(upstream.queries_sent(), 1);
        assert_eq!(upstream.waiting.load(std::sync::atomic::Ordering::Relaxed), 0, "every guard released");
        // Once answered, the name is a cache hit for everyone.
        assert!(upstream.lookup(&name, RecordType::A, client).await.is_ok());
    }
}
