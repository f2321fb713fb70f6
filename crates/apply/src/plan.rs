//! The difference between two states, as the changes that turn one into the other.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use httpdns_catalog::{info, Kind, KINDS};

use super::StateFile;

/// A section of the file: a declarative resource kind, or the config modules (which are not
/// admin resources: they have versions and no delete).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Resource(Kind),
    Config,
}

impl Section {
    /// Every section in the order creates and updates are applied: the kinds in
    /// `httpdns_catalog::KINDS`'s dependency order, then config (which may name any host).
    pub fn all() -> impl DoubleEndedIterator<Item = Section> + Clone {
        KINDS.iter().filter(|k| k.declarative).map(|k| Section::Resource(k.kind)).chain([Section::Config])
    }

    /// The section's name in the file.
    pub fn name(self) -> &'static str {
        match self {
            Section::Resource(kind) => info(kind).section,
            Section::Config => "config",
        }
    }

    /// The admin API collection.
    pub fn base(self) -> &'static str {
        match self {
            Section::Resource(kind) => info(kind).base,
            Section::Config => "/admin/v1/config",
        }
    }

    /// A body as reads show it: secrets replaced. Plans compare and print these, never the
    /// bodies a file holds: a file may hold a mirror rule's real `secret_access_key` where
    /// the server shows `<redacted>`.
    pub fn shown(self, body: &Value) -> Value {
        match self {
            Section::Resource(kind) => httpdns_catalog::shown(kind, body.clone()),
            Section::Config => body.clone(),
        }
    }

    /// The admin URL of one entry (a CIDR's `/` percent-encoded).
    pub fn path(self, name: &str) -> String {
        match self {
            Section::Resource(kind) => info(kind).path(name),
            Section::Config => format!("{}/{}", self.base(), name.replace('/', "%2F")),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Create {
        kind: Section,
        name: String,
        spec: Value,
    },
    /// `fields`: the top-level fields that differ, with the current and the wanted value as
    /// reads show them (secrets replaced); `spec` is the whole wanted body, secrets included.
    Update {
        kind: Section,
        name: String,
        spec: Value,
        fields: Vec<(String, Value, Value)>,
    },
    Delete {
        kind: Section,
        name: String,
    },
}

impl Change {
    pub fn kind(&self) -> Section {
        match self {
            Change::Create { kind, .. } | Change::Update { kind, .. } | Change::Delete { kind, .. } => *kind,
        }
    }
    pub fn name(&self) -> &str {
        match self {
            Change::Create { name, .. } | Change::Update { name, .. } | Change::Delete { name, .. } => name,
        }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Create { kind, name, .. } => write!(f, "+ {}/{name}", kind.name()),
            Change::Delete { kind, name } => write!(f, "- {}/{name}", kind.name()),
            Change::Update { kind, name, fields, .. } => {
                write!(f, "~ {}/{name}:", kind.name())?;
                for (field, from, to) in fields {
                    write!(f, " {field}: {from} -> {to};")?;
                }
                Ok(())
            }
        }
    }
}

/// One section of `s`, by name and spec as JSON.
fn section(s: &StateFile, section: Section) -> BTreeMap<String, Value> {
    match section {
        Section::Resource(kind) => s.section(kind).clone(),
        Section::Config => s
            .config
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::to_value(v).expect("documents serialise")))
            .collect(),
    }
}

fn sections(s: &StateFile) -> Vec<(Section, BTreeMap<String, Value>)> {
    Section::all().map(|k| (k, section(s, k))).collect()
}

