//! The transport of `perf-runner serve`: a client process's shared-memory
//! request and completion rings (`perf-shm`, docs/shm-abi.md) against the
//! in-process path's bounded `crossbeam-channel` queues (what a
//! `TenantHandle` uses), same traffic.
//!
//! Two threads in each case: a client that posts requests in post lists of
//! 32 and polls completions, keeping up to 1024 in flight, and a "daemon"
//! that takes every request and answers it with a successful completion
//! at once. So this measures the transport alone, per request: the
//! daemon's bridge into the loop, the loop and the NIC are not in it
//! (through the daemon, a ring request also crosses the in-process
//! channel: its cost is the channel's plus the ring's).
//!
//! Figures: ns per request on each path (median of 5 runs, each of
//! 2 M requests), the ring's request rate (one client, post lists of 32),
//! and the ratio ring / channel; also the ring with one thread playing
//! both ends in turn (the ring's own instructions, no cache line crossing
//! cores: the ceiling of its request rate). Both threads spin: on a machine with
//! fewer than two idle cores they share one and the figures say more
//! about the scheduler than about the transport. `PERF_BENCH_QUICK=1`
//! runs each once, with 200 000 requests.
//!
//! `cargo bench -p perf-benches --bench shm`

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::bounded;
use perf_benches::results::Recorder;
use perf_dataplane::engine::{Completion, CompletionKind, WorkRequest};
use perf_dataplane::rnic::{Mr, MrHandle, RemoteAddr, WcStatus};
use perf_shm::{ClientEnd, CompletionEntry, DaemonEnd, Layout, Opcode, RequestEntry};

/// Requests per post list.
const LIST: usize = 32;
/// Most requests in flight.
const WINDOW: u64 = 1024;

/// The ring path: ns per request over `n` requests.
fn ring(n: u64) -> f64 {
    let layout = Layout::new(4096, 8192).expect("ring layout");
    let mut daemon = DaemonEnd::create(layout).expect("segment");
    let fd = daemon.fd().try_clone_to_owned().expect("fd");
    let mut client = ClientEnd::open(fd, layout.total_bytes()).expect("client end");
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let server = std::thread::spawn(move || {
        while !s.load(Ordering::Relaxed) {
            let (Ok(waiting), Ok(room)) = (daemon.requests_waiting(), daemon.completion_room()) else {
                panic!("ring fault")
            };
            let k = waiting.min(room).min(256);
            if k == 0 {
                std::hint::spin_loop();
                continue;
            }
            for i in 0..k {
                let e = daemon.request(i);
                daemon.push_completion(CompletionEntry {
                    wr_id: e.wr_id,
                    qp: e.qp,
                    byte_len: e.len,
                    ..Default::default()
                });
            }
            daemon.publish_completions();
            daemon.consume_requests(k);
        }
    });
    let entry = |k: u64| RequestEntry {
        wr_id: k,
        len: 64,
        opcode: Opcode::Write as u8,
        remote_addr: 4096,
        rkey: 1,
        ..RequestEntry::default()
    };
    let mut list = [RequestEntry::default(); LIST];
    let mut cpl = vec![CompletionEntry::default(); 1024];
    let (mut posted, mut done, mut sum) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    while done < n {
        if posted < n && posted - done + LIST as u64 <= WINDOW {
            let k = (n - posted).min(LIST as u64) as usize;
            for (i, e) in list[..k].iter_mut().enumerate() {
                *e = entry(posted + i as u64);
            }
            posted += client.post(&list[..k]) as u64;
        }
        let got = client.poll(&mut cpl);
        for c in &cpl[..got] {
            sum = sum.wrapping_add(c.wr_id);
        }
        done += got as u64;
    }
    let ns = start.elapsed().as_nanos() as f64 / n as f64;
    stop.store(true, Ordering::Relaxed);
    server.join().expect("the ring's server");
    assert_eq!(sum, n * (n - 1) / 2, "every request completed once");
    ns
}

