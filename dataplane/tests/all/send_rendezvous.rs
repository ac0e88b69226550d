//! SEND rendezvous end to end: the dataplane on host 0, its tenant's peer
//! on host 1 behind the receiving end ([`RendezvousReceiver`]). Random
//! SENDs (and WRITE_WITH_IMMs, which consume RECVs too) into RECVs at
//! least as large, posted in bursts, under policies that split SENDs, keep
//! them whole, or swap between both mid-stream: every request completes
//! exactly once, in per-QP order, with its length at both ends, and every
//! byte lands in its RECV's buffer; and rendezvous does happen.

use perf_dataplane::policy::loader::PolicySpec;
use perf_dataplane::policy::wasm::WasmLimits;
use perf_dataplane::rendezvous::{RendezvousReceiver, ADVERTISE_ABOVE};
use perf_dataplane::rnic::{RecvWr, Wc, WcOpcode};

use crate::common::*;

/// One generated message: its QP, length, slack of its RECV beyond it,
/// whether it is a WRITE_WITH_IMM, and its burst.
#[derive(Debug, Clone)]
struct Msg {
    qp: u32,
    len: u32,
    slack: u32,
    imm: bool,
    burst: u64,
}

fn msg() -> impl Strategy<Value = Msg> {
    let len = prop_oneof![
        2 => 1u32..=ADVERTISE_ABOVE,
        1 => Just(ADVERTISE_ABOVE + 1),
        3 => (ADVERTISE_ABOVE + 1)..=300_000,
        1 => (1u32..=16).prop_map(|k| k * 8192),
    ];
    (0u32..3, len, prop_oneof![Just(0u32), 1u32..5000], prop::bool::weighted(0.15), 0u64..4)
        .prop_map(|(qp, len, slack, imm, burst)| Msg { qp, len, slack, imm, burst })
}

/// How the run's policy treats SENDs.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// `fairshare` (splits SENDs larger than 8 KiB).
    Fairshare,
    /// A test policy that splits everything into 4 KiB chunks.
    Force,
    /// `passthrough` until mid-run, then `fairshare`, then `perf`.
    Swaps,
    /// `passthrough` (never splits).
    Passthrough,
}

/// The pieces of a rendezvous run: the dataplane with one tenant of 3 QPs,
/// its peer behind the receiving end, and each message's slice at each
/// end (its RECV is `len + slack` bytes).
struct Rig2 {
    f: SimFabric,
    dp: Dataplane<SimRnic>,
    side: Side<RendezvousReceiver<SimRnic>>,
    h: TenantHandle,
    mr: Mr,
    at: Vec<(usize, usize)>,
}

