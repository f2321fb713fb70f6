//! Live inputs of the score: what probes, node agents and apps report, as the snapshot sees
//! it. The IO that gathers them lives elsewhere; here they are plain values, already decayed
//! by age, so a snapshot built from them is a pure function of its inputs.

use serde::Serialize;

use crate::token::Token;

/// Measured values of one node that override the operator's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LiveNode {
    /// Latency from active probes (TCP connect time), or reported by the node's agent.
    pub latency_ms: Option<f64>,
    pub load_pct: Option<f64>,
    pub bandwidth_mbps: Option<f64>,
}

/// Latency of a node as seen by the clients of one ISP and region, from app feedback. It
/// replaces the node's latency in the score for those clients only.
#[derive(Debug, Clone, PartialEq)]
pub struct Feedback {
    pub node: String,
    pub isp: Token,
    pub region: Token,
    pub latency_ms: f64,
}

/// Where the latency term of a score came from, for explanations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LatencySource {
    /// The operator's `latency_ms`.
    Operator,
    /// Active health probes or the node agent's report.
    Measured,
    /// App feedback from clients of the same ISP and region.
    Feedback,
}
