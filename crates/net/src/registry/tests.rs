//! The registry's admission, eviction and reaping rules.
use super::*;

fn metrics() -> Arc<ListenerMetrics> {
    crate::metrics::NetMetrics::new(&prometheus::Registry::new()).listener("test")
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn a_full_registry_spares_the_oldest_connection_without_a_request() {
    let reg = ConnRegistry::new(ConnLimits { max_connections: 3, max_per_address: 3 }, Arc::default());
    let m = metrics();
    let t = Timeouts::default();
    let a = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
    let b = reg.admit(ip("10.0.0.2"), &m, t).unwrap();
    let c = reg.admit(ip("10.0.0.3"), &m, t).unwrap();
    // `a` is serving a request; `b` is the oldest that never sent one.
    let _req = a.state.begin();
    let d = reg.admit(ip("10.0.0.4"), &m, t).unwrap();
    assert_eq!(b.state.close_reason(), Some(CloseReason::Evicted));
    assert_eq!(a.state.close_reason(), None);
    assert_eq!(reg.open(), 3);
    // Everyone busy: refused.
    let _r2 = (c.state.begin(), d.state.begin());
    assert_eq!(reg.admit(ip("10.0.0.5"), &m, t).unwrap_err(), Refused::Full);
    drop(b);
    assert_eq!(reg.open(), 3, "an evicted connection was already unregistered");
}

#[test]
fn one_address_spares_its_own_connections_and_proxies_are_exempt() {
    let exempt = Arc::new(CidrTable::new([("10.9.0.0/16".parse().unwrap(), ())]));
    let reg = ConnRegistry::new(ConnLimits { max_connections: 100, max_per_address: 2 }, exempt);
    let m = metrics();
    let t = Timeouts::default();
    let other = reg.admit(ip("10.0.0.7"), &m, t).unwrap();
    let a1 = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
    let _a2 = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
    let _a3 = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
    assert_eq!(a1.state.close_reason(), Some(CloseReason::Evicted));
    assert_eq!(other.state.close_reason(), None, "another address is never spared for this one");
    let busy: Vec<_> = [&_a2, &_a3].iter().map(|c| c.state.begin()).collect();
    assert_eq!(reg.admit(ip("10.0.0.1"), &m, t).unwrap_err(), Refused::PerAddress);
    drop(busy);
    let proxied: Vec<_> = (0..10).map(|_| reg.admit(ip("10.9.1.1"), &m, t).unwrap()).collect();
    assert!(proxied.iter().all(|c| c.state.close_reason().is_none()));
    assert!(reg.is_exempt(ip("10.9.1.1")));
}

#[test]
fn the_reaper_closes_each_phase_at_its_timeout() {
    let reg = ConnRegistry::new(ConnLimits { max_connections: 100, max_per_address: 100 }, Arc::default());
    let m = metrics();
    let s = Duration::from_secs(1);
    let t = Timeouts { header: 2 * s, idle: 5 * s, stalled: 10 * s, ..Timeouts::default() };
    let silent = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
    let served = reg.admit(ip("10.0.0.2"), &m, t).unwrap();
    let slow = reg.admit(ip("10.0.0.3"), &m, t).unwrap();
    let t0 = Instant::now();
    // `served` completes a request at once, `slow` starts one and then moves nothing.
    drop(served.state.begin());
    let stuck = slow.state.begin();
    reg.reap(t0 + s);
    assert_eq!(reg.reap(t0 + 2 * s), 1);
    assert_eq!(silent.state.close_reason(), Some(CloseReason::HeaderTimeout));
    assert_eq!(served.state.close_reason(), None, "idle, within the keep-alive time");
    // Part of a next request arrives on the kept-alive connection.
    served.state.note_read();
    reg.reap(t0 + 3 * s);
    reg.reap(t0 + 4 * s);
    assert_eq!(served.state.close_reason(), None);
    reg.reap(t0 + 5 * s);
    assert_eq!(served.state.close_reason(), Some(CloseReason::HeaderTimeout));
    // The busy one moves a byte at 8 s, then nothing: closed 10 s later.
    slow.state.note_write();
    reg.reap(t0 + 8 * s);
    reg.reap(t0 + 17 * s);
    assert_eq!(slow.state.close_reason(), None);
    reg.reap(t0 + 18 * s);
    assert_eq!(slow.state.close_reason(), Some(CloseReason::Stalled));
    drop(stuck);
}

#[test]
fn kept_alive_connections_close_after_the_idle_time() {
    let reg = ConnRegistry::new(ConnLimits { max_connections: 100, max_per_address: 100 }, Arc::default());
    let m = metrics();
    let s = Duration::from_secs(1);
    let t = Timeouts { header: 2 * s, idle: 5 * s, stalled: 10 * s, ..Timeouts::default() };
    let c = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
    let t0 = Instant::now();
    drop(c.state.begin());
    reg.reap(t0 + s);
    reg.reap(t0 + 5 * s);
    assert_eq!(c.state.close_reason(), None);
    reg.reap(t0 + 6 * s);
    assert_eq!(c.state.close_reason(), Some(CloseReason::IdleTimeout));
}

#[test]
fn idle_keep_alive_connections_go_before_a_client_that_just_connected() {
    let reg = ConnRegistry::new(ConnLimits { max_connections: 3, max_per_address: 3 }, Arc::default());
    let m = metrics();
    let t = Timeouts::default();
    let idle = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
    let older_idle = reg.admit(ip("10.0.0.2"), &m, t).unwrap();
    drop(idle.state.begin());
    drop(older_idle.state.begin());
    reg.reap(Instant::now());
    let newcomer = reg.admit(ip("10.0.0.3"), &m, t).unwrap();
    // Full: the next one spares the oldest idle connection, not the newcomer still sending.
    let _next = reg.admit(ip("10.0.0.4"), &m, t).unwrap();
    assert_eq!(idle.state.close_reason(), Some(CloseReason::Evicted));
    assert_eq!(newcomer.state.close_reason(), None);
    let _third = reg.admit(ip("10.0.0.5"), &m, t).unwrap();
    assert_eq!(older_idle.state.close_reason(), Some(CloseReason::Evicted));
    assert_eq!(newcomer.state.close_reason(), None);
    // No idle one left: the oldest still sending goes.
    let _fourth = reg.admit(ip("10.0.0.6"), &m, t).unwrap();
    assert_eq!(newcomer.state.close_reason(), Some(CloseReason::Evicted));
}

#[test]
fn a_connection_waiting_for_its_body_can_be_spared() {
    let reg = ConnRegistry::new(ConnLimits { max_connections: 2, max_per_address: 2 }, Arc::default());
    let m = metrics();
    let t = Timeouts::default();
    let uploading = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
    let answering = reg.admit(ip("10.0.0.2"), &m, t).unwrap();
    let _r1 = uploading.state.begin();
    let _wait = uploading.state.wait_body();
    let _r2 = answering.state.begin();
    let _new = reg.admit(ip("10.0.0.3"), &m, t).unwrap();
    assert_eq!(uploading.state.close_reason(), Some(CloseReason::Evicted));
    assert_eq!(answering.state.close_reason(), None);
}

#[test]
fn a_body_must_keep_arriving_and_arrive_whole_in_time() {
    let reg = ConnRegistry::new(ConnLimits { max_connections: 10, max_per_address: 10 }, Arc::default());
    let m = metrics();
    let s = Duration::from_secs(1);
    let t = Timeouts { header: 2 * s, idle: 5 * s, stalled: 100 * s, body: 3 * s, body_total: 10 * s };
    let silent = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
    let dribbling = reg.admit(ip("10.0.0.2"), &m, t).unwrap();
    let t0 = Instant::now();
    let _g = (silent.state.begin(), silent.state.wait_body());
    let _h = (dribbling.state.begin(), dribbling.state.wait_body());
    reg.reap(t0);
    // `dribbling` sends a byte every 2 s: within the gap, but not within the total.
    for i in 1..=9 {
        if i % 2 == 0 {
            dribbling.state.note_moved();
        }
        reg.reap(t0 + i * s);
    }
    assert_eq!(silent.state.close_reason(), Some(CloseReason::BodyTimeout), "3 s without a byte");
    assert_eq!(dribbling.state.close_reason(), None);
    dribbling.state.note_moved();
    reg.reap(t0 + 10 * s);
    assert_eq!(dribbling.state.close_reason(), Some(CloseReason::BodyTimeout), "10 s for the body");
}

#[test]
fn reads_and_http2_control_frames_do_not_keep_a_stalled_answer_alive() {
    let reg = ConnRegistry::new(ConnLimits { max_connections: 10, max_per_address: 10 }, Arc::default());
    let m = metrics();
    let s = Duration::from_secs(1);
    let t = Timeouts { stalled: 4 * s, ..Timeouts::default() };
    let h1 = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
    let h2 = reg.admit(ip("10.0.0.2"), &m, t).unwrap();
    h2.state.set_multiplexed();
    let moving = reg.admit(ip("10.0.0.3"), &m, t).unwrap();
    moving.state.set_multiplexed();
    let _r = (h1.state.begin(), h2.state.begin(), moving.state.begin());
    let t0 = Instant::now();
    reg.reap(t0);
    for i in 1..=4 {
        // h1: the client dribbles bytes but reads nothing; h2: PINGs in, PING answers out.
        h1.state.note_read();
        h2.state.note_read();
        h2.state.note_write();
        moving.state.note_moved();
        reg.reap(t0 + i * s);
    }
    assert_eq!(h1.state.close_reason(), Some(CloseReason::Stalled));
    assert_eq!(h2.state.close_reason(), Some(CloseReason::Stalled));
    assert_eq!(moving.state.close_reason(), None, "body frames are progress");
}

#[test]
fn held_units_count_against_both_caps_and_a_stuck_reader_can_be_spared() {
    let reg = ConnRegistry::new(ConnLimits { max_connections: 6, max_per_address: 3 }, Arc::default());
    let m = metrics();
    let t = Timeouts::default();
    let a = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
    let _ra = a.state.begin();
    let h1 = a.handle().hold().unwrap();
    let _h2 = a.handle().hold().unwrap();
    assert_eq!(reg.units(), 3);
    // The address has used its three units on one busy connection: a fourth is refused.
    assert_eq!(a.handle().hold().unwrap_err(), Refused::PerAddress);
    assert_eq!(reg.admit(ip("10.0.0.1"), &m, t).unwrap_err(), Refused::PerAddress);
    drop(h1);
    assert_eq!(reg.units(), 2);
    let _b = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
    // Others fill the process's units, all busy and moving. 10.0.0.1 holds three units, the
    // others one: a newcomer from a lighter address takes its place from the heaviest.
    let others: Vec<_> = (2..5).map(|i| reg.admit(ip(&format!("10.0.0.{i}")), &m, t).unwrap()).collect();
    let _busy: Vec<_> = others.iter().chain([&_b]).map(|c| c.state.begin()).collect();
    assert_eq!(reg.units(), 6);
    drop(reg.admit(ip("10.0.0.9"), &m, t).unwrap());
    assert_eq!(a.state.close_reason(), Some(CloseReason::Evicted), "the heaviest address's oldest");
    assert_eq!(reg.units(), 4, "a's two units left with it; the newcomer's with its drop");
    drop(_h2);
    assert_eq!(reg.units(), 4, "a unit of an evicted connection is not released twice");
}

#[test]
fn a_stuck_reader_is_spared_and_equal_busy_addresses_refuse_the_newcomer() {
    let reg = ConnRegistry::new(ConnLimits { max_connections: 3, max_per_address: 3 }, Arc::default());
    let m = metrics();
    let t = Timeouts::default();
    let conns: Vec<_> = (1..=3).map(|i| reg.admit(ip(&format!("10.0.0.{i}")), &m, t).unwrap()).collect();
    let _busy: Vec<_> = conns.iter().map(|c| c.state.begin()).collect();
    // One unit each, all answering: nobody is heavier than the newcomer would be.
    assert_eq!(reg.admit(ip("10.0.0.9"), &m, t).unwrap_err(), Refused::Full);
    // The first has moved nothing for longer than STUCK, the others have: it is spared.
    let t0 = Instant::now();
    reg.reap(t0);
    conns[1].state.note_moved();
    conns[2].state.note_moved();
    reg.reap(t0 + STUCK);
    let _new = reg.admit(ip("10.0.0.9"), &m, t).unwrap();
    assert_eq!(conns[0].state.close_reason(), Some(CloseReason::Evicted));
    assert_eq!(conns[1].state.close_reason(), None);
}

#[test]
fn connections_told_to_close_count_until_they_are_gone() {
    let reg = ConnRegistry::new(ConnLimits { max_connections: 64, max_per_address: 64 }, Arc::default());
    let m = metrics();
    let t = Timeouts::default();
    // 64 silent connections from two addresses, then 64 more from 64 others, each sparing one:
    // the spared ones are told to close but their tasks have not dropped them yet.
    let first: Vec<_> =
        (0..64).map(|i| reg.admit(ip(&format!("10.0.1.{}", i % 2)), &m, t).unwrap()).collect();
    assert!(!reg.backlogged());
    let second: Vec<_> = (0..64).map(|i| reg.admit(ip(&format!("10.0.2.{i}")), &m, t).unwrap()).collect();
    assert!(first.iter().all(|c| c.state.close_reason() == Some(CloseReason::Evicted)));
    // 64 open and 64 closing: the allowance (64) is used up, so accept loops wait.
    assert!(reg.backlogged());
    // Once the spared connections are really gone, they accept again.
    drop(first);
    assert!(!reg.backlogged());
    drop(second);
}

#[test]
fn a_client_that_just_connected_goes_after_lingering_and_stuck_ones() {
    let reg = ConnRegistry::new(ConnLimits { max_connections: 3, max_per_address: 3 }, Arc::default());
    let m = metrics();
    let t = Timeouts::default();
    let lingering = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
    let busy = reg.admit(ip("10.0.0.2"), &m, t).unwrap();
    let _r = busy.state.begin();
    let t0 = Instant::now();
    reg.reap(t0);
    reg.reap(t0 + LINGERING);
    // A newcomer the server has not read yet, then the cap: the connection that has been
    // sending for a second goes, not the newcomer.
    let newcomer = reg.admit(ip("10.0.0.3"), &m, t).unwrap();
    let _next = reg.admit(ip("10.0.0.4"), &m, t).unwrap();
    assert_eq!(lingering.state.close_reason(), Some(CloseReason::Evicted));
    assert_eq!(newcomer.state.close_reason(), None);
}

#[test]
fn a_light_address_is_spared_after_a_heavy_one_in_the_same_tier() {
    let reg = ConnRegistry::new(ConnLimits { max_connections: 6, max_per_address: 6 }, Arc::default());
    let m = metrics();
    let t = Timeouts::default();
    // The oldest connection is a lone client's, slow to send on a loaded server; then a flood
    // address's five, all sending for more than LINGERING at the reaper's look.
    let lone = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
    let flood: Vec<_> = (0..5).map(|_| reg.admit(ip("10.0.0.9"), &m, t).unwrap()).collect();
    let t0 = Instant::now();
    reg.reap(t0);
    reg.reap(t0 + LINGERING);
    let _new = reg.admit(ip("10.0.0.2"), &m, t).unwrap();
    assert_eq!(lone.state.close_reason(), None, "the lone client is spared last");
    assert_eq!(flood[0].state.close_reason(), Some(CloseReason::Evicted));
}

#[test]
fn a_busy_address_cannot_take_a_lone_clients_place() {
    let reg = ConnRegistry::new(ConnLimits { max_connections: 10, max_per_address: 10 }, Arc::default());
    let m = metrics();
    let t = Timeouts::default();
    // Two flood addresses with four answering connections each (one holding a file too), and a
    // lone client that has just connected: the cap is reached.
    let flood: Vec<_> =
        (0..8).map(|i| reg.admit(ip(&format!("10.0.9.{}", 1 + i / 4)), &m, t).unwrap()).collect();
    let _busy: Vec<_> = flood.iter().map(|c| c.state.begin()).collect();
    let _h = flood[0].handle().hold().unwrap();
    let lone = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
    assert_eq!(reg.units(), 10);
    // A flood connection wants one more unit (a file to stream): nothing to spare but the lone
    // client, whose place it may not take.
    assert_eq!(flood[4].handle().hold().unwrap_err(), Refused::Full);
    assert_eq!(lone.state.close_reason(), None);
    // Another lone client may: the heaviest address (5 units) gives one up.
    let _other = reg.admit(ip("10.0.0.2"), &m, t).unwrap();
    assert_eq!(flood[0].state.close_reason(), Some(CloseReason::Evicted));
    assert_eq!(lone.state.close_reason(), None);
}