/// The changes that make `current` into `wanted`: creates and updates in [`Section::all`] order,
/// then (with `prune`) deletes in reverse order.
pub fn plan(current: &StateFile, wanted: &StateFile, prune: bool) -> Vec<Change> {
    let (cur, want) = (sections(current), sections(wanted));
    let mut changes = Vec::new();
    for ((kind, have), (_, need)) in cur.iter().zip(want.iter()) {
        for (name, spec) in need {
            let Some(old) = have.get(name) else {
                changes.push(Change::Create { kind: *kind, name: name.clone(), spec: spec.clone() });
                continue;
            };
            // Secrets are write-only: compared and printed as reads show them. A new secret
            // alone is no change (S3 keys rotate as pairs, with a new `access_key_id`); with
            // any other change the whole spec, secret included, is written.
            let (old, new) = (kind.shown(old), kind.shown(spec));
            if old != new {
                changes.push(Change::Update {
                    kind: *kind,
                    name: name.clone(),
                    spec: spec.clone(),
                    fields: field_diff(&old, &new),
                });
            }
        }
    }
    if prune {
        // Config modules keep their history and are never deleted (there is no DELETE for
        // them); a module missing from the file is left as it is.
        for ((kind, have), (_, need)) in
            cur.iter().zip(want.iter()).rev().filter(|((k, _), _)| *k != Section::Config)
        {
            for name in have.keys().filter(|n| !need.contains_key(*n)) {
                changes.push(Change::Delete { kind: *kind, name: name.clone() });
            }
        }
    }
    changes
}

