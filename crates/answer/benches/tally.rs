//! What counting a question in the per-domain figures costs on the answer path
//! (`DomainTally::record`): one name asked over and over, and 1,000 names in turn, from one
//! thread and from two at once (the UDP threads and the HTTP workers share the shards).
//!
//! Run: `cargo bench -p httpdns-answer --bench tally`

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use httpdns_answer::tally::DomainTally;
use httpdns_core::{ClientView, Token};

fn record(c: &mut Criterion) {
    let view = ClientView { isp: Token::parse("unicom").ok(), region: Token::parse("shanghai").ok() };
    let names: Vec<String> = (0..1000).map(|i| format!("d{i}.example.com")).collect();
    let mut group = c.benchmark_group("tally_record");
    let tally = DomainTally::default();
    group.bench_function("one_name", |b| b.iter(|| tally.record(black_box("d1.example.com"), "d", &view, 7)));
    let mut i = 0;
    group.bench_function("1000_names", |b| {
        b.iter(|| {
            i = (i + 1) % names.len();
            tally.record(black_box(&names[i]), "udp", &view, 7);
        });
    });
    // Another thread counting the same names all along: the shards' locks are contended.
    let shared = Arc::new(DomainTally::default());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = {
        let (shared, stop, names, view) = (shared.clone(), stop.clone(), names.clone(), view.clone());
        std::thread::spawn(move || {
            let mut j = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                j = (j + 1) % names.len();
                shared.record(&names[j], "udp", &view, 7);
            }
        })
    };
    group.bench_function("1000_names_two_threads", |b| {
        b.iter(|| {
            i = (i + 1) % names.len();
            shared.record(black_box(&names[i]), "d", &view, 7);
        });
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    other.join().unwrap();
    group.finish();
}

criterion_group!(benches, record);
criterion_main!(benches);
