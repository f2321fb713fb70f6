//! Pure domain logic of httpdns.
//!
//! Nothing in this crate does IO, awaits, or knows about HTTP, SQL or files, so the scheduling
//! rules can be tested exhaustively and benchmarked alone. The one reading of the outside world
//! is [`clock`], which the crates above share and nothing here calls.
//!
//! # Layout
//!
//! * [`clock`]: the wall clock, for the crates above (pure code takes the time as an argument).
//! * [`name`]: [`DomainName`], validated and normalised once at the edge.
//! * [`token`]: lowercase tokens for ISPs, regions and pools.
//! * [`ip`]: which addresses may ever be served.
//! * [`model`]: the operator-facing specs of every admin resource: networks, nodes, pools,
//!   domains, accounts, and the gateway's mirror rules ([`model::mirror`]) and image styles
//!   ([`model::style`]).
//! * [`cidr`]: longest-prefix match for operator networks.
//! * [`proxy_header`]: the PROXY protocol header (v1, v2) that passes on a client's address.
//! * [`schedule`]: the weighted split, rules by client attributes, the all-down choice.
//! * [`score`]: the 40/30/20/10 node score.
//! * [`live`]: measured inputs (probes, agent reports, app feedback) as plain values.
//! * [`snapshot`]: the immutable answering snapshot and the answer choice.

pub mod cidr;
pub mod clock;
pub mod ip;
pub mod live;
pub mod model;
pub mod name;
pub mod proxy_header;
pub mod schedule;
pub mod score;
pub mod snapshot;
pub mod token;

pub use name::DomainName;
pub use snapshot::{ClientView, Family, Snapshot};
pub use token::Token;
