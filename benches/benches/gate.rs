//! The verbs backend's host gate (`rnic::verbs::host_gate`) on the hot path: its
//! time per WQE when every send work request goes through it, as on a
//! ConnectX or rxe device under upstream rdma-core. Each QP keeps its
//! send queue (2048 deep) full: the gate accepts a post list of 32 WQEs
//! (every 16th signaled, as the dataplane signals), runs, hands the posts
//! over, and retires them as the device's CQEs come back; the set of CQs
//! to reap is asked for after every post list and every CQE, as the
//! backend does. No device is involved: the figure is the gate's own
//! bookkeeping, the part PeRF-rs adds to every WQE on hardware.
//!
//! `cargo bench -p perf-benches --bench gate`; `PERF_BENCH_QUICK=1` runs
//! a tenth of the WQEs.

use std::collections::VecDeque;
use std::time::Instant;

use perf_benches::results::Recorder;
use perf_dataplane::rnic::verbs::host_gate::{GateAction, GateOp, GateQpConfig, GateWr, HostGate, HwWrId};
use perf_dataplane::rnic::{CqHandle, QpHandle, QpState, WcOpcode, WcStatus};

const DEPTH: u32 = 2048;
const LIST: u32 = 32;
const SIGNAL_EVERY: u64 = 16;

/// Wall ns per WQE with `qps` QPs sharing one send CQ, `wqes` WQEs in all.
fn ns_per_wqe(qps: u32, wqes: u64) -> f64 {
    let cq = CqHandle(0);
    let mut g: HostGate<u32> = HostGate::new();
    g.add_cq(cq, 1 << 20, false);
    for q in 0..qps {
        let cfg = GateQpConfig {
            qp_num: q,
            send_cq: cq,
            recv_cq: cq,
            managed: false,
            cross_channel: true,
            sig_all: false,
            max_send_wr: DEPTH,
            max_recv_wr: 1,
            hw_send_depth: DEPTH + 2,
        };
        g.add_qp(QpHandle(q), cfg).expect("qp");
        g.set_state(QpHandle(q), QpState::Rts, 0);
    }
    // The device: per QP, the signaled sequence numbers it will complete.
    let mut device: Vec<VecDeque<u64>> = vec![VecDeque::new(); qps as usize];
    let mut outstanding = vec![0u32; qps as usize];
    let mut watched = 0usize;
    let (mut posted, mut next_id) = (0u64, 0u64);
    let start = Instant::now();
    while posted < wqes {
        for q in 0..qps {
            let qp = QpHandle(q);
            // Post while the queue has room for a list.
            while outstanding[q as usize] + LIST <= DEPTH {
                for _ in 0..LIST {
                    next_id += 1;
                    let signaled = next_id.is_multiple_of(SIGNAL_EVERY);
                    let wr =
                        GateWr { wr_id: next_id, signaled, opcode: WcOpcode::Write, byte_len: 64, op: GateOp::Hw(q) };
                    g.submit(qp, wr).expect("submit");
                }
                outstanding[q as usize] += LIST;
                posted += LIST as u64;
                g.run(posted);
                for a in g.take_actions() {
                    if let GateAction::Post(p) = a {
                        if p.signaled {
                            device[q as usize].push_back(HwWrId::decode(p.wr_id).seq);
                        }
                    }
                }
                watched += g.cqs_to_watch().len();
            }
            // The device completes half of what it holds.
            let n = device[q as usize].len() / 2;
            for _ in 0..n.max(1) {
                let Some(seq) = device[q as usize].pop_front() else { break };
                g.on_send_completion(qp, seq, WcStatus::Success, posted);
                watched += g.cqs_to_watch().len();
            }
            outstanding[q as usize] = g.outstanding(qp).unwrap_or(0);
        }
        let mut out = [perf_dataplane::rnic::Wc::EMPTY; 256];
        while g.poll(cq, &mut out).expect("poll") > 0 {}
    }
    let ns = start.elapsed().as_nanos() as f64 / posted as f64;
    assert!(watched > 0, "the watch set was asked for");
    ns
}

fn main() {
    let quick = perf_benches::quick();
    let wqes: u64 = if quick { 200_000 } else { 2_000_000 };
    let mut rec = Recorder::new("gate");
    println!("host gate, {DEPTH}-deep send queues kept full, lists of {LIST}, every {SIGNAL_EVERY}th signaled");
    for qps in [1u32, 64, 256] {
        let mut runs: Vec<f64> = (0..3).map(|_| ns_per_wqe(qps, wqes)).collect();
        let ns = perf_benches::median(&mut runs);
        println!("  {qps:>5} QPs: {ns:8.1} ns per WQE (median of 3, {wqes} WQEs each)");
        rec.figure(&format!("gate_ns_per_wqe_{qps}qp"), ns, "ns");
    }
    rec.save();
}
