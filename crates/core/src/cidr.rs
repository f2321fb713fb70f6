//! Longest-prefix match of an address against operator CIDRs.
//!
//! Operator tables are small (thousands of prefixes), but lookups happen on every request, so
//! the table keeps one hash map per prefix length that is in use and probes them from the
//! longest length down. A lookup costs at most one hash probe per distinct length (typically
//! a handful), independent of the number of prefixes.

use std::collections::HashMap;

use foldhash::HashMap as FastMap;
use std::net::IpAddr;

use ipnet::IpNet;

/// A longest-prefix-match table from CIDRs to values.
#[derive(Debug, Clone)]
pub struct CidrTable<T> {
    v4: Vec<(u8, FastMap<u32, T>)>,
    v6: Vec<(u8, FastMap<u128, T>)>,
    /// Each prefix length's network addresses, sorted, longest length first: the neighbours
    /// of an address tell how long a prefix of it avoids those networks (see
    /// [`CidrTable::decided_prefix`]).
    starts4: Vec<(u8, Vec<u32>)>,
    starts6: Vec<(u8, Vec<u128>)>,
    len: usize,
}

impl<T> Default for CidrTable<T> {
    fn default() -> Self {
        Self { v4: Vec::new(), v6: Vec::new(), starts4: Vec::new(), starts6: Vec::new(), len: 0 }
    }
}

/// The shortest prefix length of `x` whose block holds none of the sorted `starts` (each the
/// start of a network that does not contain `x`): one bit past the longest common prefix with
/// a neighbour, since a network N that does not hold `x` shares fewer than its own length of
/// leading bits with it, so the block of `x` at that length misses N.
fn disjoint<B: Copy + Ord>(starts: &[B], x: B, common_bits: impl Fn(B, B) -> u32, full: u32) -> u8 {
    let at = starts.partition_point(|s| *s < x);
    let common = [at.checked_sub(1), Some(at)]
        .into_iter()
        .flatten()
        .filter_map(|i| starts.get(i))
        .map(|s| common_bits(*s, x))
        .max();
    match common {
        None => 0,
        Some(c) => (c + 1).min(full) as u8,
    }
}

fn mask4(bits: u32, len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        bits & (u32::MAX << (32 - u32::from(len)))
    }
}

fn mask6(bits: u128, len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        bits & (u128::MAX << (128 - u32::from(len)))
    }
}

impl<T> CidrTable<T> {
    /// Builds a table. Host bits of each network are ignored (`1.2.3.4/24` means `1.2.3.0/24`);
    /// a later duplicate replaces an earlier one.
    pub fn new(entries: impl IntoIterator<Item = (IpNet, T)>) -> Self {
        let mut v4: HashMap<u8, FastMap<u32, T>> = HashMap::new();
        let mut v6: HashMap<u8, FastMap<u128, T>> = HashMap::new();
        for (net, value) in entries {
            match net {
                IpNet::V4(n) => {
                    let len = n.prefix_len();
                    v4.entry(len).or_default().insert(mask4(n.addr().to_bits(), len), value);
                }
                IpNet::V6(n) => {
                    let len = n.prefix_len();
                    v6.entry(len).or_default().insert(mask6(n.addr().to_bits(), len), value);
                }
            }
        }
        let mut v4: Vec<_> = v4.into_iter().collect();
        let mut v6: Vec<_> = v6.into_iter().collect();
        v4.sort_by_key(|e| std::cmp::Reverse(e.0));
        v6.sort_by_key(|e| std::cmp::Reverse(e.0));
        let len =
            v4.iter().map(|(_, m)| m.len()).sum::<usize>() + v6.iter().map(|(_, m)| m.len()).sum::<usize>();
        fn sorted<K: Copy + Ord, V>(levels: &[(u8, FastMap<K, V>)]) -> Vec<(u8, Vec<K>)> {
            levels
                .iter()
                .map(|(len, m)| {
                    let mut starts: Vec<K> = m.keys().copied().collect();
                    starts.sort_unstable();
                    (*len, starts)
                })
                .collect()
        }
        let (starts4, starts6) = (sorted(&v4), sorted(&v6));
        Self { v4, v6, starts4, starts6, len }
    }

