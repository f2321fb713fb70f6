//! [`Published`]: what the answer path reads, one snapshot with the health of its nodes.
//!
//! Defined here, below the catalog that builds it, so the answer engine, the guards and the
//! DNS front-ends read it without depending on the catalog (and through it on the store).

use httpdns_core::Snapshot;

use crate::health::HealthView;

/// A published snapshot with the health of its nodes.
#[derive(Debug)]
pub struct Published {
    pub snapshot: Snapshot,
    pub health: HealthView,
}

impl std::ops::Deref for Published {
    type Target = Snapshot;
    fn deref(&self) -> &Snapshot {
        &self.snapshot
    }
}
