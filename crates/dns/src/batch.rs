//! Datagrams in batches: many queries read with one `recvmmsg(2)` and their replies sent with
//! one `sendmmsg(2)`.
//!
//! A busy DNS server spends more on the two system calls per query than on the answer; reading
//! what has queued up in one call and replying to all of it in one more is how Knot and
//! PowerDNS keep up. The calls are non-blocking: a batch is whatever has arrived, never a wait
//! for more, and an empty socket reads as `WouldBlock` (the UDP thread then waits in `poll`,
//! `crate::listen`).

use std::io::{self, IoSlice, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use nix::sys::socket::{recvmmsg, sendmmsg, MsgFlags, MultiHeaders, SockaddrStorage};

/// Datagrams read per call.
pub(crate) const BATCH: usize = 32;
/// Bytes kept per datagram. Queries are small (a name and an OPT); a longer one is cut here
/// and, no longer a whole message, answered FORMERR.
pub(crate) const DATAGRAM: usize = 4096;

/// Buffers for one socket's batches, reused from batch to batch.
pub(crate) struct Batch {
    buffers: Vec<[u8; DATAGRAM]>,
    /// Where each datagram of the current batch came from (`None`: no address, never seen
    /// on UDP) and its length; datagram i is in buffer i and header i.
    received: Vec<(Option<SocketAddr>, usize)>,
    replies: Vec<(Vec<u8>, SocketAddr)>,
}

impl Batch {
    pub(crate) fn new() -> Self {
        Self {
            buffers: vec![[0; DATAGRAM]; BATCH],
            received: Vec::with_capacity(BATCH),
            replies: Vec::with_capacity(BATCH),
        }
    }

    /// One batch: reads what has queued on `socket` (`WouldBlock` when nothing has), hands
    /// each datagram and its sender to `answer` (which returns the reply to send, if any), and
    /// sends the replies in one call. Returns the replies the socket did not take then, to be
    /// sent one by one.
    ///
    /// The kernel's message headers hold raw pointers, so they live only inside this call, and
    /// the send reuses the receive's headers: nix's result iterator reads each header's address
    /// slot, which the receive has filled for every datagram, and there are never more replies
    /// than datagrams.
    pub(crate) fn exchange(
        &mut self,
        socket: &std::net::UdpSocket,
        mut answer: impl FnMut(&[u8], SocketAddr) -> Option<Vec<u8>>,
    ) -> io::Result<Vec<(Vec<u8>, SocketAddr)>> {
        let fd = socket.as_raw_fd();
        let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
        self.received.clear();
        {
            let mut slices: Vec<[IoSliceMut<'_>; 1]> =
                self.buffers.iter_mut().map(|b| [IoSliceMut::new(&mut b[..])]).collect();
            let results = recvmmsg(fd, &mut headers, slices.iter_mut(), MsgFlags::MSG_DONTWAIT, None)
                .map_err(io::Error::from)?;
            for r in results {
                // A datagram longer than the buffer is cut to it (MSG_TRUNC in its flags).
                self.received.push((r.address.as_ref().and_then(socket_addr), r.bytes.min(DATAGRAM)));
            }
        }

        self.replies.clear();
        for (slot, &(peer, len)) in self.received.iter().enumerate() {
            let Some(peer) = peer else { continue };
            if let Some(bytes) = answer(&self.buffers[slot][..len], peer) {
                self.replies.push((bytes, peer));
            }
        }

        let mut sent = 0;
        if !self.replies.is_empty() {
            let replies = &self.replies;
            let slices: Vec<[IoSlice<'_>; 1]> = replies.iter().map(|(b, _)| [IoSlice::new(b)]).collect();
            let addrs: Vec<Option<SockaddrStorage>> =
                replies.iter().map(|(_, peer)| Some(SockaddrStorage::from(*peer))).collect();
            // Refused (the send buffer is full) or failed: the replies go one by one.
            sent = sendmmsg(fd, &mut headers, slices.iter(), &addrs, [], MsgFlags::MSG_DONTWAIT)
                .map_or(0, |r| r.count());
        }
        Ok(self.replies.drain(..).skip(sent).collect())
    }
}

fn socket_addr(s: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = s.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    s.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into()))
}
