//! The UDP listener over real sockets on loopback: queries that queued up are read and
//! answered together (one `recvmmsg`, one `sendmmsg`), a reuse-port group on a fixed port
//! answers every client, a datagram longer than the read buffer is answered FORMERR, a
//! question sent upstream is answered from its task, and the listener's thread ends (closing
//! the socket) when it is told to stop, also under a flood, or when its future is dropped.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use httpdns_core::model::{DomainSpec, NodeSpec, PoolSpec};
use httpdns_core::snapshot::{AllUp, Model, Policy};
use httpdns_core::{ClientView, DomainName, Snapshot, Token};
use httpdns_dns::listen::{bind_udp, serve_udp, Handler, MAX_UDP_SOCKETS};
use httpdns_dns::{answer, build_query, Context, DnsMetrics};
use httpdns_upstream::{Upstream, UpstreamConfig};
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

fn handler() -> Handler {
    let tok = |s: &str| Token::parse(s).unwrap();
    let node = |ip: &str| NodeSpec {
        ip: ip.parse().unwrap(),
        pool: tok("edge"),
        isp: tok("telecom"),
        region: tok("beijing"),
        bandwidth_mbps: 1000.0,
        load_pct: 10.0,
        latency_ms: 5.0,
        enabled: true,
    };
    let model = Model {
        nodes: vec![("a".into(), node("1.1.1.1")), ("b".into(), node("1.1.1.2"))],
        pools: vec![(tok("edge"), PoolSpec::default())],
        domains: vec![(
            DomainName::parse("www.example.com").unwrap(),
            DomainSpec::pooled(tok("edge"), 60, 2),
        )],
        ..Model::default()
    };
    let snapshot = Arc::new(Snapshot::build(model, Policy::default(), 1));
    Arc::new(move |bytes, peer, transport| {
        let ctx = Context {
            snapshot: &snapshot,
            health: &AllUp,
            classify: |_: IpAddr| (ClientView::default(), 0),
            tally: None,
        };
        answer(bytes, peer, transport, &ctx)
    })
}

fn serve(sockets: Vec<UdpSocket>) -> CancellationToken {
    let shutdown = CancellationToken::new();
    let upstream = Arc::new(Upstream::new(UpstreamConfig::new(Vec::new())));
    let metrics = Arc::new(DnsMetrics::new(&prometheus::Registry::new()));
    let handler = handler();
    for socket in sockets {
        tokio::spawn(serve_udp(socket, handler.clone(), upstream.clone(), metrics.clone(), shutdown.clone()));
    }
    shutdown
}

/// Reads replies on `client` until `want` have come or two seconds pass; returns them.
async fn replies(client: &UdpSocket, want: usize) -> Vec<Message> {
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    while got.len() < want {
        match tokio::time::timeout(Duration::from_secs(2), client.recv(&mut buf)).await {
            Ok(Ok(n)) => got.push(Message::from_vec(&buf[..n]).expect("a DNS message")),
            _ => break,
        }
    }
    got
}

fn assert_answered(m: &Message) {
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    let mut ips: Vec<String> = m.answers.iter().map(|r| r.data.to_string()).collect();
    ips.sort();
    assert_eq!(ips, ["1.1.1.1", "1.1.1.2"]);
}

#[tokio::test]
async fn queries_that_queued_up_are_all_answered() {
    let server = bind_udp("127.0.0.1:0".parse().unwrap()).unwrap();
    assert_eq!(server.len(), 1, "port 0 binds one socket of its own");
    let addr = server[0].local_addr().unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.connect(addr).await.unwrap();
    // Forty queries wait in the socket's queue before the server reads: its first read takes
    // a batch of them and the replies go out together.
    for id in 0..40u16 {
        client.send(&build_query(id, "www.example.com.", RecordType::A, None).unwrap()).await.unwrap();
    }
    let shutdown = serve(server);
    let got = replies(&client, 40).await;
    shutdown.cancel();
    assert_eq!(got.len(), 40);
    let ids: HashSet<u16> = got.iter().map(|m| m.metadata.id).collect();
    assert_eq!(ids, (0..40).collect());
    got.iter().for_each(assert_answered);
}

#[tokio::test]
async fn a_reuse_port_group_answers_every_client() {
    // A fixed port, found free (bounded: a port taken between the probe and the bind is
    // tried again).
    let mut bound = None;
    for _ in 0..20 {
        let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr: SocketAddr = probe.local_addr().unwrap();
        drop(probe);
        if let Ok(group) = bind_udp(addr) {
            bound = Some((addr, group));
            break;
        }
    }
    let (addr, group) = bound.expect("a free UDP port");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(group.len(), cpus.min(MAX_UDP_SOCKETS));
    assert!(group.iter().all(|s| s.local_addr().unwrap() == addr));
    let shutdown = serve(group);
    // Thirty-two clients, each its own source port (the kernel spreads them over the group).
    let mut clients = Vec::new();
    for i in 0..32u16 {
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        c.connect(addr).await.unwrap();
        c.send(&build_query(i, "www.example.com.", RecordType::A, None).unwrap()).await.unwrap();
        clients.push((i, c));
    }
    for (i, c) in &clients {
        let got = replies(c, 1).await;
        assert_eq!(got.len(), 1, "client {i} got no answer");
        assert_eq!(got[0].metadata.id, *i);
        assert_answered(&got[0]);
    }
    shutdown.cancel();
}

