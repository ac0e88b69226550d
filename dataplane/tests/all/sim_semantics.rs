//! Semantics of the simulated RNIC, exercised only through the [`Rnic`]
//! trait on two hosts in virtual time: data integrity of every opcode,
//! error completions and the ERR state, CQ overrun, managed QPs and
//! SEND_ENABLE, WAIT, post lists and completion order, send-queue slots,
//! the QP state machine, and determinism.
//!
//! Each test drives the fabric with bounded `step()` loops: it either waits
//! for a number of completions or runs until no event is pending.

use perf_dataplane::rnic::connect::{connect_pair, endpoint};
use perf_dataplane::rnic::sim::{ClockMode, RnicProfile, SimFabric, SimRnic};
use perf_dataplane::rnic::*;

/// Upper bound on fabric steps in any one wait (a hang is a test failure).
const MAX_STEPS: usize = 2_000_000;

/// All rights, for regions and QPs that do not test access checks.
fn all_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
}

/// A non-trivial byte pattern: a hash of (position, seed), so no two seeds
/// and no two positions are alike.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            let mut x = i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                ^ (seed as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
            x ^= x >> 29;
            x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
            (x >> 56) as u8
        })
        .collect()
}

/// One host's objects: NIC, PD, a CQ and one region.
struct Host {
    nic: SimRnic,
    pd: PdHandle,
    cq: CqHandle,
    mr: Mr,
}

impl Host {
    fn new(f: &SimFabric, h: usize, mr_len: usize) -> Host {
        let mut nic = f.nic(h);
        let pd = nic.alloc_pd().expect("pd");
        let cq = nic.create_cq(CqAttr { depth: 4096, ignore_overrun: false }).expect("cq");
        let mr = nic.reg_mr(pd, mr_len, all_access()).expect("mr");
        Host { nic, pd, cq, mr }
    }

    /// A QP in RESET on this host's CQ, with `tweak` applied to its attributes.
    fn qp(&mut self, tweak: impl FnOnce(&mut QpInitAttr)) -> Qp {
        let mut attr = QpInitAttr::new(self.cq, self.cq);
        tweak(&mut attr);
        self.nic.create_qp(self.pd, attr).expect("create_qp")
    }

    fn read(&self, mr: &Mr, off: usize, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        self.nic.read_mr(mr.handle, off, &mut out).expect("read_mr");
        out
    }

    fn write(&mut self, mr: &Mr, off: usize, data: &[u8]) {
        self.nic.write_mr(mr.handle, off, data).expect("write_mr");
    }

    fn post(&mut self, qp: Qp, wrs: &[SendWr<'_>]) {
        self.nic.post_send(qp.handle, wrs).expect("post_send");
    }

    fn state(&self, qp: Qp) -> QpState {
        self.nic.qp_state(qp.handle).expect("qp_state")
    }
}

/// Connects `qa` on `a` with `qb` on `b`, both to RTS.
fn connect(a: &mut Host, qa: Qp, b: &mut Host, qb: Qp) {
    connect_pair(&mut a.nic, (qa.handle, qa.qp_num), &mut b.nic, (qb.handle, qb.qp_num), all_access())
        .expect("connect");
}

/// Two hosts with one connected QP each.
struct Pair {
    f: SimFabric,
    a: Host,
    b: Host,
    qa: Qp,
    qb: Qp,
}

fn pair(mr_len: usize) -> Pair {
    pair_on(SimFabric::pair(7), mr_len)
}

/// [`pair`], with the handles of host 0's and host 1's regions.
fn pair_and_regions(mr_len: usize) -> (Pair, Mr, Mr) {
    let p = pair(mr_len);
    let (mr_a, mr_b) = (p.a.mr, p.b.mr);
    (p, mr_a, mr_b)
}

fn pair_on(f: SimFabric, mr_len: usize) -> Pair {
    let mut a = Host::new(&f, 0, mr_len);
    let mut b = Host::new(&f, 1, mr_len);
    let qa = a.qp(|_| {});
    let qb = b.qp(|_| {});
    connect(&mut a, qa, &mut b, qb);
    Pair { f, a, b, qa, qb }
}

/// Polls everything `cq` holds now, without advancing time.
fn drain(nic: &mut SimRnic, cq: CqHandle) -> Vec<Wc> {
    let mut out = Vec::new();
    let mut buf = [Wc::EMPTY; 64];
    loop {
        let n = nic.poll_cq(cq, &mut buf).expect("poll_cq");
        out.extend_from_slice(&buf[..n]);
        if n < buf.len() {
            return out;
        }
    }
}

/// Steps the fabric until `cq` yielded `n` completions.
fn collect(f: &SimFabric, nic: &mut SimRnic, cq: CqHandle, n: usize) -> Vec<Wc> {
    let mut out = drain(nic, cq);
    let mut steps = 0;
    while out.len() < n {
        assert!(f.step(), "no event pending with {} of {n} completions: {out:?}", out.len());
        steps += 1;
        assert!(steps < MAX_STEPS, "no {n} completions after {MAX_STEPS} steps: {out:?}");
        out.extend(drain(nic, cq));
    }
    out
}

/// Runs the fabric until no event is pending.
fn settle(f: &SimFabric) {
    let mut steps = 0;
    while f.step() {
        steps += 1;
        assert!(steps < MAX_STEPS, "the fabric did not go idle within {MAX_STEPS} steps");
    }
}

fn wr<'a>(wr_id: u64, opcode: WrOpcode, payload: Payload<'a>) -> SendWr<'a> {
    SendWr { wr_id, opcode, payload, signaled: true }
}

fn write_op(remote: RemoteAddr) -> WrOpcode {
    WrOpcode::Write { remote }
}

fn assert_ok(wcs: &[Wc]) {
    for wc in wcs {
        assert_eq!(wc.status, WcStatus::Success, "unexpected completion {wc:?}");
    }
}

const SIZES: [usize; 5] = [1, 4095, 4096, 4097, 1 << 20];
const GUARD: u8 = 0x5a;

/// Fills `len` bytes around `[off, off+len)` of `mr` with the guard byte.
fn guard(h: &mut Host, mr: &Mr, off: usize, len: usize) {
    let mr = *mr;
    h.write(&mr, off - 1, &vec![GUARD; len + 2]);
}

/// Checks the bytes just before and after `[off, off+len)` are still the guard.
fn check_guard(h: &Host, mr: &Mr, off: usize, len: usize) {
    assert_eq!(h.read(mr, off - 1, 1), [GUARD], "byte before the target was touched");
    assert_eq!(h.read(mr, off + len, 1), [GUARD], "byte after the target was touched");
}

