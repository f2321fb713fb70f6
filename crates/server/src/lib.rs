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

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use httpdns_api::metrics::Metrics;
use httpdns_api::Products;
use httpdns_catalog::{Catalog, CatalogMetrics, LiveHub};
use httpdns_center::ConfigCache;
use httpdns_geo::Geo;
use httpdns_live::health::HealthRegistry;
use httpdns_store::Store;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use config::{Config, Listen, LogFormat, MirrorStore};

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

/// Connects, loads and binds everything `config` asks for, and starts serving.
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

    let (admin_token, admin_token_file) = secrets::admin_token(config.admin_token.clone(), &config.data_dir)
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

    // One registry for the process; each crate registers its own series into it.
    let prometheus =
        prometheus::Registry::new_custom(Some("httpdns".into()), None).context("metrics registry")?;
    let dns_metrics = Arc::new(httpdns_dns::DnsMetrics::new(&prometheus));
    let metrics = Arc::new(Metrics::new(&prometheus, dns_metrics.clone()));
    let geo = Arc::new(Geo::open(config.geo.clone()).context("loading the GeoIP databases")?);
    let registry = Arc::new(HealthRegistry::default());
    let catalog = Arc::new(Catalog::new(
        store.clone(),
        config.policy.clone(),
        CatalogMetrics::new(&prometheus),
        registry.clone(),
    ));
    catalog.sync().await.context("loading data from the database")?;
    let policy_view = Arc::new(httpdns_policy::PolicyView::new(config.policy_controller.clone()));
    let config_cache = Arc::new(ConfigCache::new(
        store.clone(),
        signer,
        httpdns_center::CenterMetrics::new(&prometheus),
        catalog.metrics().store_corrupt_rows.clone(),
        policy_view.clone(),
    ));
    config_cache.refresh().await.context("loading config documents")?;
    let servers = dns::upstream_servers(&config.upstreams);
    tracing::info!(servers = ?servers, "Upstream DNS servers for names not managed here.");
    let upstream = Arc::new(httpdns_upstream::Upstream::new(httpdns_upstream::UpstreamConfig {
        allow_private: config.allow_private_node_ips,
        timeout: config.upstream_timeout,
        min_ttl: config.upstream_min_ttl,
        max_ttl: config.upstream_max_ttl,
        negative_ttl: config.upstream_negative_ttl,
        stale_for: config.upstream_stale,
        ..httpdns_upstream::UpstreamConfig::new(servers)
    }));
    let live = Arc::new(LiveHub::new(config.live.clone()));
    let restored = live.load(&store).await.context("loading feedback aggregates")?;
    if restored > 0 {
        tracing::info!(aggregates = restored, "Restored app feedback aggregates.");
    }
    live.refresh(&catalog).await.context("applying live inputs")?;
    let events = Arc::new(httpdns_events::EventHub::new(config.events.clone(), &prometheus));
    // Descriptors are shared by connections (the TCP edge below) and by the files the
    // mirror's large bodies in memory keep open.
    let nofile = httpdns_net::raise_descriptor_limit();
    let mirror = Arc::new(
        httpdns_mirror::Mirror::new(
            mirror_objects(&config, nofile).context("opening the mirror's object store")?,
            httpdns_mirror::MirrorMetrics::new(&prometheus),
        )
        .allowing_local_origins(config.allow_local_origins)
        .with_images(config.mirror_images.clone())
        .with_prefetch_dir(config.data_dir.join("mirror").join("prefetch")),
    );
    tracing::info!(store = mirror.objects.backend_name(), "Mirror store ready.");
    if let Some(cap) = mirror.objects.cap() {
        prometheus.register(cap.collector()).context("registering the store cap's metrics")?;
    }
    mirror.follow(catalog.mirror_rules(), catalog.image_styles());
    // After the rules are in: a job a crash left running goes on.
    mirror.resume_prefetches();

    let trusted_proxies =
        Arc::new(httpdns_core::cidr::CidrTable::new(config.trusted_proxies.iter().map(|n| (*n, ()))));
    if !config.public_addrs.is_empty() {
        tracing::info!(addrs = ?config.public_addrs.iter().map(ToString::to_string).collect::<Vec<_>>(), "Announcing public entry points in /ss.");
    }
    let service_ips = Arc::new(httpdns_api::service_ips::ServiceIps::new(config.public_addrs.clone()));
    // Before the first answer: a restarted replica must not forget a kill switch for a beat.
    service_ips.switches().load(&store).await.context("reading the vendor switches")?;
    let (guard, engine) = answer_services(&config, &prometheus, &geo, &upstream, &dns_metrics);
    let httpdns = httpdns_api::httpdns::HttpdnsState::new(httpdns_api::httpdns::HttpdnsParts {
        catalog: catalog.clone(),
        engine,
        guard: guard.clone(),
        service_ips: service_ips.clone(),
        metrics: metrics.clone(),
        dnspod: config.dnspod,
    });
    let products = products(
        &config,
        Services {
            answers: httpdns,
            catalog: &catalog,
            config: &config_cache,
            geo: &geo,
            live: &live,
            events: &events,
            upstream: &upstream,
            metrics: &metrics,
            mirror: &mirror,
            service_ips: &service_ips,
            guard,
            admin_token: &admin_token,
        },
    );

    let shutdown = CancellationToken::new();
    let mut tasks = JoinSet::new();

    // The TCP edge: one registry of connections for every listener, so the caps protect the
    // process's descriptors whichever listener is flooded.
    let derived = httpdns_net::ConnLimits::for_descriptors(nofile);
    let limits = httpdns_net::ConnLimits {
        max_connections: config.max_connections.unwrap_or(derived.max_connections),
        max_per_address: config.max_connections_per_addr.unwrap_or(derived.max_per_address),
    };
    tracing::info!(
        descriptors = nofile,
        max_connections = limits.max_connections,
        max_per_address = limits.max_per_address,
        "Connection limits."
    );
    let net = listeners::Edge {
        registry: httpdns_net::ConnRegistry::new(limits, trusted_proxies.clone()),
        metrics: httpdns_net::NetMetrics::new(&prometheus),
        trusted_proxies: trusted_proxies.clone(),
        http_timeouts: config.http_timeouts,
        dns_timeouts: config.dns_timeouts,
        dns_metrics: dns_metrics.clone(),
        certs: match &config.tls {
            None => None,
            Some(files) => Some(
                httpdns_net::tls::TlsCerts::load(&files.cert, &files.key, &prometheus)
                    .context("loading the TLS certificates")?,
            ),
        },
    };
    tasks.spawn(net.registry.clone().run_reaper(std::time::Duration::from_millis(250), shutdown.clone()));
    // Held long polls are answered at once on shutdown, so the drain does not wait out their
    // deadlines (up to a minute).
    let (closing, stop) = (config_cache.clone(), shutdown.clone());
    tasks.spawn(async move {
        stop.cancelled().await;
        closing.close();
    });
    tasks.spawn(config_cache.adoption().clone().run(store.clone(), shutdown.clone()));
    tasks.spawn(httpdns_center::rollout::run(
        config_cache.clone(),
        metrics.audit_write_errors.clone(),
        config.control_tick,
        shutdown.clone(),
    ));
    if let (Some(certs), Some(files)) = (&net.certs, &config.tls) {
        tasks.spawn(listeners::follow_certificates(certs.clone(), files.reload_interval, shutdown.clone()));
    }

    let api_app = httpdns_api::app(&products, config.metrics_addr == Listen::Off);
    let api_addr = net.http(&mut tasks, "api", config.api_addr, api_app.clone(), false, &shutdown)?;
    let api_tls_addr = net.http(&mut tasks, "api_tls", config.api_tls_addr, api_app, true, &shutdown)?;
    let mirror_app = httpdns_mirror::app(mirror.clone());
    let mirror_addr =
        net.http(&mut tasks, "mirror", config.mirror_addr, mirror_app.clone(), false, &shutdown)?;
    let mirror_tls_addr =
        net.http(&mut tasks, "mirror_tls", config.mirror_tls_addr, mirror_app, true, &shutdown)?;
    let metrics_addr = net.http(
        &mut tasks,
        "metrics",
        config.metrics_addr,
        httpdns_api::metrics_router(products.ops.clone()),
        false,
        &shutdown,
    )?;
    tasks.spawn(mirror.clone().run_probes(shutdown.clone()));
    let handler = dns::handler(catalog.clone(), products.answers.engine.clone());
    let dns_addr = match config.dns_addr {
        Listen::Off => None,
        Listen::At(addr) => {
            let (udp, tcp) = dns::bind(addr)?;
            let bound = udp[0].local_addr()?;
            tracing::info!(role = "dns", addr = %bound, udp_sockets = udp.len(), "Listening.");
            for socket in udp {
                tasks.spawn(httpdns_dns::listen::serve_udp(
                    socket,
                    handler.clone(),
                    upstream.clone(),
                    dns_metrics.clone(),
                    shutdown.clone(),
                ));
            }
            tasks.spawn(httpdns_dns::listen::serve_tcp(
                tcp,
                handler.clone(),
                upstream.clone(),
                net.dns_tcp("dns_tcp", None)?,
                shutdown.clone(),
            ));
            Some(bound)
        }
    };
    let dot_addr = match config.dot_addr {
        Listen::Off => None,
        Listen::At(addr) => {
            let listener = httpdns_net::bind_tcp(addr)
                .with_context(|| format!("binding the DNS over TLS listener on {addr}"))?;
            let bound = listener.local_addr()?;
            tracing::info!(role = "dot", addr = %bound, "Listening.");
            let tls = httpdns_net::tls::TlsServer::new(net.certs()?, httpdns_net::tls::ALPN_DOT)?;
            tasks.spawn(httpdns_dns::listen::serve_tcp(
                listener,
                handler,
                upstream.clone(),
                net.dns_tcp("dot", Some(tls))?,
                shutdown.clone(),
            ));
            Some(bound)
        }
    };

    let changed = Arc::new(Notify::new());
    if let Some(url) = store.postgres_url() {
        tasks.spawn(follow::listen(url.to_owned(), changed.clone(), shutdown.clone()));
    }
    tasks.spawn(follow::follow_store(
        catalog.clone(),
        config_cache,
        changed,
        config.sync_interval,
        shutdown.clone(),
    ));
    tasks.spawn(follow::run_checker(
        registry,
        catalog.targets(),
        Arc::new(follow::ProbeMetrics(metrics.clone())),
        config.live.probe_workers,
        shutdown.clone(),
    ));
    tasks.spawn(follow::follow_live(live, catalog.clone(), shutdown.clone()));
    tasks.spawn(events.run(store.clone(), shutdown.clone()));
    let checks_catalog = catalog.clone();
    // The controller recovers a place only when the server's own checks agree: some node of
    // the place's own (its carrier and region) is up, or it has none.
    let checks: httpdns_policy::run::Checks = Arc::new(move |isp: &str, region: &str| {
        let p = checks_catalog.snapshot();
        let mut own = p
            .nodes()
            .iter()
            .enumerate()
            .filter(|(_, n)| n.usable && n.spec.isp.as_str() == isp && n.spec.region.as_str() == region)
            .peekable();
        own.peek().is_none() || own.any(|(i, _)| p.health.get(i).is_none_or(|s| s.is_up()))
    });
    let controller = Arc::new(httpdns_policy::run::Controller::new(
        config.policy_controller.clone(),
        store.clone(),
        policy_view,
        httpdns_policy::PolicyMetrics::new(&prometheus),
        checks,
    ));
    tasks.spawn(controller.run(shutdown.clone()));
    tasks.spawn(service_ips.run(store.clone(), shutdown.clone()));
    tasks.spawn(follow_geo(geo, metrics, config.geo.reload_interval, shutdown.clone()));

    Ok(Running {
        api_addr,
        api_tls_addr,
        mirror_addr,
        mirror_tls_addr,
        dns_addr,
        dot_addr,
        metrics_addr,
        admin_token_file,
        admin_token,
        api: products,
        mirror,
        shutdown,
        tasks,
        grace: config.shutdown_grace,
    })
}

