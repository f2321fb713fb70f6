//! A stand-in for the apps in the live-scoring benchmark: posts batches of feedback reports to
//! `/feedback` at a steady rate over one kept-alive connection, on one plain thread, so that
//! generating the load costs next to nothing on the machine being measured (a Python client
//! doing the same cost about 15 ms of CPU a second, half as much as the probes it sat beside).
//!
//! `cargo run --release --example feedback_load -- 127.0.0.1:8080 100 10`
//! (address, reports per second, reports per request). Runs until killed.

#![allow(clippy::print_stdout, clippy::print_stderr, reason = "a benchmark tool: it prints what it measured")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:8080".into());
    let per_second: u64 = args.next().and_then(|v| v.parse().ok()).unwrap_or(100);
    let batch: u64 = args.next().and_then(|v| v.parse().ok()).unwrap_or(10).max(1);
    let period = Duration::from_secs_f64(batch as f64 / per_second.max(1) as f64);
    let mut conn = connect(&addr);
    let mut next = Instant::now();
    let mut i: u64 = 0;
    loop {
        // Reports about the 1,000 benchmark nodes (127.0.x.y), one in seven a failure.
        let reports: Vec<String> = (i..i + batch)
            .map(|n| {
                let node = n % 1000;
                format!(
                    r#"{{"ip":"127.0.{}.{}","domain":"www.example.com","ok":{},"connect_ms":{},"network":"wifi"}}"#,
                    node / 250 + 1,
                    node % 250 + 1,
                    n % 7 != 0,
                    5 + n % 50
                )
            })
            .collect();
        let body = format!("[{}]", reports.join(","));
        i += batch;
        if post(&mut conn, &addr, &body).is_err() {
            conn = connect(&addr);
        }
        next += period;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
}

fn connect(addr: &str) -> BufReader<TcpStream> {
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return BufReader::new(s);
            }
            Err(e) => {
                eprintln!("feedback_load: {addr}: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// One request and its whole response, on the kept-alive connection.
fn post(conn: &mut BufReader<TcpStream>, addr: &str, body: &str) -> std::io::Result<()> {
    let request = format!(
        "POST /feedback HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.get_mut().write_all(request.as_bytes())?;
    let mut length = 0usize;
    let mut line = String::new();
    loop {
        line.clear();
        if conn.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut rest = vec![0u8; length];
    conn.read_exact(&mut rest)
}
