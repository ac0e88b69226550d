//! What the dataplane's integration tests share: a rig with the dataplane
//! on host 0 of a [`SimFabric::pair`] and each tenant's peer [`Side`] on
//! host 1 (as `perf-runner run` wires a scenario), a virtual-time driver
//! whose every wait is bounded, test policies, and a ledger that checks
//! exactly-once, in-order completion, and the random-workload case of the
//! property tests ([`run_case_with`]), which also compares both hosts' bytes.
//!
//! The test binary declares it once (`main.rs`); each area uses what it needs.
#![allow(dead_code, unused_imports, reason = "helpers and re-exports shared by the test modules, each using some")]

pub mod hostile;
pub mod wat;
pub use std::collections::{HashMap, HashSet};

pub use perf_dataplane::engine::{
    Completion, CompletionKind, Dataplane, DataplaneConfig, PostRefused, RequestOp, TenantHandle, WorkRequest,
};
pub use perf_dataplane::policy::PolicyHost;
pub use perf_dataplane::rnic::connect::{bring_up, endpoint};
pub use perf_dataplane::rnic::sim::{SimFabric, SimRnic, PS_PER_NS};
pub use perf_dataplane::rnic::{AccessFlags, Mr, QpTransition, RemoteAddr, Rnic, WcStatus};
pub use perf_dataplane::traffic::Side;
pub use perf_policy_sdk::{Policy, RequestInfo, SplitPlan, TenantClass, TenantPlan, TenantStats};
pub use proptest::prelude::*;
pub use proptest::test_runner::RngSeed;

/// Most dataplane rounds in a row that may report progress before the
/// test calls it a livelock.
pub const MAX_BUSY_ROUNDS: usize = 1_000_000;
/// Most fabric wake-ups one run may take.
pub const MAX_WAKEUPS: usize = 20_000_000;

/// A test policy that makes every message go through the preemption
/// machinery: every request is split into `chunk`-byte sub-requests, each
/// followed by `zw` zero-weight WRs, and each tenant may have only `cap`
/// QPs active, rotated after `quantum_requests` requests or
/// `quantum_bytes` bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ForceSplit {
    pub chunk: u32,
    pub zw: u32,
    pub cap: u32,
    pub quantum_requests: u32,
    pub quantum_bytes: u64,
}

impl ForceSplit {
    /// 4 KiB chunks, 3 zero-weight WRs each, 1 active QP per tenant rotated
    /// after 2 requests or 64 KiB.
    pub const HEAVY: ForceSplit = ForceSplit { chunk: 4096, zw: 3, cap: 1, quantum_requests: 2, quantum_bytes: 65536 };

    pub fn plan(&self) -> TenantPlan {
        TenantPlan {
            max_active_qps: self.cap,
            quantum_requests: self.quantum_requests,
            quantum_bytes: self.quantum_bytes,
            quantum_ns: 0,
            split: SplitPlan { chunk_bytes: self.chunk, zero_weight_per_chunk: self.zw },
            split_threshold: 1,
            class: TenantClass::Bandwidth,
            ..TenantPlan::PASSTHROUGH
        }
    }
}

impl Policy for ForceSplit {
    fn name(&self) -> &str {
        "force-split"
    }

    fn on_request(&mut self, _req: &RequestInfo, _plan: &TenantPlan) -> SplitPlan {
        SplitPlan { chunk_bytes: self.chunk, zero_weight_per_chunk: self.zw }
    }

    fn on_tick(&mut self, _now_ns: u64, _stats: &[TenantStats], plans: &mut [TenantPlan]) {
        plans.iter_mut().for_each(|p| *p = self.plan());
    }
}

/// Which policy a run uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pol {
    /// The built-in `passthrough`.
    Passthrough,
    /// The built-in `perf`.
    Perf,
    /// [`ForceSplit`] with the given parameters.
    Force(ForceSplit),
    /// Another built-in policy, by name (`justitia`, `weighted`, `slo`).
    Named(&'static str),
    /// [`EveryCall`]: `passthrough`'s decisions, each one a call.
    EveryCall,
}

/// `passthrough`'s plans and split rule, but every request is a call
/// ([`perf_policy_sdk::RequestCalls::Every`], the default): its messages
/// take the general path where `passthrough`'s take the whole-message
/// lane.
pub struct EveryCall;

impl Policy for EveryCall {
    fn name(&self) -> &str {
        "every-call"
    }
}