#[tokio::test]
async fn a_datagram_longer_than_the_buffer_is_answered_formerr() {
    let server = bind_udp("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = server[0].local_addr().unwrap();
    let shutdown = serve(server);
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.connect(addr).await.unwrap();
    // A header claiming one question, then 6,000 bytes of a name that never ends: cut at the
    // read buffer, it is not a message.
    let mut big = vec![0xAB, 0xCD, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    big.extend(std::iter::repeat_n([63u8].into_iter().chain([b'a'; 63]), 94).flatten());
    assert!(big.len() > 6000);
    client.send(&big).await.unwrap();
    let mut buf = [0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(2), client.recv(&mut buf)).await.unwrap().unwrap();
    shutdown.cancel();
    assert_eq!(&buf[..2], &[0xAB, 0xCD]);
    assert_eq!(buf[3] & 0x0F, ResponseCode::FormErr.low());
    assert!(n >= 12);
}

/// One listener on a socket of its own, with its task's handle.
fn serve_one() -> (SocketAddr, CancellationToken, tokio::task::JoinHandle<()>) {
    serve_one_with(handler())
}

fn serve_one_with(handler: Handler) -> (SocketAddr, CancellationToken, tokio::task::JoinHandle<()>) {
    let server = bind_udp("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = server[0].local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let upstream = Arc::new(Upstream::new(UpstreamConfig::new(Vec::new())));
    let metrics = Arc::new(DnsMetrics::new(&prometheus::Registry::new()));
    let task = tokio::spawn(serve_udp(
        server.into_iter().next().unwrap(),
        handler,
        upstream,
        metrics,
        shutdown.clone(),
    ));
    (addr, shutdown, task)
}

/// Whether `addr` can be bound again within two seconds: the listener closed its socket.
async fn freed(addr: SocketAddr) -> bool {
    for _ in 0..40 {
        if std::net::UdpSocket::bind(addr).is_ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

async fn answered_once(addr: SocketAddr) {
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.connect(addr).await.unwrap();
    client.send(&build_query(7, "www.example.com.", RecordType::A, None).unwrap()).await.unwrap();
    let got = replies(&client, 1).await;
    assert_eq!(got.len(), 1, "no answer before stopping");
    assert_answered(&got[0]);
}

#[tokio::test]
async fn a_stopped_listener_ends_its_thread_and_frees_the_port() {
    let (addr, shutdown, task) = serve_one();
    answered_once(addr).await;
    assert!(std::net::UdpSocket::bind(addr).is_err(), "the port is held while serving");
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(2), task).await.expect("stopped within 2 s").unwrap();
    assert!(freed(addr).await, "the socket is closed once the listener has stopped");
}

#[tokio::test]
async fn a_flooded_listener_still_stops() {
    // Answers that take a millisecond each and two senders at full speed keep the socket
    // from ever emptying (bounded at 5 s): the thread must see the stop between batches, not
    // only when it would sleep.
    let inner = handler();
    let slow: Handler = Arc::new(move |bytes, peer, transport| {
        std::thread::sleep(Duration::from_millis(1));
        inner(bytes, peer, transport)
    });
    let (addr, shutdown, task) = serve_one_with(slow);
    let flooding = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let senders: Vec<_> = (0..2)
        .map(|_| {
            let flooding = flooding.clone();
            std::thread::spawn(move || {
                let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                s.connect(addr).unwrap();
                let q = build_query(1, "www.example.com.", RecordType::A, None).unwrap();
                let until = std::time::Instant::now() + Duration::from_secs(5);
                while flooding.load(std::sync::atomic::Ordering::Relaxed) && std::time::Instant::now() < until
                {
                    let _ = s.send(&q);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    shutdown.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(2), task).await;
    flooding.store(false, std::sync::atomic::Ordering::Relaxed);
    senders.into_iter().for_each(|t| t.join().unwrap());
    assert!(stopped.is_ok(), "a listener under a flood did not stop within 2 s");
}

#[tokio::test]
async fn a_dropped_listener_stops_its_thread() {
    let (addr, _shutdown, task) = serve_one();
    answered_once(addr).await;
    task.abort();
    let _ = task.await;
    assert!(freed(addr).await, "the thread closes the socket when the future is dropped");
}

#[tokio::test]
async fn a_question_sent_upstream_is_answered_from_its_task() {
    // Not managed here: forwarded, and with no upstream server configured the task answers
    // REFUSED through the listener's socket.
    let (addr, shutdown, _task) = serve_one();
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.connect(addr).await.unwrap();
    client.send(&build_query(9, "elsewhere.example.", RecordType::A, None).unwrap()).await.unwrap();
    let got = replies(&client, 1).await;
    shutdown.cancel();
    assert_eq!(got.len(), 1, "no answer to the forwarded question");
    assert_eq!(got[0].metadata.id, 9);
    assert_eq!(got[0].metadata.response_code, ResponseCode::Refused);
}
