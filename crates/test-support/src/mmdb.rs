//! A small writer of MaxMind DB files (format 2.0), so tests build their own GeoIP2 City and
//! ASN databases instead of downloading real ones.
//!
//! Format: <https://maxmind.github.io/MaxMind-DB/>. The writer emits an IPv6 tree with 32-bit
//! records; IPv4 networks live under `::/96`, where readers look for them.

use std::net::IpAddr;

use ipnet::IpNet;

/// A value in the data section.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    U16(u16),
    U32(u32),
    U64(u64),
    Bool(bool),
    Double(f64),
    Array(Vec<Value>),
    Map(Vec<(String, Value)>),
}

impl Value {
    pub fn map<const N: usize>(pairs: [(&str, Value); N]) -> Self {
        Value::Map(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }

    pub fn str(s: &str) -> Self {
        Value::Str(s.to_owned())
    }
}

/// Builds a database in memory.
#[derive(Debug)]
pub struct Writer {
    database_type: String,
    entries: Vec<(IpNet, Value)>,
}

#[derive(Debug, Clone, Copy)]
enum Rec {
    Empty,
    Node(u32),
    Data(u32),
}

impl Writer {
    pub fn new(database_type: &str) -> Self {
        Self { database_type: database_type.to_owned(), entries: Vec::new() }
    }

    /// Adds a network. A longer prefix inside a shorter one overrides it for its addresses.
    pub fn insert(&mut self, net: &str, value: Value) -> &mut Self {
        let net: IpNet = net.parse().expect("network");
        self.entries.push((net.trunc(), value));
        self
    }

    /// A GeoIP2-City-shaped record.
    pub fn city(country: &str, subdivision: &str, city: &str) -> Value {
        let names = |n: &str| Value::map([("en", Value::str(n))]);
        Value::map([
            ("city", Value::map([("names", names(city))])),
            ("country", Value::map([("iso_code", Value::str(country)), ("names", names(country))])),
            ("subdivisions", Value::Array(vec![Value::map([("names", names(subdivision))])])),
        ])
    }

    /// A GeoLite2-ASN-shaped record.
    pub fn asn(number: u32, organization: &str) -> Value {
        Value::map([
            ("autonomous_system_number", Value::U32(number)),
            ("autonomous_system_organization", Value::str(organization)),
        ])
    }

    /// Serialises the database.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut entries: Vec<&(IpNet, Value)> = self.entries.iter().collect();
        // Shorter prefixes first, so a longer one splits the shorter one's records.
        entries.sort_by_key(|(net, _)| tree_prefix_len(net));

        let mut data = Vec::new();
        let mut nodes: Vec<[Rec; 2]> = vec![[Rec::Empty, Rec::Empty]];
        for (net, value) in entries {
            let offset = data.len() as u32;
            encode(value, &mut data);
            let (bits, len) = tree_bits(net);
            assert!(len > 0, "a /0 network is not supported");
            let mut node = 0usize;
            for i in 0..len {
                let bit = ((bits >> (127 - i)) & 1) as usize;
                if i == len - 1 {
                    nodes[node][bit] = Rec::Data(offset);
                    break;
                }
                node = match nodes[node][bit] {
                    Rec::Node(n) => n as usize,
                    other => {
                        let fill = match other {
                            Rec::Data(d) => Rec::Data(d),
                            _ => Rec::Empty,
                        };
                        nodes.push([fill, fill]);
                        let n = nodes.len() - 1;
                        nodes[node][bit] = Rec::Node(n as u32);
                        n
                    }
                };
            }
        }

        let node_count = nodes.len() as u32;
        let mut out = Vec::with_capacity(nodes.len() * 8 + 16 + data.len() + 256);
        for pair in &nodes {
            for rec in pair {
                let v = match *rec {
                    Rec::Empty => node_count,
                    Rec::Node(n) => n,
                    Rec::Data(off) => node_count + 16 + off,
                };
                out.extend_from_slice(&v.to_be_bytes());
            }
        }
        out.extend_from_slice(&[0u8; 16]);
        out.extend_from_slice(&data);
        out.extend_from_slice(b"\xAB\xCD\xEFMaxMind.com");
        let meta = Value::map([
            ("binary_format_major_version", Value::U16(2)),
            ("binary_format_minor_version", Value::U16(0)),
            ("build_epoch", Value::U64(1_700_000_000)),
            ("database_type", Value::str(&self.database_type)),
            ("description", Value::map([("en", Value::str("httpdns test database"))])),
            ("ip_version", Value::U16(6)),
            ("languages", Value::Array(vec![Value::str("en")])),
            ("node_count", Value::U32(node_count)),
            ("record_size", Value::U16(32)),
        ]);
        encode(&meta, &mut out);
        out
    }

    /// Writes the database to `path` atomically (temp file and rename), as an operator's
    /// update job would, so a reloading reader never sees a half-written file.
    pub fn write_to(&self, path: &std::path::Path) {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, self.to_bytes()).expect("write mmdb");
        std::fs::rename(&tmp, path).expect("rename mmdb");
    }
}

fn tree_prefix_len(net: &IpNet) -> u8 {
    tree_bits(net).1
}

fn tree_bits(net: &IpNet) -> (u128, u8) {
    match net {
        IpNet::V4(n) => (u128::from(n.addr().to_bits()), 96 + n.prefix_len()),
        IpNet::V6(n) => (n.addr().to_bits(), n.prefix_len()),
    }
}

fn control(type_num: u8, size: usize, out: &mut Vec<u8>) {
    let (size_bits, ext): (u8, Vec<u8>) = if size < 29 {
        (size as u8, vec![])
    } else if size < 29 + 256 {
        (29, vec![(size - 29) as u8])
    } else if size < 285 + 65_536 {
        (30, ((size - 285) as u16).to_be_bytes().to_vec())
    } else {
        (31, ((size - 65_821) as u32).to_be_bytes()[1..].to_vec())
    };
    if type_num <= 7 {
        out.push((type_num << 5) | size_bits);
    } else {
        out.push(size_bits);
        out.push(type_num - 7);
    }
    out.extend_from_slice(&ext);
}

fn uint(type_num: u8, v: u64, out: &mut Vec<u8>) {
    let bytes = v.to_be_bytes();
    let skip = bytes.iter().take_while(|b| **b == 0).count();
    control(type_num, 8 - skip, out);
    out.extend_from_slice(&bytes[skip..]);
}

fn encode(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Str(s) => {
            control(2, s.len(), out);
            out.extend_from_slice(s.as_bytes());
        }
        Value::Double(d) => {
            control(3, 8, out);
            out.extend_from_slice(&d.to_be_bytes());
        }
        Value::U16(n) => uint(5, u64::from(*n), out),
        Value::U32(n) => uint(6, u64::from(*n), out),
        Value::U64(n) => uint(9, *n, out),
        Value::Bool(b) => control(14, usize::from(*b), out),
        Value::Map(pairs) => {
            control(7, pairs.len(), out);
            for (k, v) in pairs {
                encode(&Value::Str(k.clone()), out);
                encode(v, out);
            }
        }
        Value::Array(items) => {
            control(11, items.len(), out);
            for item in items {
                encode(item, out);
            }
        }
    }
}

/// Parses an address, for tests.
pub fn ip(s: &str) -> IpAddr {
    s.parse().expect("address")
}