/// For every size in [`SIZES`], host 0 moves a fresh pattern with one
/// signaled WQE between `src_off(k)` of the source region and `dst_off(k)`
/// of the destination region: a WRITE from host 0 to host 1, or (`read`) a
/// READ from host 1 into host 0. The completion reports the transfer and
/// exactly the target bytes change.
fn moves_the_bytes_for_every_size(read: bool, seed: u8, offs: impl Fn(usize) -> (usize, usize)) {
    let mut p = pair(3 << 20);
    let what = if read { "READ" } else { "WRITE" };
    for (k, &len) in SIZES.iter().enumerate() {
        let data = pattern(len, seed + k as u8);
        let (src_off, dst_off) = offs(k);
        let (mr_a, mr_b) = (p.a.mr, p.b.mr);
        // (local offset, remote offset, source host, destination host)
        let (local_off, remote_off, src, dst) =
            if read { (dst_off, src_off, &mut p.b, &mut p.a) } else { (src_off, dst_off, &mut p.a, &mut p.b) };
        let (src_mr, dst_mr) = if read { (mr_b, mr_a) } else { (mr_a, mr_b) };
        src.write(&src_mr, src_off, &data);
        guard(dst, &dst_mr, dst_off, len);
        let remote = mr_b.remote(remote_off);
        let (op, wc_op) =
            if read { (WrOpcode::Read { remote }, WcOpcode::Read) } else { (write_op(remote), WcOpcode::Write) };
        let sge = [mr_a.sge(local_off, len as u32)];
        p.a.post(p.qa, &[wr(k as u64, op, Payload::Sges(&sge))]);
        let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 1);
        assert_eq!(wcs.len(), 1);
        assert_ok(&wcs);
        assert_eq!((wcs[0].wr_id, wcs[0].opcode, wcs[0].byte_len), (k as u64, wc_op, len as u32));
        assert_eq!(wcs[0].qp_num, p.qa.qp_num);
        let dst = if read { &p.a } else { &p.b };
        assert!(dst.read(&dst_mr, dst_off, len) == data, "{what} of {len} B: the target bytes differ");
        check_guard(dst, &dst_mr, dst_off, len);
    }
}

#[test]
fn write_moves_the_bytes_for_every_size() {
    moves_the_bytes_for_every_size(false, 1, |k| (5 + k, 7 + 3 * k));
}

#[test]
fn read_brings_the_bytes_back_for_every_size() {
    moves_the_bytes_for_every_size(true, 40, |k| (3 + k, 11 + 2 * k));
}

#[test]
fn inline_write_and_gathered_write() {
    let (mut p, mr_a, mr_b) = pair_and_regions(1 << 16);
    // Inline: the bytes are captured at post time; changing the buffer after
    // posting must not matter.
    let data = pattern(200, 9);
    let mut buf = data.clone();
    p.a.post(p.qa, &[wr(1, write_op(mr_b.remote(100)), Payload::Inline(&buf))]);
    buf.fill(0);
    assert_ok(&collect(&p.f, &mut p.a.nic, p.a.cq, 1));
    assert_eq!(p.b.read(&mr_b, 100, 200), data);
    assert!(buf.iter().all(|&b| b == 0));
    // Gather from two SGEs into one contiguous remote range.
    let (x, y) = (pattern(3000, 10), pattern(1500, 11));
    p.a.write(&mr_a, 0, &x);
    p.a.write(&mr_a, 8000, &y);
    let sges = [mr_a.sge(0, 3000), mr_a.sge(8000, 1500)];
    p.a.post(p.qa, &[wr(2, write_op(mr_b.remote(20_000)), Payload::Sges(&sges))]);
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 1);
    assert_ok(&wcs);
    assert_eq!(wcs[0].byte_len, 4500);
    assert_eq!(p.b.read(&mr_b, 20_000, 3000), x);
    assert_eq!(p.b.read(&mr_b, 23_000, 1500), y);
}

#[test]
fn write_with_imm_consumes_a_recv() {
    let (mut p, mr_a, mr_b) = pair_and_regions(1 << 16);
    let data = pattern(5000, 3);
    p.a.write(&mr_a, 0, &data);
    let rsge = [mr_b.sge(40_000, 16)];
    p.b.nic.post_recv(p.qb.handle, &[RecvWr { wr_id: 77, sgl: &rsge }]).expect("post_recv");
    let sge = [mr_a.sge(0, 5000)];
    let op = WrOpcode::WriteImm { remote: mr_b.remote(1000), imm: 0xdead_beef };
    p.a.post(p.qa, &[wr(5, op, Payload::Sges(&sge))]);
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 1);
    assert_ok(&wcs);
    assert_eq!((wcs[0].wr_id, wcs[0].opcode), (5, WcOpcode::Write));
    let r = collect(&p.f, &mut p.b.nic, p.b.cq, 1);
    assert_ok(&r);
    assert_eq!(r[0].wr_id, 77);
    assert_eq!(r[0].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(r[0].imm, Some(0xdead_beef));
    assert_eq!(r[0].byte_len, 5000);
    assert_eq!(r[0].qp_num, p.qb.qp_num);
    // The bytes go to the WRITE's address, not to the RECV buffer.
    assert_eq!(p.b.read(&mr_b, 1000, 5000), data);
    assert!(p.b.read(&mr_b, 40_000, 16).iter().all(|&b| b == 0));
}

#[test]
fn send_scatters_over_two_recv_sges() {
    let (mut p, mr_a, mr_b) = pair_and_regions(1 << 16);
    let data = pattern(5000, 4);
    p.a.write(&mr_a, 0, &data);
    guard(&mut p.b, &mr_b, 100, 3000);
    guard(&mut p.b, &mr_b, 20_000, 4000);
    let rsges = [mr_b.sge(100, 3000), mr_b.sge(20_000, 4000)];
    p.b.nic.post_recv(p.qb.handle, &[RecvWr { wr_id: 900, sgl: &rsges }]).expect("post_recv");
    let sge = [mr_a.sge(0, 5000)];
    p.a.post(p.qa, &[wr(1, WrOpcode::SendImm { imm: 42 }, Payload::Sges(&sge))]);
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 1);
    assert_ok(&wcs);
    assert_eq!(wcs[0].opcode, WcOpcode::Send);
    let r = collect(&p.f, &mut p.b.nic, p.b.cq, 1);
    assert_ok(&r);
    assert_eq!((r[0].wr_id, r[0].opcode, r[0].byte_len, r[0].imm), (900, WcOpcode::Recv, 5000, Some(42)));
    assert_eq!(p.b.read(&mr_b, 100, 3000), data[..3000]);
    assert_eq!(p.b.read(&mr_b, 20_000, 2000), data[3000..]);
    check_guard(&p.b, &mr_b, 100, 3000);
    // The second SGE is only partly used: the rest keeps its old contents.
    assert!(p.b.read(&mr_b, 22_000, 2001).iter().all(|&b| b == GUARD));
}

#[test]
fn sends_land_in_recvs_in_post_order() {
    let (mut p, mr_a, mr_b) = pair_and_regions(1 << 16);
    let rsges: Vec<[Sge; 1]> = (0..4).map(|i| [mr_b.sge(i * 1024, 1024)]).collect();
    let recvs: Vec<RecvWr<'_>> = rsges.iter().enumerate().map(|(i, s)| RecvWr { wr_id: i as u64, sgl: s }).collect();
    p.b.nic.post_recv(p.qb.handle, &recvs).expect("post_recv");
    let msgs: Vec<Vec<u8>> = (0..4).map(|i| pattern(100 + 200 * i, 20 + i as u8)).collect();
    for (i, m) in msgs.iter().enumerate() {
        p.a.write(&mr_a, i * 2048, m);
    }
    let sges: Vec<[Sge; 1]> = msgs.iter().enumerate().map(|(i, m)| [mr_a.sge(i * 2048, m.len() as u32)]).collect();
    let wrs: Vec<SendWr<'_>> =
        sges.iter().enumerate().map(|(i, s)| wr(i as u64, WrOpcode::Send, Payload::Sges(s))).collect();
    p.a.post(p.qa, &wrs);
    assert_ok(&collect(&p.f, &mut p.a.nic, p.a.cq, 4));
    let r = collect(&p.f, &mut p.b.nic, p.b.cq, 4);
    assert_ok(&r);
    assert_eq!(r.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [0, 1, 2, 3]);
    for (i, m) in msgs.iter().enumerate() {
        assert_eq!(r[i].byte_len as usize, m.len());
        assert_eq!(&p.b.read(&mr_b, i * 1024, m.len()), m);
    }
}

