//! The config center's Prometheus series (the edge counts the requests themselves).

use prometheus::{IntCounter, IntGaugeVec, Opts, Registry};

/// The config cache's series.
#[derive(Debug, Clone)]
pub struct CenterMetrics {
    /// The served version per config module (modules are created by operators: bounded).
    pub config_version: IntGaugeVec,
    /// Reloads from the database asked for by apps that claimed a newer version.
    pub config_client_refreshes: IntCounter,
}

impl CenterMetrics {
    /// The series, registered into `registry`.
    pub fn new(registry: &Registry) -> Self {
        let config_version =
            IntGaugeVec::new(Opts::new("config_version", "Config version served, by module."), &["module"])
                .unwrap();
        let config_client_refreshes = IntCounter::new(
            "config_client_refreshes_total",
            "Config reloads from the database asked for by apps that claimed a newer version (rate bounded).",
        )
        .unwrap();
        registry.register(Box::new(config_version.clone())).expect("config metric registered once");
        registry.register(Box::new(config_client_refreshes.clone())).expect("config metric registered once");
        Self { config_version, config_client_refreshes }
    }
}
