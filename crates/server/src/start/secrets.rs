//! The admin token and the config signing key: configured, or generated once under the data
//! directory.

use std::path::PathBuf;

use anyhow::Context;

use crate::{secrets, Config};

/// The secrets a start needs, with where a generated admin token was written.
pub(crate) struct Secrets {
    pub(crate) admin_token: String,
    pub(crate) admin_token_file: Option<PathBuf>,
    pub(crate) signer: httpdns_config::Signer,
}

impl Secrets {
    pub(crate) fn prepare(config: &Config) -> anyhow::Result<Self> {
        let (admin_token, admin_token_file) =
            secrets::admin_token(config.admin_token.clone(), &config.data_dir)
                .context("preparing the admin token")?;
        if let Some(path) = &admin_token_file {
            tracing::info!(path = %path.display(), "Admin token is in this file (set HTTPDNS_ADMIN_TOKEN to choose one).");
        }

        let (signer, key_file) = secrets::signing_key(config.config_signing_key.as_deref(), &config.data_dir)
            .context("preparing the config signing key")?;
        tracing::info!(
            public_key = %signer.public_key_base64(),
            file = %key_file.as_deref().map_or("(configured)".into(), |p| p.display().to_string()),
            "Config documents are signed with Ed25519."
        );
        Ok(Self { admin_token, admin_token_file, signer })
    }
}