#[test]
fn read_scatters_into_two_local_sges() {
    let (mut p, mr_a, mr_b) = pair_and_regions(1 << 16);
    let data = pattern(6000, 50);
    p.b.write(&mr_b, 500, &data);
    let sges = [mr_a.sge(10_000, 2500), mr_a.sge(100, 3500)];
    p.a.post(p.qa, &[wr(1, WrOpcode::Read { remote: mr_b.remote(500) }, Payload::Sges(&sges))]);
    assert_ok(&collect(&p.f, &mut p.a.nic, p.a.cq, 1));
    assert_eq!(p.a.read(&mr_a, 10_000, 2500), data[..2500]);
    assert_eq!(p.a.read(&mr_a, 100, 3500), data[2500..]);
}

/// A second connected QP pair on the same two hosts, with its own regions.
struct Bystander {
    qa: Qp,
    mr_a: Mr,
    mr_b: Mr,
}

fn bystander(p: &mut Pair) -> Bystander {
    let qa = p.a.qp(|_| {});
    let qb = p.b.qp(|_| {});
    connect(&mut p.a, qa, &mut p.b, qb);
    let mr_a = p.a.nic.reg_mr(p.a.pd, 1 << 16, all_access()).expect("mr");
    let mr_b = p.b.nic.reg_mr(p.b.pd, 1 << 16, all_access()).expect("mr");
    Bystander { qa, mr_a, mr_b }
}

/// The bystander writes `data` and the bytes arrive.
fn bystander_works(p: &mut Pair, s: &Bystander, wr_id: u64, data: &[u8]) {
    p.a.write(&s.mr_a, 0, data);
    let sge = [s.mr_a.sge(0, data.len() as u32)];
    p.a.post(s.qa, &[wr(wr_id, write_op(s.mr_b.remote(64)), Payload::Sges(&sge))]);
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 1);
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status, wcs[0].qp_num), (wr_id, WcStatus::Success, s.qa.qp_num));
    assert_eq!(p.b.read(&s.mr_b, 64, data.len()), data);
    assert_eq!(p.a.state(s.qa), QpState::Rts);
}

/// Posts [bad, good, good] on the pair's QP and checks RemAccessErr, the
/// flushes, ERR, and that nothing landed; then later posts flush too.
fn remote_error_flushes(p: &mut Pair, bad: WrOpcode, bad_sge: Sge) {
    let s = bystander(p);
    let mr_b = p.b.mr;
    let before = p.b.read(&mr_b, 0, mr_b.len);
    let src = [p.a.mr.sge(0, 256)];
    let bad_sgl = [bad_sge];
    let wrs = [
        wr(1, bad, Payload::Sges(&bad_sgl)),
        wr(2, write_op(mr_b.remote(0)), Payload::Sges(&src)),
        wr(3, write_op(mr_b.remote(4096)), Payload::Sges(&src)),
    ];
    let a_mr = p.a.mr;
    p.a.write(&a_mr, 0, &pattern(256, 61));
    p.a.post(p.qa, &wrs);
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 3);
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got, [(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr), (3, WcStatus::WrFlushErr)]);
    assert_eq!(p.a.state(p.qa), QpState::Err);
    settle(&p.f);
    assert!(p.b.read(&mr_b, 0, mr_b.len) == before, "flushed WRITEs must not touch remote memory");
    // Work posted after the error flushes as well.
    p.a.post(p.qa, &[wr(4, write_op(mr_b.remote(0)), Payload::Sges(&src))]);
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (4, WcStatus::WrFlushErr));
    settle(&p.f);
    assert!(p.b.read(&mr_b, 0, mr_b.len) == before);
    // Another QP on the same hosts is untouched and keeps working.
    let data = pattern(3000, 62);
    bystander_works(p, &s, 100, &data);
    assert!(p.b.read(&mr_b, 0, mr_b.len) == before);
}

#[test]
fn bad_rkey_gives_rem_access_err_and_err_state() {
    let mut p = pair(1 << 16);
    let r = p.b.mr.remote(0);
    let bad = RemoteAddr { addr: r.addr, rkey: r.rkey ^ 0x5a };
    let sge = p.a.mr.sge(0, 64);
    remote_error_flushes(&mut p, write_op(bad), sge);
}

#[test]
fn out_of_bounds_write_gives_rem_access_err() {
    let mut p = pair(1 << 16);
    let len = p.b.mr.len;
    // 64 bytes starting 10 bytes before the end of the region.
    let sge = p.a.mr.sge(0, 64);
    let op = write_op(p.b.mr.remote(len - 10));
    remote_error_flushes(&mut p, op, sge);
}

#[test]
fn out_of_bounds_read_gives_rem_access_err() {
    let mut p = pair(1 << 16);
    let len = p.b.mr.len;
    let sge = p.a.mr.sge(1024, 4096);
    let op = WrOpcode::Read { remote: p.b.mr.remote(len - 4000) };
    remote_error_flushes(&mut p, op, sge);
}

#[test]
fn write_to_a_region_without_remote_write_is_rejected() {
    let mut p = pair(1 << 16);
    let ro = p.b.nic.reg_mr(p.b.pd, 4096, AccessFlags::REMOTE_READ).expect("mr");
    let sge = p.a.mr.sge(0, 64);
    remote_error_flushes(&mut p, write_op(ro.remote(0)), sge);
    let mut out = [1u8; 64];
    p.b.nic.read_mr(ro.handle, 0, &mut out).expect("read_mr");
    assert!(out.iter().all(|&b| b == 0));
}

#[test]
fn bad_lkey_gives_loc_prot_err() {
    let mut p = pair(1 << 16);
    let s = bystander(&mut p);
    let mut sge = p.a.mr.sge(0, 128);
    sge.lkey ^= 0x33;
    let mr_b = p.b.mr;
    let good = [p.a.mr.sge(0, 128)];
    let bad = [sge];
    p.a.post(
        p.qa,
        &[wr(1, write_op(mr_b.remote(0)), Payload::Sges(&bad)), wr(2, write_op(mr_b.remote(0)), Payload::Sges(&good))],
    );
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 2);
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got, [(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)]);
    assert_eq!(p.a.state(p.qa), QpState::Err);
    bystander_works(&mut p, &s, 9, &pattern(100, 1));
}

