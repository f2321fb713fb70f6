//! A one-line, human-readable summary of what a publish changes, stored with each version
//! when the publisher gives none, so the history says more than "updated".

use std::collections::BTreeMap;

use crate::document::ConfigDocument;

fn rate(r: f64) -> String {
    if r.fract() == 0.0 {
        format!("{}", r as u64)
    } else {
        format!("{r}")
    }
}

/// Describes the change from `old` (none: the first version) to `new`.
pub fn summarize(old: Option<&ConfigDocument>, new: &ConfigDocument) -> String {
    let Some(old) = old else {
        return format!(
            "created: {} hosts, {} merge rules",
            new.host_list_config.len(),
            new.merge_host_configs.len()
        );
    };
    let mut parts = Vec::new();

    let hosts = |d: &ConfigDocument| -> Vec<(String, f64)> {
        d.host_list_config.iter().map(|h| (h.host.to_string(), h.rate.get())).collect()
    };
    let (oh, nh) = (hosts(old), hosts(new));
    let mut host_changes = Vec::new();
    let old_map: BTreeMap<_, _> = oh.iter().cloned().collect();
    let new_map: BTreeMap<_, _> = nh.iter().cloned().collect();
    for (h, r) in &new_map {
        match old_map.get(h) {
            None => host_changes.push(format!("+{h}")),
            Some(o) if o != r => host_changes.push(format!("{h} rate {} -> {}", rate(*o), rate(*r))),
            _ => {}
        }
    }
    for h in old_map.keys().filter(|h| !new_map.contains_key(*h)) {
        host_changes.push(format!("-{h}"));
    }
    let order = |v: &[(String, f64)]| v.iter().map(|(h, _)| h.clone()).collect::<Vec<_>>();
    if host_changes.is_empty() && order(&oh) != order(&nh) {
        host_changes.push(format!("order {}", order(&nh).join(" > ")));
    }
    if !host_changes.is_empty() {
        parts.push(format!("hostListConfig: {}", host_changes.join(", ")));
    }

    let merges = |d: &ConfigDocument| -> BTreeMap<String, (String, f64)> {
        d.merge_host_configs
            .iter()
            .map(|m| (m.path_prefix.clone(), (m.host.to_string(), m.rate.get())))
            .collect()
    };
    let (om, nm) = (merges(old), merges(new));
    let mut merge_changes = Vec::new();
    for (p, (h, r)) in &nm {
        match om.get(p) {
            None => merge_changes.push(format!("+{p} ({h})")),
            Some((oh, or)) => {
                if oh != h {
                    merge_changes.push(format!("{p} host {oh} -> {h}"));
                }
                if or != r {
                    merge_changes.push(format!("{p} rate {} -> {}", rate(*or), rate(*r)));
                }
            }
        }
    }
    for p in om.keys().filter(|p| !nm.contains_key(*p)) {
        merge_changes.push(format!("-{p}"));
    }
    if !merge_changes.is_empty() {
        parts.push(format!("mergeHostConfigs: {}", merge_changes.join(", ")));
    }
    for (name, o, n) in [
        ("reviveProbeInterval", old.revive_probe_interval, new.revive_probe_interval),
        ("configRequestInterval", old.config_request_interval, new.config_request_interval),
    ] {
        if o != n {
            parts.push(format!("{name} {o} -> {n}"));
        }
    }
    if old.public_ip_list != new.public_ip_list {
        parts.push("publicIpList changed".to_owned());
    }
    if old.targets != new.targets {
        parts.push(format!("targets: {} -> {}", old.targets.len(), new.targets.len()));
    }
    if parts.is_empty() {
        "no change".to_owned()
    } else {
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarises_the_changes() {
        let old: ConfigDocument = serde_json::from_str(
            r#"{"mergeHostConfigs":[{"host":"image.xxx.com","pathPrefix":"/image","rate":1}],
                "hostListConfig":[{"host":"cdn.xxx.com","rate":1},{"host":"cdn-old.xxx.com","rate":1}],
                "reviveProbeInterval":600000,"configRequestInterval":600000,"publicIpList":[]}"#,
        )
        .unwrap();
        let new: ConfigDocument = serde_json::from_str(
            r#"{"mergeHostConfigs":[{"host":"image.xxx.com","pathPrefix":"/image","rate":0.5},
                                    {"host":"video.xxx.com","pathPrefix":"/video","rate":1}],
                "hostListConfig":[{"host":"cdn.xxx.com","rate":1},{"host":"cdn-bak.xxx.com","rate":1}],
                "reviveProbeInterval":300000,"configRequestInterval":600000,"publicIpList":[]}"#,
        )
        .unwrap();
        assert_eq!(
            summarize(Some(&old), &new),
            "hostListConfig: +cdn-bak.xxx.com, -cdn-old.xxx.com; \
             mergeHostConfigs: /image rate 1 -> 0.5, +/video (video.xxx.com); \
             reviveProbeInterval 600000 -> 300000"
        );
        assert_eq!(summarize(Some(&new), &new), "no change");
        assert_eq!(summarize(None, &new), "created: 2 hosts, 2 merge rules");
    }
}
