//! Longest-prefix match of an address against operator CIDRs.
//!
//! Operator tables are small (thousands of prefixes), but lookups happen on every request, so
//! the table keeps one hash map per prefix length that is in use and probes them from the
//! longest length down. A lookup costs at most one hash probe per distinct length (typically
//! a handful), independent of the number of prefixes.

use std::collections::HashMap;
use std::net::IpAddr;

use ipnet::IpNet;

/// A longest-prefix-match table from CIDRs to values.
#[derive(Debug, Clone)]
pub struct CidrTable<T> {
    v4: Vec<(u8, HashMap<u32, T>)>,
    v6: Vec<(u8, HashMap<u128, T>)>,
    len: usize,
}

impl<T> Default for CidrTable<T> {
    fn default() -> Self {
        Self { v4: Vec::new(), v6: Vec::new(), len: 0 }
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
        let mut v4: HashMap<u8, HashMap<u32, T>> = HashMap::new();
        let mut v6: HashMap<u8, HashMap<u128, T>> = HashMap::new();
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
        Self { v4, v6, len }
    }

    /// The value of the longest prefix containing `ip`. IPv4-mapped IPv6 addresses are looked
    /// up as IPv4.
    pub fn lookup(&self, ip: IpAddr) -> Option<&T> {
        match ip.to_canonical() {
            IpAddr::V4(a) => {
                let bits = a.to_bits();
                self.v4.iter().find_map(|(len, map)| map.get(&mask4(bits, *len)))
            }
            IpAddr::V6(a) => {
                let bits = a.to_bits();
                self.v6.iter().find_map(|(len, map)| map.get(&mask6(bits, *len)))
            }
        }
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
        assert_eq!(t.len(), 5);
    }

    #[test]
    fn host_bits_are_ignored() {
        let t = CidrTable::new([("1.2.3.4/24".parse().unwrap(), 1)]);
        assert_eq!(t.lookup("1.2.3.99".parse().unwrap()), Some(&1));
    }
}