#[test]
fn local_error_behind_an_inflight_write_stops_later_wqes() {
    // A 1 MiB WRITE is still in flight when the next WQE fails its lkey
    // check; the WQE after that must not execute (its bytes must not land).
    let (mut p, mr_a, mr_b) = pair_and_regions(2 << 20);
    let big = pattern(1 << 20, 70);
    p.a.write(&mr_a, 0, &big);
    p.a.write(&mr_a, 1 << 20, &pattern(512, 71));
    let big_sge = [mr_a.sge(0, 1 << 20)];
    let mut b = mr_a.sge(0, 64);
    b.lkey = b.lkey.wrapping_add(1);
    let bad = [b];
    let small = [mr_a.sge(1 << 20, 512)];
    p.a.post(
        p.qa,
        &[
            wr(1, write_op(mr_b.remote(0)), Payload::Sges(&big_sge)),
            wr(2, write_op(mr_b.remote(0)), Payload::Sges(&bad)),
            wr(3, write_op(mr_b.remote(1 << 20)), Payload::Sges(&small)),
        ],
    );
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 3);
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got, [(1, WcStatus::Success), (2, WcStatus::LocProtErr), (3, WcStatus::WrFlushErr)]);
    assert_eq!(p.a.state(p.qa), QpState::Err);
    settle(&p.f);
    assert!(p.b.read(&mr_b, 0, 1 << 20) == big);
    assert!(p.b.read(&mr_b, 1 << 20, 512).iter().all(|&x| x == 0), "a WQE behind a failed one executed");
}

#[test]
fn read_into_a_region_without_local_write_is_loc_prot_err() {
    let mut p = pair(1 << 16);
    let ro = p.a.nic.reg_mr(p.a.pd, 4096, AccessFlags::empty()).expect("mr");
    let sge = [ro.sge(0, 128)];
    p.a.post(p.qa, &[wr(1, WrOpcode::Read { remote: p.b.mr.remote(0) }, Payload::Sges(&sge))]);
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 1);
    assert_eq!(wcs[0].status, WcStatus::LocProtErr);
    assert_eq!(p.a.state(p.qa), QpState::Err);
}

/// Two hosts with one QP each, brought up by hand with the given RNR retry count.
fn pair_with_rnr(rnr_retry: u8) -> Pair {
    let f = SimFabric::pair(11);
    let mut a = Host::new(&f, 0, 1 << 16);
    let mut b = Host::new(&f, 1, 1 << 16);
    let qa = a.qp(|_| {});
    let qb = b.qp(|_| {});
    let (ea, eb) = (endpoint(&a.nic, qa.qp_num), endpoint(&b.nic, qb.qp_num));
    for (h, q, remote) in [(&mut a, qa, eb), (&mut b, qb, ea)] {
        h.nic.modify_qp(q.handle, QpTransition::Init { access: all_access() }).expect("init");
        h.nic.modify_qp(q.handle, QpTransition::Rtr { remote }).expect("rtr");
        h.nic.modify_qp(q.handle, QpTransition::Rts { retry_cnt: 7, rnr_retry }).expect("rts");
    }
    Pair { f, a, b, qa, qb }
}

#[test]
fn send_without_recv_and_no_rnr_retry_fails() {
    let mut p = pair_with_rnr(0);
    let data = pattern(64, 5);
    p.a.post(p.qa, &[wr(1, WrOpcode::Send, Payload::Inline(&data)), wr(2, WrOpcode::Send, Payload::Inline(&data))]);
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 2);
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got, [(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]);
    assert_eq!(p.a.state(p.qa), QpState::Err);
    settle(&p.f);
    assert!(drain(&mut p.b.nic, p.b.cq).is_empty(), "the responder consumed nothing");
}

#[test]
fn send_with_infinite_rnr_retry_completes_once_a_recv_is_posted() {
    let mut p = pair_with_rnr(7);
    let data = pattern(700, 6);
    p.a.post(p.qa, &[wr(1, WrOpcode::Send, Payload::Inline(&data[..200]))]);
    let mr_a = p.a.mr;
    p.a.write(&mr_a, 0, &data);
    let sge = [mr_a.sge(0, 700)];
    p.a.post(p.qa, &[wr(2, WrOpcode::Send, Payload::Sges(&sge))]);
    // 200 us of RNR NAKs and retries: nothing completes.
    p.f.advance_to_ns(200_000);
    assert!(drain(&mut p.a.nic, p.a.cq).is_empty());
    assert_eq!(p.a.state(p.qa), QpState::Rts);
    let mr_b = p.b.mr;
    let rs = [[mr_b.sge(0, 1024)], [mr_b.sge(2048, 1024)]];
    p.b.nic
        .post_recv(p.qb.handle, &[RecvWr { wr_id: 10, sgl: &rs[0] }, RecvWr { wr_id: 11, sgl: &rs[1] }])
        .expect("recv");
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 2);
    assert_ok(&wcs);
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2]);
    assert!(wcs[0].timestamp_ns > 200_000);
    let r = collect(&p.f, &mut p.b.nic, p.b.cq, 2);
    assert_ok(&r);
    assert_eq!(r.iter().map(|w| (w.wr_id, w.byte_len)).collect::<Vec<_>>(), [(10, 200), (11, 700)]);
    assert_eq!(p.b.read(&mr_b, 0, 200), data[..200]);
    assert_eq!(p.b.read(&mr_b, 2048, 700), data);
}

#[test]
fn send_larger_than_the_recv_buffer_fails_both_sides() {
    let mut p = pair(1 << 16);
    let rs = [p.b.mr.sge(0, 100)];
    p.b.nic.post_recv(p.qb.handle, &[RecvWr { wr_id: 5, sgl: &rs }]).expect("recv");
    let sge = [p.a.mr.sge(0, 1000)];
    p.a.post(p.qa, &[wr(1, WrOpcode::Send, Payload::Sges(&sge))]);
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 1);
    assert_eq!(wcs[0].status, WcStatus::RemInvReqErr);
    let r = collect(&p.f, &mut p.b.nic, p.b.cq, 1);
    assert_eq!((r[0].wr_id, r[0].status), (5, WcStatus::LocLenErr));
    assert_eq!(p.a.state(p.qa), QpState::Err);
    assert_eq!(p.b.state(p.qb), QpState::Err);
}

/// One host pair whose host-0 QP uses a CQ with the given attributes.
fn pair_with_send_cq(attr: CqAttr) -> (Pair, CqHandle, Qp) {
    let mut p = pair(1 << 16);
    let cq = p.a.nic.create_cq(attr).expect("cq");
    let qa = p.a.qp(|a| {
        a.send_cq = cq;
        a.recv_cq = cq;
    });
    let qb = p.b.qp(|_| {});
    connect(&mut p.a, qa, &mut p.b, qb);
    (p, cq, qa)
}

fn eight_writes(p: &mut Pair, qp: Qp, base: u64) {
    let mr_b = p.b.mr;
    let data = pattern(64, 8);
    let wrs: Vec<SendWr<'_>> =
        (0..8).map(|i| wr(base + i, write_op(mr_b.remote(i as usize * 64)), Payload::Inline(&data))).collect();
    p.a.post(qp, &wrs);
}

#[test]
fn cq_overrun_is_an_error_and_errors_the_qp() {
    let (mut p, cq, qa) = pair_with_send_cq(CqAttr { depth: 4, ignore_overrun: false });
    eight_writes(&mut p, qa, 0);
    settle(&p.f);
    let mut buf = [Wc::EMPTY; 16];
    assert_eq!(p.a.nic.poll_cq(cq, &mut buf), Err(RnicError::CqOverrun { cq: cq.0 }));
    assert_eq!(p.a.state(qa), QpState::Err);
    // The original pair, on another CQ, is untouched.
    assert_eq!(p.a.state(p.qa), QpState::Rts);
    let data = pattern(32, 1);
    p.a.post(p.qa, &[wr(50, write_op(p.b.mr.remote(9000)), Payload::Inline(&data))]);
    assert_ok(&collect(&p.f, &mut p.a.nic, p.a.cq, 1));
    assert_eq!(p.b.read(&p.b.mr, 9000, 32), data);
}

