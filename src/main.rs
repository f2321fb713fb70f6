//! The `httpdns` binary: parses the command line and runs the server crate.

// A command-line program: its subcommands' output is what they print (the server logs
// through `tracing`, like the library crates).
#![allow(clippy::print_stdout, clippy::print_stderr, reason = "the CLI's output is what it prints")]

use std::path::PathBuf;
use std::time::Duration;

mod apply_cli;
mod backup_cli;
mod client_cli;
mod healthcheck;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use httpdns_server::{config::Config, init_logging};

#[derive(Parser)]
#[command(
    name = "httpdns",
    version,
    about = "HTTPDNS resolution server, origin-mirroring gateway and config center"
)]
struct Cli {
    /// TOML configuration file; HTTPDNS_* environment variables override it.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every role with the configured listeners.
    Serve,
    /// Apply database migrations and exit.
    Migrate,
    /// Validate the configuration and exit.
    CheckConfig,
    /// Ask the configured API listener's /healthz; exit 0 when it answers 2xx (container
    /// health checks: the image has no curl).
    Healthcheck {
        /// Another URL to ask instead.
        #[arg(long)]
        url: Option<String>,
        #[arg(long, default_value_t = 2000)]
        timeout_ms: u64,
    },
    /// Write a backup: every table of the database (one transaction), the mirror's stored
    /// copies and the data directory's secrets, in one archive written atomically (mode 0600).
    Backup {
        /// The archive to write, or `-` for standard output.
        #[arg(short, long)]
        output: String,
    },
    /// Restore a backup into the configured database, mirror store and data directory. Refuses
    /// a database or mirror store that is not empty unless --force; the database is restored
    /// in one transaction, last.
    Restore {
        /// The archive to read, or `-` for standard input.
        input: String,
        /// Replace the content of a database and mirror store that are not empty.
        #[arg(long)]
        force: bool,
    },
    /// Reconcile the admin state with a YAML, TOML or JSON file (networks, pools, nodes,
    /// domains, mirror rules, config modules) through the admin API.
    Apply {
        #[command(flatten)]
        admin: apply_cli::AdminArgs,
        /// The declarative file (`httpdns export` writes one).
        #[arg(short = 'f', long)]
        file: PathBuf,
        /// Also delete what the file does not have (config modules excepted).
        #[arg(long)]
        prune: bool,
        /// Print the changes without making them.
        #[arg(long)]
        dry_run: bool,
    },
    /// Write the admin state in the format `apply` reads.
    Export {
        #[command(flatten)]
        admin: apply_cli::AdminArgs,
        /// Output file (format from its extension); default standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
        #[arg(long, value_enum)]
        format: Option<httpdns_apply::Format>,
    },
    /// Client: resolve names through HTTPDNS (LocalDNS fallback); prints the path that answered.
    Resolve {
        #[command(flatten)]
        client: client_cli::ClientArgs,
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Client: fetch a URL through convergence and host failover; the body goes to stdout (or
    /// --output), every attempt and the host that served it to stderr.
    Get {
        #[command(flatten)]
        client: client_cli::ClientArgs,
        url: String,
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Client: request a URL repeatedly while faults are injected; reports failures and
    /// switch-over times.
    Drill {
        #[command(flatten)]
        client: client_cli::ClientArgs,
        url: String,
        #[arg(long, default_value_t = 100)]
        requests: usize,
        #[arg(long, default_value_t = 100)]
        interval_ms: u64,
    },
}

fn load(path: Option<&PathBuf>) -> anyhow::Result<Config> {
    let text = match path {
        Some(p) => Some(std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?),
        None => None,
    };
    Ok(Config::load(text.as_deref(), |k| std::env::var(k).ok())?)
}

/// The allocator's options for `serve`. mimalloc reads them from the environment when the
/// process loads, before `main` (and this crate uses no `unsafe` to call `mi_option_set`), so
/// `serve` executes itself again, once, with the ones an operator has not set.
///
/// `MIMALLOC_DISALLOW_ARENA_ALLOC=1`: segments are mapped from the kernel one by one and
/// unmapped when they are free, instead of being carved from 1 GiB arenas whose freed parts
/// are purged only after a delay and only when some thread next allocates from an arena. Image
/// renders (large, short-lived buffers on threads that then end) otherwise left up to 300 MiB
/// resident above the baseline under a 256 MiB image budget; with it the peak follows the
/// renders in flight (100 to 125 MiB) and falls back to the baseline after the burst
/// (`tests/reliability/images.rs`). `/d` throughput is unchanged (`wrk`, 2 cores).
///
/// `MIMALLOC_PURGE_DELAY=0`: pages freed are handed back to the kernel at once. With the
/// default delay (10 ms) the purge waits for a later allocator call on the same segment, which
/// may never come: after 2,100 never-reading downloads were gone, 100 MiB of freed pages stayed
/// resident for the next 30 s and more; with it the process was back within 8 MiB of its
/// baseline in 1.5 s (`floods::clients_that_never_read_cannot_exhaust_descriptors`). `/d` and
/// 4 KiB mirror hits measured the same within their spread (docs/benchmarks.md).
const ALLOCATOR_OPTIONS: [(&str, &str); 2] =
    [("MIMALLOC_DISALLOW_ARENA_ALLOC", "1"), ("MIMALLOC_PURGE_DELAY", "0")];

#[cfg(not(unix))]
fn apply_allocator_options() {}

#[cfg(unix)]
fn apply_allocator_options() {
    use std::os::unix::process::CommandExt as _;
    if ALLOCATOR_OPTIONS.iter().all(|(name, _)| std::env::var_os(name).is_some()) {
        return;
    }
    let Ok(exe) = std::env::current_exe() else { return };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    command.args(args);
    for (name, value) in ALLOCATOR_OPTIONS {
        if std::env::var_os(name).is_none() {
            command.env(name, value);
        }
    }
    // Returns only when the binary cannot be executed again: run with the defaults then.
    let error = command.exec();
    eprintln!("httpdns: running with the allocator's default options: re-executing failed: {error}");
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if matches!(cli.command, Command::Serve) {
        apply_allocator_options();
    }
    httpdns_server::install_crypto_provider();
    if let Some(run) = client_command(&cli.command) {
        // Client and admin-API commands need no server configuration.
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        return rt.block_on(run);
    }
    let config = load(cli.config.as_ref())?;
    init_logging(config.log_format);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        match cli.command {
            Command::CheckConfig => {
                println!("configuration is valid");
                Ok(())
            }
            Command::Migrate => {
                std::fs::create_dir_all(&config.data_dir)?;
                let store = httpdns_store::Store::connect(&config.database_url).await?;
                store.close().await;
                println!("migrations applied ({})", store.backend_name());
                Ok(())
            }
            Command::Serve => serve(config).await,
            Command::Backup { output } => backup_cli::backup(&config, &output).await,
            Command::Restore { input, force } => backup_cli::restore(&config, &input, force).await,
            Command::Healthcheck { url, timeout_ms } => {
                healthcheck::run(&config, url.as_deref(), Duration::from_millis(timeout_ms)).await
            }
            Command::Resolve { .. }
            | Command::Get { .. }
            | Command::Drill { .. }
            | Command::Apply { .. }
            | Command::Export { .. } => unreachable!("handled above"),
        }
    })
}

fn client_command(
    command: &Command,
) -> Option<std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + '_>>> {
    match command {
        Command::Resolve { client, names } => Some(Box::pin(client_cli::resolve(client, names))),
        Command::Get { client, url, output } => Some(Box::pin(client_cli::get(client, url, output.as_ref()))),
        Command::Drill { client, url, requests, interval_ms } => {
            Some(Box::pin(client_cli::drill(client, url, *requests, Duration::from_millis(*interval_ms))))
        }
        Command::Apply { admin, file, prune, dry_run } => {
            Some(Box::pin(apply_cli::apply(admin, file, *prune, *dry_run)))
        }
        Command::Export { admin, output, format } => {
            Some(Box::pin(apply_cli::export(admin, output.as_deref(), *format)))
        }
        _ => None,
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let mut running = httpdns_server::start(config).await?;
    let stop = running.shutdown_token();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("Shutting down: no new connections, finishing in-flight requests.");
        stop.cancel();
    });
    running.wait().await;
    tracing::info!("Stopped.");
    Ok(())
}

async fn wait_for_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
