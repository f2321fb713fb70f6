//! One DNS question to one server, the way both sides of httpdns ask: the server's upstream
//! resolver (`httpdns-dns`) and the client library's LocalDNS (`httpdns-client`).
//!
//! The question goes over UDP from a fresh socket with a random id; only a response with that
//! id and that question counts (a stray or spoofed datagram is skipped, not believed). A
//! truncated answer is asked again over TCP. Each transport has the caller's bound.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

/// Why an exchange got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("no answer over TCP within {0:?}")]
    TcpTimeout(Duration),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the question could not be encoded: {0}")]
    Encode(#[from] hickory_proto::ProtoError),
    #[error("the answer could not be decoded: {0}")]
    Decode(#[from] hickory_proto::serialize::binary::DecodeError),
}

/// The question to ask.
#[derive(Debug, Clone)]
pub struct Question {
    pub name: Name,
    pub qtype: RecordType,
    /// EDNS to send (payload size, client subnet), or none.
    pub edns: Option<Edns>,
}

/// Asks `server` and returns its response: over UDP, then over TCP if that was truncated,
/// each within `timeout`.
pub async fn exchange(server: SocketAddr, q: &Question, timeout: Duration) -> Result<Message, ExchangeError> {
    let id = random_id();
    let mut m = Message::new(id, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(q.name.clone(), q.qtype));
    if let Some(edns) = &q.edns {
        m.set_edns(edns.clone());
    }
    let wire = m.to_vec()?;
    let udp = tokio::time::timeout(timeout, udp(server, &wire, id, &q.name))
        .await
        .map_err(|_| ExchangeError::Timeout(timeout))??;
    if !udp.metadata.truncation {
        return Ok(udp);
    }
    tokio::time::timeout(timeout, tcp(server, &wire)).await.map_err(|_| ExchangeError::TcpTimeout(timeout))?
}

fn random_id() -> u16 {
    let mut id = [0u8; 2];
    // Without randomness the id is 0: still answered, only less guarded against spoofing.
    let _ = getrandom::fill(&mut id);
    u16::from_be_bytes(id)
}

async fn udp(server: SocketAddr, wire: &[u8], id: u16, name: &Name) -> Result<Message, ExchangeError> {
    let bind: SocketAddr = if server.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("addr");
    let sock = UdpSocket::bind(bind).await?;
    sock.connect(server).await?;
    sock.send(wire).await?;
    let mut buf = vec![0u8; 4096];
    loop {
        let n = sock.recv(&mut buf).await?;
        // Only the answer to this question counts, against stray or spoofed datagrams.
        let Ok(m) = Message::from_vec(&buf[..n]) else { continue };
        if m.metadata.id == id
            && m.metadata.message_type == MessageType::Response
            && m.queries.first().is_some_and(|mq| mq.name() == name)
        {
            return Ok(m);
        }
    }
}

async fn tcp(server: SocketAddr, wire: &[u8]) -> Result<Message, ExchangeError> {
    let mut s = TcpStream::connect(server).await?;
    let mut out = (wire.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(wire);
    s.write_all(&out).await?;
    let mut len = [0u8; 2];
    s.read_exact(&mut len).await?;
    let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut msg).await?;
    Ok(Message::from_vec(&msg)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::rdata::A;
    use hickory_proto::rr::{RData, Record};

    /// A server on loopback that first sends a stray datagram (wrong id), then the answer,
    /// truncated; over TCP it sends the full answer.
    #[tokio::test]
    async fn skips_strays_and_follows_truncation_to_tcp() {
        // One port for both transports: a free TCP port whose UDP twin is free too (another
        // test may hold either), found within a bounded number of tries.
        let mut pair = None;
        for _ in 0..50 {
            let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            if let Ok(udp) = UdpSocket::bind(tcp.local_addr().unwrap()).await {
                pair = Some((udp, tcp));
                break;
            }
        }
        let (udp, tcp) = pair.expect("a port free over both UDP and TCP");
        let addr = udp.local_addr().unwrap();
        let reply = |query: &Message, truncated: bool| {
            let mut r = Message::new(query.metadata.id, MessageType::Response, OpCode::Query);
            r.add_query(query.queries[0].clone());
            r.metadata.truncation = truncated;
            if !truncated {
                let name = query.queries[0].name().clone();
                r.add_answer(Record::from_rdata(name, 60, RData::A(A::new(192, 0, 2, 1))));
            }
            r
        };
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            let (n, peer) = udp.recv_from(&mut buf).await.unwrap();
            let q = Message::from_vec(&buf[..n]).unwrap();
            let mut stray = reply(&q, false);
            stray.metadata.id = q.metadata.id.wrapping_add(1);
            udp.send_to(&stray.to_vec().unwrap(), peer).await.unwrap();
            udp.send_to(&reply(&q, true).to_vec().unwrap(), peer).await.unwrap();
            let (mut s, _) = tcp.accept().await.unwrap();
            let mut len = [0u8; 2];
            s.read_exact(&mut len).await.unwrap();
            let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
            s.read_exact(&mut msg).await.unwrap();
            let full = reply(&Message::from_vec(&msg).unwrap(), false).to_vec().unwrap();
            let mut out = (full.len() as u16).to_be_bytes().to_vec();
            out.extend_from_slice(&full);
            s.write_all(&out).await.unwrap();
        });
        let q = Question { name: Name::from_ascii("a.example.").unwrap(), qtype: RecordType::A, edns: None };
        let m = exchange(addr, &q, Duration::from_secs(2)).await.unwrap();
        assert!(!m.metadata.truncation);
        assert_eq!(m.answers.len(), 1, "the full answer came over TCP");
    }

    #[tokio::test]
    async fn a_silent_server_is_a_timeout() {
        let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let q = Question { name: Name::from_ascii("a.example.").unwrap(), qtype: RecordType::A, edns: None };
        let e = exchange(silent.local_addr().unwrap(), &q, Duration::from_millis(100)).await.unwrap_err();
        assert!(matches!(e, ExchangeError::Timeout(_)), "{e}");
    }
}