#[test]
fn ignore_overrun_cq_keeps_working() {
    let (mut p, cq, qa) = pair_with_send_cq(CqAttr { depth: 4, ignore_overrun: true });
    eight_writes(&mut p, qa, 0);
    settle(&p.f);
    let wcs = drain(&mut p.a.nic, cq);
    assert!(wcs.len() <= 4, "a 4-entry CQ returned {} CQEs", wcs.len());
    assert!(!wcs.is_empty());
    assert_ok(&wcs);
    assert_eq!(wcs.last().map(|w| w.wr_id), Some(7), "the newest CQE survives");
    assert_eq!(p.a.state(qa), QpState::Rts);
    // The QP keeps working.
    eight_writes(&mut p, qa, 100);
    settle(&p.f);
    let wcs = drain(&mut p.a.nic, cq);
    assert_ok(&wcs);
    assert_eq!(wcs.last().map(|w| w.wr_id), Some(107));
    assert_eq!(p.a.state(qa), QpState::Rts);
}

/// Host 0 of a pair gets a cross-channel control QP and a managed QP, both
/// connected to QPs on host 1.
fn managed_setup() -> (Pair, Qp, Qp) {
    let mut p = pair(1 << 16);
    let ctl = p.a.qp(|a| a.cross_channel = true);
    let managed = p.a.qp(|a| a.managed_send = true);
    for q in [ctl, managed] {
        let qb = p.b.qp(|_| {});
        connect(&mut p.a, q, &mut p.b, qb);
    }
    (p, ctl, managed)
}

#[test]
fn managed_qp_executes_exactly_the_enabled_count() {
    let (mut p, ctl, m) = managed_setup();
    let mr_b = p.b.mr;
    let msgs: Vec<Vec<u8>> = (0..5).map(|i| pattern(64, 80 + i)).collect();
    let wrs: Vec<SendWr<'_>> =
        msgs.iter().enumerate().map(|(i, d)| wr(i as u64, write_op(mr_b.remote(i * 64)), Payload::Inline(d))).collect();
    p.a.post(m, &wrs);
    settle(&p.f);
    assert!(drain(&mut p.a.nic, p.a.cq).is_empty(), "a managed QP executed without SEND_ENABLE");
    assert!(p.b.read(&mr_b, 0, 5 * 64).iter().all(|&b| b == 0));
    let landed = |p: &Pair| (0..5).filter(|&i| p.b.read(&mr_b, i * 64, 64) == msgs[i]).count();

    let enable = |n| WrOpcode::SendEnable { qp: m.handle, count: n };
    p.a.post(ctl, &[wr(100, enable(2), Payload::None)]);
    settle(&p.f);
    let wcs = drain(&mut p.a.nic, p.a.cq);
    assert_ok(&wcs);
    let ctl_wcs: Vec<_> = wcs.iter().filter(|w| w.qp_num == ctl.qp_num).map(|w| (w.wr_id, w.opcode)).collect();
    assert_eq!(ctl_wcs, [(100, WcOpcode::SendEnable)]);
    let m_wcs: Vec<u64> = wcs.iter().filter(|w| w.qp_num == m.qp_num).map(|w| w.wr_id).collect();
    assert_eq!(m_wcs, [0, 1]);
    assert_eq!(landed(&p), 2);
    assert!(p.b.read(&mr_b, 2 * 64, 3 * 64).iter().all(|&b| b == 0));
    let c = p.f.qp_counters(0, m.handle).expect("counters");
    assert_eq!(c.data_wqes, 2);

    p.a.post(ctl, &[wr(101, enable(3), Payload::None)]);
    settle(&p.f);
    let wcs = drain(&mut p.a.nic, p.a.cq);
    assert_ok(&wcs);
    let m_wcs: Vec<u64> = wcs.iter().filter(|w| w.qp_num == m.qp_num).map(|w| w.wr_id).collect();
    assert_eq!(m_wcs, [2, 3, 4]);
    assert_eq!(landed(&p), 5);
    assert_eq!(p.f.qp_counters(0, m.handle).expect("counters").data_wqes, 5);
}

#[test]
fn send_enable_ahead_of_posts_releases_later_wqes() {
    // Credit given before the WQEs exist applies to the WQEs posted later.
    let (mut p, ctl, m) = managed_setup();
    p.a.post(ctl, &[wr(100, WrOpcode::SendEnable { qp: m.handle, count: 1 }, Payload::None)]);
    assert_eq!(collect(&p.f, &mut p.a.nic, p.a.cq, 1)[0].opcode, WcOpcode::SendEnable);
    let data = pattern(16, 3);
    let mr_b = p.b.mr;
    p.a.post(m, &[wr(0, write_op(mr_b.remote(0)), Payload::Inline(&data))]);
    p.a.post(m, &[wr(1, write_op(mr_b.remote(64)), Payload::Inline(&data))]);
    settle(&p.f);
    let wcs = drain(&mut p.a.nic, p.a.cq);
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [0]);
    assert!(p.b.read(&mr_b, 64, 16).iter().all(|&b| b == 0));
}

/// Host 0 gets a cross-channel QP `w` on the pair's CQ, and a plain QP `p`
/// whose send CQ is the separate CQ `x` the WAITs watch.
fn wait_setup() -> (Pair, Qp, Qp, CqHandle) {
    wait_setup_with(CqAttr { depth: 64, ignore_overrun: false })
}

/// [`wait_setup`] with the watched CQ created with `attr`.
fn wait_setup_with(attr: CqAttr) -> (Pair, Qp, Qp, CqHandle) {
    let mut p = pair(1 << 16);
    let x = p.a.nic.create_cq(attr).expect("cq");
    let w = p.a.qp(|a| a.cross_channel = true);
    let other = p.a.qp(|a| {
        a.send_cq = x;
        a.recv_cq = x;
    });
    for q in [w, other] {
        let qb = p.b.qp(|_| {});
        connect(&mut p.a, q, &mut p.b, qb);
    }
    (p, w, other, x)
}

#[test]
fn wait_blocks_until_the_cq_reaches_the_count() {
    let (mut p, w, other, x) = wait_setup();
    let mr_b = p.b.mr;
    let data = pattern(128, 90);
    p.a.post(
        w,
        &[
            wr(1, WrOpcode::Wait { cq: x, count: 2 }, Payload::None),
            wr(2, write_op(mr_b.remote(0)), Payload::Inline(&data)),
        ],
    );
    settle(&p.f);
    assert!(drain(&mut p.a.nic, p.a.cq).is_empty(), "WAIT passed with 0 of 2 completions");
    assert!(p.b.read(&mr_b, 0, 128).iter().all(|&b| b == 0));

    let one = pattern(8, 91);
    p.a.post(other, &[wr(10, write_op(mr_b.remote(4096)), Payload::Inline(&one))]);
    assert_ok(&collect(&p.f, &mut p.a.nic, x, 1));
    settle(&p.f);
    assert!(drain(&mut p.a.nic, p.a.cq).is_empty(), "WAIT passed with 1 of 2 completions");
    assert!(p.b.read(&mr_b, 0, 128).iter().all(|&b| b == 0));

    p.a.post(other, &[wr(11, write_op(mr_b.remote(4096)), Payload::Inline(&one))]);
    let second = collect(&p.f, &mut p.a.nic, x, 1);
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 2);
    assert_ok(&wcs);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.opcode)).collect::<Vec<_>>(),
        [(1, WcOpcode::Wait), (2, WcOpcode::Write)]
    );
    assert!(wcs[1].timestamp_ns > second[0].timestamp_ns, "the WRITE completed before the WAIT's CQ count");
    assert_eq!(p.b.read(&mr_b, 0, 128), data);
}

