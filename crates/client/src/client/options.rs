//! What a [`CdnClient`](super::CdnClient) is built from.

use std::time::Duration;

use crate::config_source::ConfigOptions;
use crate::events::EventOptions;
use crate::failover::EjectionPolicy;
use crate::resolver::ResolverOptions;

#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// The stable id the config center buckets this device by.
    pub device_id: String,
    /// The device's segment (`premium`), matched by the document's `resolutionPolicy`.
    pub segment: Option<String>,
    pub resolver: ResolverOptions,
    pub config: ConfigOptions,
    pub ejection: EjectionPolicy,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// Port of `publicIpList` addresses used for the network check (public DNS: 53).
    pub network_probe_port: u16,
    pub network_probe_timeout: Duration,
    /// Overrides the document's `reviveProbeInterval` (whose minimum is 10 s): for drills.
    pub revive_interval: Option<Duration>,
    /// Overrides the document's `configRequestInterval`.
    pub config_interval: Option<Duration>,
    /// Reporting to the service's `/app/events` (on by default; active only when there is a
    /// service address or an events URL). `None`: nothing is reported.
    pub events: Option<EventOptions>,
    /// Connection outcomes to the service's `/feedback` (on by default, with
    /// [`EventOptions::feedback`]; active only when there is a service address; `url` overrides
    /// the address). `None`: nothing is reported.
    pub feedback: Option<EventOptions>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            device_id: String::new(),
            segment: None,
            resolver: ResolverOptions::default(),
            config: ConfigOptions::default(),
            ejection: EjectionPolicy::SEED,
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(15),
            network_probe_port: 53,
            network_probe_timeout: Duration::from_secs(3),
            revive_interval: None,
            config_interval: None,
            events: Some(EventOptions::default()),
            feedback: Some(EventOptions::feedback()),
        }
    }
}