/// Sets up `msgs`' run: every RECV posted at the start, each in its own
/// slice of the peer's buffer; message `k` sent from its own slice of the
/// tenant's buffer, which holds a pattern.
fn setup(msgs: &[Msg], mode: Mode, seed: u64) -> Rig2 {
    let f = SimFabric::pair(seed);
    let host = match mode {
        Mode::Fairshare => PolicyHost::load("fairshare"),
        Mode::Swaps => PolicyHost::load("passthrough"),
        Mode::Passthrough => PolicyHost::load("passthrough"),
        Mode::Force => Ok(PolicyHost::new(Box::new(ForceSplit {
            chunk: 4096,
            zw: 1,
            cap: 0,
            quantum_requests: 0,
            quantum_bytes: 0,
        }))),
    }
    .expect("policy");
    let mut dp = Dataplane::new(f.nic(0), host, DataplaneConfig::default()).expect("dataplane");
    if matches!(mode, Mode::Swaps) {
        for (at, to) in [(30_000, "fairshare"), (70_000, "perf")] {
            dp.schedule_swap(at, PolicySpec::Named(to.into()), WasmLimits::default()).expect("swap");
        }
    }
    // Each message's slice at each end (RECV length = len + slack).
    let mut at = Vec::with_capacity(msgs.len());
    let (mut local, mut peer) = (0usize, 0usize);
    for m in msgs {
        at.push((local, peer));
        local += m.len as usize;
        peer += (m.len + m.slack) as usize;
    }
    let h = dp.add_tenant("t", 1).expect("tenant");
    let mr = dp.reg_mr(h.id, local.max(64)).expect("reg_mr");
    let mut side = Side::new(RendezvousReceiver::new(f.nic(1)), 3, peer.max(64), 0, 1024).expect("peer");
    for i in 0..3u32 {
        let (index, ep) = dp.create_qp(h.id, 0).expect("create_qp");
        let pq = side.qps[i as usize];
        dp.connect_qp(h.id, index, endpoint(&side.nic, pq.qp_num)).expect("connect");
        bring_up(&mut side.nic, pq.handle, ep, all_access()).expect("bring_up");
        let slots = side.nic.ring_slots(pq.handle).expect("slots");
        let ring = dp.rendezvous_ring(h.id, index, slots).expect("ring");
        let records = side.nic.attach(pq.handle, pq.qp_num, ring).expect("attach");
        dp.attach_rendezvous(h.id, index, records).expect("attach_rendezvous");
    }
    let mut cpu = f.nic(0);
    cpu.write_mr(mr.handle, 0, &pattern(local.max(64), seed)).expect("fill");
    for k in send_order(msgs) {
        let m = &msgs[k];
        let sge = side.mr.sge(at[k].1, m.len + m.slack);
        let pq = side.qps[m.qp as usize].handle;
        side.nic.post_recv(pq, &[RecvWr { wr_id: k as u64, sgl: &[sge] }]).expect("post_recv");
    }
    Rig2 { f, dp, side, h, mr, at }
}

/// The order the messages are posted in: by burst, then as listed (the
/// order their RECVs are consumed in, per QP).
fn send_order(msgs: &[Msg]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..msgs.len()).collect();
    order.sort_by_key(|&k| msgs[k].burst);
    order
}

