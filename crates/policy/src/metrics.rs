//! The controller's Prometheus series. Places are bounded by the event intake's label cap.

use httpdns_config::policy::PlaceState;
use prometheus::{Gauge, GaugeVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

#[derive(Debug, Clone)]
pub struct PolicyMetrics {
    /// 1 for a place's current state, 0 for the others.
    pub state: GaugeVec,
    /// The share of the place's `httpdnsRate` in force.
    pub share: GaugeVec,
    /// The place's threshold.
    pub threshold: GaugeVec,
    /// Changes made, by the state entered.
    pub steps: IntCounterVec,
    /// 1 on the replica that holds the controller's lease.
    pub leader: IntGauge,
    pub tick_errors: IntCounter,
    /// Seconds the last tick took.
    pub tick_seconds: Gauge,
}

impl PolicyMetrics {
    pub fn new(registry: &Registry) -> Self {
        let place = ["isp", "region"];
        let m = Self {
            state: GaugeVec::new(
                Opts::new("policy_place_state", "1 for the policy state each carrier and region is in."),
                &["isp", "region", "state"],
            )
            .expect("valid"),
            share: GaugeVec::new(
                Opts::new(
                    "policy_place_share",
                    "Share of the place's httpdnsRate in force (1 when healthy).",
                ),
                &place,
            )
            .expect("valid"),
            threshold: GaugeVec::new(
                Opts::new(
                    "policy_place_threshold",
                    "Failure-rate threshold derived from the place's history.",
                ),
                &place,
            )
            .expect("valid"),
            steps: IntCounterVec::new(
                Opts::new(
                    "policy_steps_total",
                    "Policy changes made by the controller, by the state entered.",
                ),
                &["to"],
            )
            .expect("valid"),
            leader: IntGauge::new("policy_leader", "1 on the replica running the policy controller.")
                .expect("valid"),
            tick_errors: IntCounter::new("policy_tick_errors_total", "Controller ticks that failed.")
                .expect("valid"),
            tick_seconds: Gauge::new("policy_tick_seconds", "Seconds the last controller tick took.")
                .expect("valid"),
        };
        let collectors: [Box<dyn prometheus::core::Collector>; 7] = [
            Box::new(m.state.clone()),
            Box::new(m.share.clone()),
            Box::new(m.threshold.clone()),
            Box::new(m.steps.clone()),
            Box::new(m.leader.clone()),
            Box::new(m.tick_errors.clone()),
            Box::new(m.tick_seconds.clone()),
        ];
        for c in collectors {
            registry.register(c).expect("policy metrics register once");
        }
        // Every state a change can enter, at zero from the start: a dashboard's rate over the
        // counter needs the series before the first change.
        for s in PlaceState::ALL {
            m.steps.with_label_values(&[s.as_str()]);
        }
        m
    }

    /// Sets a place's gauges.
    pub fn place(&self, isp: &str, region: &str, state: PlaceState, share: f64, threshold: f64) {
        for s in PlaceState::ALL {
            self.state.with_label_values(&[isp, region, s.as_str()]).set(if s == state { 1.0 } else { 0.0 });
        }
        self.share.with_label_values(&[isp, region]).set(share);
        self.threshold.with_label_values(&[isp, region]).set(threshold);
    }
}