fn field_diff(old: &Value, new: &Value) -> Vec<(String, Value, Value)> {
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        return vec![(String::new(), old.clone(), new.clone())];
    };
    let keys: std::collections::BTreeSet<&String> = o.keys().chain(n.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let (a, b) = (o.get(k).cloned().unwrap_or(Value::Null), n.get(k).cloned().unwrap_or(Value::Null));
            (a != b).then(|| (k.clone(), a, b))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use httpdns_catalog::kinds::{Domains, Networks, Nodes};
    use httpdns_core::model::mirror::REDACTED;

    use super::super::{Format, StateFile};
    use super::*;

    const BASE: &str = r#"
networks:
  1.0.1.0/24: {isp: telecom, region: beijing}
nodes:
  n1: {ip: 1.1.1.1, pool: edge, isp: telecom, region: beijing}
domains:
  www.example.com: {pool: edge, ttl: 60}
"#;

    #[test]
    fn defaults_filled_in_compare_equal_and_changes_are_exact() {
        let a = StateFile::parse(BASE, Format::Yaml).unwrap();
        // The same state with the defaults written out is no change.
        let mut b = a.clone();
        b.edit::<Nodes>(|nodes| nodes.get_mut("n1").unwrap().enabled = true);
        assert!(plan(&a, &b, true).is_empty());
        // One update, one create, one delete (with prune), in order.
        let mut want = a.clone();
        want.edit::<Domains>(|domains| domains.get_mut("www.example.com").unwrap().ttl = 120);
        want.edit::<Nodes>(|nodes| {
            nodes.insert(
                "n2".into(),
                serde_json::from_str(
                    r#"{"ip": "2.2.2.2", "pool": "edge", "isp": "unicom", "region": "shanghai"}"#,
                )
                .unwrap(),
            );
        });
        want.edit::<Networks>(BTreeMap::clear);
        let changes = plan(&a, &want, true);
        let shown: Vec<String> = changes.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            ["+ nodes/n2", "~ domains/www.example.com: ttl: 60 -> 120;", "- networks/1.0.1.0/24"]
        );
        // Without prune nothing is deleted.
        assert_eq!(plan(&a, &want, false).len(), 2);
    }

    #[test]
    fn secrets_are_neither_printed_nor_compared() {
        let rule = |secret: &str, ttl: u32| {
            format!(
                r#"{{"mirror_rules": {{"private": {{"path_prefix": "/p", "origin": "https://b.example.com",
                "ttl_s": {ttl}, "origin_auth": {{"kind": "s3", "access_key_id": "AKIAEXAMPLE",
                "secret_access_key": "{secret}", "region": "us-east-1"}}}}}}}}"#
            )
        };
        let state = |secret: &str, ttl: u32| StateFile::parse(&rule(secret, ttl), Format::Json).unwrap();
        // The server shows `<redacted>`; the file holds the secret: no change, applied again and again.
        let server = state(REDACTED, 60);
        assert!(plan(&server, &state("wJalrXUtnFEMI/K7MDENG", 60), false).is_empty());
        // Another field changed: the update prints no secret and writes it whole.
        let changes = plan(&server, &state("wJalrXUtnFEMI/K7MDENG", 120), false);
        assert_eq!(changes.len(), 1);
        let printed = changes[0].to_string();
        assert!(!printed.contains("wJalrXUtnFEMI"), "{printed}");
        assert!(printed.contains("ttl_s: 60 -> 120"), "{printed}");
        let Change::Update { spec, .. } = &changes[0] else { panic!("an update: {printed}") };
        assert_eq!(spec["origin_auth"]["secret_access_key"], "wJalrXUtnFEMI/K7MDENG");
    }

    #[test]
    fn the_file_has_one_section_per_declarative_kind() {
        // A kind declared in `httpdns_catalog::KINDS` but missing from `StateFile` (or the other
        // way round) fails here: the file's sections are exactly the plan's.
        let value = serde_json::to_value(StateFile::default()).unwrap();
        let fields: Vec<&str> = value.as_object().unwrap().keys().map(String::as_str).collect();
        let mut want: Vec<&str> = Section::all().map(Section::name).collect();
        let mut have = fields.clone();
        want.sort_unstable();
        have.sort_unstable();
        assert_eq!(have, want);
        // And every section is read: a state with one entry in each plans one create each.
        let full = StateFile::parse(&full(), Format::Json).unwrap();
        let creates = plan(&StateFile::default(), &full, false);
        let named: Vec<&str> = creates.iter().map(|c| c.kind().name()).collect();
        assert_eq!(named, Section::all().map(Section::name).collect::<Vec<_>>());
    }

    /// A file with one entry in every section: each declarative kind's example
    /// (`KindInfo::example`), and a config module.
    fn full() -> String {
        let mut file = serde_json::Map::new();
        for info in KINDS.iter().filter(|k| k.declarative) {
            let (name, body) = info.example;
            let spec: Value = serde_json::from_str(body).unwrap();
            file.insert(info.section.into(), serde_json::json!({ name: spec }));
        }
        file.insert(
            "config".into(),
            serde_json::json!({"cdn": {"mergeHostConfigs": [], "hostListConfig": [{"host": "cdn.xxx.com", "rate": 1}], "reviveProbeInterval": 600000, "configRequestInterval": 600000, "publicIpList": []}}),
        );
        Value::Object(file).to_string()
    }

    #[test]
    fn formats_round_trip_and_bad_files_name_the_field() {
        let a = StateFile::parse(BASE, Format::Yaml).unwrap();
        for f in [Format::Yaml, Format::Toml, Format::Json] {
            let text = a.render(f).unwrap();
            assert_eq!(StateFile::parse(&text, f).unwrap(), a, "{f:?}:\n{text}");
        }
        let err = StateFile::parse(
            "nodes:\n  n1: {ip: 1.1.1.1, pool: edge, isp: t, region: r, colour: red}\n",
            Format::Yaml,
        )
        .unwrap_err();
        assert!(err.contains("colour"), "{err}");
        let err =
            StateFile::parse("domains:\n  a.example.com: {pool: edge, ttl: 0}\n", Format::Yaml).unwrap_err();
        assert!(err.starts_with("domains.a.example.com.ttl"), "{err}");
        assert!(StateFile::parse("unknown_section: {}\n", Format::Yaml).is_err());
        // Names are compared as the server stores them.
        let upper =
            StateFile::parse(&BASE.replace("www.example.com", "WWW.Example.com."), Format::Yaml).unwrap();
        assert!(plan(&a, &upper, true).is_empty(), "{:?}", plan(&a, &upper, true));
        let err = StateFile::parse("networks:\n  1.0.1.7/24: {isp: t}\n", Format::Yaml).unwrap_err();
        assert!(err.contains("host bits"), "{err}");
        let twice = "domains:\n  a.example.com: {pool: p}\n  A.example.com: {pool: q}\n";
        assert!(StateFile::parse(twice, Format::Yaml).unwrap_err().contains("same resource"));
    }
}
