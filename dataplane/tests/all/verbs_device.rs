//! Tests of the verbs backend that need a real RDMA device (a ConnectX, a
//! Soft-RoCE `rxe` device, ...): loopback RDMA WRITE, READ and SEND on one
//! device, and the host-gated WAIT / SEND_ENABLE / managed-QP semantics.
//!
//! Without a usable device every test prints a loud `SKIPPED` message that
//! says what was looked for and what was found, and returns. Set
//! `PERF_VERBS_DEVICE=rxe0` to pick a device (then it must work).

#![cfg(feature = "verbs")]

use std::io::Write;
use std::time::{Duration, Instant};

use perf_dataplane::rnic::verbs::probe::VerbsDeviceReport;
use perf_dataplane::rnic::verbs::sysfs;
use perf_dataplane::rnic::verbs::{list_devices, VerbsRnic};
use perf_dataplane::rnic::*;

fn sysfs_line() -> String {
    let s = sysfs::scan();
    let devs: Vec<&str> = s.devices.iter().map(|d| d.name.as_str()).collect();
    format!(
        "{} {}; /dev/infiniband uverbs: [{}]",
        s.root.display(),
        if s.root_exists { format!("lists [{}]", devs.join(", ")) } else { "is missing".into() },
        s.uverbs.join(", ")
    )
}

