//! `memory_estimate` against the memory real renders take: the gateway reserves the estimate
//! from its image budget before it reads the original, so an estimate below the real peak lets
//! renders together pass the budget.
//!
//! Each render runs alone in a child process (this test binary again), whose glibc `malloc`
//! is told to map every block of 64 KiB or more on its own (`MALLOC_MMAP_THRESHOLD_`, which
//! also turns off its adaptive threshold): freed blocks go back to the kernel at once, so the
//! growth of the peak resident set (`VmHWM`, reset through `/proc/self/clear_refs` before the
//! render) is what the render held at its peak, libwebp's own `malloc`s included (which a
//! counting Rust allocator would not see). The original's bytes were resident before the
//! reset and are added, as the estimate counts them.

#![cfg(all(target_os = "linux", target_env = "gnu"))]

use std::process::Command;

use httpdns_image::{memory_estimate, parse, probe, render, Limits};

/// The variable that makes this binary's `child` test render one case.
const CASE: &str = "HTTPDNS_IMAGE_MEMORY_CASE";

/// Random RGBA pixels: nothing compresses, so every buffer is as large as it can be.
fn noise_rgba(w: u32, h: u32, seed: u64) -> image::RgbaImage {
    let mut state = seed | 1;
    image::RgbaImage::from_fn(w, h, |_, _| {
        let mut px = [0u8; 4];
        for c in &mut px {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *c = state as u8;
        }
        image::Rgba(px)
    })
}

/// The originals: a PNG with alpha, one without, and the same pixels as a baseline and a
/// progressive JPEG, a GIF, a WebP and a BMP (made by the renderer itself).
fn original(kind: &str) -> Vec<u8> {
    let (w, h) = (800, 600);
    let rgba = noise_rgba(w, h, 0x9e37_79b9_7f4a_7c15);
    let mut png = Vec::new();
    let rgb = image::DynamicImage::ImageRgba8(rgba.clone()).into_rgb8();
    let image: image::DynamicImage = if kind == "rgba.png" { rgba.into() } else { rgb.into() };
    image.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png).unwrap();
    let via = |ops: &str| render(&png, &parse(ops).unwrap(), &Limits::default()).unwrap().bytes;
    match kind {
        "rgba.png" | "rgb.png" => png,
        "baseline.jpg" => via("image/quality,Q_95/format,jpg"),
        "progressive.jpg" => via("image/quality,Q_95/interlace,1/format,jpg"),
        "gif" => via("image/format,gif"),
        "webp" => via("image/format,webp"),
        "bmp" => via("image/format,bmp"),
        other => panic!("no original {other}"),
    }
}

/// A field of `/proc/self/status`, in KiB.
fn status_kib(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{key} in /proc/self/status"))
}

/// Renders the case named in [`CASE`] and prints its peak and estimate; a no-op otherwise.
#[test]
fn child() {
    let Ok(case) = std::env::var(CASE) else { return };
    let (kind, ops) = case.split_once(' ').unwrap();
    let bytes = original(kind);
    let ops = parse(ops).unwrap();
    let limits = Limits::default();
    let header = probe(&bytes).unwrap();
    let estimate = memory_estimate(&ops, &header, bytes.len() as u64, &limits).unwrap();
    std::fs::write("/proc/self/clear_refs", "5").expect("resetting VmHWM");
    let before = status_kib("VmRSS");
    let rendered = render(&bytes, &ops, &limits).unwrap();
    let peak = (status_kib("VmHWM").saturating_sub(before)) * 1024 + bytes.len() as u64;
    drop(rendered);
    println!("MEMORY peak={peak} estimate={estimate}");
}

#[test]
fn estimates_bound_the_peak_of_real_renders() {
    let exe = std::env::current_exe().unwrap();
    let all_ops = [
        "image/resize,w_100",
        "image/resize,w_1800,limit_0",
        "image/resize,m_pad,w_1200,h_1200,limit_0",
        "image/format,png",
        "image/format,jpg",
        "image/quality,Q_100/format,jpg",
        "image/interlace,1/format,jpg",
        "image/format,webp",
        "image/quality,Q_100/format,webp",
        "image/format,gif",
        "image/format,bmp",
        "image/blur,r_3,s_2",
        "image/sharpen,100",
        "image/rotate,45",
        "image/rotate,90",
        "image/circle,r_300",
        "image/rounded-corners,r_100",
        "image/crop,w_500,h_500,g_center",
        "image/bright,50/contrast,-20",
        "image/watermark,text_SGVsbG8gd29ybGQ,size_200",
        "image/average-hue",
        "image/info",
    ];
    let mut cases: Vec<String> = all_ops.iter().map(|ops| format!("rgba.png {ops}")).collect();
    for kind in ["rgb.png", "baseline.jpg", "progressive.jpg", "gif", "webp", "bmp"] {
        for ops in ["image/resize,w_100", "image/format,png", "image/info"] {
            cases.push(format!("{kind} {ops}"));
        }
    }
    for ops in ["image/format,webp", "image/quality,Q_100/format,webp", "image/interlace,1/format,jpg"] {
        cases.push(format!("rgb.png {ops}"));
    }
    let mut report = Vec::new();
    let mut over = Vec::new();
    for case in &cases {
        let out = Command::new(&exe)
            .args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env(CASE, case)
            .env("MALLOC_MMAP_THRESHOLD_", "65536")
            .env("MALLOC_TRIM_THRESHOLD_", "0")
            .env("MALLOC_ARENA_MAX", "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        // libtest prints the test's name on the same line first.
        let line =
            stdout.lines().find_map(|l| l.split_once("MEMORY ").map(|(_, r)| r)).unwrap_or_else(|| {
                panic!("{case}: no result\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr))
            });
        let field = |name: &str| -> u64 {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap()
        };
        let (peak, estimate) = (field("peak"), field("estimate"));
        report.push(format!("{case}: peak {} KiB, estimate {} KiB", peak >> 10, estimate >> 10));
        if peak > estimate {
            over.push(case.clone());
        }
    }
    eprintln!("{}", report.join("\n"));
    assert!(over.is_empty(), "renders over their estimate: {over:?}\n{}", report.join("\n"));
}
