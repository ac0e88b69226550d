//! Property test of the simulated RNIC: random mixes of WRITE, SEND and
//! READ of random sizes over one to three QP pairs, in random post lists,
//! signaled or not. Every signaled WR completes exactly once and
//! successfully, completions of one QP come in post order, each RECV gets
//! its SEND in order, and afterwards both hosts' memory is exactly what the
//! operations imply (nothing else was touched).

use crate::common;

use common::pattern;
use perf_dataplane::rnic::connect::connect_pair;
use perf_dataplane::rnic::sim::SimFabric;
use perf_dataplane::rnic::*;
use proptest::prelude::*;

/// Upper bound on fabric steps for one case.
const MAX_STEPS: usize = 5_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Write,
    Send,
    Read,
}

/// One generated work request.
#[derive(Debug, Clone)]
struct Op {
    qp: usize,
    kind: Kind,
    size: u32,
    /// Post in the same list as the previous op, if that one is on the same QP.
    chain: bool,
    signaled: bool,
    inline: bool,
}

fn op() -> impl Strategy<Value = Op> {
    let kind = prop_oneof![Just(Kind::Write), Just(Kind::Send), Just(Kind::Read)];
    let size = prop_oneof![
        3 => 1u32..=64,
        3 => 65u32..=4097,
        2 => prop_oneof![Just(4095u32), Just(4096), Just(4097), Just(8192)],
        2 => 4098u32..=70_000,
        1 => 70_001u32..=300_000,
    ];
    (0usize..3, kind, size, any::<bool>(), prop::bool::weighted(0.7), any::<bool>())
        .prop_map(|(qp, kind, size, chain, signaled, inline)| Op { qp, kind, size, chain, signaled, inline })
}

fn drain(nic: &mut impl Rnic, cq: CqHandle, out: &mut Vec<Wc>) {
    let mut buf = [Wc::EMPTY; 64];
    loop {
        let n = nic.poll_cq(cq, &mut buf).expect("poll_cq");
        out.extend_from_slice(&buf[..n]);
        if n < buf.len() {
            return;
        }
    }
}

