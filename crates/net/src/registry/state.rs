//! What the protocol handler of one connection shares with the reaper: lock-free flags the
//! handler sets and the reaper reads and clears.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::Poll;

use futures_util::task::AtomicWaker;

use crate::metrics::CloseReason;

/// One connection's flags.
#[derive(Debug, Default)]
pub struct ConnState {
    /// Requests being handled now (an HTTP/2 connection can have many).
    in_flight: AtomicU32,
    /// Requests whose handler waits for more of the request body now.
    waiting_body: AtomicU32,
    /// Requests started so far (wrapping).
    started: AtomicU32,
    /// Bytes were read, or written, on the socket since the reaper last looked.
    read: AtomicBool,
    wrote: AtomicBool,
    /// A request or response body frame moved since the reaper last looked: the progress of
    /// the requests themselves, which control frames (an HTTP/2 `PING` and its answer) are not.
    moved: AtomicBool,
    /// The connection multiplexes (HTTP/2): its socket carries control frames, so socket bytes
    /// say nothing of its requests' progress.
    multiplexed: AtomicBool,
    /// Why the connection was told to close (`CloseReason as u8 + 1`); 0: not told.
    closing: AtomicU8,
    /// Its listener is shutting down: finish the request in progress, take no more.
    draining: AtomicBool,
    /// When told to close, close with a FIN rather than a reset (an idle connection spared).
    graceful: AtomicBool,
    /// The connection's task, woken when told to close or drain. One waker rather than a
    /// `Notify`: the task polls this on every wake-up (each request), and a `Notify` takes a
    /// lock on each poll.
    waker: AtomicWaker,
}

/// What a connection was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Close at once ([`CloseReason`]).
    Close(CloseReason),
    /// Close once the requests in progress are answered.
    Drain,
}

/// What a connection's requests are doing, as far as the reaper and eviction care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Activity {
    /// No request in progress.
    None,
    /// Every request in progress waits for the client to send more of its body.
    Body,
    /// The server is answering (or reading a body that keeps arriving).
    Busy,
}

impl ConnState {
    pub fn note_read(&self) {
        self.read.store(true, Ordering::Relaxed);
    }

    pub fn note_write(&self) {
        self.wrote.store(true, Ordering::Relaxed);
    }

    /// A request or response body frame moved.
    pub fn note_moved(&self) {
        self.moved.store(true, Ordering::Relaxed);
    }

    /// The connection speaks HTTP/2: only body frames count as its requests' progress.
    pub fn set_multiplexed(&self) {
        if !self.multiplexed.load(Ordering::Relaxed) {
            self.multiplexed.store(true, Ordering::Relaxed);
        }
    }

    /// A request begins; the returned guard ends it when dropped (after its response body).
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.started.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    /// Requests in progress now.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// A request's handler starts waiting for body bytes that have not arrived; the guard
    /// ends the wait when dropped.
    pub fn wait_body(self: &Arc<Self>) -> BodyWait {
        self.waiting_body.fetch_add(1, Ordering::Relaxed);
        BodyWait(self.clone())
    }

    pub(crate) fn activity(&self) -> Activity {
        let in_flight = self.in_flight.load(Ordering::Relaxed);
        if in_flight == 0 {
            Activity::None
        } else if self.waiting_body.load(Ordering::Relaxed) >= in_flight {
            Activity::Body
        } else {
            Activity::Busy
        }
    }

    pub(crate) fn started(&self) -> u32 {
        self.started.load(Ordering::Relaxed)
    }

    /// Takes the flags the reaper looks at: (socket read, requests progressed).
    ///
    /// A request progresses when a body frame moves, or, on a connection that does not
    /// multiplex, when its socket takes bytes. Reads never count for a request being answered:
    /// a client that dribbles bytes at a server whose answer it does not read is stalled.
    pub(crate) fn take_progress(&self) -> (bool, bool) {
        let read = self.read.swap(false, Ordering::Relaxed);
        let wrote = self.wrote.swap(false, Ordering::Relaxed);
        let moved = self.moved.swap(false, Ordering::Relaxed);
        let multiplexed = self.multiplexed.load(Ordering::Relaxed);
        (read, moved || (wrote && !multiplexed))
    }

    /// Resolves once the connection has been told to close (timeout, eviction). One task per
    /// connection may wait on this (or on [`ConnState::signalled`]) at a time.
    pub fn closed(&self) -> impl Future<Output = CloseReason> + '_ {
        std::future::poll_fn(move |cx| {
            // Registered before the flag is read: a close told in between still wakes us.
            self.waker.register(cx.waker());
            self.close_reason().map_or(Poll::Pending, Poll::Ready)
        })
    }

    /// Resolves once the connection has been told to close or to drain.
    pub fn signalled(&self) -> impl Future<Output = Signal> + '_ {
        std::future::poll_fn(move |cx| {
            self.waker.register(cx.waker());
            if let Some(r) = self.close_reason() {
                Poll::Ready(Signal::Close(r))
            } else if self.draining.load(Ordering::Acquire) {
                Poll::Ready(Signal::Drain)
            } else {
                Poll::Pending
            }
        })
    }

    pub(crate) fn tell_drain(&self) {
        self.draining.store(true, Ordering::Release);
        self.waker.wake();
    }

    pub(crate) fn close_gracefully(&self) {
        self.graceful.store(true, Ordering::Relaxed);
    }

    /// Whether a close should reset the connection (SO_LINGER 0): one that timed out, stalled
    /// or was spared while in the middle of something; not an idle one.
    pub fn reset_on_close(&self) -> bool {
        matches!(
            self.close_reason(),
            Some(
                CloseReason::HeaderTimeout
                    | CloseReason::Stalled
                    | CloseReason::Evicted
                    | CloseReason::BodyTimeout
            )
        ) && !self.graceful.load(Ordering::Relaxed)
    }

    pub fn close_reason(&self) -> Option<CloseReason> {
        CloseReason::from_index(self.closing.load(Ordering::Acquire).checked_sub(1)?)
    }

    pub(crate) fn tell_close(&self, reason: CloseReason) -> bool {
        let first =
            self.closing.compare_exchange(0, reason as u8 + 1, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if first {
            self.waker.wake();
        }
        first
    }
}

/// A request in progress on a connection.
#[derive(Debug)]
pub struct InFlight(Arc<ConnState>);

impl InFlight {
    pub(crate) fn state(&self) -> &ConnState {
        &self.0
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A handler waiting for request body bytes.
#[derive(Debug)]
pub struct BodyWait(Arc<ConnState>);

impl Drop for BodyWait {
    fn drop(&mut self) {
        self.0.waiting_body.fetch_sub(1, Ordering::Relaxed);
    }
}
