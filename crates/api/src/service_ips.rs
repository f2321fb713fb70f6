//! The service-IP lists clients bootstrap from (answered by `crate::httpdns::bootstrap`:
//! Alibaba's `/{account}/ss` and `/ss`, Tencent's `/conf`): the replicas' public entry points.
//!
//! Every replica that announces public entry points (`HTTPDNS_PUBLIC_ADDRS`) rewrites its row
//! in the store every [`HEARTBEAT`]; every replica reads all rows as often and keeps the ones
//! that are alive. A row is alive while its `seen_at` keeps changing, as observed by the
//! reader's own clock, so replicas with skewed clocks neither vanish nor linger: a replica
//! that stops (crash, partition, kill -9) leaves the lists within [`EXPIRE`] plus one read, and
//! one that stops cleanly deletes its row at once.
//!
//! The handlers read the kept list from memory ([`ServiceIps::alive`]); they never wait for
//! the store.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use httpdns_store::replicas::ReplicaRow;
use httpdns_store::Store;
use tokio_util::sync::CancellationToken;

/// How often a replica writes its row and reads the others'.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// A row unchanged for this long is a replica that is gone.
pub const EXPIRE: Duration = Duration::from_secs(6);

/// A public entry point: an address, and a port unless it is the scheme's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ServiceAddr {
    pub ip: IpAddr,
    /// `None`: the default port of the scheme the client uses (80 or 443).
    pub port: Option<u16>,
}

/// Why an announced address does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an address: write ip, ip:port or [ipv6]:port")]
pub struct BadServiceAddr(String);

impl FromStr for ServiceAddr {
    type Err = BadServiceAddr;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let bad = || BadServiceAddr(s.to_owned());
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Self { ip: ip.to_canonical(), port: None });
        }
        if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            let ip = inner.parse::<std::net::Ipv6Addr>().map_err(|_| bad())?;
            return Ok(Self { ip: IpAddr::V6(ip), port: None });
        }
        let sa = s.parse::<SocketAddr>().map_err(|_| bad())?;
        if sa.port() == 0 {
            return Err(bad());
        }
        Ok(Self { ip: sa.ip().to_canonical(), port: Some(sa.port()) })
    }
}

impl fmt::Display for ServiceAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            None => write!(f, "{}", self.ip),
            Some(p) => write!(f, "{}", SocketAddr::new(self.ip, p)),
        }
    }
}

/// The replicas' announced addresses, kept alive by the heartbeat loop.
#[derive(Debug)]
pub struct ServiceIps {
    id: String,
    own: Vec<ServiceAddr>,
    /// Every alive replica's addresses (this one's first), deduplicated.
    alive: ArcSwap<Vec<ServiceAddr>>,
    /// Per other replica: what its row looked like when last read.
    seen: Mutex<HashMap<String, Seen>>,
    /// The vendors' switches these answers carry, read from the store with the heartbeat.
    switches: crate::vendor_switches::Board,
}

/// One other replica's row, as this replica has read it.
#[derive(Debug, Clone, Copy)]
struct Seen {
    seen_at: i64,
    /// When it was first read with this `seen_at`.
    since: Instant,
    /// Read to change (or fresh by the writer's clock at first sight); a row stale at first
    /// sight is not listed until it changes.
    changing: bool,
}

/// A row read unchanged for this long, by this replica's own clock, belongs to a replica that
/// is gone: it is deleted (no writer's clock is trusted for it, so a replica whose clock is
/// far off neither deletes the others' rows nor loses its own).
pub const FORGET: Duration = Duration::from_secs(24 * 3600);

impl ServiceIps {
    /// This replica's announcer; `own` may be empty (it then only lists the others).
    pub fn new(own: Vec<ServiceAddr>) -> Self {
        let id = httpdns_auth::instance_id();
        Self {
            id,
            alive: ArcSwap::from_pointee(own.clone()),
            own,
            seen: Mutex::new(HashMap::new()),
            switches: Default::default(),
        }
    }

    /// The vendors' switches `/ss` and `/conf` carry.
    pub fn switches(&self) -> &crate::vendor_switches::Board {
        &self.switches
    }

    /// The addresses every alive replica announces.
    pub fn alive(&self) -> Arc<Vec<ServiceAddr>> {
        self.alive.load_full()
    }

    /// Folds one read of the rows into the alive list, at local time `now` with the wall
    /// clock at `now_ms`. Returns the rows to forget, as `(id, seen_at)`.
    fn observe(&self, rows: Vec<ReplicaRow>, now: Instant, now_ms: i64) -> Vec<(String, i64)> {
        let mut seen = self.seen.lock();
        let mut list = self.own.clone();
        let mut present = Vec::with_capacity(rows.len());
        let mut forget = Vec::new();
        for row in rows {
            if row.id == self.id {
                continue;
            }
            present.push(row.id.clone());
            let fresh = Seen { seen_at: row.seen_at, since: now, changing: true };
            let entry = match seen.get(&row.id) {
                Some(s) if s.seen_at == row.seen_at => *s,
                Some(_) => fresh,
                // First sight: the writer's clock is all there is to go by.
                None => Seen {
                    changing: (now_ms - row.seen_at).unsigned_abs() <= EXPIRE.as_millis() as u64,
                    ..fresh
                },
            };
            seen.insert(row.id.clone(), entry);
            let unchanged_for = now.saturating_duration_since(entry.since);
            if unchanged_for > FORGET {
                forget.push((row.id.clone(), row.seen_at));
            }
            if !entry.changing || unchanged_for > EXPIRE {
                continue;
            }
            for a in row.addrs.iter().filter_map(|a| a.parse::<ServiceAddr>().ok()) {
                if !list.contains(&a) {
                    list.push(a);
                }
            }
        }
        seen.retain(|id, _| present.contains(id));
        self.alive.store(Arc::new(list));
        forget
    }