impl Pol {
    pub fn host(self) -> PolicyHost {
        match self {
            Pol::Passthrough => PolicyHost::builtin("passthrough").expect("built-in passthrough"),
            Pol::Perf => PolicyHost::builtin("perf").expect("built-in perf"),
            Pol::Force(p) => PolicyHost::new(Box::new(p)),
            Pol::Named(n) => PolicyHost::load(n).expect("a built-in policy, with any parameters"),
            Pol::EveryCall => PolicyHost::new(Box::new(EveryCall)),
        }
    }

    /// Whether every message goes through splitting and rotation.
    pub fn splits_everything(self) -> bool {
        matches!(self, Pol::Force(_))
    }
}

/// The policies every random-workload property runs under: none, PeRF as
/// built in, and splitting with rotation forced on every message.
pub const BASE_POLICIES: [Pol; 3] = [Pol::Passthrough, Pol::Perf, Pol::Force(ForceSplit::HEAVY)];
/// `fairshare` with a tight shared budget: fair admission holds most work back.
pub const TIGHT_FAIRSHARE: Pol =
    Pol::Named("fairshare:window_kib=8,read_window_kib=8,chunk_bytes=4096,read_chunk_bytes=4096");
/// `perf` with run-time parameters: one active QP per tenant, rotated after
/// every request.
pub const ROTATE_EVERY_REQUEST: Pol = Pol::Named("perf:max_active_qps=1,quantum_requests=1,chunk_bytes=4096");
/// `perf` with token buckets: QPs wait for their tenant's debt to be paid.
pub const TOKEN_BUCKETS: Pol = Pol::Named("perf:rate_bytes_per_s=2000000000,burst_bytes=65536,chunk_bytes=4096");

/// One `#[test]` per policy, each running `check(policy)`:
/// `per_policy!(check: check_passthrough => Pol::Passthrough, ...)`.
macro_rules! per_policy {
    ($check:ident: $($name:ident => $pol:expr),+ $(,)?) => {
        $(
            #[test]
            fn $name() {
                $check($pol);
            }
        )+
    };
}
pub(crate) use per_policy;

/// All rights, for every region and QP of these tests.
pub fn all_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
}

/// A byte pattern hashed from (position, seed): no two seeds and no two
/// positions alike.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            let mut x =
                i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed.wrapping_mul(0xD1B5_4A32_D192_ED03);
            x ^= x >> 29;
            x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
            (x >> 56) as u8
        })
        .collect()
}

/// One tenant of a rig: its handle, its region on host 0 and its peer side
/// (QPs and target region) on host 1.
pub struct TenantRig {
    pub h: TenantHandle,
    pub mr: Mr,
    pub side: Side<SimRnic>,
    /// Every completion delivered so far, in delivery order.
    pub got: Vec<Completion>,
}

impl TenantRig {
    /// Where the tenant's requests land at (or read from) the peer.
    pub fn remote(&self, offset: u64) -> RemoteAddr {
        self.side.mr.remote(offset as usize)
    }
}

/// A dataplane on host 0 with its tenants, their peers on host 1.
pub struct Rig {
    pub f: SimFabric,
    pub dp: Dataplane<SimRnic>,
    /// Host 0's NIC, for CPU access to tenant memory.
    pub cpu: SimRnic,
    pub tenants: Vec<TenantRig>,
}

impl Rig {
    pub fn new(seed: u64, pol: Pol, cfg: DataplaneConfig) -> Rig {
        let f = SimFabric::pair(seed);
        let dp = Dataplane::new(f.nic(0), pol.host(), cfg).expect("dataplane");
        let cpu = f.nic(0);
        Rig { f, dp, cpu, tenants: Vec::new() }
    }

    /// Adds a tenant with `nqps` connected QPs and a region of `mem` bytes
    /// on each host; returns its index.
    pub fn tenant(&mut self, name: &str, nqps: u32, mem: usize) -> usize {
        let h = self.dp.add_tenant(name, 1).expect("add_tenant");
        let t = h.id;
        let mr = self.dp.reg_mr(t, mem.max(64)).expect("reg_mr");
        let mut side = Side::new(self.f.nic(1), nqps as usize, mem, 0, 1024).expect("peer side");
        for i in 0..nqps as usize {
            let (index, ep) = self.dp.create_qp(t, 0).expect("create_qp");
            assert_eq!(index as usize, i, "QP indices are dense per tenant");
            let peer = side.qps[i];
            self.dp.connect_qp(t, index, endpoint(&side.nic, peer.qp_num)).expect("connect_qp");
            bring_up(&mut side.nic, peer.handle, ep, all_access()).expect("peer bring_up");
        }
        self.tenants.push(TenantRig { h, mr, side, got: Vec::new() });
        self.tenants.len() - 1
    }

