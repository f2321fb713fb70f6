//! Keeping the answering snapshot and the served config documents in step with the database.
//!
//! Every replica polls the store every `sync_interval` (the safety net) and, on PostgreSQL,
//! also listens on the `NOTIFY` channel that every committed write announces on, so a change
//! made through any replica reaches all of them in milliseconds rather than a poll period.

use std::sync::Arc;
use std::time::Duration;

use httpdns_api::metrics::Metrics;
use httpdns_catalog::Catalog;
use httpdns_catalog::LiveHub;
use httpdns_center::ConfigCache;
use httpdns_live::checker::{ProbeObserver, Target};
use httpdns_live::health::Transition;
use httpdns_live::probe::ProbeError;
use httpdns_store::NOTIFY_CHANNEL;
use sqlx::postgres::PgListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Syncs on every tick and every notification until `shutdown`. Errors are logged once per
/// outage, not once per tick.
pub(crate) async fn follow_store(
    catalog: Arc<Catalog>,
    config: Arc<ConfigCache>,
    changed: Arc<Notify>,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
            () = changed.notified() => {}
        }
        let result = match catalog.sync().await {
            Ok(_) => config.refresh().await,
            Err(e) => Err(e),
        };
        match result {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("Database reachable again; sync resumed.");
            }
            Ok(()) => {}
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "Database unreachable; answering from the last snapshot.");
            }
            Err(_) => {}
        }
    }
}

/// Listens for change notifications on PostgreSQL, reconnecting with backoff.
pub(crate) async fn listen(url: String, changed: Arc<Notify>, shutdown: CancellationToken) {
    let mut backoff = Duration::from_millis(200);
    loop {
        let connected = async {
            let mut listener = PgListener::connect(&url).await?;
            listener.listen(NOTIFY_CHANNEL).await?;
            Ok::<_, sqlx::Error>(listener)
        };
        let mut listener = tokio::select! {
            () = shutdown.cancelled() => return,
            r = connected => match r {
                Ok(l) => l,
                Err(e) => {
                    tracing::debug!(error = %e, "LISTEN connection failed; retrying.");
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                    continue;
                }
            },
        };
        backoff = Duration::from_millis(200);
        // A change may have landed while the listener was away.
        changed.notify_one();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                n = listener.recv() => match n {
                    Ok(_) => changed.notify_one(),
                    Err(e) => {
                        tracing::debug!(error = %e, "LISTEN connection lost; reconnecting.");
                        break;
                    }
                },
            }
        }
    }
}

/// Folds live inputs into the snapshot every refresh interval and saves feedback aggregates
/// every flush interval, and once more on shutdown so a restart keeps them.
pub(crate) async fn follow_live(live: Arc<LiveHub>, catalog: Arc<Catalog>, shutdown: CancellationToken) {
    let mut refresh = tokio::time::interval(live.settings().refresh_interval);
    refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut flush = tokio::time::interval(live.settings().feedback_flush);
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    flush.tick().await;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            _ = refresh.tick() => {
                if let Err(e) = live.refresh(&catalog).await {
                    tracing::debug!(error = %e, "Live inputs not refreshed.");
                }
            }
            _ = flush.tick() => {
                if let Err(e) = live.flush(catalog.store()).await {
                    tracing::warn!(error = %e, "Feedback aggregates not saved; will retry.");
                }
            }
        }
    }
    if let Err(e) = live.flush(catalog.store()).await {
        tracing::warn!(error = %e, "Feedback aggregates not saved at shutdown.");
    }
}

/// Runs the health checker on a runtime of its own, on its own thread: probe traffic (connects,
/// timers, completions) then never wakes or competes with the API's worker threads, which
/// keeps its cost off the answer path's latency. Completes when the checker has stopped.
pub(crate) async fn run_checker(
    registry: Arc<httpdns_live::health::HealthRegistry>,
    targets: tokio::sync::watch::Receiver<Arc<Vec<Target>>>,
    observer: Arc<dyn ProbeObserver>,
    workers: usize,
    shutdown: CancellationToken,
) {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let spawned = std::thread::Builder::new().name("health-checks".into()).spawn(move || {
        // Probing is background work: at nice 10 the thread's wake-ups do not preempt the
        // threads answering requests (it waits for them to yield), and it still gets the few
        // percent of a core it needs. On Linux the nice value is per thread.
        #[cfg(target_os = "linux")]
        if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 10) {
            tracing::debug!(error = %e, "Health checks keep the default priority.");
        }
        match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt.block_on(httpdns_live::checker::run(registry, targets, observer, workers, shutdown)),
            Err(e) => tracing::error!(error = %e, "Health checks not started: no runtime."),
        }
        let _ = done_tx.send(());
    });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "Health checks not started: no thread.");
        return;
    }
    let _ = done_rx.await;
}

/// Counts probes and logs health transitions.
pub(crate) struct ProbeMetrics(pub(crate) Arc<Metrics>);

impl ProbeObserver for ProbeMetrics {
    fn probed(&self, target: &Target, result: &Result<Duration, ProbeError>, transition: Transition) {
        let m = &self.0;
        m.health_probes.with_label_values(&[if result.is_ok() { "ok" } else { "fail" }]).inc();
        match transition {
            Transition::None => {}
            Transition::WentDown => {
                m.health_transitions.with_label_values(&["down"]).inc();
                tracing::warn!(node = %target.node_id, addr = %target.addr, error = ?result.as_ref().err(), "Node failed its health checks; out of answers.");
            }
            Transition::WentUp => {
                m.health_transitions.with_label_values(&["up"]).inc();
                tracing::info!(node = %target.node_id, addr = %target.addr, "Node passed its health checks; back in answers.");
            }
        }
    }
}
