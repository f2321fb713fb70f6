//! `httpdns backup` and `httpdns restore`: the database, the mirror's stored copies and the
//! data directory's secrets in one archive, and back.
//!
//! # What is in a backup
//!
//! | entry | what |
//! | --- | --- |
//! | `secrets/admin-token`, `secrets/config-signing-key` | the admin token and the config signing key in effect (configured, or the files the server generated) |
//! | `mirror/<path>` | every stored copy, byte for byte (the local tree under `<data dir>/mirror/store`, or the objects under the bucket's prefix) |
//! | `database.jsonl` | every row of every table, one transaction (see `httpdns_store::backup`) |
//! | `manifest.json` | counts, the store revision, the signing key's public key and the SHA-256 of every entry before it |
//!
//! The archive is written to a temp file beside the output, fsynced and renamed, so the
//! output is complete or absent; it is readable by its owner only (it holds the secrets).
//!
//! # Restore
//!
//! First the whole archive is read and checked against its manifest, the database's schema
//! is checked, and the targets are checked: the database and the mirror store must be empty,
//! and secret files in the data directory must not differ, unless `force`. Only then is
//! anything written: the secret files (atomically), the copies (each atomically; with `force`
//! the store is emptied first), and last the database, in one transaction. A failure before
//! that commit leaves the database as it was, and the restore can be run again with `force`.

mod archive;
mod mirror;

