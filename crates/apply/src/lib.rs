//! `httpdns apply -f FILE` and `httpdns export`: the admin state (networks, pools, nodes,
//! domains, mirror rules, image styles, config modules) as one declarative YAML, TOML or JSON file,
//! reconciled through the admin API.
//!
//! The file is parsed into the same spec types the server stores, so it is validated (unknown
//! fields refused, types checked) before anything is sent, and both sides are compared with
//! their defaults filled in: a file that omits a default and a server that filled it in agree.
//! [`plan`] is pure; [`client`] does the HTTP. Creates and updates go in dependency order
//! (networks, pools, nodes, domains, mirror rules, image styles, config), deletes (only with `--prune`) in
//! the reverse order. Config modules are published with `If-Match` on the version read, so a
//! publish that raced the plan fails instead of overwriting it.

pub mod client;
mod plan;

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::OnceLock;

use httpdns_catalog::{with_kind, Kind, KindVisitor, ResourceKind, Validation, KINDS};
use httpdns_config::ConfigDocument;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use plan::{plan, Change, Section};

/// The whole declarative state: one section per declarative kind of `httpdns_catalog::KINDS`,
/// named by its `section` and read as its `ResourceKind::Spec`, then `config`. Missing sections
/// are empty; an unknown one is an error. Nothing here names a kind: a kind declared in the
/// catalog is a section of the file (`the_file_has_one_section_per_declarative_kind`).
#[derive(Debug, Clone, PartialEq)]
pub struct StateFile {
    /// By kind (every declarative kind present): name → spec as its type serialises it, so
    /// defaults are filled in and two spellings of one spec compare equal.
    sections: BTreeMap<Kind, BTreeMap<String, Value>>,
    pub config: BTreeMap<String, ConfigDocument>,
}

impl Default for StateFile {
    fn default() -> Self {
        let sections = declarative().map(|k| (k, BTreeMap::new())).collect();
        Self { sections, config: BTreeMap::new() }
    }
}

/// The declarative kinds, in `KINDS` order.
fn declarative() -> impl DoubleEndedIterator<Item = Kind> + Clone {
    KINDS.iter().filter(|k| k.declarative).map(|k| k.kind)
}

/// The file's top-level names: the declarative kinds' sections, then `config`.
fn field_names() -> &'static [&'static str] {
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    NAMES.get_or_init(|| declarative().map(|k| httpdns_catalog::info(k).section).chain(["config"]).collect())
}

/// File formats, chosen by extension (`.toml`; `.json`; anything else is YAML).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Yaml,
    Toml,
    Json,
}

impl Format {
    pub fn of_path(path: &std::path::Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("toml") => Format::Toml,
            Some("json") => Format::Json,
            _ => Format::Yaml,
        }
    }
}

impl StateFile {
    pub fn parse(text: &str, format: Format) -> Result<Self, String> {
        let mut state: StateFile = match format {
            Format::Yaml => serde_norway::from_str(text).map_err(|e| e.to_string())?,
            Format::Toml => toml::from_str(text).map_err(|e| e.to_string())?,
            Format::Json => serde_json::from_str(text).map_err(|e| e.to_string())?,
        };
        state.canonicalize()?;
        state.validate()?;
        for doc in state.config.values_mut() {
            *doc = doc.content();
        }
        Ok(state)
    }

    /// The section of a declarative `kind`: name → spec as JSON (empty for any other kind).
    pub fn section(&self, kind: Kind) -> &BTreeMap<String, Value> {
        static EMPTY: BTreeMap<String, Value> = BTreeMap::new();
        self.sections.get(&kind).unwrap_or(&EMPTY)
    }

    /// The section of `R` as its spec type.
    pub fn get<R: ResourceKind>(&self) -> BTreeMap<String, R::Spec> {
        self.section(R::KIND)
            .iter()
            .map(|(n, v)| (n.clone(), serde_json::from_value(v.clone()).expect("sections hold parsed specs")))
            .collect()
    }

    /// Changes the section of `R` through its spec type.
    pub fn edit<R: ResourceKind>(&mut self, change: impl FnOnce(&mut BTreeMap<String, R::Spec>)) {
        let mut typed = self.get::<R>();
        change(&mut typed);
        self.sections.insert(R::KIND, to_values::<R>(typed).expect("specs serialise"));
    }

    /// Replaces the section of `kind` with `specs` as the server sent them, read as the kind's
    /// spec type (so they compare with a file's like for like).
    pub(crate) fn set_section(&mut self, kind: Kind, specs: BTreeMap<String, Value>) -> Result<(), String> {
        struct Read(Option<BTreeMap<String, Value>>, Option<Result<BTreeMap<String, Value>, String>>);
        impl KindVisitor for Read {
            fn visit<R: ResourceKind>(&mut self) {
                let section = R::INFO.section;
                let mut typed = BTreeMap::new();
                for (name, v) in self.0.take().into_iter().flatten() {
                    match serde_json::from_value::<R::Spec>(v) {
                        Ok(spec) => drop(typed.insert(name, spec)),
                        Err(e) => return self.1 = Some(Err(format!("{section}/{name}: {e}"))),
                    }
                }
                self.1 = Some(to_values::<R>(typed).map_err(|e| e.to_string()));
            }
        }
        let mut read = Read(Some(specs), None);
        with_kind(kind, &mut read);
        self.sections.insert(kind, read.1.expect("a declared kind")?);
        Ok(())
    }

