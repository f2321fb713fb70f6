//! The app's side of httpdns (seed `000` §2–4, seed `003`, seed `004`), for any Rust app.
//!
//! * [`Resolver`]: HTTPDNS lookups with failover between service addresses, a per-network
//!   cache with refresh at 75% of the TTL, optional reuse of expired answers, a cache file,
//!   invalid-address and carrier filters, and LocalDNS when the service is down or empty.
//!   Also: pre-resolve in batches of 5, the service addresses from `/ss`, the IP stack
//!   ([`stack`]: the families asked and the answer's order), allow/deny lists.
//! * [`convergence`]: `https://image.xxx.com/a.jpg` → `https://<host>/image/a.jpg` by
//!   `mergeHostConfigs`, with the config center's gray-release buckets.
//! * [`failover`]: the ordered `hostListConfig`, hosts disabled on 5xx and connection failures
//!   (only while the network works, [`netcheck`]), revived by `HEAD` probes.
//! * [`config_source`]: the signed config document, polled, kept on disk, larger version wins.
//! * [`events`]: what the app saw (fallbacks, host switches, sampled requests and LocalDNS
//!   comparisons), batched to the service's `/app/events`, never delaying a request.
//! * [`feedback`]: every connection the client opens, reported to `/feedback` for the server's
//!   live node scores.
//! * [`CdnClient`]: all of it behind one `get`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), httpdns_client::Error> {
//! use httpdns_client::{CdnClient, ClientOptions};
//! let mut opts = ClientOptions { device_id: "a1b2c3d4e5f6".into(), ..Default::default() };
//! opts.resolver.service.servers = vec!["http://203.0.113.10:8080".parse().unwrap()];
//! opts.config.url = Some("http://203.0.113.10:8080/app/config-center/module-config?module=cdn".parse().unwrap());
//! let client = CdnClient::new(opts)?;
//! let _background = client.start().await;
//! let fetched = client.get("https://image.xxx.com/a.jpg").await?;
//! println!("{} from {} after {} attempt(s)", fetched.response.status(), fetched.host, fetched.attempts.len());
//! # Ok(()) }
//! ```

pub mod cache;
pub mod client;
pub mod config_source;
pub mod convergence;
pub mod error;
pub mod events;
pub mod failover;
pub mod feedback;
mod fsutil;
mod http;
pub mod localdns;
pub mod netcheck;
pub mod policy;
pub mod resolver;
pub mod service;
pub mod stack;

pub use client::{Attempt, Background, CdnClient, ClientOptions, Fetched, Outcome, Route};
pub use config_source::{ConfigOptions, ConfigStore};
pub use error::{Error, Result};
pub use events::{EventOptions, Reporter, ReporterStats};
pub use failover::EjectionPolicy;
pub use localdns::{AskError, LocalDns, LocalDnsError};
pub use reqwest::Url;
pub use resolver::{Path, Resolution, Resolver, ResolverOptions};
pub use service::{Account, ServiceOptions};
