//! `httpdns resolve | get | drill`: the client library from the command line, as an app would
//! use it, against any deployment.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use httpdns_client::{Account, CdnClient, ClientOptions, LocalDns, Url};

#[derive(Args, Debug, Clone)]
pub(crate) struct ClientArgs {
    /// HTTPDNS service base URL; repeat (or separate with commas) for failover between them.
    #[arg(long = "server", value_delimiter = ',', default_value = "http://127.0.0.1:8080")]
    servers: Vec<Url>,
    /// Config center: a base URL (`http://127.0.0.1:8080`, module `cdn`) or the full
    /// `.../app/config-center/module-config?module=NAME`.
    #[arg(long)]
    config_url: Option<Url>,
    /// The device id the config center's gray release buckets this device by.
    #[arg(long, default_value = "cli-device")]
    device_id: String,
    /// The config center's Ed25519 public key (base64); fetched from the server when absent.
    #[arg(long)]
    public_key: Option<String>,
    /// Account id for signed requests (`/{account}/sign_resolve`), with --secret.
    #[arg(long, requires = "secret")]
    account: Option<u32>,
    /// The account's secret.
    #[arg(long, env = "HTTPDNS_CLIENT_SECRET", hide_env_values = true)]
    secret: Option<String>,
    /// LocalDNS servers (`IP:PORT`) for the fallback; default: the system resolver.
    #[arg(long, value_delimiter = ',')]
    local_dns: Vec<SocketAddr>,
    /// Accept private and loopback addresses (intranets, tests).
    #[arg(long)]
    allow_private: bool,
    /// Network key the cache is kept under (`wifi:home`, `cellular`).
    #[arg(long, default_value = "default")]
    network: String,
    /// Keep answers here between runs.
    #[arg(long)]
    cache_file: Option<PathBuf>,
    /// TCP port of the `publicIpList` addresses the network check connects to.
    #[arg(long, default_value_t = 53)]
    probe_port: u16,
    /// Report nothing to the service's `/app/events`.
    #[arg(long)]
    no_events: bool,
    /// Share of requests reported as `request` events (0 to 1).
    #[arg(long, default_value_t = 1.0)]
    request_sample_rate: f64,
    /// Share of HTTPDNS answers also asked of LocalDNS and reported for the hijack map (0 to 1).
    #[arg(long, default_value_t = 0.0)]
    localdns_sample_rate: f64,
    /// Keep unsent events here between runs.
    #[arg(long)]
    events_file: Option<PathBuf>,
}

impl ClientArgs {
    fn client(&self) -> anyhow::Result<CdnClient> {
        let mut o = ClientOptions { device_id: self.device_id.clone(), ..Default::default() };
        o.resolver.service.servers = self.servers.clone();
        o.resolver.service.account =
            self.account.map(|id| Account { id, secret: self.secret.clone().unwrap_or_default() });
        o.resolver.local_dns = if self.local_dns.is_empty() {
            LocalDns::System
        } else {
            LocalDns::Servers(self.local_dns.clone())
        };
        o.resolver.allow_private = self.allow_private;
        o.resolver.cache_file = self.cache_file.clone();
        o.config.url = self.config_url.clone().map(|mut u| {
            if u.path() == "/" || u.path().is_empty() {
                u.set_path("/app/config-center/module-config");
                u.set_query(Some("module=cdn"));
            }
            u
        });
        o.config.public_key = self.public_key.clone();
        o.network_probe_port = self.probe_port;
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.request_sample_rate)
                && (0.0..=1.0).contains(&self.localdns_sample_rate),
            "the sample rates are 0 to 1"
        );
        o.events = (!self.no_events).then(|| httpdns_client::EventOptions {
            request_sample_rate: self.request_sample_rate,
            localdns_sample_rate: self.localdns_sample_rate,
            file: self.events_file.clone(),
            ..Default::default()
        });
        let client = CdnClient::new(o)?;
        client.resolver().set_network(&self.network);
        Ok(client)
    }
}

pub(crate) async fn resolve(args: &ClientArgs, names: &[String]) -> anyhow::Result<()> {
    let client = args.client()?;
    let mut failed = false;
    for name in names {
        match client.resolver().resolve(name).await {
            Ok(r) => {
                let ips: Vec<String> = r.ips.iter().map(ToString::to_string).collect();
                println!("{}\t{}\tttl={}s\tpath={}", r.name, ips.join(","), r.ttl.as_secs(), r.path);
                for (ip, why) in &r.dropped {
                    println!("  dropped {ip}: {why}");
                }
                if let Some(e) = &r.service_error {
                    println!("  HTTPDNS did not answer: {e}");
                }
            }
            Err(e) => {
                eprintln!("{name}: {e}");
                failed = true;
            }
        }
    }
    report_events(&client).await;
    anyhow::ensure!(!failed, "some names did not resolve");
    Ok(())
}