    pub fn now_ns(&self) -> u64 {
        self.f.now_ns()
    }

    /// A request of tenant `t` on `qp` for `len` bytes at `offset` of its
    /// region (and, for WRITE / READ, at `offset` of the peer's).
    pub fn wr(&self, t: usize, wr_id: u64, qp: u32, read: bool, offset: u64, len: u32) -> WorkRequest {
        let tr = &self.tenants[t];
        let remote = tr.remote(offset);
        WorkRequest {
            wr_id,
            qp,
            op: if read { RequestOp::Read { remote } } else { RequestOp::Write { remote } },
            mr: tr.mr,
            offset,
            len,
            posted_ns: self.now_ns(),
        }
    }

    /// Brings tenant `t`'s failed QP `qp` back: a new QP on the
    /// dataplane's side, the peer's QP reset and connected to it.
    pub fn recover(&mut self, t: usize, qp: u32) {
        let ep = self.dp.recover_qp(t as u32, qp).expect("recover_qp");
        let side = &mut self.tenants[t].side;
        let peer = side.qps[qp as usize];
        side.nic.modify_qp(peer.handle, QpTransition::Reset).expect("reset peer");
        bring_up(&mut side.nic, peer.handle, ep, all_access()).expect("peer bring_up");
        let remote = endpoint(&side.nic, peer.qp_num);
        self.dp.connect_qp(t as u32, qp, remote).expect("connect_qp");
    }

    /// Runs dataplane rounds until one does nothing, then takes every
    /// tenant's waiting completions. Returns whether anything happened.
    pub fn pump(&mut self) -> bool {
        let mut did = false;
        let mut n = 0;
        while self.dp.round().expect("round") {
            did = true;
            n += 1;
            assert!(n < MAX_BUSY_ROUNDS, "the dataplane reported progress {n} rounds in a row");
        }
        for tr in &mut self.tenants {
            while let Some(c) = tr.h.poll() {
                tr.got.push(c);
                did = true;
            }
        }
        did
    }

    /// Drives the fabric and the loop in virtual time. At every visible
    /// instant (and at `hook`'s wake-up times) the loop runs until idle, the
    /// tenants' completions are collected and `hook` runs; `hook` returns
    /// `Some(t)` to be woken at `t` ns at the latest, `None` once it is done.
    /// Returns the time it finished; panics if it is not done by
    /// `deadline_ns`.
    pub fn drive(&mut self, deadline_ns: u64, mut hook: impl FnMut(&mut Rig) -> Option<u64>) -> u64 {
        for _ in 0..MAX_WAKEUPS {
            loop {
                let pumped = self.pump();
                let before: usize = self.tenants.iter().map(|t| t.got.len()).sum();
                let queued: usize = self.tenants.iter().map(|t| t.h.queued()).sum();
                let wake = hook(self);
                // The hook may have posted: let the loop see it before
                // sleeping (a queue the loop leaves full is back-pressure).
                let posted = self.tenants.iter().map(|t| t.h.queued()).sum::<usize>() > queued;
                let after: usize = self.tenants.iter().map(|t| t.got.len()).sum();
                match wake {
                    None => return self.now_ns(),
                    Some(_) if pumped || posted || before != after => continue,
                    Some(wake) => {
                        // The loop's own timer (policy tick) is a wake-up too.
                        let limit_ns = wake.min(deadline_ns).min(self.dp.next_timer_ns()).max(self.now_ns() + 1);
                        assert!(self.now_ns() < deadline_ns, "not done by {deadline_ns} ns of virtual time");
                        if !self.f.step_until_visible(limit_ns * PS_PER_NS) {
                            self.f.advance_to_ns(limit_ns);
                        }
                        break;
                    }
                }
            }
        }
        panic!("not done after {MAX_WAKEUPS} wake-ups");
    }

    /// Runs `ns` more of virtual time, collecting completions.
    pub fn idle_for(&mut self, ns: u64) {
        let until = self.now_ns() + ns;
        self.drive(until + 1, |r| (r.now_ns() < until).then_some(until));
    }

