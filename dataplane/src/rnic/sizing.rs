//! Queue sizing against a real device's limits, as libibverbs providers
//! compute them: how many CQEs the device completion queue behind a CQ
//! must hold for the QPs attached to it, how deep an RC send queue may be
//! on mlx5 (which counts 64 B WQE building blocks, not WQEs), and the
//! dataplane's queue depths for a number of QPs on a given device.
//!
//! Pure arithmetic, compiled and tested without the `verbs` feature; the
//! verbs backend enforces it at `create_qp`, and the live runner sizes the
//! dataplane with it before creating anything.

use super::{DeviceInfo, QpCaps, RnicError};

/// Send-queue slots the verbs backend asks for beyond the application's
/// depth: one for a completion marker (a zero-length WRITE the host gate
/// posts to learn when unsignaled work is done) and one for the drain
/// marker of the ERR path (the `ib_drain_sq` pattern).
pub const MARKER_SLOTS: u32 = 2;

/// Size of one mlx5 send-queue building block (`MLX5_SEND_WQE_BB`).
pub const MLX5_SEND_WQE_BB: u32 = 64;
/// Bytes of an RC send WQE before its data segments, as
/// `providers/mlx5/qp.c:sq_overhead()` computes it for the legacy post
/// path: the largest of the RDMA, atomic and memory-window layouts, the
/// latter being control (16) + UMR control (48) + mkey context (64) + one
/// 64 B KLM block = 192 B.
pub const MLX5_RC_SQ_OVERHEAD: u32 = 192;
/// `struct mlx5_wqe_inl_data_seg` header bytes.
pub const MLX5_INLINE_SEG: u32 = 4;
/// `struct mlx5_wqe_data_seg` bytes (one SGE).
pub const MLX5_DATA_SEG: u32 = 16;
/// The largest send WQE ConnectX-4 and later accept
/// (`max_sq_desc_sz`, from the device's `max_wqe_sz_sq` capability).
pub const MLX5_MAX_SQ_DESC: u32 = 512;

/// How a device counts its send queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqModel {
    /// In work requests (`max_send_wr <= max_qp_wr`): rxe, siw, most providers.
    Wqes,
    /// In 64 B building blocks (mlx5): a WQE takes as many as its size
    /// needs, the ring is rounded up to a power of two, and the ring's
    /// block count must not exceed `max_qp_wr`.
    Mlx5,
}

/// The `vendor_id` Mellanox / NVIDIA devices report (their IEEE OUI).
pub const MELLANOX_OUI: u32 = 0x02c9;

impl SqModel {
    /// The model of a device by its `(vendor_id, vendor_part_id)`
    /// ([`DeviceCaps::vendor`](super::DeviceCaps::vendor)), and why: the
    /// device ids that rdma-core's mlx5 provider drives (Connect-IB and
    /// ConnectX-4 on, PCI ids 0x1011-0x1025, and the BlueField DPUs,
    /// 0xa2d2-0xa2df) count blocks; anything else counts WQEs. The name
    /// is not asked: udev renames mlx5 devices (`rocep…`, `ibp…`).
    pub fn of_vendor(vendor: (u32, u32)) -> (SqModel, String) {
        let (id, part) = vendor;
        let mlx5 = id == MELLANOX_OUI && (matches!(part, 0x1011..=0x1025) || matches!(part, 0xa2d2..=0xa2df));
        if mlx5 {
            (SqModel::Mlx5, format!("vendor {id:#06x} part {part} ({part:#06x}) is an mlx5 device: 64 B blocks"))
        } else {
            (SqModel::Wqes, format!("vendor {id:#06x} part {part} ({part:#06x}) is not an mlx5 device: WQEs"))
        }
    }

    /// The model of a device ([`SqModel::of_vendor`]).
    pub fn of(caps: &super::DeviceCaps) -> SqModel {
        Self::of_vendor(caps.vendor).0
    }
}

fn align(v: u32, to: u32) -> u32 {
    v.div_ceil(to) * to
}

/// Bytes one send WQE of a QP with these capabilities occupies on mlx5
/// (`mlx5_calc_send_wqe`: the larger of the gather and the inline layout,
/// rounded up to a building block). The default [`QpCaps`] (4 SGEs, 220 B
/// inline) give 448 B, seven blocks.
pub fn mlx5_send_wqe_bytes(caps: &QpCaps) -> u32 {
    let gather = MLX5_RC_SQ_OVERHEAD + caps.max_send_sge.max(1) * MLX5_DATA_SEG;
    let inline = if caps.max_inline_data > 0 {
        MLX5_RC_SQ_OVERHEAD + align(MLX5_INLINE_SEG + caps.max_inline_data, 16)
    } else {
        0
    };
    align(gather.max(inline), MLX5_SEND_WQE_BB)
}