/// The services the API listener's products are handed slices of.
struct Services<'a> {
    /// The httpdns product's state, built beside the others.
    answers: httpdns_api::httpdns::HttpdnsState,
    catalog: &'a Arc<Catalog>,
    config: &'a Arc<ConfigCache>,
    geo: &'a Arc<Geo>,
    live: &'a Arc<LiveHub>,
    events: &'a Arc<httpdns_events::EventHub>,
    upstream: &'a Arc<httpdns_upstream::Upstream>,
    metrics: &'a Arc<Metrics>,
    mirror: &'a Arc<httpdns_mirror::Mirror>,
    service_ips: &'a Arc<httpdns_api::service_ips::ServiceIps>,
    /// The answer routes' guard: account limits and signatures, shared with the signed app
    /// endpoints.
    guard: Arc<httpdns_guard::Guard>,
    admin_token: &'a str,
}

/// Each product of the API listener with only its slice of state.
fn products(config: &Config, s: Services<'_>) -> Products {
    let trusted = || httpdns_core::cidr::CidrTable::new(config.trusted_proxies.iter().map(|n| (*n, ())));
    let console = Arc::new(httpdns_api::console::Console::new(s.admin_token));
    Products {
        apps: httpdns_api::apps::state::AppsState::new(httpdns_api::apps::state::Apps {
            catalog: s.catalog.clone(),
            config: s.config.clone(),
            geo: s.geo.clone(),
            live: s.live.clone(),
            events: s.events.clone(),
            upstream: s.upstream.clone(),
            metrics: s.metrics.clone(),
            guard: s.guard,
            event_limits: httpdns_guard::RateLimiter::new(config.events.rate_per_client, config.events.burst),
            feedback_limits: httpdns_guard::RateLimiter::new(
                config.live.feedback_rate,
                config.live.feedback_burst,
            ),
            trusted_proxies: trusted(),
            auth_required: config.auth_required,
            allow_private_node_ips: config.allow_private_node_ips,
        }),
        admin: httpdns_api::admin::state::AdminState::new(httpdns_api::admin::state::Admin {
            catalog: s.catalog.clone(),
            config: s.config.clone(),
            events: s.events.clone(),
            geo: s.geo.clone(),
            mirror: s.mirror.clone(),
            upstream: s.upstream.clone(),
            metrics: s.metrics.clone(),
            service_ips: s.service_ips.clone(),
            console: console.clone(),
            trusted_proxies: trusted(),
            admin_token: s.admin_token.to_owned(),
            validation: httpdns_catalog::Validation {
                allow_private_node_ips: config.allow_private_node_ips,
                allow_local_origins: config.allow_local_origins,
            },
        }),
        console: httpdns_api::console::ConsoleState::new(httpdns_api::console::ConsoleParts {
            console,
            store: s.catalog.store().clone(),
            admin_token: s.admin_token.to_owned(),
            trusted_proxies: trusted(),
            metrics: s.metrics.clone(),
        }),
        ops: httpdns_api::ops::state::OpsState::new(httpdns_api::ops::state::Ops {
            catalog: s.catalog.clone(),
            geo: s.geo.clone(),
            upstream: s.upstream.clone(),
            metrics: s.metrics.clone(),
        }),
        answers: s.answers,
    }
}

