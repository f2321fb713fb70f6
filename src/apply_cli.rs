//! `httpdns apply -f FILE` and `httpdns export`: declarative state through the admin API.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use httpdns_apply::client::AdminClient;
use httpdns_apply::{plan, Format, StateFile};

#[derive(Args, Debug, Clone)]
pub(crate) struct AdminArgs {
    /// The server's API base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    server: String,
    /// Admin token; default: HTTPDNS_ADMIN_TOKEN, else the file --token-file.
    #[arg(long, env = "HTTPDNS_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// File holding the admin token (what `httpdns serve` generates in its data directory).
    #[arg(long, default_value = "data/admin-token")]
    token_file: PathBuf,
}

impl AdminArgs {
    fn client(&self) -> anyhow::Result<AdminClient> {
        let token = match &self.token {
            Some(t) => t.clone(),
            None => std::fs::read_to_string(&self.token_file)
                .with_context(|| format!("no --token and no readable {}", self.token_file.display()))?
                .trim()
                .to_owned(),
        };
        AdminClient::new(&self.server, &token)
    }
}

pub(crate) async fn export(
    admin: &AdminArgs,
    output: Option<&Path>,
    format: Option<Format>,
) -> anyhow::Result<()> {
    let current = admin.client()?.current().await?;
    let format = format.or(output.map(Format::of_path)).unwrap_or(Format::Yaml);
    let text = current.state.render(format).map_err(anyhow::Error::msg)?;
    match output {
        Some(p) => std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}

pub(crate) async fn apply(admin: &AdminArgs, file: &Path, prune: bool, dry_run: bool) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let wanted = StateFile::parse(&text, Format::of_path(file))
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let client = admin.client()?;
    let current = client.current().await?;
    let changes = plan(&current.state, &wanted, prune);
    let skipped: Vec<&String> =
        current.state.config.keys().filter(|m| prune && !wanted.config.contains_key(*m)).collect();
    if !skipped.is_empty() {
        eprintln!("note: config modules are never deleted (they keep their history): {skipped:?}");
    }
    if changes.is_empty() {
        println!("no changes");
        return Ok(());
    }
    for c in &changes {
        if !dry_run {
            client.apply(c, &current).await?;
        }
        println!("{c}");
    }
    println!(
        "{} change(s){}",
        changes.len(),
        if dry_run { " (dry run: nothing written)" } else { " applied" }
    );
    Ok(())
}