/// Runs `msgs` under `mode` and checks both ends; returns how many SENDs
/// went by rendezvous.
fn drive(msgs: &[Msg], mode: Mode, seed: u64) -> Result<u64, String> {
    let mut rig = setup(msgs, mode, seed);
    let at = rig.at.clone();
    let (mut sender, mut receiver) = (Vec::new(), Vec::new());
    let mut ledger = Ledger::default();
    let bursts = msgs.iter().map(|m| m.burst).max().unwrap_or(0) + 1;
    let mut next_burst = 0;
    let mut wcs = vec![Wc::EMPTY; 64];
    for _ in 0..MAX_WAKEUPS {
        let now = rig.f.now_ns();
        while next_burst < bursts && now >= next_burst * BURST_GAP_NS {
            for (k, m) in msgs.iter().enumerate().filter(|(_, m)| m.burst == next_burst) {
                let remote = rig.side.mr.remote(at[k].1);
                let wr = WorkRequest {
                    wr_id: app_wr_id(0, k),
                    qp: m.qp,
                    op: if m.imm { RequestOp::WriteImm { remote, imm: k as u32 } } else { RequestOp::Send },
                    mr: rig.mr,
                    offset: at[k].0 as u64,
                    len: m.len,
                    posted_ns: now,
                };
                ledger.record(&wr);
                post(&rig.h, wr);
            }
            next_burst += 1;
        }
        let mut n = 0;
        while rig.dp.round().expect("round") {
            n += 1;
            assert!(n < MAX_BUSY_ROUNDS, "livelock");
        }
        while let Some(c) = rig.h.poll() {
            sender.push(c);
        }
        loop {
            let got = rig.side.nic.poll_cq(rig.side.cq, &mut wcs).expect("poll peer");
            receiver.extend_from_slice(&wcs[..got]);
            if got == 0 {
                break;
            }
        }
        if next_burst >= bursts && sender.len() == msgs.len() && receiver.len() == msgs.len() {
            break;
        }
        let wake = (next_burst * BURST_GAP_NS).min(rig.dp.next_timer_ns()).max(now + 1);
        if !rig.f.step_until_visible(wake * PS_PER_NS) {
            rig.f.advance_to_ns(wake);
        }
        assert!(rig.f.now_ns() < 1_000_000_000, "not done after a virtual second");
    }
    let rendezvous_sends = rig.dp.counters().rendezvous_sends;
    ledger.check(&sender, true)?;
    // The receiver: one completion per RECV, in order per QP, each with its
    // message's length, and the message's bytes in the RECV's slice.
    let mut per_qp: HashMap<u32, Vec<usize>> = HashMap::new();
    for k in send_order(msgs) {
        per_qp.entry(msgs[k].qp).or_default().push(k);
    }
    let mut next: HashMap<u32, usize> = HashMap::new();
    for wc in &receiver {
        let k = wc.wr_id as usize;
        let m = msgs.get(k).ok_or(format!("receiver completion for no RECV: {wc:?}"))?;
        let qp_num = rig.side.qps[m.qp as usize].qp_num;
        let want_op = if m.imm { WcOpcode::RecvRdmaWithImm } else { WcOpcode::Recv };
        if wc.status != WcStatus::Success || wc.byte_len != m.len || wc.opcode != want_op || wc.qp_num != qp_num {
            return Err(format!("RECV {k} ({m:?}) completed as {wc:?}"));
        }
        let n = next.entry(m.qp).or_default();
        if per_qp[&m.qp].get(*n) != Some(&k) {
            return Err(format!("RECV {k} completed out of order on QP {}", m.qp));
        }
        *n += 1;
    }
    let mut sent = vec![0u8; at.last().map_or(0, |a| a.0) + msgs.last().map_or(0, |m| m.len as usize)];
    let cpu = rig.f.nic(0);
    cpu.read_mr(rig.mr.handle, 0, &mut sent).expect("read");
    for (k, m) in msgs.iter().enumerate() {
        let mut landed = vec![0u8; m.len as usize];
        rig.side.nic.read_mr(rig.side.mr.handle, at[k].1, &mut landed).expect("read peer");
        if landed[..] != sent[at[k].0..at[k].0 + m.len as usize] {
            return Err(format!("message {k} ({m:?}): bytes differ at the receiver"));
        }
    }
    // Only a SEND whose RECV was advertised (larger than the threshold) can
    // go by rendezvous.
    if rendezvous_sends > msgs.iter().filter(|m| !m.imm && m.len + m.slack > ADVERTISE_ABOVE).count() as u64 {
        return Err(format!("{rendezvous_sends} rendezvous SENDs for fewer advertised RECVs"));
    }
    Ok(rendezvous_sends)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn sends_by_rendezvous_complete_once_in_order_with_their_bytes(
        msgs in prop::collection::vec(msg(), 1..40),
        mode in prop_oneof![Just(Mode::Fairshare), Just(Mode::Force), Just(Mode::Swaps)],
        seed in any::<u64>(),
    ) {
        drive(&msgs, mode, seed).map_err(TestCaseError::fail)?;
    }
}

/// Large SENDs posted once their RECVs were advertised all go by
/// rendezvous under a policy that splits them, none under `passthrough`;
/// all deliver every byte.
#[test]
fn large_sends_go_by_rendezvous_when_split_and_whole_under_passthrough() {
    let msgs: Vec<Msg> =
        (0..12).map(|k| Msg { qp: k % 3, len: 100_000 + k * 777, slack: k * 10, imm: false, burst: 1 }).collect();
    let by = |mode| drive(&msgs, mode, 7).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
    assert_eq!(by(Mode::Fairshare), 12);
    assert_eq!(by(Mode::Force), 12);
    assert_eq!(by(Mode::Passthrough), 0);
}
