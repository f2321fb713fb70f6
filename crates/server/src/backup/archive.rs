//! The backup file: a tar archive whose entries are hashed in order, closed by a manifest that
//! holds the hash. A truncated or altered archive fails the check before a restore writes
//! anything.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The last entry of every archive.
pub(crate) const MANIFEST: &str = "manifest.json";
/// Version of the archive layout.
pub(crate) const FORMAT: u32 = 1;

/// What a backup holds, written as its last entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    pub format: u32,
    pub httpdns_version: String,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// Rows per table, the store revision and the migrations of the dumped database.
    pub database: httpdns_store::backup::DumpSummary,
    pub mirror: MirrorSummary,
    /// The secret files present (`admin-token`, `config-signing-key`).
    pub secrets: Vec<String>,
    /// The public key of the config signing key in the backup: the restored server signs
    /// with it.
    pub config_public_key: Option<String>,
    /// Entries before the manifest, and the SHA-256 over them (see [`Writer`]).
    pub entries: u64,
    pub sha256: String,
}

/// The mirror's stored copies in a backup.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct MirrorSummary {
    /// `local` or `s3`: where they were copied from (they restore into either).
    pub store: String,
    pub objects: u64,
    pub bytes: u64,
}

/// The running hash of an archive: every entry's path, a NUL, its size (u64, little endian)
/// and its content, in archive order.
#[derive(Default)]
pub(crate) struct RunningHash {
    hash: Sha256,
    pub(crate) entries: u64,
}

impl RunningHash {
    fn start(&mut self, path: &str, size: u64) {
        self.hash.update(path.as_bytes());
        self.hash.update([0]);
        self.hash.update(size.to_le_bytes());
        self.entries += 1;
    }

    pub(crate) fn hex(&self) -> String {
        self.hash.clone().finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// A reader that feeds the running hash and counts bytes.
pub(crate) struct Hashing<'a, R> {
    inner: R,
    hash: &'a mut RunningHash,
    pub(crate) read: u64,
}

impl<R: Read> Read for Hashing<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.hash.update(&buf[..n]);
        self.read += n as u64;
        Ok(n)
    }
}

impl RunningHash {
    /// Starts an entry and returns a reader of its content that feeds the hash.
    pub(crate) fn entry<R: Read>(&mut self, path: &str, size: u64, inner: R) -> Hashing<'_, R> {
        self.start(path, size);
        Hashing { inner, hash: self, read: 0 }
    }
}

/// Writes an archive: entries, then [`Writer::finish`] with the manifest.
pub(crate) struct Writer<W: Write> {
    tar: tar::Builder<W>,
    pub(crate) hash: RunningHash,
}

impl<W: Write> Writer<W> {
    pub(crate) fn new(out: W) -> Self {
        let mut tar = tar::Builder::new(out);
        tar.mode(tar::HeaderMode::Deterministic);
        Self { tar, hash: RunningHash::default() }
    }

    /// Adds an entry of exactly `size` bytes read from `data`; fewer bytes (a file that shrank
    /// while it was read) is an error, so no entry is ever padded or cut.
    pub(crate) fn add(&mut self, path: &str, size: u64, data: impl Read) -> io::Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_size(size);
        header.set_mode(0o600);
        header.set_entry_type(tar::EntryType::Regular);
        let mut reader = self.hash.entry(path, size, data.take(size));
        self.tar.append_data(&mut header, path, &mut reader)?;
        if reader.read != size {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{path}: {} of {size} bytes could be read", reader.read),
            ));
        }
        Ok(())
    }

    /// Appends the manifest (with the hash of everything before it) and ends the archive.
    pub(crate) fn finish(mut self, mut manifest: Manifest) -> io::Result<(W, Manifest)> {
        manifest.entries = self.hash.entries;
        manifest.sha256 = self.hash.hex();
        let text = serde_json::to_vec_pretty(&manifest).map_err(io::Error::other)?;
        let mut header = tar::Header::new_gnu();
        header.set_size(text.len() as u64);
        header.set_mode(0o600);
        header.set_entry_type(tar::EntryType::Regular);
        self.tar.append_data(&mut header, MANIFEST, text.as_slice())?;
        Ok((self.tar.into_inner()?, manifest))
    }
}

/// An entry's path as text, checked: relative, `/`-separated, no `.` or `..` parts, so it can
/// name a file under a directory or an object under a prefix and nothing else.
pub(crate) fn entry_path(entry: &tar::Entry<'_, impl Read>) -> io::Result<String> {
    let raw = entry.path_bytes();
    let path = std::str::from_utf8(&raw)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "an entry's path is not UTF-8"))?
        .to_owned();
    let safe = !path.is_empty()
        && !path.starts_with('/')
        && path.split('/').all(|part| !part.is_empty() && part != "." && part != "..");
    if !safe {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("entry path {path:?} is not allowed"),
        ));
    }
    Ok(path)
}
