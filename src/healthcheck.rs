//! `httpdns healthcheck`: asks the configured API listener's `/healthz`, for container
//! health checks in an image without curl or a shell.

use std::time::Duration;

use anyhow::{bail, Context};
use httpdns_server::{Config, Listen};

/// The URL of `/healthz` on the configured API listener (an unspecified address is asked on
/// loopback), or `url` when given.
fn target(config: &Config, url: Option<&str>) -> anyhow::Result<String> {
    if let Some(u) = url {
        return Ok(u.to_owned());
    }
    let Listen::At(mut addr) = config.api_addr else {
        bail!("HTTPDNS_API_ADDR is off: nothing to check (give --url)");
    };
    if addr.ip().is_unspecified() {
        addr.set_ip(if addr.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    Ok(format!("http://{addr}/healthz"))
}

/// Succeeds when the URL answers 2xx within `timeout`.
pub(crate) async fn run(config: &Config, url: Option<&str>, timeout: Duration) -> anyhow::Result<()> {
    let url = target(config, url)?;
    let client = reqwest::Client::builder().timeout(timeout).no_proxy().build()?;
    let resp = client.get(&url).send().await.with_context(|| format!("GET {url}"))?;
    if !resp.status().is_success() {
        bail!("GET {url}: {}", resp.status());
    }
    println!("{url}: {}", resp.status());
    Ok(())
}