use std::io::{BufRead, BufReader, Read, Seek, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use httpdns_store::Store;

pub use archive::{Manifest, MirrorSummary};

use crate::secrets::{ADMIN_TOKEN_FILE, SIGNING_KEY_FILE};
use crate::Config;

const DATABASE: &str = "database.jsonl";
const SECRETS: &str = "secrets/";

/// Where a backup goes, or a restore comes from.
#[derive(Debug, Clone)]
pub enum Location {
    File(PathBuf),
    /// Standard output or input (`-`): for `kubectl exec ... > backup.tar`, where the image has
    /// no shell or tar to copy files with.
    Stdio,
}

impl Location {
    pub fn parse(text: &str) -> Self {
        if text == "-" {
            Location::Stdio
        } else {
            Location::File(text.into())
        }
    }
}

/// The admin token and signing key in effect, by file name: configured, else the data
/// directory's files. Nothing is generated.
fn current_secrets(config: &Config) -> anyhow::Result<Vec<(&'static str, String)>> {
    let read = |name: &str| -> anyhow::Result<Option<String>> {
        let path = config.data_dir.join(name);
        match std::fs::read_to_string(&path) {
            Ok(t) if !t.trim().is_empty() => Ok(Some(t.trim().to_owned())),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    };
    let mut out = Vec::new();
    if let Some(t) = config.admin_token.clone().map_or_else(|| read(ADMIN_TOKEN_FILE), |t| Ok(Some(t)))? {
        out.push((ADMIN_TOKEN_FILE, t));
    }
    let key = match &config.config_signing_key {
        Some(k) => Some(k.clone()),
        None => read(SIGNING_KEY_FILE)?,
    };
    if let Some(k) = key {
        let signer =
            httpdns_config::Signer::from_text(&k).map_err(|e| anyhow::anyhow!("config signing key: {e}"))?;
        out.push((SIGNING_KEY_FILE, signer.seed_base64()));
    }
    Ok(out)
}

fn public_key(seed_text: &str) -> Option<String> {
    httpdns_config::Signer::from_text(seed_text).ok().map(|s| s.public_key_base64())
}

/// The name prefix of an archive being written.
const TEMP_PREFIX: &str = ".httpdns-backup-";

/// Removes the archives killed backups left in `dir`: a running backup holds its archive
/// locked (`flock`), and the kernel drops the lock with the process, so one whose lock can be
/// taken has no writer. Returns how many were removed; what cannot be read is left alone.
pub fn clear_abandoned(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut removed = 0;
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
            continue;
        }
        let Ok(f) = std::fs::File::open(e.path()) else { continue };
        let free = rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok();
        if free && std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Writes a backup of everything `config` points at to `out`, and returns its manifest.
pub async fn backup(config: &Config, out: &Location) -> anyhow::Result<Manifest> {
    let spool_dir = match out {
        Location::File(p) => {
            p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_owned()
        }
        Location::Stdio => {
            std::fs::create_dir_all(&config.data_dir)?;
            config.data_dir.clone()
        }
    };
    // The database first, as of one point in time, spooled: its size goes before its content.
    let store = Store::open(&config.database_url).await.context("opening the database")?;
    let mut db = tempfile::tempfile_in(&spool_dir)
        .with_context(|| format!("a temp file in {}", spool_dir.display()))?;
    let dumped = {
        let mut w = std::io::BufWriter::new(&mut db);
        let s = store.dump(&mut w).await.context("dumping the database")?;
        w.flush()?;
        s
    };
    store.close().await;
    let db_size = db.stream_position()?;
    db.rewind()?;

    let secrets = current_secrets(config)?;
    let target = mirror::Target::of(config)?;
    let mut manifest = Manifest {
        format: archive::FORMAT,
        httpdns_version: env!("CARGO_PKG_VERSION").to_owned(),
        created_at_ms: httpdns_core::clock::unix_ms() as i64,
        database: dumped,
        mirror: MirrorSummary::default(),
        secrets: secrets.iter().map(|(n, _)| (*n).to_owned()).collect(),
        config_public_key: secrets
            .iter()
            .find(|(n, _)| *n == SIGNING_KEY_FILE)
            .and_then(|(_, k)| public_key(k)),
        entries: 0,
        sha256: String::new(),
    };

    match out {
        Location::File(path) => {
            let cleared = clear_abandoned(&spool_dir);
            if cleared > 0 {
                tracing::info!(files = cleared, dir = %spool_dir.display(), "Removed archives of interrupted backups.");
            }
            // Owner-only from the start (tempfile creates 0600), renamed into place when whole,
            // and locked while written: a backup killed mid-way leaves it unlocked, and the
            // next one removes it.
            let tmp = tempfile::Builder::new()
                .prefix(TEMP_PREFIX)
                .tempfile_in(&spool_dir)
                .with_context(|| format!("a temp file in {}", spool_dir.display()))?;
            rustix::fs::flock(tmp.as_file(), rustix::fs::FlockOperation::LockExclusive)
                .with_context(|| format!("locking {}", tmp.path().display()))?;
            let mut w = archive::Writer::new(std::io::BufWriter::new(tmp));
            manifest.mirror = entries(&mut w, &secrets, &target, &spool_dir, &mut db, db_size).await?;
            let (buf, m) = w.finish(manifest)?;
            let tmp = buf.into_inner().map_err(|e| e.into_error())?;
            tmp.as_file().sync_all()?;
            tmp.persist(path).with_context(|| format!("writing {}", path.display()))?;
            if let Ok(d) = std::fs::File::open(&spool_dir) {
                let _ = d.sync_all();
            }
            Ok(m)
        }
        Location::Stdio => {
            let mut w = archive::Writer::new(std::io::BufWriter::new(std::io::stdout().lock()));
            manifest.mirror = entries(&mut w, &secrets, &target, &spool_dir, &mut db, db_size).await?;
            let (mut buf, m) = w.finish(manifest)?;
            buf.flush()?;
            Ok(m)
        }
    }
}

/// The entries before the manifest: secrets, stored copies, and the database last.
async fn entries<W: Write>(
    w: &mut archive::Writer<W>,
    secrets: &[(&'static str, String)],
    target: &mirror::Target,
    spool_dir: &Path,
    db: &mut std::fs::File,
    db_size: u64,
) -> anyhow::Result<MirrorSummary> {
    for (name, text) in secrets {
        w.add(&format!("{SECRETS}{name}"), text.len() as u64, text.as_bytes())?;
    }
    let mirror = target.backup(w, spool_dir).await.context("copying the mirror's store")?;
    w.add(DATABASE, db_size, db)?;
    Ok(mirror)
}

/// What the check of an archive found.
struct Checked {
    manifest: Manifest,
    header: httpdns_store::backup::DumpHeader,
    secrets: Vec<(String, String)>,
}

/// Reads the whole archive and checks it against its manifest: every entry hashed, the
/// manifest last, the counts right, the dump's header readable.
fn check(file: &mut std::fs::File) -> anyhow::Result<Checked> {
    file.rewind()?;
    let mut tar = tar::Archive::new(BufReader::new(&mut *file));
    let mut hash = archive::RunningHash::default();
    let (mut manifest, mut header, mut secrets) = (None, None, Vec::new());
    let (mut objects, mut bytes) = (0u64, 0u64);
    for entry in tar.entries().context("reading the archive")? {
        let entry = entry.context("reading the archive")?;
        let path = archive::entry_path(&entry)?;
        if manifest.is_some() {
            bail!("the archive has entries after its manifest ({path})");
        }
        let size = entry.header().size()?;
        if path == archive::MANIFEST {
            let mut text = Vec::new();
            entry.take(16 << 20).read_to_end(&mut text)?;
            manifest = Some(serde_json::from_slice::<Manifest>(&text).context("reading the manifest")?);
            continue;
        }
        let mut reader = hash.entry(&path, size, entry);
        if path == DATABASE {
            let mut r = BufReader::new(&mut reader);
            let mut first = String::new();
            r.read_line(&mut first)?;
            header = Some(httpdns_store::backup::read_header(first.trim_end())?);
            std::io::copy(&mut r, &mut std::io::sink())?;
        } else if let Some(name) = path.strip_prefix(SECRETS) {
            let mut text = String::new();
            reader.read_to_string(&mut text).with_context(|| format!("{path} is not text"))?;
            secrets.push((name.to_owned(), text));
        } else if path.starts_with(mirror::PREFIX) {
            std::io::copy(&mut reader, &mut std::io::sink())?;
            objects += 1;
            bytes += size;
        } else {
            bail!("unknown entry {path} in the archive");
        }
        if reader.read != size {
            bail!("{path}: {} of {size} bytes (the archive is cut short)", reader.read);
        }
    }
    let manifest = manifest.context("the archive has no manifest: it is cut short or not a backup")?;
    if manifest.format != archive::FORMAT {
        bail!(
            "backup format {} is not {} (made by httpdns {})",
            manifest.format,
            archive::FORMAT,
            manifest.httpdns_version
        );
    }
    if manifest.entries != hash.entries || manifest.sha256 != hash.hex() {
        bail!("the archive does not match its manifest: it is damaged");
    }
    if (manifest.mirror.objects, manifest.mirror.bytes) != (objects, bytes) {
        bail!("the archive's stored copies do not match its manifest");
    }
    let header = header.context("the archive has no database")?;
    Ok(Checked { manifest, header, secrets })
}

/// Restores a backup into what `config` points at; see the module docs for the order and
/// the checks. Returns the backup's manifest.
pub async fn restore(config: &Config, from: &Location, force: bool) -> anyhow::Result<Manifest> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating the data directory {}", config.data_dir.display()))?;
    let mut file = match from {
        Location::File(p) => std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?,
        Location::Stdio => {
            // Read twice (check, then restore): standard input is spooled first.
            let mut spool = tempfile::tempfile_in(&config.data_dir)?;
            std::io::copy(&mut std::io::stdin().lock(), &mut spool)?;
            spool
        }
    };
    let checked = check(&mut file)?;

    let store = Store::connect(&config.database_url).await.context("opening the database")?;
    store.check_dump(&checked.header).await?;
    let non_empty = store.non_empty_tables().await?;
    if !non_empty.is_empty() && !force {
        bail!(
            "the database is not empty (rows in {}): restore refuses to replace it; --force replaces its content",
            non_empty.join(", ")
        );
    }
    let target = mirror::Target::of(config)?;
    if !force && !target.is_empty().await? {
        bail!("the mirror's store is not empty: restore refuses to replace it; --force replaces its content");
    }
    let writes = secret_writes(config, &checked, force)?;

    if force {
        target.clear().await.context("emptying the mirror's store")?;
    }
    for (path, text) in &writes {
        crate::secrets::write_private(path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    file.rewind()?;
    let mut tar = tar::Archive::new(BufReader::new(&mut file));
    let mut restored = None;
    for entry in tar.entries()? {
        let mut entry = entry?;
        let path = archive::entry_path(&entry)?;
        if let Some(rel) = path.strip_prefix(mirror::PREFIX) {
            target.restore(rel, &mut entry).await.with_context(|| format!("restoring {path}"))?;
        } else if path == DATABASE {
            let mut r = BufReader::new(entry);
            restored = Some(store.restore_dump(&mut r, force).await.context("restoring the database")?);
        }
    }
    store.close().await;
    let restored = restored.context("the archive has no database")?;
    if restored.rows != checked.manifest.database.rows
        || restored.revision != checked.manifest.database.revision
    {
        bail!(
            "restored {:?} at revision {}, the backup says {:?}",
            restored.rows,
            restored.revision,
            checked.manifest.database
        );
    }
    Ok(checked.manifest)
}

/// The secret files to write, after checking they keep the backup's signatures: a configured
/// signing key must be the backup's, and a file that differs is replaced only with `force`. A
/// configured admin token stays as configured.
fn secret_writes(config: &Config, checked: &Checked, force: bool) -> anyhow::Result<Vec<(PathBuf, String)>> {
    let mut writes = Vec::new();
    for (name, text) in &checked.secrets {
        let (configured, setting) = match name.as_str() {
            ADMIN_TOKEN_FILE => (config.admin_token.clone(), "HTTPDNS_ADMIN_TOKEN"),
            SIGNING_KEY_FILE => (config.config_signing_key.clone(), "HTTPDNS_CONFIG_SIGNING_KEY"),
            other => bail!("unknown secret {other} in the archive"),
        };
        if let Some(c) = configured {
            if name == SIGNING_KEY_FILE && public_key(&c) != public_key(text) && !force {
                bail!(
                    "{setting} is set to another key than the backup's: documents would be signed differently \
                     (the backup's public key is {}); unset it or set the backup's key, or --force",
                    public_key(text).unwrap_or_default()
                );
            }
            continue;
        }
        let path = config.data_dir.join(name);
        match std::fs::read_to_string(&path) {
            Ok(existing) if existing.trim() == text.trim() => continue,
            Ok(_) if !force => {
                bail!("{} exists and differs from the backup's; --force replaces it", path.display())
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        }
        writes.push((path, text.clone()));
    }
    Ok(writes)
}