/// The mirror's store of copies, as configured, with the process's descriptor limit `nofile`.
/// Fills are staged under the data directory.
fn mirror_objects(config: &Config, nofile: u64) -> anyhow::Result<httpdns_mirror::Objects> {
    let tmp = config.data_dir.join("mirror").join("tmp");
    match &config.mirror_store {
        MirrorStore::Local => {
            let root = local_objects_dir(config);
            // Copies of layout version 1 (`objects/`, where a key and its children collided)
            // move into the current layout once; a crash mid-way resumes at the next start.
            let legacy = config.data_dir.join("mirror").join("objects");
            let moved = httpdns_mirror::layout::migrate_v1(&legacy, &root)
                .context("moving stored copies to the current layout")?;
            if moved > 0 {
                tracing::info!(copies = moved, "Moved stored copies to the current store layout.");
            }
            // Large bodies in memory keep their files open (sent with sendfile): connections
            // may take half of the descriptors, these a quarter.
            let open_files = usize::try_from(nofile / 4).unwrap_or(usize::MAX).min(1 << 14);
            let objects = httpdns_mirror::Objects::local(&root, tmp)?
                .with_memory(config.mirror_memory)
                .with_sendfile(if config.mirror_sendfile { open_files } else { 0 });
            Ok(match config.mirror_max_bytes {
                Some(max) => objects.with_cap(max)?,
                None => objects,
            })
        }
        MirrorStore::S3 { .. } => {
            Ok(httpdns_mirror::Objects::remote(s3_objects(config)?, tmp)?.with_memory(config.mirror_memory))
        }
    }
}