    /// Writes this replica's row and reads the others' every [`HEARTBEAT`] until `shutdown`,
    /// then deletes the row. A store that fails keeps the last list: during a database outage
    /// no replica can announce itself, and the list from before is the best knowledge there is.
    pub async fn run(self: Arc<Self>, store: Store, shutdown: CancellationToken) {
        let own: Vec<String> = self.own.iter().map(ToString::to_string).collect();
        let mut tick = tokio::time::interval(HEARTBEAT);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            let beat = async {
                if !own.is_empty() {
                    store.replica_heartbeat(&self.id, &own).await?;
                }
                if let Err(e) = self.switches.load(&store).await {
                    tracing::warn!(error = %e, "Could not read the vendor switches; keeping the last read.");
                }
                store.replicas().await
            };
            match tokio::time::timeout(HEARTBEAT * 2, beat).await {
                Ok(Ok(rows)) => {
                    let now_ms = httpdns_core::clock::unix_ms() as i64;
                    for (id, seen_at) in self.observe(rows, Instant::now(), now_ms) {
                        if let Err(e) = store.forget_replica(&id, seen_at).await {
                            tracing::warn!(error = %e, replica = %id, "Could not delete a gone replica's row.");
                        }
                    }
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "Replica heartbeat failed."),
                Err(_) => tracing::warn!("Replica heartbeat timed out."),
            }
        }
        if !own.is_empty() {
            if let Ok(Err(e)) = tokio::time::timeout(HEARTBEAT, store.remove_replica(&self.id)).await {
                tracing::warn!(error = %e, "Could not remove this replica from the service-IP list.");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> ServiceAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parses_announced_addresses() {
        assert_eq!(a("1.2.3.4"), ServiceAddr { ip: "1.2.3.4".parse().unwrap(), port: None });
        assert_eq!(a("1.2.3.4:8080").port, Some(8080));
        assert_eq!(a("[2001:db8::1]:443").port, Some(443));
        assert_eq!(a("2001:db8::1").port, None);
        assert_eq!(a("[2001:db8::1]").port, None);
        assert_eq!(a("::ffff:1.2.3.4").ip, "1.2.3.4".parse::<IpAddr>().unwrap(), "mapped → v4");
        for bad in ["", "host:80", "1.2.3.4:0", "1.2.3.4:99999", "1.2.3"] {
            assert!(bad.parse::<ServiceAddr>().is_err(), "{bad}");
        }
        assert_eq!(a("[2001:db8::1]:443").to_string(), "[2001:db8::1]:443");
        assert_eq!(a("1.2.3.4").to_string(), "1.2.3.4");
    }

    fn row(id: &str, addr: &str, seen_at: i64) -> ReplicaRow {
        ReplicaRow { id: id.into(), addrs: vec![addr.into()], seen_at }
    }

    #[test]
    fn replicas_leave_when_their_row_stops_changing() {
        let ips = ServiceIps::new(vec![a("10.0.0.1")]);
        let t0 = Instant::now();
        let wall = 1_700_000_000_000;
        ips.observe(vec![row("b", "10.0.0.2", wall), row("c", "10.0.0.3", wall - 3_600_000)], t0, wall);
        assert_eq!(*ips.alive(), [a("10.0.0.1"), a("10.0.0.2")], "c's row is an hour old at first sight");
        // b keeps beating, with a clock an hour slow: still alive, since its row changes.
        ips.observe(
            vec![row("b", "10.0.0.2", wall + 2000), row("c", "10.0.0.3", wall - 3_598_000)],
            t0 + HEARTBEAT,
            wall,
        );
        assert_eq!(ips.alive().len(), 3, "c changed its row: alive whatever its clock says");
        // b stops; c goes on.
        let later = t0 + HEARTBEAT + EXPIRE + Duration::from_millis(1);
        ips.observe(
            vec![row("b", "10.0.0.2", wall + 2000), row("c", "10.0.0.3", wall - 3_590_000)],
            later,
            wall,
        );
        assert_eq!(*ips.alive(), [a("10.0.0.1"), a("10.0.0.3")]);
        // Unchanged for a day by this replica's clock: deleted, whatever the writer's clock.
        let day = later + FORGET + Duration::from_secs(1);
        let gone = ips.observe(
            vec![row("b", "10.0.0.2", wall + 2000), row("c", "10.0.0.3", wall - 3_590_000)],
            day,
            wall,
        );
        assert_eq!(gone, [("b".to_owned(), wall + 2000), ("c".to_owned(), wall - 3_590_000)]);
        // A row stale at first sight is deleted after a day too, never listed meanwhile.
        let fresh = ServiceIps::new(vec![]);
        assert!(fresh.observe(vec![row("d", "10.0.0.4", 0)], t0, wall).is_empty());
        assert!(fresh.alive().is_empty());
        assert_eq!(fresh.observe(vec![row("d", "10.0.0.4", 0)], day, wall), [("d".to_owned(), 0)]);
        // A deleted row is forgotten.
        ips.observe(vec![], later, wall);
        assert_eq!(*ips.alive(), [a("10.0.0.1")]);
        assert!(ips.seen.lock().is_empty());
    }
}