    /// The value of the longest prefix containing `ip`. IPv4-mapped IPv6 addresses are looked
    /// up as IPv4.
    pub fn lookup(&self, ip: IpAddr) -> Option<&T> {
        self.lookup_prefix(ip).map(|(_, v)| v)
    }

    /// [`lookup`](Self::lookup) with the length of the prefix that matched.
    pub fn lookup_prefix(&self, ip: IpAddr) -> Option<(u8, &T)> {
        match ip.to_canonical() {
            IpAddr::V4(a) => {
                let bits = a.to_bits();
                self.v4.iter().find_map(|(len, map)| map.get(&mask4(bits, *len)).map(|v| (*len, v)))
            }
            IpAddr::V6(a) => {
                let bits = a.to_bits();
                self.v6.iter().find_map(|(len, map)| map.get(&mask6(bits, *len)).map(|v| (*len, v)))
            }
        }
    }

    /// How many leading bits of `ip` decide [`lookup`](Self::lookup): every address that
    /// shares them gets the same network (or none). In a network of length P that is P, or
    /// more when a longer network lies within it near `ip`: the block must miss every longer
    /// network, none of which holds `ip`. Outside every network, the block must miss all of
    /// them. (Shorter networks than the match either hold it whole or lie apart from it.)
    pub fn decided_prefix(&self, ip: IpAddr) -> u8 {
        let matched = self.lookup_prefix(ip).map(|(p, _)| p);
        let longer = |len: u8| matched.is_none_or(|p| len > p);
        let clear = match ip.to_canonical() {
            IpAddr::V4(a) => self
                .starts4
                .iter()
                .filter(|(len, _)| longer(*len))
                .map(|(_, starts)| disjoint(starts, a.to_bits(), |s, x| (s ^ x).leading_zeros(), 32))
                .max(),
            IpAddr::V6(a) => self
                .starts6
                .iter()
                .filter(|(len, _)| longer(*len))
                .map(|(_, starts)| disjoint(starts, a.to_bits(), |s, x| (s ^ x).leading_zeros(), 128))
                .max(),
        };
        clear.unwrap_or(0).max(matched.unwrap_or(0))
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> CidrTable<&'static str> {
        CidrTable::new([
            ("1.0.0.0/8".parse().unwrap(), "eight"),
            ("1.0.1.0/24".parse().unwrap(), "twentyfour"),
            ("1.0.1.128/25".parse().unwrap(), "twentyfive"),
            ("0.0.0.0/0".parse().unwrap(), "default4"),
            ("2400:3200::/32".parse().unwrap(), "ali6"),
        ])
    }