    /// Names as the server stores them (`Www.Example.com.` is `www.example.com`, IPv6 CIDRs
    /// compressed), so the plan compares like with like; two keys naming one resource are an
    /// error.
    fn canonicalize(&mut self) -> Result<(), String> {
        struct Keys<'s>(&'s mut BTreeMap<String, Value>, Result<(), String>);
        impl KindVisitor for Keys<'_> {
            fn visit<R: ResourceKind>(&mut self) {
                let section = R::info().section;
                let mut out = BTreeMap::new();
                for (raw, v) in std::mem::take(self.0) {
                    let name = match R::canonical_name(&raw) {
                        Ok(name) => name,
                        Err(e) => return self.1 = Err(format!("{section}.{raw}: {}", e.message)),
                    };
                    if out.insert(name.clone(), v).is_some() {
                        return self.1 =
                            Err(format!("{section}.{raw}: names the same resource as another key ({name})"));
                    }
                }
                *self.0 = out;
            }
        }
        for (kind, section) in &mut self.sections {
            let mut keys = Keys(section, Ok(()));
            with_kind(*kind, &mut keys);
            keys.1?;
        }
        for module in self.config.keys() {
            httpdns_config::validate_module(module).map_err(|e| format!("config.{module}: {}", e.message))?;
        }
        Ok(())
    }

    /// What the server would refuse, found before anything is sent. What depends on the
    /// server's settings (private node addresses, local origins) is allowed here and checked
    /// there.
    fn validate(&self) -> Result<(), String> {
        struct Check<'s>(&'s BTreeMap<String, Value>, Result<(), String>);
        impl KindVisitor for Check<'_> {
            fn visit<R: ResourceKind>(&mut self) {
                for (n, v) in self.0 {
                    let spec: R::Spec =
                        serde_json::from_value(v.clone()).expect("sections hold parsed specs");
                    if let Err(e) = R::validate(&spec, &Validation::PERMISSIVE) {
                        return self.1 = Err(format!("{}.{n}.{}: {}", R::info().section, e.field, e.message));
                    }
                }
            }
        }
        for (kind, section) in &self.sections {
            let mut check = Check(section, Ok(()));
            with_kind(*kind, &mut check);
            check.1?;
        }
        for (n, s) in &self.config {
            s.validate().map_err(|e| format!("config.{n}.{}: {}", e.field, e.message))?;
        }
        Ok(())
    }

    pub fn render(&self, format: Format) -> Result<String, String> {
        let mut value = serde_json::to_value(self).map_err(|e| e.to_string())?;
        // `configVersion` belongs to the server's history, not to the declared content.
        if let Some(cfg) = value.get_mut("config").and_then(|c| c.as_object_mut()) {
            for doc in cfg.values_mut() {
                if let Some(d) = doc.as_object_mut() {
                    d.remove("configVersion");
                }
            }
        }
        strip_nulls(&mut value);
        match format {
            Format::Yaml => serde_norway::to_string(&value).map_err(|e| e.to_string()),
            Format::Toml => toml::to_string_pretty(&value).map_err(|e| e.to_string()),
            Format::Json => serde_json::to_string_pretty(&value).map(|s| s + "\n").map_err(|e| e.to_string()),
        }
    }
}

/// A section's specs as JSON.
fn to_values<R: ResourceKind>(
    typed: BTreeMap<String, R::Spec>,
) -> Result<BTreeMap<String, Value>, serde_json::Error> {
    typed.into_iter().map(|(n, spec)| Ok((n, serde_json::to_value(spec)?))).collect()
}

impl Serialize for StateFile {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.sections.len() + 1))?;
        for kind in declarative() {
            map.serialize_entry(httpdns_catalog::info(kind).section, self.section(kind))?;
        }
        map.serialize_entry("config", &self.config)?;
        map.end()
    }
}

impl<'de> Deserialize<'de> for StateFile {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_struct("StateFile", field_names(), FileVisitor)
    }
}

struct FileVisitor;

impl<'de> de::Visitor<'de> for FileVisitor {
    type Value = StateFile;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of sections")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StateFile, A::Error> {
        let mut state = StateFile::default();
        let mut seen = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let Some(&name) = field_names().iter().find(|n| **n == key) else {
                return Err(de::Error::unknown_field(&key, field_names()));
            };
            if seen.contains(&name) {
                return Err(de::Error::duplicate_field(name));
            }
            seen.push(name);
            match declarative().find(|k| httpdns_catalog::info(*k).section == name) {
                Some(kind) => drop(state.sections.insert(kind, map.next_value_seed(SectionSeed(kind))?)),
                None => state.config = map.next_value()?,
            }
        }
        Ok(state)
    }
}

/// Reads one section as its kind's spec type, straight from the file's deserializer (so errors
/// keep their place in the file).
struct SectionSeed(Kind);

impl<'de> DeserializeSeed<'de> for SectionSeed {
    type Value = BTreeMap<String, Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        struct Read<'de, D: Deserializer<'de>>(
            Option<D>,
            Option<Result<BTreeMap<String, Value>, D::Error>>,
            PhantomData<&'de ()>,
        );
        impl<'de, D: Deserializer<'de>> KindVisitor for Read<'de, D> {
            fn visit<R: ResourceKind>(&mut self) {
                let deserializer = self.0.take().expect("one kind");
                self.1 = Some(
                    BTreeMap::<String, R::Spec>::deserialize(deserializer)
                        .and_then(|typed| to_values::<R>(typed).map_err(de::Error::custom)),
                );
            }
        }
        let mut read = Read(Some(deserializer), None, PhantomData);
        with_kind(self.0, &mut read);
        read.1.expect("a declared kind")
    }
}

/// TOML has no null; absent and null mean the same to every spec.
fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}
