//! The zero-weight WR a policy asks for (ABI 1.6,
//! `Policy::zero_weight_op`), in virtual time on the simulated NIC: both a
//! NOP and a WAIT take a turn of the NIC's send scheduler without moving
//! data, but the NIC processes nothing of a QP past a WAIT before the WAIT
//! executes, so with WAITs a QP's next chunk is fetched only after its
//! turn, and with NOPs while it waits for it.

use crate::common::*;

/// 256 KiB WRITEs kept four deep on one QP under `policy`, every
/// completion checked: the payload goodput, Gb/s, from 50 to 250 us.
fn one_qp_stream_gbps(policy: &'static str) -> f64 {
    const MSG: u32 = 256 * 1024;
    const DEPTH: u64 = 4;
    let (start, end) = (50_000u64, 250_000u64);
    let mut rig = Rig::new(7, Pol::Named(policy), DataplaneConfig::default());
    let t = rig.tenant("bulk", 1, MSG as usize);
    rig.write_local(t, 0, &pattern(MSG as usize, 3));
    let mut ledger = Ledger::default();
    let mut posted = 0u64;
    let (mut at_start, mut at_end) = (None, None);
    rig.drive(end + 10_000_000, |r| {
        let got = r.tenants[t].got.len() as u64;
        while posted < got + DEPTH {
            let wr = r.wr(t, posted, 0, false, 0, MSG);
            ledger.record(&wr);
            post(&r.tenants[t].h, wr);
            posted += 1;
        }
        if r.now_ns() >= start && at_start.is_none() {
            at_start = Some((r.now_ns(), got));
        }
        if r.now_ns() >= end {
            at_end = Some((r.now_ns(), got));
            return None;
        }
        Some(if r.now_ns() < start { start } else { end })
    });
    rig.idle_for(1_000_000);
    ledger.check(&rig.tenants[t].got, true).expect("every WRITE completes once, in order");
    assert_eq!(rig.read_peer(t, 0, MSG as usize), pattern(MSG as usize, 3), "the bytes arrived");
    let ((t0, n0), (t1, n1)) = (at_start.expect("ran past the start"), at_end.expect("ran to the end"));
    (n1 - n0) as f64 * MSG as f64 * 8.0 / (t1 - t0) as f64
}

#[test]
fn nop_zero_weight_wrs_let_one_qp_stream_small_chunks_at_line_rate() {
    let nop = one_qp_stream_gbps("fairshare:chunk_bytes=2048,zero_weight_op=nop");
    let wait = one_qp_stream_gbps("fairshare:chunk_bytes=2048,zero_weight_op=wait");
    // 2 KiB is 164 ns of wire; a chunk after a WAIT waits for its WQE's
    // processing and payload fetch (0.53 us on cx6-100g) after the WAIT's turn.
    assert!(nop > 85.0, "2 KiB chunks with NOPs on one QP: {nop:.1} Gb/s");
    assert!(wait < 0.6 * nop, "with WAITs: {wait:.1} Gb/s against {nop:.1} with NOPs");
}