/// Runs one generated case; returns a description of the first violation.
fn run_case(nqps: usize, ops: &[Op], seed: u64) -> Result<(), TestCaseError> {
    let f = SimFabric::pair(seed);
    let (mut a, mut b) = (f.nic(0), f.nic(1));
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let (pa, pb) = (a.alloc_pd().expect("pd"), b.alloc_pd().expect("pd"));
    let cq_attr = CqAttr { depth: 1024, ignore_overrun: false };
    let (ca, cb) = (a.create_cq(cq_attr).expect("cq"), b.create_cq(cq_attr).expect("cq"));
    let mut qps = Vec::new();
    for _ in 0..nqps {
        let qa = a.create_qp(pa, QpInitAttr::new(ca, ca)).expect("qp");
        let qb = b.create_qp(pb, QpInitAttr::new(cb, cb)).expect("qp");
        connect_pair(&mut a, (qa.handle, qa.qp_num), &mut b, (qb.handle, qb.qp_num), access).expect("connect");
        qps.push((qa, qb));
    }
    // Each op owns a slot at the same offset on both hosts, with gaps.
    let mut slots = Vec::with_capacity(ops.len());
    let mut end = 16usize;
    for o in ops {
        slots.push(end);
        end += o.size as usize + 13;
    }
    let (ma, mb) = (a.reg_mr(pa, end, access).expect("mr"), b.reg_mr(pb, end, access).expect("mr"));
    // What memory must look like afterwards.
    let mut want_a = vec![0u8; end];
    let mut want_b = vec![0u8; end];
    let datas: Vec<Vec<u8>> = ops.iter().enumerate().map(|(i, o)| pattern(o.size as usize, seed ^ i as u64)).collect();
    for (i, o) in ops.iter().enumerate() {
        let (off, d) = (slots[i], &datas[i]);
        match o.kind {
            Kind::Write | Kind::Send => {
                a.write_mr(ma.handle, off, d).expect("write_mr");
                want_a[off..off + d.len()].copy_from_slice(d);
                want_b[off..off + d.len()].copy_from_slice(d);
            }
            Kind::Read => {
                b.write_mr(mb.handle, off, d).expect("write_mr");
                want_a[off..off + d.len()].copy_from_slice(d);
                want_b[off..off + d.len()].copy_from_slice(d);
            }
        }
    }
    // RECVs for the SENDs, in order, per QP; each with 13 bytes of slack.
    let mut recvs_per_qp: Vec<Vec<u64>> = vec![Vec::new(); nqps];
    for (i, o) in ops.iter().enumerate() {
        if o.kind == Kind::Send {
            let qi = o.qp % nqps;
            let sge = [mb.sge(slots[i], o.size + 13)];
            b.post_recv(qps[qi].1.handle, &[RecvWr { wr_id: i as u64, sgl: &sge }]).expect("post_recv");
            recvs_per_qp[qi].push(i as u64);
        }
    }
    // Post in op order; consecutive ops of one QP may share a post list.
    let sges: Vec<[Sge; 1]> = ops.iter().enumerate().map(|(i, o)| [ma.sge(slots[i], o.size)]).collect();
    let mut i = 0;
    while i < ops.len() {
        let qi = ops[i].qp % nqps;
        let mut j = i + 1;
        while j < ops.len() && ops[j].chain && ops[j].qp % nqps == qi {
            j += 1;
        }
        let wrs: Vec<SendWr<'_>> = (i..j)
            .map(|k| {
                let o = &ops[k];
                let remote = mb.remote(slots[k]);
                let data = if o.inline && o.size <= 220 && o.kind != Kind::Read {
                    Payload::Inline(&datas[k])
                } else {
                    Payload::Sges(&sges[k])
                };
                let opcode = match o.kind {
                    Kind::Write => WrOpcode::Write { remote },
                    Kind::Send => WrOpcode::Send,
                    Kind::Read => WrOpcode::Read { remote },
                };
                SendWr { wr_id: k as u64, opcode, payload: data, signaled: o.signaled }
            })
            .collect();
        a.post_send(qps[qi].0.handle, &wrs).expect("post_send");
        i = j;
    }
    // Run to completion.
    let mut wcs_a = Vec::new();
    let mut wcs_b = Vec::new();
    let mut steps = 0;
    while f.step() {
        steps += 1;
        prop_assert!(steps < MAX_STEPS, "no quiescence after {} steps", MAX_STEPS);
        drain(&mut a, ca, &mut wcs_a);
        drain(&mut b, cb, &mut wcs_b);
    }
    drain(&mut a, ca, &mut wcs_a);
    drain(&mut b, cb, &mut wcs_b);

    // Exactly the signaled WRs completed, once each, successfully.
    for wc in wcs_a.iter().chain(&wcs_b) {
        prop_assert_eq!(wc.status, WcStatus::Success, "{:?}", wc);
    }
    let mut got: Vec<u64> = wcs_a.iter().map(|w| w.wr_id).collect();
    got.sort_unstable();
    let want: Vec<u64> = (0..ops.len() as u64).filter(|&k| ops[k as usize].signaled).collect();
    prop_assert_eq!(&got, &want, "signaled completions");
    // Per-QP post order, and the completion describes the WR.
    for (qi, (qa, qb)) in qps.iter().enumerate() {
        let mine: Vec<u64> = wcs_a.iter().filter(|w| w.qp_num == qa.qp_num).map(|w| w.wr_id).collect();
        let posted: Vec<u64> = want.iter().copied().filter(|&k| ops[k as usize].qp % nqps == qi).collect();
        prop_assert_eq!(&mine, &posted, "completion order of QP {}", qi);
        let recvd: Vec<u64> = wcs_b.iter().filter(|w| w.qp_num == qb.qp_num).map(|w| w.wr_id).collect();
        prop_assert_eq!(&recvd, &recvs_per_qp[qi], "RECV order of QP {}", qi);
    }
    for wc in &wcs_a {
        let o = &ops[wc.wr_id as usize];
        let opcode = match o.kind {
            Kind::Write => WcOpcode::Write,
            Kind::Send => WcOpcode::Send,
            Kind::Read => WcOpcode::Read,
        };
        prop_assert_eq!((wc.opcode, wc.byte_len), (opcode, o.size));
    }
    for wc in &wcs_b {
        prop_assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::Recv, ops[wc.wr_id as usize].size));
    }
    // Memory on both hosts is exactly as the operations imply.
    for (nic, mr, want, host) in [(&a, &ma, &want_a, "requester"), (&b, &mb, &want_b, "responder")] {
        let mut have = vec![0u8; end];
        nic.read_mr(mr.handle, 0, &mut have).expect("read_mr");
        if have != *want {
            let at = have.iter().zip(want.iter()).position(|(x, y)| x != y).unwrap_or(0);
            let op = slots.iter().rposition(|&s| s <= at);
            return Err(TestCaseError::fail(format!("{host} memory differs at byte {at} (slot of op {op:?})")));
        }
    }
    for (qa, _) in &qps {
        prop_assert_eq!(a.qp_state(qa.handle).expect("state"), QpState::Rts);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn random_mixes_complete_in_order_with_the_right_bytes(
        nqps in 1usize..=3,
        ops in prop::collection::vec(op(), 1..=40),
        seed in any::<u64>(),
    ) {
        run_case(nqps, &ops, seed)?;
    }
}
