//! A stand-in for a fleet of edge nodes in the live-scoring benchmark: accepts TCP connections
//! on one address (`0.0.0.0:PORT` answers every `127.x.y.z`) and closes them at once, on one
//! plain thread, so that being probed costs as little as a remote node's kernel would.
//!
//! `cargo run --release --example probe_sink -- 0.0.0.0:18483`

fn main() {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "0.0.0.0:18483".into());
    let listener = std::net::TcpListener::bind(&addr).expect("bind");
    eprintln!("probe sink listening on {}", listener.local_addr().expect("addr"));
    for conn in listener.incoming() {
        drop(conn);
    }
}
