//! The mirror's stored copies in a backup: an opaque copy, byte for byte, of the local
//! directory tree or of the objects under the bucket's prefix. Nothing here reads the copies'
//! format, so a change of the mirror's layout needs no change of backups.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use futures_util::TryStreamExt as _;
use object_store::{ObjectStore, ObjectStoreExt as _};
use tokio::io::AsyncWriteExt as _;

use super::archive::{MirrorSummary, Writer};
use crate::{Config, MirrorStore};

/// Where archive entries of stored copies start.
pub(crate) const PREFIX: &str = "mirror/";

/// The configured store of copies.
pub(crate) enum Target {
    Local(PathBuf),
    S3(Arc<dyn ObjectStore>),
}

impl Target {
    pub(crate) fn of(config: &Config) -> anyhow::Result<Self> {
        Ok(match config.mirror_store {
            MirrorStore::Local => Target::Local(crate::local_objects_dir(config)),
            MirrorStore::S3 { .. } => Target::S3(crate::s3_objects(config)?),
        })
    }

    fn name(&self) -> &'static str {
        match self {
            Target::Local(_) => "local",
            Target::S3(_) => "s3",
        }
    }

    /// Whether the store holds any copy.
    pub(crate) async fn is_empty(&self) -> anyhow::Result<bool> {
        match self {
            Target::Local(root) => Ok(local_files(root)?.is_empty()),
            Target::S3(store) => {
                Ok(store.list(None).try_next().await.context("listing the bucket")?.is_none())
            }
        }
    }

    /// Removes every copy (a forced restore replaces the store's content).
    pub(crate) async fn clear(&self) -> anyhow::Result<()> {
        match self {
            Target::Local(root) => match std::fs::remove_dir_all(root) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e).with_context(|| format!("removing {}", root.display())),
            },
            Target::S3(store) => {
                let keys: Vec<_> = store.list(None).map_ok(|m| m.location).try_collect().await?;
                for k in keys {
                    store.delete(&k).await.with_context(|| format!("deleting {k}"))?;
                }
                Ok(())
            }
        }
    }

    /// Copies every stored copy into the archive under [`PREFIX`], in name order. A copy that
    /// disappears while the backup runs (purged) is left out; one replaced meanwhile is taken
    /// whole, old or new (the mirror replaces files by renaming, and objects atomically).
    pub(crate) async fn backup<W: Write>(
        &self,
        w: &mut Writer<W>,
        spool_dir: &Path,
    ) -> anyhow::Result<MirrorSummary> {
        let mut summary = MirrorSummary { store: self.name().to_owned(), ..MirrorSummary::default() };
        match self {
            Target::Local(root) => {
                for rel in local_files(root)? {
                    let path = root.join(&rel);
                    let file = match std::fs::File::open(&path) {
                        Ok(f) => f,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
                    };
                    let size = file.metadata()?.len();
                    w.add(&format!("{PREFIX}{rel}"), size, file)
                        .with_context(|| format!("archiving {}", path.display()))?;
                    summary.objects += 1;
                    summary.bytes += size;
                }
            }
            Target::S3(store) => {
                let mut metas: Vec<_> = store.list(None).try_collect().await.context("listing the bucket")?;
                metas.sort_by(|a, b| a.location.as_ref().cmp(b.location.as_ref()));
                for meta in metas {
                    // Spooled to a file: an entry's size goes before its content, and objects
                    // can be larger than memory should hold.
                    let mut spool = tempfile::tempfile_in(spool_dir)?;
                    let got = match store.get(&meta.location).await {
                        Ok(g) => g,
                        Err(object_store::Error::NotFound { .. }) => continue,
                        Err(e) => return Err(e).with_context(|| format!("reading {}", meta.location)),
                    };
                    let mut stream = got.into_stream();
                    let mut size = 0u64;
                    while let Some(chunk) = stream.try_next().await? {
                        spool.write_all(&chunk)?;
                        size += chunk.len() as u64;
                    }
                    std::io::Seek::rewind(&mut spool)?;
                    w.add(&format!("{PREFIX}{}", meta.location), size, spool)
                        .with_context(|| format!("archiving {}", meta.location))?;
                    summary.objects += 1;
                    summary.bytes += size;
                }
            }
        }
        Ok(summary)
    }

    /// Writes one copy (`rel`: the entry's path after [`PREFIX`], already checked to be a
    /// plain relative path) atomically: a temp file, fsync, rename; or one upload.
    pub(crate) async fn restore(&self, rel: &str, data: &mut dyn Read) -> anyhow::Result<()> {
        match self {
            Target::Local(root) => {
                let path = root.join(rel);
                let dir = path.parent().expect("a file under the root");
                std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
                let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
                std::io::copy(data, &mut tmp)?;
                tmp.as_file().sync_all()?;
                tmp.persist(&path).with_context(|| format!("writing {}", path.display()))?;
                if let Ok(d) = std::fs::File::open(dir) {
                    let _ = d.sync_all();
                }
                Ok(())
            }
            Target::S3(store) => {
                let location =
                    object_store::path::Path::parse(rel).with_context(|| format!("object key {rel:?}"))?;
                // Multipart above the writer's buffer, so a large copy never sits in memory.
                let mut up = object_store::buffered::BufWriter::new(store.clone(), location);
                let mut buf = vec![0u8; 256 * 1024];
                loop {
                    let n = data.read(&mut buf)?;
                    if n == 0 {
                        break;
                    }
                    up.write_all(&buf[..n]).await?;
                }
                up.shutdown().await.with_context(|| format!("uploading {rel}"))?;
                Ok(())
            }
        }
    }
}

/// Every regular file under `root`, as `/`-separated relative paths in name order (none when
/// `root` does not exist). Anything but files and directories is an error: a backup that
/// cannot copy something must not pretend it did.
fn local_files(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
        };
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            let name =
                name.to_str().with_context(|| format!("{}: a file name that is not UTF-8", dir.display()))?;
            let child = if rel.is_empty() { name.to_owned() } else { format!("{rel}/{name}") };
            let ty = entry.file_type()?;
            if ty.is_dir() {
                stack.push((entry.path(), child));
            } else if ty.is_file() {
                out.push(child);
            } else {
                anyhow::bail!("{}: neither a file nor a directory", entry.path().display());
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_files_are_listed_in_order_and_other_kinds_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(local_files(&dir.path().join("missing")).unwrap().is_empty());
        std::fs::create_dir_all(dir.path().join("b/c")).unwrap();
        std::fs::write(dir.path().join("b/c/x"), b"1").unwrap();
        std::fs::write(dir.path().join("a"), b"2").unwrap();
        assert_eq!(local_files(dir.path()).unwrap(), ["a", "b/c/x"]);
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("a", dir.path().join("link")).unwrap();
            assert!(local_files(dir.path()).is_err());
        }
    }
}
