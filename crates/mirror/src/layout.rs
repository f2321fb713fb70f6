//! Where a store path lives on the local disk, and in an S3 bucket.
//!
//! A store path is a list of parts (`o`, the rule prefix, the key's segments; `q/...` and
//! `v/...` add the query or the variant's chain), each already percent-encoded by
//! `object_store`'s `PathPart`, which leaves no `/`, no `.`/`..`, and never a raw `~` or `#`.
//!
//! **Local disk.** Every part is a directory and the copy is the file `~` inside the last one:
//! `o/p/c.jpg` is `o/p/c.jpg/~`, `o/p/c.jpg/d` is `o/p/c.jpg/d/~`. A key and its "children"
//! therefore never need the same name as a file and as a directory, which object stores allow
//! and a file system does not. A part longer than [`MAX_LOCAL_PART`] bytes becomes `#` and
//! the SHA-256 of the part in hex, so no file name reaches the 255-byte limit of common file
//! systems, however long a valid key segment, query or chain is. `~` and `#` cannot come out
//! of `PathPart`, so neither rule can collide with a plain part. The mapping is a pure
//! function of the store path: every replica computes the same one.
//!
//! **S3.** The same shape: the key is the store path with `/~` appended. S3 and OSS allow a
//! key and its children side by side, but S3-compatible stores built on a file system (MinIO,
//! whose `XMinioParentIsObject` refuses `a/b` when `a` is an object; `s3s-fs`) do not, and
//! the leaf name makes both work everywhere. A key longer than S3's 1,024 bytes has its last
//! part replaced by `#<sha256>` (its parents stay, so a prefix purge of a parent lists it).
//!
//! Version 1 of both layouts was the store path itself as the file path or key. Local copies of
//! that version are moved at start ([`migrate_v1`]); remote ones are found at their old key on
//! a miss and moved then ([`remote_key_v1`]).

use std::path::{Path as FsPath, PathBuf};

use object_store::path::Path;
use sha2::Digest as _;

/// The file name of a copy inside its key's directory.
pub const OBJECT_FILE: &str = "~";
/// Longest part kept as it is in a local file name.
pub const MAX_LOCAL_PART: usize = 200;
/// S3's object key limit, in bytes.
pub const MAX_REMOTE_KEY: usize = 1024;

fn hashed(part: &str) -> String {
    format!("#{}", hex::encode(sha2::Sha256::digest(part.as_bytes())))
}

fn local_part(part: &str) -> std::borrow::Cow<'_, str> {
    if part.len() > MAX_LOCAL_PART {
        hashed(part).into()
    } else {
        part.into()
    }
}

/// The directory of a store path (or prefix) under `root`.
pub fn local_dir(root: &FsPath, location: &Path) -> PathBuf {
    let mut p = root.to_path_buf();
    for part in location.parts() {
        p.push(local_part(part.as_ref()).as_ref());
    }
    p
}

/// The file of the copy at a store path.
pub fn local_file(root: &FsPath, location: &Path) -> PathBuf {
    let mut p = local_dir(root, location);
    p.push(OBJECT_FILE);
    p
}

/// The key of a store path in an S3 bucket.
pub fn remote_key(location: &Path) -> Path {
    let key = format!("{}/{OBJECT_FILE}", location.as_ref());
    if key.len() <= MAX_REMOTE_KEY {
        return Path::parse(key).unwrap_or_else(|_| location.clone());
    }
    let parts: Vec<String> = location.parts().map(|p| p.as_ref().to_owned()).collect();
    let (last, parents) = parts.split_last().expect("a long path has parts");
    // The parents alone fit: every key segment is at most 255 bytes and a key at most 1,024
    // (`ObjectKey`), and the namespace and rule prefix are short.
    let key = format!("{}/{}/{OBJECT_FILE}", parents.join("/"), hashed(last));
    Path::parse(key).unwrap_or_else(|_| location.clone())
}

/// Where version 1 of the remote layout kept a store path: the path itself (when it fitted).
pub fn remote_key_v1(location: &Path) -> Option<Path> {
    (location.as_ref().len() <= MAX_REMOTE_KEY).then(|| location.clone())
}

