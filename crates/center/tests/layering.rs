//! The config center is a service below the HTTP edge: no HTTP framework, no edge crate among
//! its dependencies (ARCHITECTURE.md, `crates/center`).

#[test]
fn no_http_edge_below_the_edge() {
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    let deps = manifest.split("[dependencies]").nth(1).expect("a [dependencies] table");
    let deps = deps.split("\n[").next().unwrap_or(deps);
    for banned in ["axum", "hyper", "tower", "httpdns-api", "httpdns-net", "httpdns-server"] {
        assert!(
            !deps.lines().any(|l| l
                .trim_start()
                .strip_prefix(banned)
                .is_some_and(|rest| rest.trim_start().starts_with(['=', '.']))),
            "httpdns-center must not depend on {banned}"
        );
    }
}