    pub fn read_local(&self, t: usize, off: usize, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        self.cpu.read_mr(self.tenants[t].mr.handle, off, &mut out).expect("read_mr");
        out
    }

    pub fn read_peer(&self, t: usize, off: usize, len: usize) -> Vec<u8> {
        let s = &self.tenants[t].side;
        let mut out = vec![0u8; len];
        s.nic.read_mr(s.mr.handle, off, &mut out).expect("read_mr");
        out
    }

    pub fn write_local(&mut self, t: usize, off: usize, data: &[u8]) {
        let h = self.tenants[t].mr.handle;
        self.cpu.write_mr(h, off, data).expect("write_mr");
    }

    pub fn write_peer(&mut self, t: usize, off: usize, data: &[u8]) {
        let s = &mut self.tenants[t].side;
        let h = s.mr.handle;
        s.nic.write_mr(h, off, data).expect("write_mr");
    }
}

/// Posts `wr`, which must be accepted.
pub fn post(h: &TenantHandle, wr: WorkRequest) {
    h.post(wr).unwrap_or_else(|e| panic!("post of wr {} refused: {e}", wr.wr_id));
}

/// What a tenant posted: per QP, the wr_ids in post order, and each
/// wr_id's (QP, length).
#[derive(Default)]
pub struct Ledger {
    pub per_qp: HashMap<u32, Vec<u64>>,
    pub by_id: HashMap<u64, (u32, u32)>,
}