/// The store path a remote key (of this layout) holds the copy of, if it is one of ours.
pub fn is_remote_copy(key: &Path) -> bool {
    key.filename() == Some(OBJECT_FILE)
}

/// Every copy file under `dir` (recursively), in no particular order.
pub fn list_files(dir: &FsPath) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() && entry.file_name() == OBJECT_FILE {
                out.push(entry.path());
            }
        }
    }
    Ok(out)
}

/// Renames a staged copy to `target` and makes the rename durable. An eviction or purge may
/// prune the (then empty) directory between its creation and the rename: that is retried.
pub fn persist(mut staged: tempfile::NamedTempFile, target: &FsPath) -> std::io::Result<()> {
    let dir = target.parent().ok_or_else(|| std::io::Error::other("a copy's file has a directory"))?;
    let mut attempt = 0;
    loop {
        std::fs::create_dir_all(dir)?;
        match staged.persist(target) {
            Ok(_) => break,
            Err(e) if e.error.kind() == std::io::ErrorKind::NotFound && attempt < 3 => {
                attempt += 1;
                staged = e.file;
            }
            Err(e) => return Err(e.error),
        }
    }
    // The rename is durable only once the directory entry is.
    std::fs::File::open(dir)?.sync_all()
}

/// Removes the copy file `file`, then every directory above it that is left empty, up to
/// (not including) `root`: a purge leaves nothing behind. `false` when there was no file.
pub fn remove_file(root: &FsPath, file: &FsPath) -> std::io::Result<bool> {
    match std::fs::remove_file(file) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    }
    prune_empty(root, file.parent());
    Ok(true)
}

/// Removes empty directories from `dir` upwards, stopping at `root` or at the first that is
/// not empty (or that another writer just filled: `remove_dir` only removes empty ones).
fn prune_empty(root: &FsPath, mut dir: Option<&FsPath>) {
    while let Some(d) = dir {
        if d == root || !d.starts_with(root) || std::fs::remove_dir(d).is_err() {
            return;
        }
        dir = d.parent();
    }
}

/// Moves every copy of layout version 1 (a store path as a file path under `old`) into this
/// layout under `root`, one rename each, then removes what is left of `old`. A crash in the
/// middle is resumed at the next start: moved copies are gone from `old`. Returns how many
/// were moved.
pub fn migrate_v1(old: &FsPath, root: &FsPath) -> std::io::Result<u64> {
    if !old.is_dir() {
        return Ok(0);
    }
    let mut moved = 0;
    let mut stack = vec![old.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                stack.push(entry.path());
                continue;
            }
            if !kind.is_file() {
                continue;
            }
            let rel = entry.path();
            let rel = rel.strip_prefix(old).expect("below old");
            let parts: Vec<&str> = rel.iter().filter_map(|c| c.to_str()).collect();
            // Version 1 file names were `PathPart`s; anything else is not ours.
            let Ok(location) = Path::parse(parts.join("/")) else { continue };
            let target = local_file(root, &location);
            std::fs::create_dir_all(target.parent().expect("has a parent"))?;
            std::fs::rename(entry.path(), &target)?;
            moved += 1;
        }
    }
    std::fs::remove_dir_all(old)?;
    Ok(moved)
}

