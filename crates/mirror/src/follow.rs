//! What the gateway derives from the catalog's `watch` channels (the compiled rule table, the
//! compiled image styles), derived again on the first use after the channel changed.
//!
//! The check is one atomic load, so it sits on every request: a change the catalog sent
//! before a request started is in force for that request. The catalog sends a new rule set
//! before the admin write that made it is answered, so a rule is served from the moment its
//! `PUT` returns, as when the catalog set the rules itself (`tests/integration/kinds.rs`,
//! `tests/integration/mirror.rs`).

use std::sync::Arc;

use parking_lot::Mutex;

use arc_swap::{ArcSwap, Guard};
use tokio::sync::watch;

/// A value derived from what a `watch` channel carries (none until [`Followed::follow`]).
pub(crate) struct Followed<S, T> {
    current: ArcSwap<Current<S, T>>,
    /// Held while deriving, so one caller derives and the others then see its result.
    // Never held across an await; a panic in `derive` leaves nothing half-done (the value is
    // swapped whole afterwards), and parking_lot's lock does not poison.
    derive: Mutex<()>,
}

/// The value in force and the receiver it was derived from.
pub(crate) struct Current<S, T> {
    value: T,
    source: Option<watch::Receiver<S>>,
}

impl<S, T> Current<S, T> {
    /// The channel has a value this one was not derived from (a closed channel has none).
    fn stale(&self) -> bool {
        self.source.as_ref().is_some_and(|rx| rx.has_changed().unwrap_or(false))
    }
}

impl<S, T> std::ops::Deref for Current<S, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<S: Clone, T> Followed<S, T> {
    pub(crate) fn new(value: T) -> Self {
        Self { current: ArcSwap::from_pointee(Current { value, source: None }), derive: Mutex::new(()) }
    }

    /// Follows `source` from now on, deriving from its current value at once.
    pub(crate) fn follow(&self, source: watch::Receiver<S>, derive: impl FnOnce(&S, &T) -> T) {
        let _one = self.derive.lock();
        self.swap(source, derive);
    }

    /// The value in force, derived again first when the channel changed since.
    pub(crate) fn load(&self, derive: impl FnOnce(&S, &T) -> T) -> Guard<Arc<Current<S, T>>> {
        let current = self.current.load();
        if !current.stale() {
            return current;
        }
        drop(current);
        {
            let _one = self.derive.lock();
            // Another caller may have derived it while this one waited.
            let current = self.current.load_full();
            if let (true, Some(source)) = (current.stale(), current.source.clone()) {
                drop(current);
                self.swap(source, derive);
            }
        }
        self.current.load()
    }

    /// Derives from `source`'s newest value and swaps the result in (the caller holds `derive`).
    fn swap(&self, mut source: watch::Receiver<S>, derive: impl FnOnce(&S, &T) -> T) {
        // Cloned out, so the sender is not held up while `derive` runs.
        let input = source.borrow_and_update().clone();
        let value = derive(&input, &self.current.load().value);
        self.current.store(Arc::new(Current { value, source: Some(source) }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sent_value_is_in_force_at_the_next_load() {
        let (tx, rx) = watch::channel(1u32);
        let followed: Followed<u32, String> = Followed::new(String::new());
        assert_eq!(***followed.load(|_, _| unreachable!("nothing to follow yet")), "");
        followed.follow(rx, |n, _| format!("v{n}"));
        assert_eq!(***followed.load(|_, _| unreachable!("unchanged")), "v1");
        tx.send_replace(2);
        // The old value is handed to the derivation (the gateway keeps unchanged rules' clients).
        assert_eq!(***followed.load(|n, old| format!("{old}+v{n}")), "v1+v2");
        assert_eq!(***followed.load(|_, _| unreachable!("derived once")), "v1+v2");
        drop(tx);
        assert_eq!(***followed.load(|_, _| unreachable!("a closed channel keeps the last value")), "v1+v2");
    }
}