impl Ledger {
    pub fn record(&mut self, wr: &WorkRequest) {
        assert!(self.by_id.insert(wr.wr_id, (wr.qp, wr.len)).is_none(), "test bug: wr_id {} reused", wr.wr_id);
        self.per_qp.entry(wr.qp).or_default().push(wr.wr_id);
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Checks `got` against what was posted: every completion is of a
    /// posted request on its QP, successful, with its byte count, at most
    /// once, and each QP's completions come in post order; with
    /// `complete`, every posted request completed.
    pub fn check(&self, got: &[Completion], complete: bool) -> Result<(), String> {
        self.check_outcomes(got, complete, false).map(|_| ())
    }

    /// [`Ledger::check`], but with `allow_errors` a request may also fail
    /// (with no bytes). Returns each completed request's wr_id and status,
    /// in delivery order.
    pub fn check_outcomes(
        &self,
        got: &[Completion],
        complete: bool,
        allow_errors: bool,
    ) -> Result<Vec<(u64, WcStatus)>, String> {
        let mut seen = HashSet::new();
        let mut next: HashMap<u32, usize> = HashMap::new();
        let mut out = Vec::with_capacity(got.len());
        for c in got {
            let Some(&(qp, len)) = self.by_id.get(&c.wr_id) else {
                return Err(format!("completion of wr_id {:#x} that the tenant never posted: {c:?}", c.wr_id));
            };
            if !seen.insert(c.wr_id) {
                return Err(format!("wr_id {:#x} completed twice: {c:?}", c.wr_id));
            }
            let bytes_ok = if c.status.is_ok() { c.byte_len == len } else { allow_errors && c.byte_len == 0 };
            if c.qp != qp || !bytes_ok || c.kind != CompletionKind::Send {
                return Err(format!("wrong completion for wr {:#x} (qp {qp}, {len} B): {c:?}", c.wr_id));
            }
            let k = next.entry(qp).or_default();
            let want = self.per_qp[&qp][*k];
            if want != c.wr_id {
                return Err(format!("QP {qp}: wr {:#x} completed before wr {want:#x}, posted earlier", c.wr_id));
            }
            *k += 1;
            out.push((c.wr_id, c.status));
        }
        if complete && seen.len() != self.by_id.len() {
            let missing: Vec<u64> = self.by_id.keys().filter(|id| !seen.contains(id)).copied().collect();
            return Err(format!("{} of {} requests never completed: {missing:x?}", missing.len(), self.by_id.len()));
        }
        Ok(out)
    }
}

// ---------------------------------------------------------------------------
// 1. Random workloads.
// ---------------------------------------------------------------------------

/// One generated request.
#[derive(Debug, Clone)]
pub struct GenOp {
    pub tenant: usize,
    pub qp: u32,
    pub read: bool,
    pub size: u32,
    /// Posted at `burst * BURST_GAP_NS`.
    pub burst: u64,
}

/// Time between two bursts of posts.
pub const BURST_GAP_NS: u64 = 25_000;

pub fn size() -> impl Strategy<Value = u32> {
    prop_oneof![
        3 => 1u32..=64,
        2 => 65u32..=4096,
        3 => (1u32..=18).prop_map(|k| k * 16384),
        2 => (1u32..=18, prop_oneof![Just(-1i64), Just(1)]).prop_map(|(k, d)| (k as i64 * 16384 + d) as u32),
        2 => 4097u32..=70_000,
        2 => 70_001u32..=300_000,
    ]
}

pub fn gen_op() -> impl Strategy<Value = (usize, u32, bool, u32, u64)> {
    (0usize..3, 0u32..4, prop::bool::weighted(0.25), size(), 0u64..4)
}

/// A case: QPs per tenant (1 to 3 tenants, 1 to 4 QPs each) and requests.
pub fn case() -> impl Strategy<Value = (Vec<u32>, Vec<GenOp>, u64)> {
    (prop::collection::vec(1u32..=4, 1..=3), prop::collection::vec(gen_op(), 1..48), any::<u64>()).prop_map(
        |(qps, raw, seed)| {
            let ops = raw
                .into_iter()
                .map(|(t, q, read, size, burst)| {
                    let tenant = t % qps.len();
                    GenOp { tenant, qp: q % qps[tenant], read, size, burst }
                })
                .collect();
            (qps, ops, seed)
        },
    )
}

/// A distinctive wr_id for request `k` of tenant `t` (nothing like the
/// dataplane's own WQE ids).
pub fn app_wr_id(t: usize, k: usize) -> u64 {
    0x5EED_0000_0000_0000 | ((t as u64) << 24) | k as u64
}

/// Runs one generated case under `pol`, with the checks that hold under
/// any policy: exactly once, per-QP order, byte counts, no refusal, both
/// hosts' bytes. `setup` runs once the tenants exist (to schedule swaps,
/// say); `deadline_ns` bounds the run in virtual time. Returns the rig for
/// further checks.
pub fn run_case_with(
    qps: &[u32],
    ops: &[GenOp],
    seed: u64,
    pol: Pol,
    cfg: DataplaneConfig,
    deadline_ns: u64,
    setup: impl FnOnce(&mut Rig),
) -> Result<Rig, TestCaseError> {
    let mut rig = Rig::new(seed, pol, cfg);
    // Each request owns a slot at the same offset of its tenant's region on
    // both hosts, with untouched gaps between slots.
    let mut slots = vec![0u64; ops.len()];
    let mut ends = vec![64u64; qps.len()];
    for (i, o) in ops.iter().enumerate() {
        slots[i] = ends[o.tenant];
        ends[o.tenant] += o.size as u64 + 61;
    }
    for (t, &n) in qps.iter().enumerate() {
        rig.tenant(&format!("t{t}"), n, ends[t] as usize);
    }
    setup(&mut rig);
    // Afterwards both hosts' regions of a tenant hold every slot's pattern.
    let mut want: Vec<Vec<u8>> = ends.iter().map(|&e| vec![0u8; e as usize]).collect();
    for (i, o) in ops.iter().enumerate() {
        let data = pattern(o.size as usize, seed ^ (i as u64 + 1));
        let off = slots[i] as usize;
        if o.read {
            rig.write_peer(o.tenant, off, &data);
        } else {
            rig.write_local(o.tenant, off, &data);
        }
        want[o.tenant][off..off + data.len()].copy_from_slice(&data);
    }
    let mut ledgers: Vec<Ledger> = qps.iter().map(|_| Ledger::default()).collect();
    let bursts = ops.iter().map(|o| o.burst).max().unwrap_or(0);
    let mut next_burst = 0u64;
    let total = ops.len();
    let mut check_err = None;
    rig.drive(deadline_ns, |r| {
        while next_burst <= bursts && r.now_ns() >= next_burst * BURST_GAP_NS {
            for (i, o) in ops.iter().enumerate().filter(|(_, o)| o.burst == next_burst) {
                let wr = r.wr(o.tenant, app_wr_id(o.tenant, i), o.qp, o.read, slots[i], o.size);
                post(&r.tenants[o.tenant].h, wr);
                ledgers[o.tenant].record(&wr);
            }
            next_burst += 1;
        }
        // Running checks: a violation stops the run at once.
        for (t, l) in ledgers.iter().enumerate() {
            if let Err(e) = l.check(&r.tenants[t].got, false) {
                check_err = Some(e);
                return None;
            }
        }
        let done: usize = r.tenants.iter().map(|t| t.got.len()).sum();
        if done == total && next_burst > bursts {
            return None;
        }
        Some(if next_burst <= bursts { next_burst * BURST_GAP_NS } else { u64::MAX })
    });
    if let Some(e) = check_err {
        return Err(TestCaseError::fail(format!("{pol:?}: {e}")));
    }
    // Nothing more may arrive: no duplicates, no late hidden completions.
    rig.idle_for(200_000);
    for (t, l) in ledgers.iter().enumerate() {
        l.check(&rig.tenants[t].got, true).map_err(|e| TestCaseError::fail(format!("{pol:?} tenant {t}: {e}")))?;
    }
    let c = rig.dp.counters();
    prop_assert_eq!(c.requests, total as u64);
    prop_assert_eq!(c.completions, total as u64);
    prop_assert_eq!(c.refused, 0);
    for (t, w) in want.iter().enumerate() {
        let local = rig.read_local(t, 0, w.len());
        let peer = rig.read_peer(t, 0, w.len());
        for (name, got) in [("local", &local), ("peer", &peer)] {
            if let Some(at) = got.iter().zip(w).position(|(a, b)| a != b) {
                let op = slots.iter().zip(ops).rposition(|(&s, o)| o.tenant == t && s as usize <= at);
                return Err(TestCaseError::fail(format!(
                    "{pol:?} tenant {t}: {name} byte {at} is {} instead of {} (slot of op {op:?})",
                    got[at], w[at]
                )));
            }
        }
    }
    Ok(rig)
}

/// [`run_case_with`] under `pol` alone, with the default configuration,
/// plus the checks of a forced-split policy (hidden completions and
/// zero-weight WRs were used).
pub fn run_case(qps: &[u32], ops: &[GenOp], seed: u64, pol: Pol) -> Result<(), TestCaseError> {
    let rig = run_case_with(qps, ops, seed, pol, DataplaneConfig::default(), 200_000_000, |_| {})?;
    let c = rig.dp.counters();
    if let Pol::Force(p) = pol {
        // Hidden WQEs retire with the next signaled WQE of their QP: there is
        // one after them if a message had several chunks or a QP carried
        // several messages (a lone one-chunk message's trailing zero-weight
        // WRs wait for traffic that never comes).
        let mut per_qp = HashMap::new();
        ops.iter().for_each(|o| *per_qp.entry((o.tenant, o.qp)).or_insert(0) += 1);
        if ops.iter().any(|o| o.size > p.chunk) || per_qp.values().any(|&n| n > 1) {
            prop_assert!(c.hidden_completions > 0, "{:?}: splitting on but no hidden completion: {:?}", pol, c);
        }
        prop_assert!(c.zero_weight_wrs >= ops.len() as u64 * p.zw as u64, "{:?}: zero-weight WRs: {:?}", pol, c);
    }
    Ok(())
}

/// Posts `n` WRITEs of tenant `t` spread over its `qps` QPs, with sizes
/// that split into several chunks.
pub fn post_batch(rig: &mut Rig, ledger: &mut Ledger, t: usize, qps: u32, first_id: u64, n: u64) {
    for k in 0..n {
        let id = first_id + k;
        let qp = (id % qps as u64) as u32;
        let len = 4096 + (id as u32 * 7919) % 60_000;
        let wr = rig.wr(t, id, qp, false, (qp as u64) << 16, len);
        ledger.record(&wr);
        post(&rig.tenants[t].h, wr);
    }
}

/// Proptest settings: `cases` by default, a fixed seed (so every run
/// checks the same cases) unless `PROPTEST_RNG_SEED` is set, and
/// `PROPTEST_CASES` overrides the count.
pub fn seeded_config(cases: u32, seed: u64) -> ProptestConfig {
    let env_cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok());
    ProptestConfig {
        cases: env_cases.unwrap_or(cases),
        failure_persistence: None,
        rng_seed: if std::env::var_os("PROPTEST_RNG_SEED").is_some() {
            ProptestConfig::default().rng_seed
        } else {
            RngSeed::Fixed(seed)
        },
        ..ProptestConfig::default()
    }
}
