//! The long poll's wait, without HTTP: a held request waits on the config cache's one `watch`
//! channel and its own deadline, no task and no polling. The channel is bumped when the served
//! map changes, which a publish here, a PostgreSQL `NOTIFY` from another replica (the follow
//! loop refreshes the cache at once) or the sync timer (SQLite shared by several processes)
//! causes. Each waiter then compares numbers and goes back to sleep unless its module moved
//! past its version.
//!
//! A long poll holds while the request names a version *at least* as new as the served one: a
//! device that got a newer version on another replica, or the new side of a rollout, must not
//! be answered an older version at once and come straight back.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::cache::{ConfigCache, Published};

/// The longest a request may be held, in seconds (CONTRACT).
pub const MAX_WAIT_S: u64 = 60;

/// What a long poll on a module, holding `held`, finds at once.
#[derive(Debug)]
pub enum Poll {
    /// The module is not served.
    Missing,
    /// A version newer than the one held is served: answer it now.
    Newer(Arc<Published>),
    /// The process is stopping: answer what is served now, hold nothing.
    Closing(Arc<Published>),
    /// Nothing newer yet: wait.
    Wait(Waiter),
}

/// A held long poll: subscribed before the first look, so a change between the look and the
/// wait is seen.
#[derive(Debug)]
pub struct Waiter {
    cache: Arc<ConfigCache>,
    module: String,
    held: i64,
    changes: watch::Receiver<u64>,
}

/// The first look of a long poll on `module` by a device holding version `held`.
pub fn poll(cache: &Arc<ConfigCache>, module: &str, held: i64) -> Poll {
    let changes = cache.subscribe();
    match cache.get(module) {
        None => Poll::Missing,
        Some(p) if p.version > held => Poll::Newer(p),
        Some(p) if cache.is_closing() => Poll::Closing(p),
        Some(_) => Poll::Wait(Waiter { cache: cache.clone(), module: module.to_owned(), held, changes }),
    }
}

impl Waiter {
    /// Waits until a version newer than the held one is served (`Some`), or until `deadline`
    /// or the process stopping (`None`: then the caller answers what is served).
    pub async fn newer(mut self, deadline: Instant) -> Option<Arc<Published>> {
        loop {
            tokio::select! {
                r = self.changes.changed() => if r.is_err() { return None },
                () = tokio::time::sleep_until(deadline) => return None,
            }
            if self.cache.is_closing() {
                return None;
            }
            if let Some(p) = self.cache.get(&self.module).filter(|p| p.version > self.held) {
                return Some(p);
            }
        }
    }
}