/// Where the local mirror store keeps its copies (also what `httpdns backup` copies).
pub(crate) fn local_objects_dir(config: &Config) -> PathBuf {
    config.data_dir.join("mirror").join("store")
}

/// The configured S3 bucket (under its prefix) of the mirror's copies.
pub(crate) fn s3_objects(config: &Config) -> anyhow::Result<Arc<dyn object_store::ObjectStore>> {
    let MirrorStore::S3 { bucket, prefix, endpoint, region } = &config.mirror_store else {
        anyhow::bail!("the mirror store is not S3");
    };
    install_crypto_provider();
    let mut builder =
        object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket).with_region(region);
    if let Some(e) = endpoint {
        builder = builder.with_endpoint(e).with_allow_http(e.starts_with("http://"));
    }
    let s3 = builder.build().context("configuring the S3 store")?;
    Ok(if prefix.is_empty() {
        Arc::new(s3)
    } else {
        Arc::new(object_store::prefix::PrefixStore::new(s3, prefix.as_str()))
    })
}

/// Makes ring the process's TLS crypto provider unless one is installed already.
///
/// reqwest (the S3 store's client, health checks) is built without a bundled provider: the
/// workspace uses ring, and reqwest's `rustls` feature would compile aws-lc-rs beside it.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Reloads the GeoIP databases when their files change.
async fn follow_geo(
    geo: Arc<Geo>,
    metrics: Arc<Metrics>,
    every: std::time::Duration,
    shutdown: CancellationToken,
) {
    let configured = geo.config().city_db.is_some() || geo.config().asn_db.is_some();
    let mut trigger = reload::ReloadTrigger::new(every);
    while let Some(force) = trigger.next(&shutdown).await {
        if !configured {
            if force {
                tracing::info!("SIGHUP: no GeoIP database is configured; nothing to reload.");
            }
            continue;
        }
        if force {
            tracing::info!("SIGHUP: reloading the GeoIP databases.");
        }
        let g = geo.clone();
        match tokio::task::spawn_blocking(move || g.reload(force)).await {
            Ok(Ok(true)) => tracing::info!("GeoIP databases reloaded."),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                metrics.geoip_reload_errors.inc();
                tracing::error!(error = %e, "GeoIP reload failed; the previous databases stay in service.");
            }
            Err(e) => tracing::error!(error = %e, "GeoIP reload task failed."),
        }
    }
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

/// The services behind the httpdns product's routes (`httpdns_api::httpdns`): the guards of
/// its routes and the answer engine, their series in `prometheus`; the engine counts managed
/// names in the DNS front-ends' tally.
fn answer_services(
    config: &Config,
    prometheus: &prometheus::Registry,
    geo: &Arc<Geo>,
    upstream: &Arc<httpdns_upstream::Upstream>,
    dns_metrics: &httpdns_dns::DnsMetrics,
) -> (Arc<httpdns_guard::Guard>, Arc<httpdns_answer::Engine>) {
    let guard = httpdns_guard::Guard::new(
        httpdns_guard::GuardSettings {
            trusted_proxies: httpdns_core::cidr::CidrTable::new(
                config.trusted_proxies.iter().map(|n| (*n, ())),
            ),
            client_rate_limit: config.client_rate_limit,
            auth_required: config.auth_required,
        },
        prometheus,
    );
    let engine =
        httpdns_answer::Engine::new(geo.clone(), upstream.clone(), dns_metrics.domains.clone(), prometheus);
    (Arc::new(guard), Arc::new(engine))
}
