//! Datagrams in batches: many queries read with one `recvmmsg(2)` and their replies sent with
//! one `sendmmsg(2)`.
//!
//! A busy DNS server spends more on the two system calls per query than on the answer; reading
//! what has queued up in one call and replying to all of it in one more is how Knot and
//! PowerDNS keep up. The socket stays a tokio socket: readiness comes from the runtime and the
//! calls are made non-blocking inside `try_io`, so a quiet socket costs nothing and a batch
//! is whatever has arrived, never a wait for more.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use nix::sys::socket::{recvmmsg, sendmmsg, MsgFlags, MultiHeaders, SockaddrStorage};
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Datagrams read per call.
pub(crate) const BATCH: usize = 32;
/// Bytes kept per datagram. Queries are small (a name and an OPT); a longer one is cut here
/// and, no longer a whole message, answered FORMERR.
pub(crate) const DATAGRAM: usize = 4096;

/// One received datagram.
pub(crate) struct Received {
    pub peer: SocketAddr,
    /// Where its bytes are in [`Batch::datagram`].
    pub slot: usize,
    pub len: usize,
}

/// Buffers for one socket's batches, reused from call to call. (The kernel's message headers
/// hold raw pointers, so they are built per call rather than kept in this `Send` state.)
pub(crate) struct Batch {
    buffers: Vec<[u8; DATAGRAM]>,
    pub received: Vec<Received>,
}

impl Batch {
    pub(crate) fn new() -> Self {
        Self { buffers: vec![[0; DATAGRAM]; BATCH], received: Vec::with_capacity(BATCH) }
    }

    /// The bytes of a received datagram.
    pub(crate) fn datagram(&self, r: &Received) -> &[u8] {
        &self.buffers[r.slot][..r.len]
    }

    /// Reads what has queued on `socket` (at least one datagram, waiting for readiness first),
    /// into [`Batch::received`].
    pub(crate) async fn recv(&mut self, socket: &UdpSocket) -> io::Result<()> {
        self.received.clear();
        loop {
            socket.readable().await?;
            let fd = socket.as_raw_fd();
            let (buffers, received) = (&mut self.buffers, &mut self.received);
            let got = socket.try_io(Interest::READABLE, || {
                let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
                let mut slices: Vec<[IoSliceMut<'_>; 1]> =
                    buffers.iter_mut().map(|b| [IoSliceMut::new(&mut b[..])]).collect();
                let results = recvmmsg(fd, &mut headers, slices.iter_mut(), MsgFlags::MSG_DONTWAIT, None)
                    .map_err(io::Error::from)?;
                for (slot, r) in results.enumerate() {
                    let Some(peer) = r.address.as_ref().and_then(socket_addr) else { continue };
                    // A datagram longer than the buffer is cut to it (MSG_TRUNC in its flags).
                    received.push(Received { peer, slot, len: r.bytes.min(DATAGRAM) });
                }
                Ok(())
            });
            match got {
                Ok(()) if !self.received.is_empty() => return Ok(()),
                Ok(()) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

fn socket_addr(s: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = s.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    s.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into()))
}

/// Replies waiting to be sent together.
pub(crate) struct Outbox {
    replies: Vec<(Vec<u8>, SocketAddr)>,
}

impl Outbox {
    pub(crate) fn new() -> Self {
        Self { replies: Vec::with_capacity(BATCH) }
    }

    pub(crate) fn push(&mut self, bytes: Vec<u8>, peer: SocketAddr) {
        self.replies.push((bytes, peer));
    }

    /// Sends every reply: as many as the socket takes in one call, the rest one by one as the
    /// socket allows (a reply the kernel refuses outright is dropped, as a lost datagram).
    pub(crate) async fn flush(&mut self, socket: &UdpSocket) {
        let mut sent = 0;
        if self.replies.len() > 1 {
            let fd = socket.as_raw_fd();
            let replies = &self.replies;
            let slices: Vec<[IoSlice<'_>; 1]> = replies.iter().map(|(b, _)| [IoSlice::new(b)]).collect();
            let addrs: Vec<Option<SockaddrStorage>> =
                replies.iter().map(|(_, peer)| Some(SockaddrStorage::from(*peer))).collect();
            let r = socket.try_io(Interest::WRITABLE, || {
                let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(replies.len(), None);
                let n = sendmmsg(fd, &mut headers, slices.iter(), &addrs, [], MsgFlags::MSG_DONTWAIT)
                    .map_err(io::Error::from)?
                    .count();
                Ok(n)
            });
            if let Ok(n) = r {
                sent = n;
            }
        }
        for (bytes, peer) in &self.replies[sent..] {
            let _ = socket.send_to(bytes, *peer).await;
        }
        self.replies.clear();
    }
}
