//! `examples/bare_axum.rs` on mimalloc, the allocator `httpdns` links (`src/main.rs`): with the
//! allocator the same on both sides, a ratio against it is the cost of httpdns's own work and
//! nothing else. `scripts/bench-http.sh` measures against both.
//!
//! `cargo run --release --example bare_axum_mimalloc -- 127.0.0.1:18482`

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "bare_axum.rs"]
mod bare;

fn main() {
    bare::main();
}