fn describe(devs: &[VerbsDeviceReport]) -> String {
    devs.iter()
        .map(|d| format!("{} ({})", d.name, d.unusable.as_deref().unwrap_or("usable")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Opens the device under test, or prints why there is none and returns `None`.
fn open_device(test: &str) -> Option<VerbsRnic> {
    let wanted = std::env::var("PERF_VERBS_DEVICE").ok().filter(|s| !s.is_empty());
    let looked = match &wanted {
        Some(n) => format!("device {n:?} (from PERF_VERBS_DEVICE)"),
        None => "any libibverbs device with an ACTIVE port and a usable GID (PERF_VERBS_DEVICE unset)".into(),
    };
    let skip = |found: String| {
        // Straight to the process's stderr, not through `eprintln!`, which
        // the test harness captures (and hides) for a passing test: a
        // skipped device test must be seen in a plain `cargo test`.
        let _ = writeln!(
            std::io::stderr().lock(),
            "\n======== SKIPPED {test}: no usable RDMA device ========\n  looked for: {looked}\n  found:      {found}\n  to run it:  modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0 (see docs/hardware.md)\n========================================================\n"
        );
        None
    };
    let devs = match list_devices() {
        Ok(d) => d,
        Err(RnicError::Device(m)) => return skip(format!("{m}; {}", sysfs_line())),
        Err(e) => return skip(format!("{e}; {}", sysfs_line())),
    };
    let pick = match &wanted {
        Some(n) => devs.iter().find(|d| &d.name == n),
        None => devs.iter().find(|d| d.unusable.is_none()),
    };
    let Some(dev) = pick else {
        return skip(if devs.is_empty() {
            format!("ibv_get_device_list returned 0 devices; {}", sysfs_line())
        } else {
            format!("libibverbs lists {}", describe(&devs))
        });
    };
    if let Some(why) = &dev.unusable {
        panic!("{test}: requested device {} is not usable: {why}", dev.name);
    }
    match VerbsRnic::open(&dev.name) {
        Ok(nic) => Some(nic),
        Err(e) => panic!("{test}: {} is listed as usable but does not open: {e}", dev.name),
    }
}

const ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_WRITE).union(AccessFlags::REMOTE_READ);

struct Loopback {
    nic: VerbsRnic,
    pd: PdHandle,
    cq: CqHandle,
    a: Qp,
    b: Qp,
    mr_a: Mr,
    mr_b: Mr,
}

/// Two RC QPs on one device connected to each other, one CQ, two regions.
fn loopback(mut nic: VerbsRnic, attr_a: impl Fn(&mut QpInitAttr)) -> Loopback {
    let pd = nic.alloc_pd().expect("alloc_pd");
    let cq = nic.create_cq(CqAttr { depth: 256, ignore_overrun: false }).expect("create_cq");
    let mr_a = nic.reg_mr(pd, 64 * 1024, ACCESS).expect("reg_mr a");
    let mr_b = nic.reg_mr(pd, 64 * 1024, ACCESS).expect("reg_mr b");
    let max_inline = nic.device_info().caps.max_inline_data;
    assert!(max_inline >= 64, "the device accepts inline payloads (probed {max_inline} B)");
    let attr = |f: &dyn Fn(&mut QpInitAttr)| {
        let mut a = QpInitAttr::new(cq, cq);
        a.caps.max_inline_data = a.caps.max_inline_data.min(max_inline);
        f(&mut a);
        a
    };
    let a = nic.create_qp(pd, attr(&attr_a)).expect("create_qp a");
    let b = nic.create_qp(pd, attr(&|_| {})).expect("create_qp b");
    let ea = connect::endpoint(&nic, a.qp_num);
    let eb = connect::endpoint(&nic, b.qp_num);
    connect::bring_up(&mut nic, a.handle, eb, ACCESS).expect("bring up a");
    connect::bring_up(&mut nic, b.handle, ea, ACCESS).expect("bring up b");
    assert_eq!(nic.qp_state(a.handle), Ok(QpState::Rts));
    assert_eq!(nic.qp_state(b.handle), Ok(QpState::Rts));
    Loopback { nic, pd, cq, a, b, mr_a, mr_b }
}

impl Loopback {
    /// Posts one signaled WQE on QP a with the gathered payload `sge`.
    fn post_a(&mut self, wr_id: u64, opcode: WrOpcode, sge: &[Sge], what: &str) {
        let wr = SendWr { wr_id, opcode, payload: Payload::Sges(sge), signaled: true };
        self.nic.post_send(self.a.handle, &[wr]).expect(what);
    }

    /// `len` bytes of `mr` from `off`.
    fn read(&self, mr: &Mr, off: usize, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        self.nic.read_mr(mr.handle, off, &mut out).expect("read_mr");
        out
    }

    /// A cross-channel QP on `cq` (the device's inline limit applied),
    /// connected to itself.
    fn self_connected_cross_channel(&mut self, cq: CqHandle, what: &str) -> Qp {
        let max_inline = self.nic.device_info().caps.max_inline_data;
        let mut attr = QpInitAttr::new(cq, cq);
        attr.cross_channel = true;
        attr.caps.max_inline_data = attr.caps.max_inline_data.min(max_inline);
        let qp = self.nic.create_qp(self.pd, attr).expect(what);
        let me = connect::endpoint(&self.nic, qp.qp_num);
        connect::bring_up(&mut self.nic, qp.handle, me, ACCESS).expect(what);
        qp
    }
}

/// Polls until `n` completions arrived or 5 s passed.
fn poll_n(nic: &mut VerbsRnic, cq: CqHandle, n: usize) -> Vec<Wc> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    let mut buf = [Wc::EMPTY; 16];
    while got.len() < n && Instant::now() < deadline {
        let k = nic.poll_cq(cq, &mut buf).expect("poll_cq");
        got.extend_from_slice(&buf[..k]);
    }
    assert_eq!(got.len(), n, "completions within 5 s: {got:?}; last device error: {:?}", nic.last_device_error());
    got
}

/// Polls for `d` and asserts that nothing completes.
fn poll_none(nic: &mut VerbsRnic, cq: CqHandle, d: Duration) {
    let deadline = Instant::now() + d;
    let mut buf = [Wc::EMPTY; 4];
    while Instant::now() < deadline {
        let k = nic.poll_cq(cq, &mut buf).expect("poll_cq");
        assert_eq!(k, 0, "unexpected completion {:?}", &buf[..k]);
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn loopback_write_read_send() {
    let Some(nic) = open_device("loopback_write_read_send") else { return };
    let mut l = loopback(nic, |_| {});
    let info = l.nic.device_info();
    assert!(!info.caps.cross_channel && !info.caps.managed_send, "upstream rdma-core runs no cross-channel verbs");

    // RDMA WRITE a -> b.
    let data = pattern(8192, 1);
    l.nic.write_mr(l.mr_a.handle, 0, &data).expect("write_mr");
    let sge = [l.mr_a.sge(0, data.len() as u32)];
    l.post_a(1, WrOpcode::Write { remote: l.mr_b.remote(0) }, &sge, "post WRITE");
    let wc = poll_n(&mut l.nic, l.cq, 1);
    assert_eq!((wc[0].wr_id, wc[0].status, wc[0].opcode), (1, WcStatus::Success, WcOpcode::Write));
    assert_eq!(wc[0].qp_num, l.a.qp_num);
    assert_eq!(l.read(&l.mr_b, 0, data.len()), data, "WRITE landed in b");

    // RDMA READ b -> a (at offset 16 KiB).
    let data = pattern(4096, 7);
    l.nic.write_mr(l.mr_b.handle, 32 * 1024, &data).expect("write_mr");
    let sge = [l.mr_a.sge(16 * 1024, data.len() as u32)];
    l.post_a(2, WrOpcode::Read { remote: l.mr_b.remote(32 * 1024) }, &sge, "post READ");
    let wc = poll_n(&mut l.nic, l.cq, 1);
    assert_eq!((wc[0].wr_id, wc[0].status, wc[0].opcode), (2, WcStatus::Success, WcOpcode::Read));
    assert_eq!(l.read(&l.mr_a, 16 * 1024, data.len()), data, "READ brought b's bytes");

    // Inline SEND with immediate into a posted RECV, in a post list of two.
    let recv_sge = [l.mr_b.sge(48 * 1024, 256)];
    l.nic
        .post_recv(l.b.handle, &[RecvWr { wr_id: 30, sgl: &recv_sge }, RecvWr { wr_id: 31, sgl: &recv_sge }])
        .expect("post_recv");
    let msg = b"hello from a";
    let list = [
        SendWr {
            wr_id: 3,
            opcode: WrOpcode::SendImm { imm: 0xfeed_f00d },
            payload: Payload::Inline(msg),
            signaled: false,
        },
        SendWr { wr_id: 4, opcode: WrOpcode::Send, payload: Payload::Inline(msg), signaled: true },
    ];
    l.nic.post_send(l.a.handle, &list).expect("post SEND list");
    let wcs = poll_n(&mut l.nic, l.cq, 3);
    let recv: Vec<&Wc> = wcs.iter().filter(|w| w.opcode == WcOpcode::Recv).collect();
    assert_eq!(recv.len(), 2, "{wcs:?}");
    assert_eq!((recv[0].wr_id, recv[0].byte_len, recv[0].imm), (30, msg.len() as u32, Some(0xfeed_f00d)));
    assert_eq!((recv[1].wr_id, recv[1].imm), (31, None));
    let send: Vec<&Wc> = wcs.iter().filter(|w| w.opcode == WcOpcode::Send).collect();
    assert_eq!(send.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![4], "only the signaled SEND reports");
    assert_eq!(&l.read(&l.mr_b, 48 * 1024, msg.len()), msg);

    // A WRITE with a bad rkey fails with a remote access error.
    let sge = [l.mr_a.sge(0, 64)];
    let bad = RemoteAddr { addr: l.mr_b.addr, rkey: l.mr_b.rkey ^ 0x00ff_ff00 };
    l.post_a(5, WrOpcode::Write { remote: bad }, &sge, "post bad WRITE");
    let wc = poll_n(&mut l.nic, l.cq, 1);
    assert_eq!((wc[0].wr_id, wc[0].status, wc[0].opcode), (5, WcStatus::RemAccessErr, WcOpcode::Write));
    assert_eq!(l.nic.qp_state(l.a.handle), Ok(QpState::Err));
}

#[test]
fn host_gated_managed_qp_and_wait() {
    let Some(nic) = open_device("host_gated_managed_qp_and_wait") else { return };
    // a: managed (holds its WQEs); b: the peer, cross-channel, releases a.
    let mut l = loopback(nic, |attr| {
        attr.managed_send = true;
        attr.cross_channel = true;
    });
    let ctl = l.self_connected_cross_channel(l.cq, "control QP to itself");

    let data = pattern(1024, 3);
    l.nic.write_mr(l.mr_a.handle, 0, &data).expect("write_mr");
    let sge = [l.mr_a.sge(0, data.len() as u32)];
    l.post_a(10, WrOpcode::Write { remote: l.mr_b.remote(0) }, &sge, "post to managed QP");
    poll_none(&mut l.nic, l.cq, Duration::from_millis(100));
    let out = l.read(&l.mr_b, 0, data.len());
    assert!(out.iter().all(|&b| b == 0), "a managed QP's WRITE must not run before it is enabled");

    let enable = SendWr {
        wr_id: 11,
        opcode: WrOpcode::SendEnable { qp: l.a.handle, count: 1 },
        payload: Payload::None,
        signaled: true,
    };
    l.nic.post_send(ctl.handle, &[enable]).expect("SEND_ENABLE");
    let wcs = poll_n(&mut l.nic, l.cq, 2);
    let ids: Vec<(u64, WcOpcode)> = wcs.iter().map(|w| (w.wr_id, w.opcode)).collect();
    assert!(ids.contains(&(11, WcOpcode::SendEnable)) && ids.contains(&(10, WcOpcode::Write)), "{ids:?}");
    assert_eq!(l.read(&l.mr_b, 0, data.len()), data, "the enabled WRITE ran on the device");

    // WAIT: the control QP holds a WRITE until a second CQ has 1 completion.
    let watched = l.nic.create_cq(CqAttr { depth: 4, ignore_overrun: true }).expect("watched CQ");
    let bumper = l.self_connected_cross_channel(watched, "bumper to itself");
    let data = pattern(512, 9);
    l.nic.write_mr(l.mr_a.handle, 4096, &data).expect("write_mr");
    let sge = [l.mr_a.sge(4096, data.len() as u32)];
    let list = [
        SendWr { wr_id: 20, opcode: WrOpcode::Wait { cq: watched, count: 1 }, payload: Payload::None, signaled: false },
        SendWr {
            wr_id: 21,
            opcode: WrOpcode::Write { remote: l.mr_b.remote(4096) },
            payload: Payload::Sges(&sge),
            signaled: true,
        },
    ];
    l.nic.post_send(ctl.handle, &list).expect("WAIT + WRITE");
    poll_none(&mut l.nic, l.cq, Duration::from_millis(100));
    let nop = SendWr { wr_id: 30, opcode: WrOpcode::Nop, payload: Payload::None, signaled: true };
    l.nic.post_send(bumper.handle, &[nop]).expect("NOP");
    let wcs = poll_n(&mut l.nic, l.cq, 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (21, WcStatus::Success));
    assert_eq!(l.read(&l.mr_b, 4096, data.len()), data);
    assert!(l.nic.gate_counters().ctrl_executed >= 3);
}

/// ERR after unsignaled work that completed silently: the gate's drain
/// marker retires it, so a post to the failed QP still completes (with a
/// flush error) instead of waiting forever behind WQEs that will never
/// produce a CQE. Also: an application CQ deeper than `max_cqe` (the
/// dataplane's 2^20) is accepted, the device ring growing with its QPs,
/// and the endpoint carries the port MTU and READ depth for the peer.
#[test]
fn err_drain_after_silent_completions_and_cq_sizing() {
    let Some(mut nic) = open_device("err_drain_after_silent_completions_and_cq_sizing") else { return };
    let big = nic.create_cq(CqAttr { depth: 1 << 20, ignore_overrun: false }).expect("a host-side CQ depth");
    let zw = nic.create_cq(CqAttr { depth: 1, ignore_overrun: true }).expect("the zero-weight WRs' CQ");
    let ignores = nic.device_cq_ignores_overrun(zw).expect("cq");
    eprintln!("{}: ignore-overrun CQ from ibv_create_cq_ex: {ignores}", nic.name());
    nic.destroy_cq(zw).expect("destroy");
    nic.destroy_cq(big).expect("destroy");
    let mut l = loopback(nic, |_| {});
    let ep = connect::endpoint(&l.nic, l.a.qp_num);
    assert!(ep.mtu >= 256 && ep.max_rd_atomic >= 1, "{ep:?}");
    let remote = l.mr_b.remote(0);
    let sge = [l.mr_a.sge(0, 64)];
    let write =
        |wr_id, signaled| SendWr { wr_id, opcode: WrOpcode::Write { remote }, payload: Payload::Sges(&sge), signaled };
    let silent: Vec<SendWr<'_>> = (0..8).map(|i| write(i, false)).collect();
    l.nic.post_send(l.a.handle, &silent).expect("unsignaled WRITEs");
    // Let them complete in the device: no CQE will ever say so.
    std::thread::sleep(Duration::from_millis(50));
    poll_none(&mut l.nic, l.cq, Duration::from_millis(10));
    l.nic.modify_qp(l.a.handle, QpTransition::Err).expect("to ERR");
    l.nic.post_send(l.a.handle, &[write(100, true)]).expect("a post to a QP in ERR is accepted");
    let got = poll_n(&mut l.nic, l.cq, 1);
    assert_eq!((got[0].wr_id, got[0].status), (100, WcStatus::WrFlushErr), "{got:?}");
    assert!(l.nic.gate_counters().markers >= 1, "the drain marker was posted");
}

#[test]
fn opening_a_missing_device_fails_with_a_clear_error() {
    let e = match VerbsRnic::open("perf-rs-missing-device") {
        Ok(_) => panic!("perf-rs-missing-device exists"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("perf-rs-missing-device") && (e.contains("not found") || e.contains("ibv_get_device_list")),
        "{e}"
    );
    eprintln!("VerbsRnic::open of a missing device says: {e}");
}
