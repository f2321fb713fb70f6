//! `cargo run --release --example mirror_herd -- URL [N]`: N concurrent GETs of one URL (a
//! key the mirror does not have yet), each timing its first body byte; prints the
//! distribution, the slowest ("last waiter"), and whether every body was identical.

#![allow(clippy::print_stdout, clippy::print_stderr, reason = "a benchmark tool: it prints what it measured")]

use std::time::{Duration, Instant};

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let url = args.next().expect("usage: mirror_herd URL [N]");
    let n: usize = args.next().map_or(1000, |s| s.parse().expect("N"));
    let client = httpdns_test_support::http::client_builder().pool_max_idle_per_host(0).build().unwrap();
    let started = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let t0 = Instant::now();
                let mut resp = client.get(&url).send().await.map_err(|e| e.to_string())?;
                let status = resp.status().as_u16();
                let mut ttfb = None;
                let mut hash: u64 = 0xcbf29ce484222325;
                let mut len = 0usize;
                while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
                    ttfb.get_or_insert_with(|| t0.elapsed());
                    for b in chunk.iter() {
                        hash = (hash ^ u64::from(*b)).wrapping_mul(0x100000001b3);
                    }
                    len += chunk.len();
                }
                Ok::<_, String>((status, ttfb.unwrap_or_else(|| t0.elapsed()), t0.elapsed(), hash, len))
            })
        })
        .collect();
    let mut ttfbs = Vec::new();
    let mut totals = Vec::new();
    let mut hashes = std::collections::BTreeSet::new();
    let mut failed = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok((200, ttfb, total, hash, len)) => {
                ttfbs.push(ttfb);
                totals.push(total);
                hashes.insert((hash, len));
            }
            Ok((status, ..)) => {
                failed += 1;
                eprintln!("status {status}");
            }
            Err(e) => {
                failed += 1;
                eprintln!("error: {e}");
            }
        }
    }
    ttfbs.sort();
    totals.sort();
    let pct = |v: &[Duration], p: f64| {
        v.get(((v.len() as f64 - 1.0) * p) as usize).map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    println!(
        "requests={n} ok={} failed={failed} distinct_bodies={} wall_ms={:.0}",
        ttfbs.len(),
        hashes.len(),
        started.elapsed().as_secs_f64() * 1e3
    );
    println!(
        "ttfb_ms p50={:.1} p90={:.1} p99={:.1} max(last waiter)={:.1}; complete_ms p50={:.1} max={:.1}",
        pct(&ttfbs, 0.5),
        pct(&ttfbs, 0.9),
        pct(&ttfbs, 0.99),
        pct(&ttfbs, 1.0),
        pct(&totals, 0.5),
        pct(&totals, 1.0)
    );
}