/// The ring path with one thread playing both ends in turn: what the
/// ring's code costs per request with no cache line crossing cores.
fn ring_one_thread(n: u64) -> f64 {
    let layout = Layout::new(4096, 8192).expect("ring layout");
    let mut daemon = DaemonEnd::create(layout).expect("segment");
    let fd = daemon.fd().try_clone_to_owned().expect("fd");
    let mut client = ClientEnd::open(fd, layout.total_bytes()).expect("client end");
    let mut list = [RequestEntry { len: 64, opcode: Opcode::Write as u8, ..RequestEntry::default() }; LIST];
    let mut cpl = vec![CompletionEntry::default(); LIST];
    let (mut done, mut sum) = (0u64, 0u64);
    let start = Instant::now();
    while done < n {
        let k = (n - done).min(LIST as u64) as usize;
        for (i, e) in list[..k].iter_mut().enumerate() {
            e.wr_id = done + i as u64;
        }
        let posted = client.post(&list[..k]) as u64;
        let waiting = daemon.requests_waiting().expect("no ring fault");
        for i in 0..waiting {
            let e = daemon.request(i);
            daemon.push_completion(CompletionEntry { wr_id: e.wr_id, qp: e.qp, byte_len: e.len, ..Default::default() });
        }
        daemon.publish_completions();
        daemon.consume_requests(waiting);
        let got = client.poll(&mut cpl);
        assert_eq!((got as u64, waiting), (posted, posted), "a post list goes round whole");
        for c in &cpl[..got] {
            sum = sum.wrapping_add(c.wr_id);
        }
        done += got as u64;
    }
    let ns = start.elapsed().as_nanos() as f64 / n as f64;
    assert_eq!(sum, n * (n - 1) / 2, "every request completed once");
    ns
}

/// The channel path: ns per request over `n` requests.
fn channel(n: u64) -> f64 {
    let (req_tx, req_rx) = bounded::<WorkRequest>(4096);
    let (cpl_tx, cpl_rx) = bounded::<Completion>(8192);
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let server = std::thread::spawn(move || {
        while !s.load(Ordering::Relaxed) {
            let mut any = false;
            for _ in 0..256 {
                let Ok(wr) = req_rx.try_recv() else { break };
                any = true;
                let c = Completion {
                    wr_id: wr.wr_id,
                    qp: wr.qp,
                    status: WcStatus::Success,
                    kind: CompletionKind::Send,
                    byte_len: wr.len,
                    imm: None,
                    posted_ns: wr.posted_ns,
                    completed_ns: 0,
                };
                if cpl_tx.send(c).is_err() {
                    return;
                }
            }
            if !any {
                std::hint::spin_loop();
            }
        }
    });
    let mr = Mr { handle: MrHandle(1), addr: 0, len: 1 << 20, lkey: 1, rkey: 1 };
    let wr = |k: u64| WorkRequest::write(k, 0, mr, 64, RemoteAddr { addr: 4096, rkey: 1 });
    let (mut posted, mut done, mut sum) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    while done < n {
        if posted < n && posted - done + LIST as u64 <= WINDOW {
            let k = (n - posted).min(LIST as u64);
            for _ in 0..k {
                if req_tx.try_send(wr(posted)).is_err() {
                    break;
                }
                posted += 1;
            }
        }
        while let Ok(c) = cpl_rx.try_recv() {
            sum = sum.wrapping_add(c.wr_id);
            done += 1;
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / n as f64;
    stop.store(true, Ordering::Relaxed);
    server.join().expect("the channel's server");
    assert_eq!(sum, n * (n - 1) / 2, "every request completed once");
    ns
}

fn main() {
    let quick = perf_benches::quick();
    let (runs, n) = if quick { (1, 200_000) } else { (5, 2_000_000) };
    let mut rec = Recorder::new("shm");
    // Interleaved, so that load changes hit both alike.
    let (mut rings, mut chans) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        rings.push(ring(n));
        chans.push(channel(n));
    }
    let (r, c) = (perf_benches::median(&mut rings), perf_benches::median(&mut chans));
    let one = perf_benches::median(&mut (0..runs).map(|_| ring_one_thread(n)).collect::<Vec<_>>());
    println!("shm: {n} requests, post lists of {LIST}, up to {WINDOW} in flight, median of {runs}");
    println!("  shared-memory rings     {r:8.1} ns/request   {:6.2} M requests/s", 1e3 / r);
    println!("  crossbeam channels      {c:8.1} ns/request   {:6.2} M requests/s", 1e3 / c);
    println!("  rings / channels        {:8.2}x   (target <= 1.5x)", r / c);
    println!("  rings, one thread       {one:8.1} ns/request   {:6.2} M requests/s (both ends in turn)", 1e3 / one);
    rec.figure("shm/ring_ns_per_request", r, "ns");
    rec.figure("shm/channel_ns_per_request", c, "ns");
    rec.figure("shm/ring_rate", 1e3 / r, "M req/s");
    rec.figure("shm/channel_rate", 1e3 / c, "M req/s");
    rec.figure("shm/ring_one_thread_rate", 1e3 / one, "M req/s");
    rec.ratio("shm/ring_over_channel_per_request", r / c);
    rec.save();
}
