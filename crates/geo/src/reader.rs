use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use httpdns_core::Token;
use maxminddb::Reader;
use serde::Deserialize;

use crate::IspMap;

/// Where the databases are and how they are read.
#[derive(Debug, Clone)]
pub struct GeoConfig {
    /// A GeoIP2/GeoLite2 City (or Country) database, for the region.
    pub city_db: Option<PathBuf>,
    /// A GeoLite2 ASN (or GeoIP2 ISP) database, for the carrier.
    pub asn_db: Option<PathBuf>,
    pub isp_map: IspMap,
    /// How often the files are checked for changes.
    pub reload_interval: Duration,
}

/// What the databases say of an address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GeoInfo {
    pub isp: Option<Token>,
    pub region: Option<Token>,
    /// How many leading bits of the address decided this answer: the longest of the networks
    /// the databases matched (with or without data). 0 when no database is loaded: then every
    /// address gets the same (empty) answer.
    pub prefix: u8,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GeoError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a valid MaxMind database: {source}")]
    Parse { path: PathBuf, source: maxminddb::MaxMindDbError },
}

/// What is loaded, for `/readyz` and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GeoStatus {
    pub city_loaded: bool,
    pub asn_loaded: bool,
    /// Successful (re)loads since start.
    pub loads: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
}

struct Loaded {
    reader: Reader<Vec<u8>>,
    stamp: FileStamp,
}

#[derive(Default)]
struct Databases {
    city: Option<Arc<Loaded>>,
    asn: Option<Arc<Loaded>>,
    loads: u64,
}

/// The GeoIP databases, swapped atomically on reload. Cheap to share behind an `Arc`.
pub struct Geo {
    config: GeoConfig,
    dbs: ArcSwap<Databases>,
    /// Serialises reloads; lookups never take it.
    reload_lock: parking_lot::Mutex<()>,
}

impl std::fmt::Debug for Geo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Geo").field("config", &self.config).field("status", &self.status()).finish()
    }
}

#[derive(Deserialize)]
struct CityRecord<'a> {
    #[serde(borrow, default)]
    subdivisions: Vec<Named<'a>>,
    #[serde(borrow, default)]
    country: Option<Country<'a>>,
}

#[derive(Deserialize)]
struct Named<'a> {
    #[serde(borrow, default)]
    names: Option<Names<'a>>,
}

#[derive(Deserialize)]
struct Names<'a> {
    #[serde(borrow, default)]
    en: Option<&'a str>,
}

#[derive(Deserialize)]
struct Country<'a> {
    #[serde(borrow, default)]
    iso_code: Option<&'a str>,
}

#[derive(Deserialize)]
struct AsnRecord<'a> {
    #[serde(default)]
    autonomous_system_number: Option<u32>,
    #[serde(borrow, default)]
    autonomous_system_organization: Option<&'a str>,
}

/// The prefix length of the network a database matched for `ip`, in `ip`'s own family; the
/// whole address when the database cannot say (an IPv4 address above a v6 database's IPv4
/// subtree), which is always safe.
fn decided_bits<S: AsRef<[u8]>>(found: &maxminddb::LookupResult<'_, S>, ip: IpAddr) -> u8 {
    let full = if ip.is_ipv4() { 32 } else { 128 };
    match found.network() {
        Ok(net) if net.is_ipv4() == ip.is_ipv4() => net.prefix().min(full),
        _ => full,
    }
}

impl Geo {
    /// Loads the configured databases. A configured file that is missing or corrupt at start-up
    /// is an error: the operator asked for it.
    pub fn open(config: GeoConfig) -> Result<Self, GeoError> {
        let geo = Self {
            config,
            dbs: ArcSwap::from_pointee(Databases::default()),
            reload_lock: Default::default(),
        };
        geo.reload(true)?;
        Ok(geo)
    }

    /// No databases: every address is unknown unless an operator network covers it.
    pub fn disabled() -> Self {
        Self::open(GeoConfig {
            city_db: None,
            asn_db: None,
            isp_map: IspMap::default(),
            reload_interval: Duration::from_secs(3600),
        })
        .expect("no files to read")
    }

    pub fn config(&self) -> &GeoConfig {
        &self.config
    }

    /// Looks `ip` up in the databases.
    pub fn lookup(&self, ip: IpAddr) -> GeoInfo {
        let dbs = self.dbs.load();
        let mut info = GeoInfo::default();
        if let Some(city) = &dbs.city {
            if let Ok(found) = city.reader.lookup(ip) {
                info.prefix = info.prefix.max(decided_bits(&found, ip));
                if let Ok(Some(rec)) = found.decode::<CityRecord<'_>>() {
                    info.region = rec
                        .subdivisions
                        .first()
                        .and_then(|s| s.names.as_ref())
                        .and_then(|n| n.en)
                        .and_then(Token::fold)
                        .or_else(|| rec.country.and_then(|c| c.iso_code).and_then(Token::fold));
                }
            }
        }
        if let Some(asn) = &dbs.asn {
            if let Ok(found) = asn.reader.lookup(ip) {
                info.prefix = info.prefix.max(decided_bits(&found, ip));
                if let Ok(Some(rec)) = found.decode::<AsnRecord<'_>>() {
                    info.isp = self
                        .config
                        .isp_map
                        .isp(rec.autonomous_system_number, rec.autonomous_system_organization);
                }
            }
        }
        info
    }

    pub fn status(&self) -> GeoStatus {
        let dbs = self.dbs.load();
        GeoStatus { city_loaded: dbs.city.is_some(), asn_loaded: dbs.asn.is_some(), loads: dbs.loads }
    }

    /// Reloads every database whose file changed (or all when `force`). Returns whether
    /// anything was swapped in. On error the previous databases stay in service.
    pub fn reload(&self, force: bool) -> Result<bool, GeoError> {
        let _guard = self.reload_lock.lock();
        let current = self.dbs.load_full();
        let city = refresh(self.config.city_db.as_deref(), current.city.as_deref(), force)?;
        let asn = refresh(self.config.asn_db.as_deref(), current.asn.as_deref(), force)?;
        if city.is_none() && asn.is_none() {
            return Ok(false);
        }
        // An unchanged database is shared with the previous set, not reloaded.
        let next = Databases {
            city: city.map(Arc::new).or_else(|| current.city.clone()),
            asn: asn.map(Arc::new).or_else(|| current.asn.clone()),
            loads: current.loads + 1,
        };
        self.dbs.store(Arc::new(next));
        Ok(true)
    }
}

fn stamp(path: &Path) -> Result<FileStamp, GeoError> {
    let meta = std::fs::metadata(path).map_err(|source| GeoError::Read { path: path.to_owned(), source })?;
    Ok(FileStamp { modified: meta.modified().ok(), len: meta.len() })
}

fn load(path: &Path) -> Result<Loaded, GeoError> {
    let stamp = stamp(path)?;
    let bytes = std::fs::read(path).map_err(|source| GeoError::Read { path: path.to_owned(), source })?;
    let reader =
        Reader::from_source(bytes).map_err(|source| GeoError::Parse { path: path.to_owned(), source })?;
    Ok(Loaded { reader, stamp })
}

/// A freshly loaded database if `path` changed since `old` (or `force`), else `None`.
fn refresh(path: Option<&Path>, old: Option<&Loaded>, force: bool) -> Result<Option<Loaded>, GeoError> {
    let Some(path) = path else { return Ok(None) };
    if !force {
        if let Some(old) = old {
            if stamp(path)? == old.stamp {
                return Ok(None);
            }
        }
    }
    load(path).map(Some)
}

#[cfg(test)]
mod tests;