fn pow2_floor(v: u64) -> u64 {
    if v == 0 {
        0
    } else {
        1 << (63 - v.leading_zeros())
    }
}

/// The deepest send queue (in WQEs, markers included) a device with
/// `max_qp_wr` accepts for a QP with these capabilities. On mlx5 the ring
/// of `n` WQEs takes `roundup_pow2(n * wqe_bytes) / 64` blocks, which must
/// not exceed `max_qp_wr`; 0 if one WQE is already too large.
pub fn max_send_wr(model: SqModel, max_qp_wr: u32, caps: &QpCaps) -> u32 {
    match model {
        SqModel::Wqes => max_qp_wr,
        SqModel::Mlx5 => {
            let wqe = mlx5_send_wqe_bytes(caps);
            if wqe > MLX5_MAX_SQ_DESC {
                return 0;
            }
            let ring = pow2_floor(max_qp_wr as u64 * MLX5_SEND_WQE_BB as u64);
            (ring / wqe as u64).min(u32::MAX as u64) as u32
        }
    }
}

/// Checks that a send queue of `depth` WQEs (markers included) fits the
/// device; the error names the limit and what to change.
pub fn check_send_depth(
    device: &str,
    model: SqModel,
    max_qp_wr: u32,
    caps: &QpCaps,
    depth: u32,
) -> Result<(), RnicError> {
    let most = max_send_wr(model, max_qp_wr, caps);
    if depth <= most {
        return Ok(());
    }
    Err(RnicError::InvalidArgument(match model {
        SqModel::Wqes => format!("send queue of {depth} WQEs exceeds {device}'s max_qp_wr {max_qp_wr}"),
        SqModel::Mlx5 => format!(
            "send queue of {depth} WQEs does not fit {device}: with {} SGEs and {} B inline one WQE takes {} B, \
             and a ring of at most {max_qp_wr} x {MLX5_SEND_WQE_BB} B blocks holds {most} of them \
             (fewer SGEs or less inline data make WQEs smaller)",
            caps.max_send_sge,
            caps.max_inline_data,
            mlx5_send_wqe_bytes(caps)
        ),
    }))
}

/// The device CQEs a completion queue must hold once a queue of `adding`
/// more entries is attached to it (`attached` entries already are): every
/// outstanding WQE of an attached queue can produce one CQE, and the
/// backend frees a WQE's slot only after reaping its CQE, so a ring of
/// that size never overruns. Fails when the device's `max_cqe` is smaller.
pub fn cq_ring_need(cq: u32, attached: u64, adding: u64, max_cqe: u32) -> Result<u32, RnicError> {
    let need = attached + adding;
    if need > max_cqe as u64 {
        return Err(RnicError::InvalidArgument(format!(
            "CQ {cq} would need {need} device CQEs for the queues attached to it ({attached} + {adding} entries), \
             more than the device's max_cqe {max_cqe}: use fewer or shallower QPs per CQ \
             (the live runner sizes the dataplane with rnic::sizing::fit_queue_depths)"
        )));
    }
    Ok(need as u32)
}

