//! No production source file passes 600 lines (ARCHITECTURE.md, "Rules kept by tools"): a file
//! that grows past it is split by what its parts hold, into small files named for them. Test
//! files (`tests.rs`, `*_tests.rs`, anything under a `tests/` directory) may be longer.

use std::path::{Path, PathBuf};

/// The most lines a production source file may have.
const MAX_LINES: usize = 600;

/// Files over the limit while they move, with why. The list only shrinks: an entry whose file
/// is gone or back under the limit fails the test until it is taken off.
const MOVING: &[(&str, &str)] = &[];

fn is_test_file(path: &Path) -> bool {
    path.components().any(|c| c.as_os_str() == "tests")
        || path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with("tests.rs"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_production_source_file_passes_600_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    for krate in std::fs::read_dir(root.join("crates")).unwrap() {
        rust_files(&krate.unwrap().path().join("src"), &mut files);
    }
    assert!(files.len() > 100, "found only {} source files under {}", files.len(), root.display());

    let mut over = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(root).unwrap();
        if is_test_file(relative) {
            continue;
        }
        let lines = std::fs::read_to_string(file).unwrap().lines().count();
        let name = relative.to_string_lossy().into_owned();
        if lines > MAX_LINES && !MOVING.iter().any(|(m, _)| *m == name) {
            over.push(format!("{name}: {lines} lines"));
        }
    }
    assert!(
        over.is_empty(),
        "production source files over {MAX_LINES} lines; split each by what its parts hold:\n{}",
        over.join("\n")
    );

    for (name, why) in MOVING {
        let lines = std::fs::read_to_string(root.join(name)).map(|t| t.lines().count()).unwrap_or(0);
        assert!(
            lines > MAX_LINES,
            "{name} ({why}) is gone or within {MAX_LINES} lines ({lines}): take it off MOVING"
        );
    }
}
