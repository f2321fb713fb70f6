//! The byte cap's bookkeeping per hit (docs/benchmarks.md, issue 44): `touch` (what every hit
//! on a capped store does) over 100,000 copies, spread and on a hot set, `touch_and_pin` (a hit
//! that streams from its file), and, from the same run, the `stat(2)` every local hit makes
//! anyway, the yardstick.
//!
//! `cargo bench -p httpdns-mirror --bench cap`

use std::path::{Path, PathBuf};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use httpdns_mirror::cap::{Cap, Reserved};

fn cap_with(names: &[PathBuf]) -> Arc<Cap> {
    let cap = Arc::new(Cap::new(u64::MAX, Path::new("/nonexistent")));
    for n in names {
        if let Reserved::Room { pin, .. } = cap.reserve(n, 4096) {
            drop(pin);
        }
    }
    cap
}

fn bookkeeping(c: &mut Criterion) {
    let names: Vec<PathBuf> = (0..100_000)
        .map(|i| PathBuf::from(format!("/var/lib/httpdns/mirror/store/o/image/2026/12/{i:08}.jpg/~")))
        .collect();
    let cap = cap_with(&names);
    let mut g = c.benchmark_group("cap_hit");
    let mut i = 0usize;
    g.bench_function("touch_spread", |b| {
        b.iter(|| {
            i = i.wrapping_add(7919);
            cap.touch(&names[i % names.len()]);
        });
    });
    g.bench_function("touch_hot_1000", |b| {
        b.iter(|| {
            i = i.wrapping_add(7919);
            cap.touch(&names[i % 1000]);
        });
    });
    g.bench_function("touch_and_pin", |b| {
        b.iter(|| {
            i = i.wrapping_add(7919);
            drop(cap.touch_and_pin(&names[i % names.len()]));
        });
    });
    let file = tempfile::NamedTempFile::new().unwrap();
    g.bench_function("stat_yardstick", |b| {
        b.iter(|| std::hint::black_box(std::fs::metadata(file.path()).unwrap()));
    });
    g.finish();
}

criterion_group!(benches, bookkeeping);
criterion_main!(benches);
