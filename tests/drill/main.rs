//! The disaster drill (`../shared/DOMAIN.md`, seed `004`), end to end: the real `httpdns`
//! binary, real origins and CDN stand-ins on loopback, and the client library as the app.
//! Every fault of the table is injected; each scenario asserts what the seed promises (zero
//! failed user requests where it promises it) and the drill prints, per fault, the time to an
//! answer (p50, p90, max) of the requests that met the fault.
//!
//! Run alone with `cargo test --test drill`; figures are in `docs/drill.md`.

#![allow(clippy::print_stdout, clippy::print_stderr, reason = "the drill prints its figures as it goes")]

#[allow(dead_code, reason = "shared with the integration suite, which uses all of it")]
#[path = "../integration/origin.rs"]
mod origin;
mod places;
#[allow(dead_code, reason = "shared with the integration suite, which uses all of it")]
#[path = "../integration/promtool.rs"]
mod promtool;
mod scenarios;
mod standin;
mod topology;

use std::time::Duration;

/// One line of the report.
pub(crate) struct Row {
    pub(crate) fault: &'static str,
    pub(crate) requests: usize,
    pub(crate) failed: usize,
    /// Requests that needed another host, path or address than the first choice.
    pub(crate) switched: usize,
    /// Per request that met the fault: the time it lost before the answering attempt (host
    /// faults), or the time to its answer (resolution and node faults), as `what` says.
    pub(crate) times: Vec<Duration>,
    pub(crate) what: &'static str,
    pub(crate) note: String,
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

pub(crate) fn print_row(r: &Row) {
    let mut t = r.times.clone();
    t.sort();
    println!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        r.fault,
        r.requests,
        r.failed,
        r.switched,
        r.what,
        ms(pct(&t, 0.5)),
        ms(pct(&t, 0.9)),
        ms(t.last().copied().unwrap_or_default()),
        r.note
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    let rows = rt.block_on(scenarios::run_all());
    println!();
    println!("drill summary (loopback; milliseconds)");
    println!("| fault | requests | failed | switched | measured | p50 | p90 | max | note |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in &rows {
        print_row(r);
    }
    let failed: usize = rows.iter().map(|r| r.failed).sum();
    assert_eq!(failed, 0, "user requests failed where the seed promises none");
    println!("drill: {} scenarios passed", rows.len());
}
