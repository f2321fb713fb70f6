use std::time::Duration;

use httpdns_test_support::mmdb::{ip, Writer};

use super::*;

fn write_dbs(dir: &Path, beijing_org: &str) -> (PathBuf, PathBuf) {
    let city = dir.join("city.mmdb");
    let asn = dir.join("asn.mmdb");
    Writer::new("GeoLite2-City")
        .insert("1.0.0.0/8", Writer::city("CN", "Guangdong", "Guangzhou"))
        .insert("1.2.0.0/16", Writer::city("CN", "Beijing", "Beijing"))
        .insert("8.8.8.0/24", Writer::city("US", "", "Mountain View"))
        .insert("2408:8000::/20", Writer::city("CN", "Inner Mongolia", "Hohhot"))
        .write_to(&city);
    Writer::new("GeoLite2-ASN")
        .insert("1.0.0.0/8", Writer::asn(4134, "CHINANET-BACKBONE"))
        .insert("1.2.0.0/16", Writer::asn(64512, beijing_org))
        .insert("2408:8000::/20", Writer::asn(4837, "CHINA UNICOM China169 Backbone"))
        .write_to(&asn);
    (city, asn)
}

fn config(city: PathBuf, asn: PathBuf) -> GeoConfig {
    GeoConfig {
        city_db: Some(city),
        asn_db: Some(asn),
        isp_map: IspMap::default(),
        reload_interval: Duration::from_millis(50),
    }
}

fn tokens(info: GeoInfo) -> (Option<String>, Option<String>) {
    (info.isp.map(|t| t.to_string()), info.region.map(|t| t.to_string()))
}

fn pair(isp: Option<&str>, region: Option<&str>) -> (Option<String>, Option<String>) {
    (isp.map(str::to_owned), region.map(str::to_owned))
}

#[test]
fn looks_up_region_and_carrier_v4_and_v6() {
    let dir = tempfile::tempdir().unwrap();
    let (city, asn) = write_dbs(dir.path(), "China Unicom Beijing");
    let geo = Geo::open(config(city, asn)).unwrap();
    assert_eq!(tokens(geo.lookup(ip("1.9.9.9"))), pair(Some("telecom"), Some("guangdong")));
    // Longer prefix wins; carrier from the organisation when the AS number is not mapped.
    assert_eq!(tokens(geo.lookup(ip("1.2.3.4"))), pair(Some("unicom"), Some("beijing")));
    // No subdivision: the country code stands in for the region; unknown carrier.
    assert_eq!(tokens(geo.lookup(ip("8.8.8.8"))), pair(None, Some("us")));
    assert_eq!(tokens(geo.lookup(ip("2408:8001::1"))), pair(Some("unicom"), Some("innermongolia")));
    assert_eq!(tokens(geo.lookup(ip("9.9.9.9"))), pair(None, None));
    assert_eq!(geo.status(), GeoStatus { city_loaded: true, asn_loaded: true, loads: 1 });
}

#[test]
fn reloads_changed_files_and_keeps_old_on_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let (city, asn) = write_dbs(dir.path(), "China Unicom Beijing");
    let geo = Geo::open(config(city, asn.clone())).unwrap();
    assert!(!geo.reload(false).unwrap(), "nothing changed");

    // The file's length changes with the organisation, so the stamp differs even if the
    // modification time has a coarse resolution.
    write_dbs(dir.path(), "China Mobile Communications Corporation");
    assert!(geo.reload(false).unwrap());
    assert_eq!(tokens(geo.lookup(ip("1.2.3.4"))).0.as_deref(), Some("mobile"));

    std::fs::write(&asn, b"not a database at all").unwrap();
    assert!(geo.reload(false).is_err());
    assert_eq!(tokens(geo.lookup(ip("1.2.3.4"))).0.as_deref(), Some("mobile"), "old db still serves");
}

#[test]
fn missing_configured_file_is_an_error_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let err = Geo::open(config(dir.path().join("nope.mmdb"), dir.path().join("nope2.mmdb"))).unwrap_err();
    assert!(matches!(err, GeoError::Read { .. }));
}

#[test]
fn disabled_knows_nothing() {
    assert_eq!(Geo::disabled().lookup(ip("1.2.3.4")), GeoInfo::default());
}
