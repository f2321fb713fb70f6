//! Persistence for httpdns: sqlx over SQLite (the embedded default) or PostgreSQL.
//!
//! # Layout
//!
//! * [`Store`]: the connection pool, migrations and the revisioned resource table that holds
//!   every admin resource (networks, nodes, pools, domains, and the resources of later
//!   features) as a validated JSON body under `(kind, name)`.
//! * [`Kind`]: the closed set of resource kinds.
//! * [`teams`]: named admin tokens with roles, and the audit log of every change.
//! * [`behind`]: rows a replica counts in memory and writes behind, bounded, nothing lost.
//!
//! # Revisions
//!
//! `store_meta.revision` is a counter that every write transaction increments first, so it
//! also serialises writers: on PostgreSQL the row lock makes revisions commit in order, and
//! SQLite has a single writer anyway. A reader that has seen revision `N` fetches
//! `revision > N` and gets every later change exactly once, deletions included (a deleted row
//! keeps a NULL body). This is how the answering snapshot follows the database, in this process
//! and in every other replica sharing a PostgreSQL database.
//!
//! The answer path never calls this crate; only the sync loop and the admin API do.

pub mod adoption;
pub mod backup;
pub mod behind;
pub mod config;
mod error;
pub mod events;
pub mod live;
pub mod policy;
pub mod replicas;
mod resources;
pub mod rollouts;
pub mod switches;
pub mod teams;

pub use error::StoreError;
pub use resources::{Change, Kind, Precondition, Resource, Store, Written, NOTIFY_CHANNEL};
