//! Client classification: which carrier (ISP) and region a client address belongs to.
//!
//! Sources, in order:
//!
//! 1. the operator CIDR table of the answering snapshot (admin API `/admin/v1/networks`),
//!    which overrides everything else, field by field;
//! 2. MaxMind-format databases: a GeoIP2/GeoLite2 **City** database for the region and an
//!    **ASN** database for the carrier, mapped to an ISP token by AS number, else by a
//!    substring of the AS organisation;
//! 3. otherwise unknown.
//!
//! The databases are held behind an `ArcSwap` and replaced when their files change (checked
//! every `reload_interval`, and on demand), so an operator's weekly GeoLite2 update needs no
//! restart. A file that fails to parse leaves the previous database in service.
//!
//! Region tokens are the English subdivision name folded to lowercase letters and digits
//! (`Beijing` → `beijing`, `Inner Mongolia` → `innermongolia`), or the lowercase country code
//! when the database has no subdivision for the address.

mod classify;
mod isp_map;
mod reader;

pub use classify::{classify, classify_scoped};
pub use isp_map::IspMap;
pub use reader::{Geo, GeoConfig, GeoError, GeoInfo, GeoStatus};
