//! When to reload files the process follows (GeoIP databases, TLS certificates): on a timer
//! that notices ordinary replacements, and at once on SIGHUP, which also forces a reload of
//! files that look unchanged (a copy that kept the modification time).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// The timer and the signal behind every follow loop.
pub(crate) struct ReloadTrigger {
    ticker: tokio::time::Interval,
    #[cfg(unix)]
    hangup: Option<tokio::signal::unix::Signal>,
}

impl ReloadTrigger {
    pub(crate) fn new(every: Duration) -> Self {
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self {
            ticker,
            #[cfg(unix)]
            hangup: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok(),
        }
    }

    /// Waits for the next reload: `Some(false)` on a tick, `Some(true)` on SIGHUP (forced),
    /// `None` once `shutdown` is cancelled.
    pub(crate) async fn next(&mut self, shutdown: &CancellationToken) -> Option<bool> {
        #[cfg(unix)]
        let hup = async {
            match self.hangup.as_mut() {
                Some(s) => s.recv().await.is_some(),
                None => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let hup = std::future::pending::<bool>();
        tokio::select! {
            () = shutdown.cancelled() => None,
            _ = self.ticker.tick() => Some(false),
            forced = hup => Some(forced),
        }
    }
}
