//! `GET /admin/v1/explain?dn=NAME&ip=ADDR[&isp=&region=][&app_version=&tag=][&type=a|aaaa|addrs]`:
//! for that client (`isp` and `region`, when given, replace the address's classification), which
//! rule, split entry or backup chose the pool, every node of that pool with each term of its
//! score, its health, and why it is or is not in the answer. The answer in the explanation is
//! computed by the same code as `/d`'s. A `cname` domain explains as its alias.

use std::net::IpAddr;

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use httpdns_core::snapshot::client_seed;
use httpdns_core::{DomainName, Family};

use crate::admin::state::AdminState;
use crate::error::ApiError;
use crate::peer::PeerAddr;

pub(crate) async fn handle(
    State(app): State<AdminState>,
    PeerAddr(peer): PeerAddr,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let pairs: Vec<(String, String)> =
        form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()).into_owned().collect();
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let dn = get("dn")
        .filter(|d| !d.is_empty())
        .ok_or_else(|| ApiError::bad_request("MissingArgument", "dn", "missing dn"))?;
    let name =
        DomainName::parse(dn).map_err(|e| ApiError::bad_request("InvalidHost", "dn", e.to_string()))?;
    let client: IpAddr = match get("ip").filter(|s| !s.is_empty()) {
        None => peer,
        Some(s) => s
            .parse::<IpAddr>()
            .map_err(|_| ApiError::bad_request("InvalidArgument", "ip", "must be an IP address"))?
            .to_canonical(),
    };
    let families: &[Family] = match get("type").unwrap_or("a").to_ascii_lowercase().as_str() {
        "" | "a" => &[Family::V4],
        "aaaa" => &[Family::V6],
        "addrs" => &[Family::V4, Family::V6],
        _ => return Err(ApiError::bad_request("InvalidArgument", "type", "type must be a, aaaa or addrs")),
    };
    let published = app.catalog.snapshot();
    let mut view = httpdns_geo::classify(&published, &app.geo, client);
    // A carrier and region asked for directly (the console's "what would a unicom client in
    // shanghai get"): they replace what the address classifies as.
    for (field, slot) in [("isp", &mut view.isp), ("region", &mut view.region)] {
        if let Some(v) = get(field).filter(|s| !s.is_empty()) {
            let token = httpdns_core::Token::parse(v)
                .map_err(|e| ApiError::bad_request("InvalidArgument", field, e.to_string()))?;
            *slot = Some(token);
        }
    }
    // The client's own attributes, as `/resolve` takes them, for the domains' rules.
    let tags = pairs.iter().filter(|(n, _)| n == "tag").map(|(_, v)| v.as_str());
    let attrs = httpdns_answer::client_attrs(get("app_version"), tags);
    let network = published.network(client);
    let seed = client_seed(client);
    let explanations: Vec<_> = families
        .iter()
        .filter_map(|f| published.snapshot.explain(&name, *f, &view, &attrs, seed, &published.health))
        .collect();
    let body = serde_json::json!({
        "name": name.as_str(),
        "managed": published.is_managed(&name),
        "cname": published.snapshot.domain(&name).and_then(|d| d.cname.as_ref()).map(ToString::to_string),
        "client": {
            "ip": client,
            "isp": view.isp.as_ref().map(ToString::to_string),
            "region": view.region.as_ref().map(ToString::to_string),
            "operator_network": network.is_some(),
        },
        "snapshot_revision": published.revision(),
        "answers": explanations,
    });
    Ok(axum::Json(body).into_response())
}
