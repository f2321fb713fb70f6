//! The admin token: from configuration, else generated once into the data directory.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The generated admin token's file in the data directory.
pub(crate) const ADMIN_TOKEN_FILE: &str = "admin-token";
/// The generated config signing key's file in the data directory.
pub(crate) const SIGNING_KEY_FILE: &str = "config-signing-key";

/// Returns the admin token and, when it lives in a file, that file's path.
pub(crate) fn admin_token(
    configured: Option<String>,
    data_dir: &Path,
) -> std::io::Result<(String, Option<PathBuf>)> {
    if let Some(t) = configured {
        return Ok((t, None));
    }
    let path = data_dir.join(ADMIN_TOKEN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => return Ok((t.trim().to_owned(), Some(path))),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    write_private(&path, token.as_bytes())?;
    Ok((token, Some(path)))
}

/// Returns the config signing key: from configuration, else from
/// `<data dir>/config-signing-key`, generated on first start.
pub(crate) fn signing_key(
    configured: Option<&str>,
    data_dir: &Path,
) -> std::io::Result<(httpdns_config::Signer, Option<PathBuf>)> {
    let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
    if let Some(text) = configured {
        return Ok((httpdns_config::Signer::from_text(text).map_err(invalid)?, None));
    }
    let path = data_dir.join(SIGNING_KEY_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let signer = httpdns_config::Signer::from_text(&text)
                .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
            return Ok((signer, Some(path)));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| std::io::Error::other(e.to_string()))?;
    let signer = httpdns_config::Signer::from_seed(seed);
    write_private(&path, signer.seed_base64().as_bytes())?;
    Ok((signer, Some(path)))
}

/// Writes `contents` to `path` readable by the owner only, atomically: a temp file in the same
/// directory, fsync, rename, so a crash never leaves a half-written token.
pub(crate) fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension("tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut f = options.open(&tmp)?;
    f.write_all(contents)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_once_with_owner_only_mode() {
        let dir = tempfile::tempdir().unwrap();
        let (t1, p1) = admin_token(None, dir.path()).unwrap();
        assert_eq!(t1.len(), 64);
        let (t2, _) = admin_token(None, dir.path()).unwrap();
        assert_eq!(t1, t2, "the same token on the next start");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(p1.unwrap()).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let (t3, p3) = admin_token(Some("configured-token-123".into()), dir.path()).unwrap();
        assert_eq!((t3.as_str(), p3), ("configured-token-123", None));
    }

    #[test]
    fn signing_key_is_generated_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (a, path) = signing_key(None, dir.path()).unwrap();
        let (b, _) = signing_key(None, dir.path()).unwrap();
        assert_eq!(a.public_key_base64(), b.public_key_base64());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(path.unwrap()).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let fixed = httpdns_config::Signer::from_seed([1; 32]);
        let (c, none) = signing_key(Some(&fixed.seed_base64()), dir.path()).unwrap();
        assert_eq!((c.public_key_base64(), none), (fixed.public_key_base64(), None));
        assert!(signing_key(Some("garbage"), dir.path()).is_err());
    }
}
