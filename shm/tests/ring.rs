//! The rings between two ends mapped in one process: order, wrap-around,
//! back-pressure, and a daemon end that survives any index a client
//! writes.

use std::os::fd::AsFd;

use perf_shm::abi::{Layout, SegmentStatus};
use perf_shm::{ClientEnd, CompletionEntry, DaemonEnd, RequestEntry, RingFault};
use proptest::prelude::*;

fn pair(req: u32, cpl: u32) -> (DaemonEnd, ClientEnd) {
    let layout = Layout::new(req, cpl).expect("layout");
    let d = DaemonEnd::create(layout).expect("segment");
    let fd = d.fd().as_fd().try_clone_to_owned().expect("dup");
    let c = ClientEnd::open(fd, layout.total_bytes()).expect("open");
    (d, c)
}

fn wr(id: u64) -> RequestEntry {
    RequestEntry { wr_id: id, len: id as u32, opcode: 1, ..RequestEntry::default() }
}

#[test]
fn requests_and_completions_cross_in_order_through_many_wraps() {
    let (mut d, mut c) = pair(8, 4);
    let mut next_post = 0u64;
    let mut next_take = 0u64;
    let mut next_cpl = 0u64;
    let mut out = [CompletionEntry::default(); 3];
    while next_cpl < 1000 {
        let batch: Vec<_> = (next_post..next_post + 5).map(wr).collect();
        next_post += c.post(&batch) as u64;
        let n = d.requests_waiting().expect("valid tail");
        assert!(n <= 8);
        let room = d.completion_room().expect("valid head");
        let take = n.min(room);
        for i in 0..take {
            let e = d.request(i);
            assert_eq!(e, wr(next_take), "requests arrive in post order");
            next_take += 1;
            d.push_completion(CompletionEntry { wr_id: e.wr_id, byte_len: e.len, ..CompletionEntry::default() });
        }
        d.consume_requests(take);
        d.publish_completions();
        let got = c.poll(&mut out);
        for e in &out[..got] {
            assert_eq!(e.wr_id, next_cpl, "completions arrive in order, once");
            next_cpl += 1;
        }
    }
}

#[test]
fn a_full_request_ring_takes_nothing_more_until_the_daemon_consumes() {
    let (mut d, mut c) = pair(4, 4);
    let batch: Vec<_> = (0..6).map(wr).collect();
    assert_eq!(c.post(&batch), 4, "a post list stops at the ring's room");
    assert_eq!(c.post(&batch[4..]), 0);
    assert_eq!(d.requests_waiting(), Ok(4));
    d.consume_requests(1);
    assert_eq!(c.post(&batch[4..]), 1);
}

#[test]
fn the_client_reads_the_header_and_the_status_word() {
    let (d, c) = pair(16, 32);
    assert_eq!(c.layout(), Layout::new(16, 32).expect("layout"));
    assert_eq!(c.status(), Some(SegmentStatus::Running));
    d.set_status(SegmentStatus::Draining);
    assert_eq!(c.status(), Some(SegmentStatus::Draining));
}

#[test]
fn a_segment_of_another_major_version_or_size_is_refused() {
    let layout = Layout::new(8, 8).expect("layout");
    let d = DaemonEnd::create(layout).expect("segment");
    let fd = d.fd().as_fd().try_clone_to_owned().expect("dup");
    let err = ClientEnd::open(fd, layout.total_bytes() + 4096).err().expect("wrong length refused");
    assert!(err.to_string().contains("not the"), "{err}");
    let mut h = layout.header();
    h.version_major = 2;
    let err = Layout::from_header(&h, layout.total_bytes() as u64).expect_err("version 2 refused");
    assert!(err.to_string().contains("version 2.0"), "{err}");
    assert!(Layout::new(6, 8).is_err(), "not a power of two");
}

proptest! {
    /// Whatever a client writes into its indices, the daemon end either
    /// sees a count within the ring or reports a fault; it never reads
    /// outside the segment.
    #[test]
    fn garbage_indices_are_faults_never_out_of_range(
        posts in 0u64..20, tails in proptest::collection::vec(any::<u64>(), 1..8),
        heads in proptest::collection::vec(any::<u64>(), 1..8),
    ) {
        let (mut d, mut c) = pair(8, 8);
        let batch: Vec<_> = (0..posts).map(wr).collect();
        c.post(&batch);
        for (&t, &h) in tails.iter().zip(&heads) {
            c.scribble(t, h, &[wr(t)]);
            match d.requests_waiting() {
                Ok(n) => {
                    prop_assert!(n <= 8);
                    for i in 0..n { let _ = d.request(i); }
                    d.consume_requests(n);
                }
                Err(RingFault::RequestTail { entries, .. }) => prop_assert_eq!(entries, 8),
                Err(f) => prop_assert!(false, "unexpected fault {}", f),
            }
            match d.completion_room() {
                Ok(room) => prop_assert!(room <= 8),
                Err(RingFault::CompletionHead { .. }) => {}
                Err(f) => prop_assert!(false, "unexpected fault {}", f),
            }
        }
    }
}
