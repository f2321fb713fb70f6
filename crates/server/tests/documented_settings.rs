//! Every environment variable the binary reads is listed in `ENV_VARS` and documented in
//! `docs/configuration.md`, and the contract's names are all there.

use std::collections::BTreeSet;

use httpdns_server::config::ENV_VARS;

fn env_literals(source: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (i, _) in source.match_indices("\"HTTPDNS_") {
        let rest = &source[i + 1..];
        let end = rest.find('"').unwrap();
        // The bare prefix appears where setting names are derived from it.
        if end > "HTTPDNS_".len() {
            found.insert(rest[..end].to_owned());
        }
    }
    found
}

#[test]
fn env_vars_are_listed_and_documented() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let source = std::fs::read_to_string(format!("{root}/crates/server/src/config.rs")).unwrap();
    let docs = std::fs::read_to_string(format!("{root}/docs/configuration.md")).unwrap();
    let listed: BTreeSet<String> = ENV_VARS.iter().map(|(n, _)| (*n).to_owned()).collect();

    for name in env_literals(&source) {
        assert!(listed.contains(&name), "{name} is read but not in ENV_VARS");
    }
    for name in &listed {
        assert!(docs.contains(&format!("`{name}`")), "{name} is not documented in docs/configuration.md");
    }
    for contract in [
        "HTTPDNS_API_ADDR",
        "HTTPDNS_MIRROR_ADDR",
        "HTTPDNS_DNS_ADDR",
        "HTTPDNS_DATA_DIR",
        "HTTPDNS_DATABASE_URL",
        "HTTPDNS_ADMIN_TOKEN",
        "HTTPDNS_ALLOW_PRIVATE_NODE_IPS",
        "HTTPDNS_UPSTREAMS",
    ] {
        assert!(listed.contains(contract), "contract variable {contract} missing");
    }
}
