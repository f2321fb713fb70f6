//! Metrics of the listeners: open connections, refusals and closes by reason. The labels are
//! fixed sets (listener names are the process's own, reasons are enums).

use std::sync::Arc;

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

/// Why a connection was closed by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CloseReason {
    /// No complete request head (or TLS handshake, or PROXY header) in time.
    HeaderTimeout,
    /// Kept alive without a request for too long.
    IdleTimeout,
    /// A request in progress moved no byte for too long.
    Stalled,
    /// Closed to make room when a connection cap was reached.
    Evicted,
    /// A request body arrived too slowly: a gap between its reads, or the whole body, took
    /// longer than allowed.
    BodyTimeout,
}

impl CloseReason {
    pub const ALL: [CloseReason; 5] = [
        CloseReason::HeaderTimeout,
        CloseReason::IdleTimeout,
        CloseReason::Stalled,
        CloseReason::Evicted,
        CloseReason::BodyTimeout,
    ];

    pub fn label(self) -> &'static str {
        match self {
            CloseReason::HeaderTimeout => "header_timeout",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::Stalled => "stalled",
            CloseReason::Evicted => "evicted",
            CloseReason::BodyTimeout => "body_timeout",
        }
    }

    pub(crate) fn from_index(i: u8) -> Option<Self> {
        Self::ALL.get(usize::from(i)).copied()
    }
}

/// Why a connection was refused at accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefuseReason {
    /// The process-wide cap, with every open connection busy.
    Full,
    /// The per-address cap, with every connection of that address busy.
    PerAddress,
}

impl RefuseReason {
    pub fn label(self) -> &'static str {
        match self {
            RefuseReason::Full => "full",
            RefuseReason::PerAddress => "per_address",
        }
    }
}

/// The metric families, registered once per process.
#[derive(Debug, Clone)]
pub struct NetMetrics {
    open: IntGaugeVec,
    refused: IntCounterVec,
    closed: IntCounterVec,
    tls_failures: IntCounterVec,
    sendfile_bytes: IntCounterVec,
}

impl NetMetrics {
    pub fn new(registry: &Registry) -> Self {
        let open = IntGaugeVec::new(
            Opts::new("connections_open", "TCP connections open now, by listener"),
            &["listener"],
        )
        .expect("metric");
        let refused = IntCounterVec::new(
            Opts::new(
                "connections_refused_total",
                "Connections refused at accept because a connection cap was reached and every connection was busy",
            ),
            &["listener", "reason"],
        )
        .expect("metric");
        let closed = IntCounterVec::new(
            Opts::new(
                "connections_closed_total",
                "Connections the server closed: timeouts, stalls, and evictions to make room",
            ),
            &["listener", "reason"],
        )
        .expect("metric");
        let tls_failures = IntCounterVec::new(
            Opts::new("tls_handshake_failures_total", "TLS handshakes that failed or timed out"),
            &["listener"],
        )
        .expect("metric");
        let sendfile_bytes = IntCounterVec::new(
            Opts::new(
                "http_sendfile_bytes_total",
                "Response body bytes plain (unencrypted) connections sent from stored files with sendfile(2), by listener",
            ),
            &["listener"],
        )
        .expect("metric");
        for c in [&refused, &closed, &tls_failures, &sendfile_bytes] {
            registry.register(Box::new(c.clone())).expect("unique metric");
        }
        registry.register(Box::new(open.clone())).expect("unique metric");
        Self { open, refused, closed, tls_failures, sendfile_bytes }
    }

    /// The pre-resolved series of one listener.
    pub fn listener(&self, name: &'static str) -> Arc<ListenerMetrics> {
        Arc::new(ListenerMetrics {
            name,
            open: self.open.with_label_values(&[name]),
            refused: [RefuseReason::Full, RefuseReason::PerAddress]
                .map(|r| self.refused.with_label_values(&[name, r.label()])),
            closed: CloseReason::ALL.map(|r| self.closed.with_label_values(&[name, r.label()])),
            tls_failures: self.tls_failures.with_label_values(&[name]),
            sendfile_bytes: self.sendfile_bytes.with_label_values(&[name]),
        })
    }
}

/// One listener's series.
#[derive(Debug)]
pub struct ListenerMetrics {
    pub name: &'static str,
    pub open: IntGauge,
    refused: [IntCounter; 2],
    closed: [IntCounter; 5],
    pub tls_failures: IntCounter,
    pub sendfile_bytes: IntCounter,
}

impl ListenerMetrics {
    pub(crate) fn refused(&self, reason: RefuseReason) {
        self.refused[reason as usize].inc();
    }

    pub(crate) fn closed(&self, reason: CloseReason) {
        self.closed[reason as usize].inc();
    }
}
