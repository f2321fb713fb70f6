//! A stand-in for a fleet of edge nodes in the live-scoring benchmark: accepts TCP connections
//! on one address (`0.0.0.0:PORT` answers every `127.x.y.z`) and closes them, on one plain
//! thread, so that being probed costs as little as a remote node's kernel would.
//!
//! A TCP check passes when the handshake completes, which the kernel does before any
//! `accept`; the sink drains its accept queue every 20 ms rather than waking for each of
//! hundreds of connections a second. Those wake-ups would be another machine's on a real
//! fleet; here they would land on the two cores being measured.
//!
//! `cargo run --release --example probe_sink -- 0.0.0.0:18483`

#![allow(clippy::print_stdout, clippy::print_stderr, reason = "a benchmark tool: it prints what it measured")]

use std::time::Duration;

fn main() {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "0.0.0.0:18483".into());
    let listener = std::net::TcpListener::bind(&addr).expect("bind");
    listener.set_nonblocking(true).expect("non-blocking");
    eprintln!("probe sink listening on {}", listener.local_addr().expect("addr"));
    loop {
        loop {
            match listener.accept() {
                Ok((conn, _)) => drop(conn),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => eprintln!("probe sink: {e}"),
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
