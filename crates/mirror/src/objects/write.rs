//! Writes to the store: publishing a staged copy (room made under the byte cap first), small
//! bodies written whole, and deletions (one key, or everything under a prefix), each forgetting
//! what memory held for the paths it changed.

use std::io::{Seek, SeekFrom, Write};

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path;
use object_store::ObjectStoreExt;

use super::{Backend, Objects, ObjectsError, StoredMeta, MAGIC};
use crate::cap::Reserved;
use crate::layout;
use crate::store_io::{blocking, upload};

impl Objects {
    /// Publishes a fully written and verified staged body at `location`. Under a byte cap, a
    /// copy that cannot get room is not published (its readers still have the staged file).
    pub async fn commit(
        &self,
        location: &Path,
        mut staged: tempfile::NamedTempFile,
        meta: &StoredMeta,
    ) -> Result<(), ObjectsError> {
        let meta = StoredMeta { location: Some(location.to_string()), ..meta.clone() };
        let json = serde_json::to_vec(&meta).map_err(std::io::Error::other)?;
        let staged = tokio::task::spawn_blocking(move || -> std::io::Result<tempfile::NamedTempFile> {
            let file = staged.as_file_mut();
            file.seek(SeekFrom::End(0))?;
            file.write_all(&json)?;
            file.write_all(&(json.len() as u64).to_le_bytes())?;
            file.write_all(MAGIC)?;
            file.sync_all()?;
            Ok(staged)
        })
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))??;
        match &self.backend {
            Backend::Local { root } => {
                let target = layout::local_file(root, location);
                let cap = self.cap.clone();
                tokio::task::spawn_blocking(move || -> Result<(), ObjectsError> {
                    // Held until the rename: the copy cannot be chosen as a victim before it is
                    // in place.
                    let _pin = match &cap {
                        None => None,
                        Some(cap) => match cap.reserve(&target, staged.as_file().metadata()?.len()) {
                            Reserved::Room { evict, pin } => {
                                cap.remove_all(&evict);
                                Some(pin)
                            }
                            Reserved::NoRoom => {
                                tracing::info!(file = %target.display(), "A copy was served but not kept: no room under the byte cap.");
                                return Ok(());
                            }
                        },
                    };
                    if let Err(e) = layout::persist(staged, &target) {
                        if let Some(cap) = &cap {
                            cap.forget(&target);
                        }
                        return Err(e.into());
                    }
                    Ok(())
                })
                .await
                .map_err(|e| std::io::Error::other(e.to_string()))??;
            }
            Backend::Remote(store) => upload(store.as_ref(), &layout::remote_key(location), staged).await?,
        }
        self.forget(location);
        Ok(())
    }

    /// Writes `body` as a copy at `location` (admin writes, variants).
    pub async fn put_bytes(
        &self,
        location: &Path,
        body: Bytes,
        meta: &StoredMeta,
    ) -> Result<(), ObjectsError> {
        let mut staged = self.temp_file()?;
        let staged = tokio::task::spawn_blocking(move || -> std::io::Result<tempfile::NamedTempFile> {
            staged.as_file_mut().write_all(&body)?;
            Ok(staged)
        })
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))??;
        self.commit(location, staged, meta).await
    }

    /// Removes one copy; `false` when there was none.
    pub async fn delete(&self, location: &Path) -> Result<bool, ObjectsError> {
        self.forget(location);
        match &self.backend {
            Backend::Local { root } => {
                let (root, file) = (root.clone(), layout::local_file(root, location));
                if let Some(cap) = &self.cap {
                    cap.forget(&file);
                }
                Ok(blocking(move || layout::remove_file(&root, &file)).await?)
            }
            Backend::Remote(store) => {
                // The copy, and a version-1 copy of the same path not moved yet.
                let mut existed = false;
                let current = layout::remote_key(location);
                for key in std::iter::once(current.clone()).chain(layout::remote_key_v1(location)) {
                    match store.head(&key).await {
                        Ok(_) => existed = true,
                        Err(object_store::Error::NotFound { .. }) => continue,
                        Err(e) if key == current => return Err(e.into()),
                        // The old key's own trouble (see `remote_head`): nothing to remove there.
                        Err(_) => continue,
                    }
                    match store.delete(&key).await {
                        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Ok(existed)
            }
        }
    }

    /// Removes every copy under `prefix` (and, locally, the directories that leaves empty);
    /// returns how many.
    pub async fn delete_prefix(&self, prefix: &Path) -> Result<u64, ObjectsError> {
        self.delete_below(prefix, None).await
    }

    /// Removes the copies exactly one part below `prefix`: the variants (or query-selected
    /// originals) of one key, not those of the keys below it.
    pub async fn delete_children(&self, prefix: &Path) -> Result<u64, ObjectsError> {
        self.delete_below(prefix, Some(1)).await
    }

    async fn delete_below(&self, prefix: &Path, depth: Option<usize>) -> Result<u64, ObjectsError> {
        let prefix_parts = prefix.parts().count();
        match &self.backend {
            Backend::Local { root } => {
                let (root, dir) = (root.clone(), layout::local_dir(root, prefix));
                // Copies in memory and metadata are keyed by store path, which the files do
                // not tell (hashed parts): forget everything under the prefix by name.
                self.forget_under(prefix);
                let cap = self.cap.clone();
                let n = blocking(move || -> std::io::Result<u64> {
                    let dir_parts = dir.components().count();
                    let mut n = 0;
                    for file in layout::list_files(&dir)? {
                        // `<dir>/<depth parts>/~`
                        if depth.is_some_and(|d| file.components().count() != dir_parts + d + 1) {
                            continue;
                        }
                        if let Some(cap) = &cap {
                            cap.forget(&file);
                        }
                        n += u64::from(layout::remove_file(&root, &file)?);
                    }
                    Ok(n)
                })
                .await?;
                Ok(n)
            }
            Backend::Remote(store) => {
                let mut listed = store.list(Some(prefix));
                let mut locations = Vec::new();
                while let Some(meta) = listed.next().await {
                    match meta {
                        Ok(m) => {
                            // How many store-path parts below the prefix (a current key ends with
                            // the `~` leaf, a version-1 key does not).
                            let parts =
                                m.location.parts().count() - usize::from(layout::is_remote_copy(&m.location));
                            if depth.is_none_or(|d| parts == prefix_parts + d) {
                                locations.push(m.location);
                            }
                        }
                        Err(object_store::Error::NotFound { .. }) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                self.forget_under(prefix);
                let mut n = 0;
                for location in locations {
                    match store.delete(&location).await {
                        Ok(()) => n += 1,
                        Err(object_store::Error::NotFound { .. }) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Ok(n)
            }
        }
    }

    /// Forgets the metadata and bodies in memory of every store path under `prefix`.
    fn forget_under(&self, prefix: &Path) {
        let p = prefix.as_ref();
        let under = |k: &str| k == p || k.strip_prefix(p).is_some_and(|rest| rest.starts_with('/'));
        self.meta.retain(|k, _| !under(k));
        self.hot.remove_if(under);
    }
}
