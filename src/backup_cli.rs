//! `httpdns backup` and `httpdns restore`: run with the server's own settings (the same
//! environment or `--config`), print what was written to stderr.

use httpdns_server::backup::{self, Location, Manifest};
use httpdns_server::Config;

fn report(verb: &str, to: &Location, m: &Manifest) {
    let rows: u64 = m.database.rows.values().sum();
    let place = match to {
        Location::File(p) => p.display().to_string(),
        Location::Stdio => "-".into(),
    };
    eprintln!(
        "{verb} {place}: {rows} rows in {} tables (store revision {}), {} stored copies ({} bytes, {}), secrets {:?}, config public key {}",
        m.database.rows.len(),
        m.database.revision,
        m.mirror.objects,
        m.mirror.bytes,
        m.mirror.store,
        m.secrets,
        m.config_public_key.as_deref().unwrap_or("(none)"),
    );
}

pub(crate) async fn backup(config: &Config, output: &str) -> anyhow::Result<()> {
    let to = Location::parse(output);
    let m = backup::backup(config, &to).await?;
    report("backed up to", &to, &m);
    Ok(())
}

pub(crate) async fn restore(config: &Config, input: &str, force: bool) -> anyhow::Result<()> {
    let from = Location::parse(input);
    let m = backup::restore(config, &from, force).await?;
    report("restored from", &from, &m);
    Ok(())
}
