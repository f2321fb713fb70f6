//! The model by name, applied and derived: a store change applied to [`ModelState`], and the
//! inputs of the next snapshot (the whole model, one node's update, feedback by node).

use super::*;

/// The whole model of `state` for a build; the names only `with_names` (else the build shares
/// the current snapshot's).
pub(super) fn whole_model(state: &ModelState, with_names: bool) -> Model {
    Model {
        networks: state.networks.values().cloned().collect(),
        nodes: state.nodes.iter().map(|(id, spec)| (id.clone(), spec.clone())).collect(),
        pools: state.pools.values().cloned().collect(),
        domains: if with_names { state.domains.values().cloned().collect() } else { Vec::new() },
        live: state.live.clone(),
        feedback: state.feedback.clone(),
        accounts: state.accounts.iter().map(|(id, a)| (*id, a.clone())).collect(),
    }
}

/// The current inputs of `ids`, for [`Snapshot::with_node_updates`].
pub(super) fn node_updates(state: &ModelState, ids: &BTreeSet<String>) -> Vec<NodeUpdate> {
    let mut feedback: HashMap<&str, Vec<(Token, Token, f64)>> = HashMap::new();
    for f in state.feedback.iter().filter(|f| ids.contains(&f.node)) {
        feedback.entry(&f.node).or_default().push((f.isp.clone(), f.region.clone(), f.latency_ms));
    }
    ids.iter()
        // A node removed since would have made the publish a full one.
        .filter_map(|id| {
            Some(NodeUpdate {
                id: id.clone(),
                spec: state.nodes.get(id)?.clone(),
                live: state.live.get(id).copied().unwrap_or_default(),
                feedback: feedback.remove(id.as_str()).unwrap_or_default(),
            })
        })
        .collect()
}

/// Feedback grouped by node, in the model's order.
pub(super) fn feedback_by_node(feedback: &[Feedback]) -> HashMap<&str, Vec<(&Token, &Token, f64)>> {
    let mut by_node: HashMap<&str, Vec<_>> = HashMap::new();
    for f in feedback {
        by_node.entry(&f.node).or_default().push((&f.isp, &f.region, f.latency_ms));
    }
    by_node
}

pub(super) fn apply(state: &mut ModelState, change: &Change, metrics: &CatalogMetrics) {
    let name = change.name.clone();
    // What the next publish rebuilds: a node whose spec changed keeping its pool is rebuilt
    // alone (marked below, once its body parsed); a domain re-indexes the names; anything
    // else in the model rebuilds the rest from scratch.
    match change.kind {
        Kind::Domain => state.pending.domains = true,
        Kind::Node => state.pending.specs = true,
        Kind::Network | Kind::Pool | Kind::Account => state.pending.full = true,
        // Not in the snapshot: nothing to rebuild.
        _ => {}
    }
    if !in_snapshot(change.kind) {
        let mut keep =
            KeepSpec { others: &mut state.others, name: &name, body: change.body.as_deref(), result: Ok(()) };
        with_kind(change.kind, &mut keep);
        if let Err(e) = keep.result {
            metrics.store_corrupt_rows.inc();
            tracing::error!(kind = change.kind.as_str(), name = %change.name, error = %e, "Skipping corrupt stored resource.");
        }
        return;
    }
    let Some(body) = &change.body else {
        match change.kind {
            Kind::Network => drop(state.networks.remove(&name)),
            Kind::Node => {
                state.nodes.remove(&name);
                state.pending.full = true;
            }
            Kind::Pool => drop(state.pools.remove(&name)),
            Kind::Domain => drop(state.domains.remove(&name)),
            Kind::Account => {
                if let Ok(id) = name.parse::<u32>() {
                    state.accounts.remove(&id);
                }
            }
            // Kept outside the snapshot (above).
            _ => {}
        }
        return;
    };
    // Bodies were validated before they were written; a failure here means a row was edited
    // by hand or written by an incompatible version. Skip it loudly rather than stop syncing.
    let result: Result<(), String> = (|| {
        match change.kind {
            Kind::Network => {
                let net: IpNet = name.parse().map_err(|e| format!("{e}"))?;
                let spec: NetworkSpec = serde_json::from_str(body).map_err(|e| e.to_string())?;
                state.networks.insert(name.clone(), (net, spec));
            }
            Kind::Node => {
                let spec: NodeSpec = serde_json::from_str(body).map_err(|e| e.to_string())?;
                match state.nodes.insert(name.clone(), spec) {
                    Some(old) if old.pool == state.nodes[&name].pool => {
                        state.pending.nodes.insert(name.clone());
                    }
                    // Added, or moved to another pool: the pools' member lists change.
                    _ => state.pending.full = true,
                }
            }
            Kind::Pool => {
                let token = Token::parse(&name).map_err(|e| e.to_string())?;
                let spec: PoolSpec = serde_json::from_str(body).map_err(|e| e.to_string())?;
                state.pools.insert(name.clone(), (token, spec));
            }
            Kind::Domain => {
                let dn = DomainName::parse_pattern(&name).map_err(|e| e.to_string())?;
                let spec: DomainSpec = serde_json::from_str(body).map_err(|e| e.to_string())?;
                state.domains.insert(name.clone(), (dn, spec));
            }
            Kind::Account => {
                let id = parse_account_id(&name).map_err(|e| e.message)?;
                let spec: AccountSpec = serde_json::from_str(body).map_err(|e| e.to_string())?;
                state.accounts.insert(id, spec);
            }
            // Kept outside the snapshot (above).
            _ => {}
        }
        Ok(())
    })();
    if let Err(e) = result {
        metrics.store_corrupt_rows.inc();
        tracing::error!(kind = change.kind.as_str(), name = %change.name, error = %e, "Skipping corrupt stored resource.");
    }
}