/// Removes the staging files of fills that a crash left behind (every file in `tmp`; the
/// process is the only writer there and has not started filling yet). Returns how many.
pub fn clear_staging(tmp: &FsPath) -> std::io::Result<u64> {
    let mut n = 0;
    for entry in std::fs::read_dir(tmp)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::remove_file(entry.path())?;
            n += 1;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::store_path;

    #[test]
    fn a_key_and_its_children_have_different_files() {
        let root = FsPath::new("/r");
        let parent = local_file(root, &store_path("o", ["p", "c.jpg"]));
        let child = local_file(root, &store_path("o", ["p", "c.jpg", "d"]));
        assert_eq!(parent, PathBuf::from("/r/o/p/c.jpg/~"));
        assert_eq!(child, PathBuf::from("/r/o/p/c.jpg/d/~"));
        assert!(!child.starts_with(&parent), "the parent's copy is a file beside the child's directory");
        // A segment spelled like the copy file or a hashed part stays distinct.
        assert_eq!(local_file(root, &store_path("o", ["p", "~"])), PathBuf::from("/r/o/p/%7E/~"));
        assert_eq!(local_file(root, &store_path("o", ["#x"])), PathBuf::from("/r/o/%23x/~"));
    }

    #[test]
    fn long_parts_are_hashed_below_the_file_name_limit() {
        let root = FsPath::new("/r");
        let cjk = "中".repeat(28) + ".jpg";
        let angle = "<".repeat(255);
        for seg in [cjk.as_str(), angle.as_str()] {
            let file = local_file(root, &store_path("o", ["p", seg]));
            for c in file.iter() {
                assert!(c.len() <= 255, "{c:?}");
            }
            assert_eq!(file, local_file(root, &store_path("o", ["p", seg])), "the same on every replica");
        }
        assert_ne!(
            local_file(root, &store_path("o", ["p", &"a".repeat(300)])),
            local_file(root, &store_path("o", ["p", &"a".repeat(301)]))
        );
    }

    #[test]
    fn remote_keys_fit_s3_and_file_system_backed_stores() {
        let short = store_path("o", ["p", "a.jpg"]);
        assert_eq!(remote_key(&short).as_ref(), "o/p/a.jpg/~");
        assert_eq!(remote_key(&store_path("o", ["p", "a.jpg", "b"])).as_ref(), "o/p/a.jpg/b/~");
        assert_eq!(remote_key_v1(&short), Some(short));
        let long =
            store_path("q", ["p", &"a".repeat(255), &"b".repeat(255), &"c".repeat(255), &"t".repeat(600)]);
        let key = remote_key(&long);
        assert!(key.as_ref().len() <= MAX_REMOTE_KEY, "{}", key.as_ref().len());
        assert!(key.as_ref().starts_with(&format!("q/p/{}/", "a".repeat(255))));
        assert!(key.as_ref().ends_with("/~") && is_remote_copy(&key));
        assert_eq!(remote_key_v1(&long), None);
    }

    #[test]
    fn purge_removes_the_directories_it_emptied_and_migration_moves_v1_copies() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        let a = local_file(&root, &store_path("o", ["p", "c.jpg"]));
        let b = local_file(&root, &store_path("o", ["p", "c.jpg", "d"]));
        for f in [&a, &b] {
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, b"x").unwrap();
        }
        let mut listed = list_files(&local_dir(&root, &store_path("o", ["p"]))).unwrap();
        listed.sort();
        let mut both = vec![a.clone(), b.clone()];
        both.sort();
        assert_eq!(listed, both);
        assert!(remove_file(&root, &b).unwrap());
        assert!(!b.parent().unwrap().exists(), "the emptied directory went");
        assert!(a.exists());
        assert!(remove_file(&root, &a).unwrap());
        assert!(!root.join("o").exists() && root.exists());
        assert!(!remove_file(&root, &a).unwrap());

        // Version 1: the store path as a file path.
        let old = dir.path().join("objects");
        std::fs::create_dir_all(old.join("o/p")).unwrap();
        std::fs::write(old.join("o/p/c.jpg"), b"v1 copy").unwrap();
        std::fs::create_dir_all(old.join("v/p/c.jpg")).unwrap();
        std::fs::write(old.join("v/p/c.jpg/image%2Fresize,w_10"), b"v1 variant").unwrap();
        assert_eq!(migrate_v1(&old, &root).unwrap(), 2);
        assert!(!old.exists());
        assert_eq!(std::fs::read(&a).unwrap(), b"v1 copy");
        let variant = Path::parse("v/p/c.jpg/image%2Fresize,w_10").unwrap();
        assert_eq!(std::fs::read(local_file(&root, &variant)).unwrap(), b"v1 variant");
        assert_eq!(migrate_v1(&old, &root).unwrap(), 0, "nothing left to move");
    }
}