/// Queue depths for `qps` data QPs sharing one send and one receive CQ on
/// `device`: at most `sq` / `rq` (the caller's wish), and small enough
/// that every QP's send queue with its [`MARKER_SLOTS`] fits the device
/// (mlx5 block count included) and that all the QPs' queues fit
/// `max_cqe` on their shared CQs. Powers of two, at least 16 (a device
/// that cannot hold that fails later, at `create_qp`, with the reason).
pub fn fit_queue_depths(device: &DeviceInfo, qps: usize, sq: u32, rq: u32) -> (u32, u32) {
    let caps = &device.caps;
    let n = qps.max(1) as u64;
    let model = SqModel::of(&device.caps);
    let per_qp_sq = max_send_wr(model, caps.max_qp_wr, &QpCaps::default()) as u64;
    let sq_room = per_qp_sq.min(caps.max_cqe as u64 / n).saturating_sub(MARKER_SLOTS as u64);
    let rq_room = (caps.max_qp_wr as u64).min(caps.max_cqe as u64 / n);
    let fit = |want: u32, room: u64| {
        if room >= want as u64 {
            want
        } else {
            pow2_floor(room).max(16) as u32
        }
    };
    (fit(sq, sq_room), fit(rq, rq_room))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rnic::DeviceCaps;

    /// A device; an `mlx5_*` name has a ConnectX-6's ids.
    fn device(name: &str, max_qp_wr: u32, max_cqe: u32) -> DeviceInfo {
        DeviceInfo {
            name: name.into(),
            caps: DeviceCaps {
                cross_channel: false,
                managed_send: false,
                max_qp_wr,
                max_cqe,
                max_inline_data: 220,
                traffic_classes: 8,
                max_rd_atomic: 16,
                vendor: if name.starts_with("mlx5") { (MELLANOX_OUI, 0x101b) } else { (0, 0) },
            },
        }
    }

    #[test]
    fn mlx5_wqe_size_of_the_default_caps_is_seven_blocks() {
        assert_eq!(mlx5_send_wqe_bytes(&QpCaps::default()), 448);
        let small = QpCaps { max_send_sge: 1, max_inline_data: 0, ..QpCaps::default() };
        assert_eq!(mlx5_send_wqe_bytes(&small), 256, "192 B overhead + one 16 B SGE, rounded to a block");
        let big = QpCaps { max_inline_data: 512, ..QpCaps::default() };
        assert!(mlx5_send_wqe_bytes(&big) > MLX5_MAX_SQ_DESC);
        assert_eq!(max_send_wr(SqModel::Mlx5, 32768, &big), 0);
    }

    #[test]
    fn mlx5_send_queue_limit_counts_blocks() {
        let caps = QpCaps::default();
        // 32768 blocks of 64 B = 2 MiB; 448 B WQEs: 4681 of them.
        assert_eq!(max_send_wr(SqModel::Mlx5, 32768, &caps), 4681);
        // The old request (2 x depth for markers) failed above 2340.
        assert!(check_send_depth("mlx5_0", SqModel::Mlx5, 32768, &caps, 2 * 2341).is_err());
        assert!(check_send_depth("mlx5_0", SqModel::Mlx5, 32768, &caps, 2 * 2340).is_ok());
        // One depth of 4096 plus the marker slots fits; 4680 + 2 does not.
        assert!(check_send_depth("mlx5_0", SqModel::Mlx5, 32768, &caps, 4096 + MARKER_SLOTS).is_ok());
        let e = check_send_depth("mlx5_0", SqModel::Mlx5, 32768, &caps, 4680 + MARKER_SLOTS).expect_err("too deep");
        assert!(e.to_string().contains("448 B") && e.to_string().contains("4681"), "{e}");
        // Other providers count WQEs.
        assert_eq!(max_send_wr(SqModel::Wqes, 16384, &caps), 16384);
        assert!(check_send_depth("rxe0", SqModel::Wqes, 16384, &caps, 16385).is_err());
        // ConnectX-6 (0x101b), BlueField-2 (0xa2d6), whatever udev named them.
        assert_eq!(SqModel::of_vendor((MELLANOX_OUI, 0x101b)).0, SqModel::Mlx5);
        assert_eq!(SqModel::of_vendor((MELLANOX_OUI, 0xa2d6)).0, SqModel::Mlx5);
        // ConnectX-3 (mlx4, 0x1003), rxe (vendor 0), the simulator.
        assert_eq!(SqModel::of_vendor((MELLANOX_OUI, 0x1003)).0, SqModel::Wqes);
        assert_eq!(SqModel::of_vendor((0, 0)).0, SqModel::Wqes);
        let (_, why) = SqModel::of_vendor((MELLANOX_OUI, 0x101b));
        assert!(why.contains("0x02c9") && why.contains("4123") && why.contains("mlx5"), "{why}");
    }

    #[test]
    fn cq_ring_grows_with_attached_queues_up_to_max_cqe() {
        assert_eq!(cq_ring_need(0, 0, 2050, 32767), Ok(2050));
        assert_eq!(cq_ring_need(0, 30000, 2767, 32767), Ok(32767));
        let e = cq_ring_need(3, 30000, 2768, 32767).expect_err("past max_cqe");
        assert!(e.to_string().contains("max_cqe 32767") && e.to_string().contains("CQ 3"), "{e}");
    }

    #[test]
    fn dataplane_depths_fit_rxe_and_mlx5() {
        // rxe: max_cqe 2^15 - 1, max_qp_wr 2^14 - 1 (rdma-core's rxe defaults).
        let rxe = device("rxe0", 16383, 32767);
        assert_eq!(fit_queue_depths(&rxe, 4, 2048, 1024), (2048, 1024), "a few QPs keep the defaults");
        let (sq, rq) = fit_queue_depths(&rxe, 64, 2048, 1024);
        assert_eq!((sq, rq), (256, 256));
        assert!(64 * (sq + MARKER_SLOTS) as u64 <= 32767 && 64 * rq as u64 <= 32767);
        // mlx5: the send queue is limited by blocks, not by max_qp_wr.
        let cx6 = device("mlx5_0", 32768, 4_194_303);
        assert_eq!(fit_queue_depths(&cx6, 1, 8192, 1024), (4096, 1024));
        assert!(check_send_depth("mlx5_0", SqModel::Mlx5, 32768, &QpCaps::default(), 4096 + MARKER_SLOTS).is_ok());
        // Never below 16.
        assert_eq!(fit_queue_depths(&rxe, 100_000, 2048, 1024), (16, 16));
    }
}