#[test]
fn wait_with_count_zero_passes_immediately() {
    let (mut p, w, _, x) = wait_setup();
    let mr_b = p.b.mr;
    let data = pattern(16, 92);
    let t0 = p.a.nic.clock_ns();
    p.a.post(
        w,
        &[
            wr(1, WrOpcode::Wait { cq: x, count: 0 }, Payload::None),
            wr(2, write_op(mr_b.remote(0)), Payload::Inline(&data)),
        ],
    );
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 2);
    assert_ok(&wcs);
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2]);
    assert!(wcs[1].timestamp_ns - t0 < 10_000, "a satisfied WAIT delayed the WRITE to {} ns", wcs[1].timestamp_ns);
    assert_eq!(p.b.read(&mr_b, 0, 16), data);
}

#[test]
fn wait_on_an_ignore_overrun_cq_counts_every_completion() {
    let (mut p, w, other, x) = wait_setup_with(CqAttr { depth: 1, ignore_overrun: true });
    eight_writes(&mut p, other, 0);
    settle(&p.f);
    p.a.post(w, &[wr(1, WrOpcode::Wait { cq: x, count: 8 }, Payload::None)]);
    assert_eq!(collect(&p.f, &mut p.a.nic, p.a.cq, 1)[0].opcode, WcOpcode::Wait);
    p.a.post(w, &[wr(2, WrOpcode::Wait { cq: x, count: 9 }, Payload::None)]);
    settle(&p.f);
    assert!(drain(&mut p.a.nic, p.a.cq).is_empty());
}

#[test]
fn cross_channel_wqes_need_a_cross_channel_qp() {
    let (mut p, _, m) = managed_setup();
    let data = pattern(16, 1);
    let wrs = [
        wr(1, write_op(p.b.mr.remote(0)), Payload::Inline(&data)),
        wr(2, WrOpcode::Wait { cq: p.a.cq, count: 0 }, Payload::None),
    ];
    let err = p.a.nic.post_send(p.qa.handle, &wrs).expect_err("WAIT on a plain QP");
    assert_eq!(err.index, 1);
    assert!(matches!(err.error, RnicError::InvalidArgument(_)), "{err:?}");
    let err = p.a.nic.post_send(p.qa.handle, &[wr(3, WrOpcode::SendEnable { qp: m.handle, count: 1 }, Payload::None)]);
    let err = err.expect_err("SEND_ENABLE on a plain QP");
    assert_eq!(err.index, 0);
    assert!(matches!(err.error, RnicError::InvalidArgument(_)), "{err:?}");
    // The request before the rejected one was posted and executes.
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::Success));
    settle(&p.f);
    assert!(drain(&mut p.a.nic, p.a.cq).is_empty());
    assert_eq!(p.b.read(&p.b.mr, 0, 16), data);
    // SEND_ENABLE must target a managed QP.
    let ctl = p.a.qp(|a| a.cross_channel = true);
    let qb = p.b.qp(|_| {});
    connect(&mut p.a, ctl, &mut p.b, qb);
    let err =
        p.a.nic.post_send(ctl.handle, &[wr(4, WrOpcode::SendEnable { qp: p.qa.handle, count: 1 }, Payload::None)]);
    assert!(matches!(err, Err(PostError { index: 0, error: RnicError::InvalidArgument(_) })), "{err:?}");
}

#[test]
fn post_list_lands_in_order() {
    let mut p = pair(1 << 16);
    let mr_b = p.b.mr;
    let bufs: Vec<Vec<u8>> = (0..32).map(|i| pattern(64, 100 + i)).collect();
    let wrs: Vec<SendWr<'_>> =
        bufs.iter().enumerate().map(|(i, b)| wr(i as u64, write_op(mr_b.remote(256)), Payload::Inline(b))).collect();
    p.a.post(p.qa, &wrs);
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 32);
    assert_ok(&wcs);
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), (0..32).collect::<Vec<u64>>());
    assert!(wcs.windows(2).all(|w| w[0].timestamp_ns <= w[1].timestamp_ns));
    assert_eq!(p.b.read(&mr_b, 256, 64), bufs[31], "the last WRITE of the list must land last");
}

#[test]
fn completions_follow_post_order_across_mixed_sizes() {
    let mut p = pair(4 << 20);
    let s = bystander(&mut p);
    let sizes = [1usize << 20, 16, 65_536, 1, 300_000, 4097, 8, 131_072, 3];
    let mr_a = p.a.mr;
    let mr_b = p.b.mr;
    let mut off = 0;
    let mut sges = Vec::new();
    let mut datas = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let d = pattern(len, 120 + i as u8);
        p.a.write(&mr_a, off, &d);
        sges.push(([mr_a.sge(off, len as u32)], off));
        datas.push(d);
        off += len;
    }
    let wrs: Vec<SendWr<'_>> = sges
        .iter()
        .enumerate()
        .map(|(i, (sge, off))| wr(i as u64, write_op(mr_b.remote(*off)), Payload::Sges(sge)))
        .collect();
    // Post half as one list, the rest one by one, with the bystander
    // interleaving small WRITEs on its own QP.
    p.a.post(p.qa, &wrs[..4]);
    let small = pattern(16, 7);
    for (i, w) in wrs[4..].iter().enumerate() {
        p.a.post(p.qa, std::slice::from_ref(w));
        p.a.post(s.qa, &[wr(1000 + i as u64, write_op(s.mr_b.remote(i * 16)), Payload::Inline(&small))]);
    }
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, sizes.len() + 5);
    assert_ok(&wcs);
    let mine: Vec<(u64, u32)> = wcs.iter().filter(|w| w.qp_num == p.qa.qp_num).map(|w| (w.wr_id, w.byte_len)).collect();
    let expect: Vec<(u64, u32)> = sizes.iter().enumerate().map(|(i, &l)| (i as u64, l as u32)).collect();
    assert_eq!(mine, expect);
    let theirs: Vec<u64> = wcs.iter().filter(|w| w.qp_num == s.qa.qp_num).map(|w| w.wr_id).collect();
    assert_eq!(theirs, (1000..1005).collect::<Vec<u64>>());
    // The small WRITEs of the other QP are not stuck behind the 1 MiB one.
    let first_small = wcs.iter().find(|w| w.qp_num == s.qa.qp_num).map(|w| w.timestamp_ns);
    let big = wcs.iter().find(|w| w.wr_id == 0).map(|w| w.timestamp_ns);
    assert!(first_small < big, "round-robin: a 16 B WRITE waited for a 1 MiB one on another QP");
    let mut off = 0;
    for d in &datas {
        assert!(p.b.read(&mr_b, off, d.len()) == *d);
        off += d.len();
    }
}

