//! The httpdns process: configuration, start-up, listeners, background loops and shutdown.
//!
//! `main.rs` only parses the command line and calls into here. [`start`] binds every
//! configured listener (port 0 allowed; the bound addresses are returned and logged) and
//! spawns the servers and loops; [`Running::shutdown`] stops them gracefully.

pub mod backup;
pub mod config;
pub mod demo_secrets;
mod dns;
mod follow;
mod listeners;
mod policy_env;
mod reload;
mod secrets;
/// The steps of [`start`], in order.
mod start {
    pub(crate) mod edge;
    pub(crate) mod listen;
    pub(crate) mod loops;
    pub(crate) mod mirror;
    pub(crate) mod products;
    pub(crate) mod secrets;
    pub(crate) mod services;
}

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use httpdns_api::Products;
use httpdns_store::Store;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use config::{Config, Listen, LogFormat, MirrorStore};
pub use start::mirror::install_crypto_provider;
pub(crate) use start::mirror::{local_objects_dir, s3_objects};

/// A started server.
#[derive(Debug)]
pub struct Running {
    /// The bound API address, when the API listener is on.
    pub api_addr: Option<SocketAddr>,
    /// The bound mirror gateway address, when on.
    pub mirror_addr: Option<SocketAddr>,
    /// The bound plain DNS address (UDP and TCP), when on.
    pub dns_addr: Option<SocketAddr>,
    /// The bound HTTPS API, HTTPS mirror, DNS over TLS and metrics addresses, when on.
    pub api_tls_addr: Option<SocketAddr>,
    pub mirror_tls_addr: Option<SocketAddr>,
    pub dot_addr: Option<SocketAddr>,
    pub metrics_addr: Option<SocketAddr>,
    /// Where the generated admin token was written, when it was not configured.
    pub admin_token_file: Option<PathBuf>,
    pub admin_token: String,
    /// The API listener's products, each with its slice of state.
    pub api: Products,
    /// The mirroring gateway.
    pub mirror: Arc<httpdns_mirror::Mirror>,
    shutdown: CancellationToken,
    tasks: JoinSet<()>,
    grace: std::time::Duration,
}

impl Running {
    /// A token that, when cancelled, starts a graceful shutdown.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Stops accepting, lets in-flight requests finish within the grace period, stops the
    /// background loops and closes the database pool.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        self.wait().await;
    }

    /// Waits until a shutdown (from [`Running::shutdown_token`]) has completed.
    pub async fn wait(&mut self) {
        self.shutdown.cancelled().await;
        let drain = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(self.grace, drain).await.is_err() {
            tracing::warn!(
                grace_ms = self.grace.as_millis() as u64,
                "In-flight work outlived the grace period; aborting it."
            );
            self.tasks.abort_all();
        }
        self.api.answers.catalog.store().close().await;
    }
}

impl Drop for Running {
    /// Dropping a server without [`Running::shutdown`] still stops it: the tasks are aborted
    /// with the task set, and the health-check thread ends on the cancelled token.
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Connects, loads and binds everything `config` asks for, and starts serving: the secrets,
/// the services (the mirror among them), the API's products, the edge and its loops, the
/// listeners, then the loops that follow the outside world.
pub async fn start(config: Config) -> anyhow::Result<Running> {
    if !config.demo_secrets.is_empty() {
        tracing::warn!(
            settings = ?config.demo_secrets,
            "Running with placeholder secrets (HTTPDNS_ALLOW_DEMO_SECRETS): anyone can read them; never expose this server."
        );
    }
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating data directory {}", config.data_dir.display()))?;
    let store = Store::connect(&config.database_url).await.context("opening the database")?;
    tracing::info!(backend = store.backend_name(), "Database ready.");
    let start::secrets::Secrets { admin_token, admin_token_file, signer } =
        start::secrets::Secrets::prepare(&config)?;

    // One registry for the process; each crate registers its own series into it.
    let prometheus =
        prometheus::Registry::new_custom(Some("httpdns".into()), None).context("metrics registry")?;
    let services = start::services::Services::load(&config, store, signer, &prometheus).await?;
    let products = start::products::build(&config, &services, &prometheus, &admin_token);

    let shutdown = CancellationToken::new();
    let mut tasks = JoinSet::new();
    let net = start::edge::build(&config, services.nofile, &prometheus, services.dns_metrics.clone())?;
    start::loops::spawn_edge(&config, &net, &services, &mut tasks, &shutdown);
    let bound = start::listen::bind(&config, &net, &services, &products, &mut tasks, &shutdown)?;
    let mirror = services.mirror.clone();
    start::loops::spawn_background(&config, services, &prometheus, &mut tasks, &shutdown);

    Ok(Running {
        api_addr: bound.api,
        api_tls_addr: bound.api_tls,
        mirror_addr: bound.mirror,
        mirror_tls_addr: bound.mirror_tls,
        dns_addr: bound.dns,
        dot_addr: bound.dot,
        metrics_addr: bound.metrics,
        admin_token_file,
        admin_token,
        api: products,
        mirror,
        shutdown,
        tasks,
        grace: config.shutdown_grace,
    })
}

/// Installs the tracing subscriber: `RUST_LOG` filters (default `info`), text or JSON lines.
pub fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour codes only for a person at a terminal, never into log files or collectors.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        // One JSON object per line; the `request` span's id (see `httpdns_api::request_id`)
        // rides along on every line logged inside a request.
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(false).init(),
    }
}