    fn find(t: &CidrTable<&'static str>, ip: &str) -> Option<&'static str> {
        t.lookup(ip.parse().unwrap()).copied()
    }

    #[test]
    fn longest_prefix_wins() {
        let t = table();
        assert_eq!(find(&t, "1.0.1.200"), Some("twentyfive"));
        assert_eq!(find(&t, "1.0.1.5"), Some("twentyfour"));
        assert_eq!(find(&t, "1.9.9.9"), Some("eight"));
        assert_eq!(find(&t, "8.8.8.8"), Some("default4"));
        assert_eq!(find(&t, "2400:3200::1"), Some("ali6"));
        assert_eq!(find(&t, "2401::1"), None);
        assert_eq!(find(&t, "::ffff:1.0.1.5"), Some("twentyfour"));
        assert_eq!(t.lookup_prefix("1.0.1.200".parse().unwrap()), Some((25, &"twentyfive")));
        assert_eq!(t.lookup_prefix("1.9.9.9".parse().unwrap()), Some((8, &"eight")));
        assert_eq!(t.len(), 5);
    }

    #[test]
    fn decided_prefix_is_the_shortest_block_missing_every_network() {
        let t = CidrTable::new([
            ("1.0.1.0/24".parse().unwrap(), ()),
            ("1.0.2.0/24".parse().unwrap(), ()),
            ("2400:3200::/32".parse().unwrap(), ()),
        ]);
        let at = |ip: &str| t.decided_prefix(ip.parse().unwrap());
        // 1.0.0.0/24 misses 1.0.1.0/24 and 1.0.2.0/24; 1.0.0.0/23 would hold 1.0.1.0/24.
        assert_eq!(at("1.0.0.7"), 24);
        assert_eq!(at("1.0.3.1"), 24);
        // 1.0.4.0/22 is clear of both.
        assert_eq!(at("1.0.5.1"), 22);
        // 58.0.0.0 = 0b0011_1010..., 1.0.2.0 = 0b0000_0001...: two bits in common.
        assert_eq!(at("58.1.2.3"), 3);
        assert_eq!(at("2400:3201::1"), 32);
        // No IPv6 network below 2400::/8 ... and none of a family: every block is clear.
        assert_eq!(
            CidrTable::<()>::new([("1.0.1.0/24".parse().unwrap(), ())])
                .decided_prefix("::1".parse().unwrap()),
            0
        );
        // Brute force: no block at the reported length holds a network, one bit shorter does.
        for probe in ["1.0.0.7", "1.0.3.1", "1.0.5.1", "58.1.2.3", "0.0.0.1", "255.0.0.1"] {
            let ip: std::net::Ipv4Addr = probe.parse().unwrap();
            let len = at(probe);
            let block = ipnet::Ipv4Net::new(ip, len).unwrap().trunc();
            for net in ["1.0.1.0/24", "1.0.2.0/24"] {
                let net: ipnet::Ipv4Net = net.parse().unwrap();
                assert!(!block.contains(&net) && !net.contains(&block), "{probe}/{len} holds {net}");
            }
            if len > 0 {
                let wider = ipnet::Ipv4Net::new(ip, len - 1).unwrap().trunc();
                assert!(
                    ["1.0.1.0/24", "1.0.2.0/24"]
                        .iter()
                        .any(|n| wider.contains(&n.parse::<ipnet::Ipv4Net>().unwrap())),
                    "{probe}/{} is clear too",
                    len - 1
                );
            }
        }
    }

    /// Brute force over nested networks: every address of the reported block looks the same
    /// to `lookup`, and one bit shorter some address does not (or the length is 0).
    #[test]
    fn decided_prefix_holds_for_nested_networks() {
        let nets = ["1.0.0.0/8", "1.0.1.0/24", "1.0.1.128/26", "1.0.64.0/18", "1.2.0.0/16", "9.0.0.0/8"];
        let t = CidrTable::new(nets.iter().map(|n| (n.parse().unwrap(), *n)));
        let same = |block: ipnet::Ipv4Net| {
            // Every network is at least /8 and at most /26: sampling each /26 of the block
            // (up to 2^18 of them) sees every value the block can take.
            let first = t.lookup(IpAddr::V4(block.network()));
            let step = 1u32 << 6;
            let (lo, hi) = (block.network().to_bits(), block.broadcast().to_bits());
            let mut a = lo;
            loop {
                if t.lookup(IpAddr::V4(a.into())) != first {
                    return false;
                }
                match a.checked_add(step) {
                    Some(n) if n <= hi => a = n,
                    _ => return true,
                }
            }
        };
        for probe in [
            "1.0.5.0",
            "1.0.1.7",
            "1.0.1.200",
            "1.0.70.1",
            "1.3.0.1",
            "1.2.9.9",
            "9.9.9.9",
            "10.0.0.1",
            "0.0.0.1",
        ] {
            let ip: std::net::Ipv4Addr = probe.parse().unwrap();
            let len = t.decided_prefix(IpAddr::V4(ip));
            let block = ipnet::Ipv4Net::new(ip, len.max(8)).unwrap().trunc();
            if len >= 8 {
                assert!(same(block), "{probe}/{len} is not decided");
            }
            if len > 8 {
                let wider = ipnet::Ipv4Net::new(ip, len - 1).unwrap().trunc();
                assert!(!same(wider), "{probe}/{} is decided too: {len} is not the shortest", len - 1);
            }
        }
        // The case a shallow rule gets wrong: inside 1.0.0.0/8 but near 1.0.1.0/24.
        assert_eq!(t.decided_prefix("1.0.5.0".parse().unwrap()), 22);
        assert_eq!(t.decided_prefix("1.0.1.7".parse().unwrap()), 25, "clear of 1.0.1.128/26");
    }

    #[test]
    fn host_bits_are_ignored() {
        let t = CidrTable::new([("1.2.3.4/24".parse().unwrap(), 1)]);
        assert_eq!(t.lookup("1.2.3.99".parse().unwrap()), Some(&1));
    }
}