#[test]
fn unsignaled_wqes_hold_send_queue_slots() {
    let mut p = pair(1 << 16);
    let qa = p.a.qp(|a| a.caps.max_send_wr = 8);
    let qb = p.b.qp(|_| {});
    connect(&mut p.a, qa, &mut p.b, qb);
    let mr_b = p.b.mr;
    let data = pattern(32, 2);
    let unsig =
        |i: u64| SendWr { signaled: false, ..wr(i, write_op(mr_b.remote(i as usize * 32)), Payload::Inline(&data)) };
    let wrs: Vec<SendWr<'_>> = (0..8).map(unsig).collect();
    p.a.post(qa, &wrs);
    settle(&p.f);
    assert!(drain(&mut p.a.nic, p.a.cq).is_empty(), "unsignaled WRITEs produced CQEs");
    assert_eq!(p.b.read(&mr_b, 7 * 32, 32), data, "the unsignaled WRITEs executed");
    let err = p.a.nic.post_send(qa.handle, &[unsig(8)]).expect_err("the send queue should be full");
    assert_eq!(err, PostError { index: 0, error: RnicError::QueueFull { queue: "send", depth: 8 } });

    // Seven unsignaled and one signaled: the signaled CQE frees all eight.
    let mut p = pair(1 << 16);
    let qa = p.a.qp(|a| a.caps.max_send_wr = 8);
    let qb = p.b.qp(|_| {});
    connect(&mut p.a, qa, &mut p.b, qb);
    let mr_b = p.b.mr;
    let unsig =
        |i: u64| SendWr { signaled: false, ..wr(i, write_op(mr_b.remote(i as usize * 32)), Payload::Inline(&data)) };
    let mut wrs: Vec<SendWr<'_>> = (0..7).map(unsig).collect();
    wrs.push(wr(7, write_op(mr_b.remote(7 * 32)), Payload::Inline(&data)));
    p.a.post(qa, &wrs);
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (7, WcStatus::Success));
    settle(&p.f);
    assert!(drain(&mut p.a.nic, p.a.cq).is_empty());
    let wrs: Vec<SendWr<'_>> = (10..18).map(unsig).collect();
    p.a.post(qa, &wrs);
    let err = p.a.nic.post_send(qa.handle, &wrs[..2]).expect_err("full again");
    assert_eq!(err.index, 0);
}

#[test]
fn qp_state_machine_rejects_out_of_order_verbs() {
    let f = SimFabric::pair(3);
    let mut a = Host::new(&f, 0, 4096);
    let mut b = Host::new(&f, 1, 4096);
    let qa = a.qp(|_| {});
    let qb = b.qp(|_| {});
    let data = [1u8; 8];
    let w = [wr(1, write_op(b.mr.remote(0)), Payload::Inline(&data))];
    let state_err = |r: Result<(), PostError>| match r {
        Err(PostError { index: 0, error: RnicError::InvalidState { state, .. } }) => state,
        other => panic!("expected InvalidState, got {other:?}"),
    };
    assert_eq!(a.state(qa), QpState::Reset);
    assert_eq!(state_err(a.nic.post_send(qa.handle, &w)), QpState::Reset);
    let rsge = [a.mr.sge(0, 64)];
    assert!(matches!(
        a.nic.post_recv(qa.handle, &[RecvWr { wr_id: 1, sgl: &rsge }]),
        Err(PostError { error: RnicError::InvalidState { state: QpState::Reset, .. }, .. })
    ));
    let rts = QpTransition::Rts { retry_cnt: 7, rnr_retry: 7 };
    assert!(matches!(a.nic.modify_qp(qa.handle, rts), Err(RnicError::InvalidState { state: QpState::Reset, .. })));
    a.nic.modify_qp(qa.handle, QpTransition::Init { access: all_access() }).expect("init");
    assert_eq!(a.state(qa), QpState::Init);
    assert_eq!(state_err(a.nic.post_send(qa.handle, &w)), QpState::Init);
    a.nic.post_recv(qa.handle, &[RecvWr { wr_id: 1, sgl: &rsge }]).expect("recv in INIT");
    assert!(matches!(
        a.nic.modify_qp(qa.handle, QpTransition::Init { access: all_access() }),
        Err(RnicError::InvalidState { state: QpState::Init, .. })
    ));
    let eb = endpoint(&b.nic, qb.qp_num);
    a.nic.modify_qp(qa.handle, QpTransition::Rtr { remote: eb }).expect("rtr");
    assert_eq!(state_err(a.nic.post_send(qa.handle, &w)), QpState::Rtr);
    assert!(matches!(
        a.nic.modify_qp(qa.handle, QpTransition::Rts { retry_cnt: 8, rnr_retry: 0 }),
        Err(RnicError::InvalidArgument(_))
    ));
    a.nic.modify_qp(qa.handle, rts).expect("rts");
    assert_eq!(a.state(qa), QpState::Rts);
    // Moving to ERR flushes the posted RECV.
    a.nic.modify_qp(qa.handle, QpTransition::Err).expect("err");
    assert_eq!(a.state(qa), QpState::Err);
    let wcs = collect(&f, &mut a.nic, a.cq, 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status, wcs[0].opcode), (1, WcStatus::WrFlushErr, WcOpcode::Recv));
    // Unknown handles are refused.
    assert!(matches!(a.nic.qp_state(QpHandle(999)), Err(RnicError::InvalidHandle { kind: "qp", .. })));
    // RESET drops the QP back to the start of the state machine.
    a.nic.modify_qp(qa.handle, QpTransition::Reset).expect("reset");
    assert_eq!(a.state(qa), QpState::Reset);
}

/// A mixed workload on two QP pairs: WRITEs of several sizes (some in post
/// lists), SEND/RECV, READ; returns every completion on both hosts as
/// (host, wr_id, status, timestamp_ns), in poll order.
fn trace(profile: RnicProfile, seed: u64) -> Vec<(usize, u64, WcStatus, u64)> {
    let f = SimFabric::new(profile, 2, seed, ClockMode::Virtual);
    let mut p = pair_on(f, 4 << 20);
    let s = bystander(&mut p);
    let (mr_a, mr_b) = (p.a.mr, p.b.mr);
    p.a.write(&mr_a, 0, &pattern(2 << 20, 1));
    p.b.write(&mr_b, 2 << 20, &pattern(1 << 20, 2));
    let rs: Vec<[Sge; 1]> = (0..4).map(|i| [mr_b.sge((3 << 20) + i * 8192, 8192)]).collect();
    let recvs: Vec<RecvWr<'_>> = rs.iter().enumerate().map(|(i, s)| RecvWr { wr_id: 500 + i as u64, sgl: s }).collect();
    p.b.nic.post_recv(p.qb.handle, &recvs).expect("recv");
    let sizes = [16u32, 4096, 100_000, 1 << 20, 1, 65_536, 5000];
    let sges: Vec<[Sge; 1]> = sizes.iter().map(|&l| [mr_a.sge(0, l)]).collect();
    let mut expected = 0;
    for round in 0..3u64 {
        let wrs: Vec<SendWr<'_>> = sges
            .iter()
            .enumerate()
            .map(|(i, sge)| wr(round * 100 + i as u64, write_op(mr_b.remote(i * 4096)), Payload::Sges(sge)))
            .collect();
        p.a.post(p.qa, &wrs);
        let send_sge = [mr_a.sge(1000, 3000 + round as u32)];
        p.a.post(p.qa, &[wr(round * 100 + 50, WrOpcode::Send, Payload::Sges(&send_sge))]);
        let read_sge = [mr_a.sge(3 << 20, 70_000)];
        p.a.post(
            s.qa,
            &[wr(round * 100 + 60, WrOpcode::Read { remote: mr_b.remote(2 << 20) }, Payload::Sges(&read_sge))],
        );
        expected += sizes.len() + 3;
        p.f.advance_to_ns(p.f.now_ns() + 30_000);
    }
    let mut out = Vec::new();
    let mut steps = 0;
    while out.len() < expected {
        for (h, host) in [(0, &mut p.a), (1, &mut p.b)] {
            out.extend(drain(&mut host.nic, host.cq).into_iter().map(|w| (h, w.wr_id, w.status, w.timestamp_ns)));
        }
        if !p.f.step() {
            break;
        }
        steps += 1;
        assert!(steps < MAX_STEPS);
    }
    for (h, host) in [(0, &mut p.a), (1, &mut p.b)] {
        out.extend(drain(&mut host.nic, host.cq).into_iter().map(|w| (h, w.wr_id, w.status, w.timestamp_ns)));
    }
    assert_eq!(out.len(), expected, "{out:?}");
    assert!(out.iter().all(|c| c.2 == WcStatus::Success), "{out:?}");
    out
}

