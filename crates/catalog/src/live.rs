use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Duration;

use httpdns_core::live::{Feedback, LiveNode};
use httpdns_core::Token;
use httpdns_live::feedback::{Aggregator, Estimate, FeedbackConfig, Key, Reporter};
use httpdns_store::live::FeedbackRow;
use httpdns_store::{Store, StoreError};

use crate::catalog::Catalog;

/// Settings of the live inputs.
#[derive(Debug, Clone)]
pub struct LiveSettings {
    /// How often measured values and feedback are folded into the answering snapshot.
    pub refresh_interval: Duration,
    /// An agent's report counts fully for this long...
    pub report_fresh: Duration,
    /// ...then fades linearly back to the operator's figures over this long.
    pub report_decay: Duration,
    /// How often feedback aggregates are saved to the database.
    pub feedback_flush: Duration,
    pub feedback: FeedbackConfig,
    /// `POST /feedback` requests per second per client address, and the burst allowed.
    pub feedback_rate: f64,
    pub feedback_burst: f64,
    /// Reports in one `POST /feedback`.
    pub feedback_max_batch: usize,
    /// Concurrent health probes.
    pub probe_workers: usize,
}

impl Default for LiveSettings {
    fn default() -> Self {
        Self {
            refresh_interval: Duration::from_secs(1),
            report_fresh: Duration::from_secs(30),
            report_decay: Duration::from_secs(60),
            feedback_flush: Duration::from_secs(10),
            feedback: FeedbackConfig::default(),
            feedback_rate: 5.0,
            feedback_burst: 20.0,
            feedback_max_batch: 100,
            probe_workers: 64,
        }
    }
}

/// App feedback and the refresh of live inputs.
#[derive(Debug)]
pub struct LiveHub {
    settings: LiveSettings,
    // A blocking mutex: short updates per report, never held across an await.
    aggregator: Mutex<Aggregator>,
}

/// `weight × reported + (1 − weight) × fallback`, rounded so that jitter below the score's
/// resolution does not rebuild the snapshot.
fn blend(reported: Option<f64>, fallback: f64, weight: f64, step: f64) -> Option<f64> {
    reported.map(|r| ((weight * r + (1.0 - weight) * fallback) / step).round() * step)
}

impl LiveHub {
    pub fn new(settings: LiveSettings) -> Self {
        Self { aggregator: Mutex::new(Aggregator::new(settings.feedback)), settings }
    }

    pub fn settings(&self) -> &LiveSettings {
        &self.settings
    }

    pub fn record(&self, key: Key, client: Reporter, ok: bool, connect_ms: Option<f64>) {
        let mut agg = self.aggregator.lock();
        agg.record(key, client, ok, connect_ms, httpdns_core::clock::unix_ms());
    }

    /// The current feedback estimate of a key.
    pub fn estimate(&self, key: &Key) -> Option<Estimate> {
        self.aggregator.lock().estimate(key, httpdns_core::clock::unix_ms())
    }

    /// Loads saved aggregates (from the last day) as the starting point after a restart.
    pub async fn load(&self, store: &Store) -> Result<usize, StoreError> {
        let rows = store.load_feedback(httpdns_core::clock::unix_ms() as i64 - 86_400_000).await?;
        let mut agg = self.aggregator.lock();
        let mut n = 0;
        for r in rows {
            let (Ok(isp), Ok(region)) = (Token::parse(&r.isp), Token::parse(&r.region)) else { continue };
            let estimate = Estimate {
                latency_ms: r.latency_ms,
                success_rate: r.success_rate,
                clients: r.clients.max(0) as usize,
            };
            agg.restore(Key { node: r.node, isp, region }, estimate);
            n += 1;
        }
        Ok(n)
    }

    /// Saves every current aggregate.
    pub async fn flush(&self, store: &Store) -> Result<usize, StoreError> {
        let rows: Vec<FeedbackRow> = {
            let mut agg = self.aggregator.lock();
            let now = httpdns_core::clock::unix_ms();
            agg.expire(now);
            agg.estimates(now)
                .into_iter()
                .map(|(k, e)| FeedbackRow {
                    node: k.node,
                    isp: k.isp.to_string(),
                    region: k.region.to_string(),
                    latency_ms: e.latency_ms,
                    success_rate: e.success_rate,
                    clients: e.clients as i64,
                })
                .collect()
        };
        store.save_feedback(&rows).await?;
        Ok(rows.len())
    }

    /// Folds agent reports, probe latencies and feedback into the catalog's live inputs.
    ///
    /// Latency precedence: app feedback for the client's ISP and region (applied per client
    /// kind by the snapshot), else the agent's reported latency, else the probes' measured
    /// connect time, else the operator's figure. An agent report counts fully while fresh and
    /// then fades linearly back to the fallback.
    pub async fn refresh(&self, catalog: &Catalog) -> Result<(), StoreError> {
        let now = httpdns_core::clock::unix_ms();
        let (fresh, decay) =
            (self.settings.report_fresh.as_millis() as u64, self.settings.report_decay.as_millis() as u64);
        let horizon = now.saturating_sub(fresh + decay) as i64;
        let reports: HashMap<String, _> = catalog.store().reports_since(horizon).await?.into_iter().collect();
        let published = catalog.snapshot();
        let mut live = HashMap::new();
        // By snapshot index through the published health view: once a second over every node,
        // a lookup by id (a lock and a key allocation each) would stall the answer path of a
        // 100,000-node fleet for milliseconds.
        for (index, node) in published.nodes().iter().enumerate() {
            let probed =
                published.health.get(index).and_then(|s| s.latency_ms()).map(|l| (l * 10.0).round() / 10.0);
            let mut entry = LiveNode { latency_ms: probed, ..LiveNode::default() };
            if let Some(r) = reports.get(&*node.id) {
                let age = now.saturating_sub(r.reported_at.max(0) as u64);
                let weight = if age <= fresh {
                    1.0
                } else if decay == 0 {
                    0.0
                } else {
                    (1.0 - (age - fresh) as f64 / decay as f64).clamp(0.0, 1.0)
                };
                let spec = &node.spec;
                if weight > 0.0 {
                    let base_latency = probed.unwrap_or(spec.latency_ms);
                    entry.latency_ms = blend(r.latency_ms, base_latency, weight, 0.1).or(probed);
                    entry.load_pct = blend(r.load_pct, spec.load_pct, weight, 0.1);
                    entry.bandwidth_mbps = blend(r.bandwidth_mbps, spec.bandwidth_mbps, weight, 1.0);
                }
            }
            if entry != LiveNode::default() {
                live.insert(node.id.to_string(), entry);
            }
        }
        let feedback: Vec<Feedback> = {
            let agg = self.aggregator.lock();
            let cfg = *agg.config();
            agg.estimates(now)
                .into_iter()
                .map(|(k, e)| Feedback {
                    node: k.node,
                    isp: k.isp,
                    region: k.region,
                    latency_ms: (e.effective_latency_ms(&cfg) * 10.0).round() / 10.0,
                })
                .collect()
        };
        drop(published);
        catalog.set_live(live, feedback).await;
        Ok(())
    }
}
