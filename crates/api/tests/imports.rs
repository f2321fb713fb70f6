//! No import loop between this crate's files: a file's `crate::` and `super::` paths (outside
//! comments and its `#[cfg(test)]` part) name the modules it depends on, and that graph has no
//! cycle, so reading the edge goes downhill (ARCHITECTURE.md, `crates/api`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Files of the httpdns product whose loop the answer engine's move out of this crate undoes
/// (issue 39); every other file is held to the rule now.
const UNTANGLED_ELSEWHERE: &[&str] = &[];

/// Every `.rs` file under `dir` as (module path, source).
fn modules(dir: &Path, prefix: &[String], out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if path.is_dir() {
            let mut p = prefix.to_vec();
            p.push(name);
            modules(&path, &p, out);
        } else if let Some(stem) = name.strip_suffix(".rs") {
            let mut p = prefix.to_vec();
            if stem != "mod" && stem != "lib" {
                p.push(stem.to_owned());
            }
            out.insert(p.join("::"), std::fs::read_to_string(&path).unwrap());
        }
    }
}

/// The source without comments and without its tests.
fn code(source: &str) -> String {
    let source = source.split("#[cfg(test)]").next().unwrap_or("");
    source.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// The module a path names: the longest prefix that is a file of this crate.
fn resolve(from: &str, path: &[&str], files: &BTreeMap<String, String>) -> Option<String> {
    let mut base: Vec<&str> = if from.is_empty() { vec![] } else { from.split("::").collect() };
    let mut rest = path;
    match rest.first() {
        Some(&"crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some(&"super") => {
            while rest.first() == Some(&"super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    (0..=rest.len())
        .rev()
        .map(|n| base.iter().chain(&rest[..n]).copied().collect::<Vec<_>>().join("::"))
        .find(|m| files.contains_key(m))
}

/// What each file depends on.
fn graph(files: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut g = BTreeMap::new();
    for (module, source) in files {
        let code = code(source);
        let mut deps = BTreeSet::new();
        let words: Vec<&str> = code.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).collect();
        for w in words.iter().filter(|w| w.starts_with("crate::") || w.starts_with("super::")) {
            let parts: Vec<&str> = w.split("::").filter(|p| !p.is_empty()).collect();
            deps.extend(resolve(module, &parts, files));
        }
        // `use crate::x::{a, b}`: each name of the group.
        for group in code.split("::{").skip(1) {
            let head =
                code[..code.len() - group.len() - 3].rsplit(|c: char| c.is_whitespace()).next().unwrap_or("");
            if !(head.starts_with("crate") || head.starts_with("super")) {
                continue;
            }
            let names = group.split('}').next().unwrap_or("");
            for name in names.split(',') {
                let name = name.split_whitespace().next().unwrap_or("");
                let mut parts: Vec<&str> = head.split("::").collect();
                parts.extend(name.split("::").filter(|p| !p.is_empty() && *p != "self"));
                deps.extend(resolve(module, &parts, files));
            }
        }
        deps.remove(module);
        g.insert(module.clone(), deps);
    }
    g
}

/// The cycles of `g`: its strongly connected components of more than one file.
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for d in g.get(&m).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    todo.push(d.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> = g.keys().map(|m| (m, reach(m))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for m in g.keys() {
        let comp: BTreeSet<String> = g
            .keys()
            .filter(|n| *n == m || (reached[m].contains(*n) && reached[*n].contains(m)))
            .cloned()
            .collect();
        if comp.len() > 1 && !out.contains(&comp) {
            out.push(comp);
        }
    }
    out
}

#[test]
fn no_file_imports_one_that_imports_it_back() {
    let mut files = BTreeMap::new();
    modules(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &[], &mut files);
    let g = graph(&files);
    assert!(
        g.get("config_center::push").is_some_and(|d| d.contains("config_center::app")),
        "the graph is read"
    );
    let loops: Vec<_> = cycles(&g)
        .into_iter()
        .filter(|c| !c.iter().all(|m| UNTANGLED_ELSEWHERE.contains(&m.as_str())))
        .collect();
    assert!(loops.is_empty(), "import loops between files: {loops:?}");
}