#[test]
fn same_seed_gives_identical_completions_and_timestamps() {
    let one = trace(RnicProfile::cx6_100g(), 1234);
    let two = trace(RnicProfile::cx6_100g(), 1234);
    assert_eq!(one, two);
    // Another seed draws other doorbell and receive jitter.
    let other_seed = trace(RnicProfile::cx6_100g(), 99);
    assert_ne!(one, other_seed, "the seed had no effect on the timestamps");
    let ids = |t: &[(usize, u64, WcStatus, u64)]| {
        let mut v: Vec<(usize, u64)> = t.iter().map(|c| (c.0, c.1)).collect();
        v.sort_unstable();
        v
    };
    assert_eq!(ids(&one), ids(&other_seed), "the same work completes under any seed");
    // Another profile times things differently.
    let slow = RnicProfile { propagation_ps: 2 * RnicProfile::cx6_100g().propagation_ps, ..RnicProfile::cx6_100g() };
    let other_profile = trace(slow, 1234);
    assert_ne!(one, other_profile);
    assert_eq!(ids(&one), ids(&other_profile));
}

#[test]
fn messages_of_one_qp_are_placed_in_post_order_despite_jitter() {
    // A 60 KB WRITE followed by an 8 B one to the same bytes: both leave in
    // one scheduling turn, the short one a few ns after the long one, and the
    // receive jitter must not let it overtake. Over many seeds the final
    // bytes are always the second WRITE's.
    for i in 0..64u64 {
        let seed = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 12345;
        let mut p = pair_on(SimFabric::pair(seed), 1 << 17);
        let (mr_a, mr_b) = (p.a.mr, p.b.mr);
        let (first, second) = (pattern(60_000, 1), pattern(8, 2));
        p.a.write(&mr_a, 0, &first);
        let sge = [mr_a.sge(0, 60_000)];
        p.a.post(
            p.qa,
            &[
                wr(1, write_op(mr_b.remote(0)), Payload::Sges(&sge)),
                wr(2, write_op(mr_b.remote(0)), Payload::Inline(&second)),
            ],
        );
        assert_ok(&collect(&p.f, &mut p.a.nic, p.a.cq, 2));
        assert_eq!(p.b.read(&mr_b, 0, 8), second, "seed {seed}: an earlier WRITE landed after a later one");
        assert!(p.b.read(&mr_b, 8, 59_992) == first[8..]);
    }
}

/// An RC responder takes requests only from the QP it is connected to: a
/// third QP that connects itself to host 1's QP (which is connected to
/// host 0's) gets no byte read or written, knowing the region's address
/// and key, and fails with the transport's retry error; the pair it aimed
/// at keeps working.
#[test]
fn a_responder_takes_nothing_from_a_qp_it_is_not_connected_to() {
    let mut p = pair(1 << 16);
    let secret = pattern(4096, 9);
    p.b.write(&p.b.mr.clone(), 0, &secret);
    // The intruder: a second QP on host 0, in its own PD, connected
    // one-sidedly to host 1's QP.
    let pd = p.a.nic.alloc_pd().expect("pd");
    let own = p.a.nic.reg_mr(pd, 1 << 16, all_access()).expect("mr");
    let qx = p.a.nic.create_qp(pd, QpInitAttr::new(p.a.cq, p.a.cq)).expect("qp");
    let eb = endpoint(&p.b.nic, p.qb.qp_num);
    perf_dataplane::rnic::connect::bring_up(&mut p.a.nic, qx.handle, eb, all_access()).expect("bring up");
    let remote = p.b.mr.remote(0);
    let (into, from) = ([own.sge(0, 4096)], [own.sge(4096, 4096)]);
    let wrs = [
        wr(1, WrOpcode::Read { remote }, Payload::Sges(&into)),
        wr(2, write_op(p.b.mr.remote(8192)), Payload::Sges(&from)),
    ];
    p.a.post(qx, &wrs);
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 2);
    assert_eq!(wcs[0].status, WcStatus::RetryExcErr, "{wcs:?}");
    assert_ne!(wcs[1].status, WcStatus::Success, "{wcs:?}");
    assert_ne!(p.a.read(&own, 0, 4096), secret, "the intruder READ the secret");
    assert_eq!(p.b.read(&p.b.mr.clone(), 0, 4096), secret);
    assert_eq!(p.b.read(&p.b.mr.clone(), 8192, 4096), vec![0u8; 4096], "nothing written");
    // The connected pair is untouched.
    let data = pattern(512, 3);
    let mr_a = p.a.mr;
    p.a.write(&mr_a, 0, &data);
    let sge = [mr_a.sge(0, 512)];
    p.a.post(p.qa, &[wr(3, write_op(p.b.mr.remote(16384)), Payload::Sges(&sge))]);
    let wcs = collect(&p.f, &mut p.a.nic, p.a.cq, 1);
    assert_ok(&wcs);
    assert_eq!(p.b.read(&p.b.mr.clone(), 16384, 512), data);
}

/// Keys are random, as a real NIC's: the same seed gives other keys in
/// another fabric, and no key is a region's index with a counter.
#[test]
fn region_keys_are_random_and_not_derived_from_their_index() {
    let keys = |f: &SimFabric| {
        let mut nic = f.nic(0);
        let pd = nic.alloc_pd().expect("pd");
        (0..32).map(|_| nic.reg_mr(pd, 4096, all_access()).expect("mr")).map(|m| m.rkey).collect::<Vec<u32>>()
    };
    let (a, b) = (keys(&SimFabric::pair(7)), keys(&SimFabric::pair(7)));
    assert_ne!(a, b, "the same keys in two fabrics of one seed");
    let mut sorted = a.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), a.len(), "keys repeat: {a:x?}");
    assert!(a.iter().filter(|&&k| k >> 8 < 64).count() <= 1, "keys look like (index << 8) | counter: {a:x?}");
}