pub(crate) async fn get(args: &ClientArgs, url: &str, output: Option<&PathBuf>) -> anyhow::Result<()> {
    let client = args.client()?;
    if args.config_url.is_some() {
        client.config().refresh().await.context("fetching the config document")?;
    }
    let f = match client.get(url).await {
        Ok(f) => f,
        Err(e) => {
            // A failed request is what events are for: report it before giving up.
            report_events(&client).await;
            return Err(e.into());
        }
    };
    for (n, a) in f.attempts.iter().enumerate() {
        let resolved = a.resolved.as_ref().map_or(String::new(), |(path, ips)| {
            format!(
                " resolved by {path} to {}",
                ips.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
            )
        });
        eprintln!(
            "attempt {}: {} -> {:?} in {:.1} ms{}{}",
            n + 1,
            a.url,
            a.outcome,
            a.elapsed.as_secs_f64() * 1000.0,
            resolved,
            if a.disabled_host { " (host disabled)" } else { "" }
        );
    }
    let status = f.response.status();
    eprintln!(
        "served by {} ({:?} route), status {status}, switch-over {:.1} ms",
        f.host,
        f.route,
        f.switch_time().as_secs_f64() * 1000.0
    );
    let body = f.response.bytes().await?;
    report_events(&client).await;
    match output {
        Some(path) => std::fs::write(path, &body).with_context(|| format!("writing {}", path.display()))?,
        None => {
            use std::io::Write;
            std::io::stdout().write_all(&body)?;
        }
    }
    anyhow::ensure!(!status.is_server_error(), "the last route answered {status}");
    Ok(())
}

/// Sends what is waiting to `/app/events` (a sampled LocalDNS comparison may still be on its
/// way: it gets a moment) and says what was reported.
async fn report_events(client: &CdnClient) {
    let Some(r) = client.events() else { return };
    if r.options().localdns_sample_rate > 0.0 {
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let sent = r.flush().await;
    let s = r.stats();
    if s.recorded == 0 && s.queued == 0 {
        return;
    }
    let types: Vec<String> = s.by_type.iter().map(|(t, n)| format!("{t} {n}")).collect();
    eprintln!(
        "events: recorded {} ({}), sent {}, queued {}, dropped {}, refused {}{}",
        s.recorded,
        if types.is_empty() { "none".to_owned() } else { types.join(", ") },
        s.sent,
        s.queued,
        s.dropped,
        s.refused,
        match sent {
            Ok(_) => String::new(),
            Err(e) if r.options().file.is_some() =>
                format!(" (last send failed: {e}; kept in --events-file for the next run)"),
            Err(e) => format!(" (last send failed: {e}; lost without --events-file)"),
        }
    );
}

/// Sends `requests` requests for `url`, one every `interval`, while an operator breaks
/// things, and reports failures and switch-over times.
pub(crate) async fn drill(
    args: &ClientArgs,
    url: &str,
    requests: usize,
    interval: Duration,
) -> anyhow::Result<()> {
    let client = args.client()?;
    let _background = client.start().await;
    let (mut failed, mut switched) = (0usize, Vec::new());
    let mut times = Vec::with_capacity(requests);
    let mut hosts: std::collections::BTreeMap<String, usize> = Default::default();
    for i in 0..requests {
        let started = Instant::now();
        match client.get(url).await {
            Ok(f) => {
                let status = f.response.status();
                let (switch, attempts) = (f.switch_time(), f.attempts.len());
                let _ = f.response.bytes().await;
                *hosts.entry(f.host.clone()).or_default() += 1;
                if status.is_server_error() {
                    failed += 1;
                    println!("{i}: FAILED status {status} from {}", f.host);
                } else if attempts > 1 {
                    switched.push(switch);
                    println!(
                        "{i}: switched to {} after {attempts} attempts in {:.1} ms",
                        f.host,
                        switch.as_secs_f64() * 1000.0
                    );
                }
            }
            Err(e) => {
                failed += 1;
                println!("{i}: FAILED {e}");
            }
        }
        times.push(started.elapsed());
        tokio::time::sleep(interval).await;
    }
    times.sort();
    switched.sort();
    let q = |v: &[Duration], p: f64| {
        v.get(((v.len() as f64 * p).ceil() as usize).clamp(1, v.len().max(1)) - 1)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    println!("requests {requests}, failed {failed}, switched {}", switched.len());
    println!(
        "request time ms: p50 {:.1} p90 {:.1} max {:.1}",
        q(&times, 0.5),
        q(&times, 0.9),
        q(&times, 1.0)
    );
    if !switched.is_empty() {
        println!(
            "switch-over ms: p50 {:.1} p90 {:.1} max {:.1}",
            q(&switched, 0.5),
            q(&switched, 0.9),
            q(&switched, 1.0)
        );
    }
    for (host, n) in hosts {
        println!("served by {host}: {n}");
    }
    report_events(&client).await;
    anyhow::ensure!(failed == 0, "{failed} requests failed");
    Ok(())
}
