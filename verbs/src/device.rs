//! The simulated NIC as verbs describes it: one device, `perfsim0`, with
//! one active port and ConnectX-6-class limits. The vendor is left
//! unknown on purpose: programs that recognise a vendor go to its own
//! provider interfaces (perftest posts through `mlx5dv` and `ibv_wr_*` for
//! a ConnectX-6), which a simulated NIC does not have.

use crate::abi::{self as v};

/// The device's name, as `ibv_get_device_name` and `ibv_devinfo` show it.
pub const NAME: &str = "perfsim0";
/// Scatter-gather entries per WR (gathered into a staging slot).
pub const MAX_SGE: u32 = 4;
/// The port's LID (an InfiniBand link layer: programs without `-g` need one).
pub const LID: u16 = 1;
/// The node GUID (host order).
pub const NODE_GUID: u64 = 0x0050_5e00_0000_0001;

/// Copies `s` into a C string field.
fn c_str(dst: &mut [libc::c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as libc::c_char;
    }
    dst[n] = 0;
}

/// Fills an `ibv_device`'s names and types.
pub fn fill_device(d: &mut v::ibv_device) {
    d.node_type = v::IBV_NODE_CA;
    d.transport_type = v::IBV_TRANSPORT_IB;
    c_str(&mut d.name, NAME);
    c_str(&mut d.dev_name, "uverbs-perfsim0");
    c_str(&mut d.dev_path, "/sys/class/infiniband_verbs/uverbs-perfsim0");
    c_str(&mut d.ibdev_path, "/sys/class/infiniband/perfsim0");
}

/// Fills `ibv_query_device`'s answer.
pub fn fill_device_attr(a: &mut v::ibv_device_attr) {
    c_str(&mut a.fw_ver, "perf-rs sim 1.0");
    a.node_guid = NODE_GUID.to_be();
    a.sys_image_guid = NODE_GUID.to_be();
    a.max_mr_size = 1 << 34;
    a.page_size_cap = 0xffff_f000;
    a.vendor_id = 0;
    a.vendor_part_id = 0;
    a.hw_ver = 0;
    a.max_qp = 1 << 17;
    a.max_qp_wr = 1 << 15;
    a.device_cap_flags = 0;
    a.max_sge = MAX_SGE as i32;
    a.max_sge_rd = 1;
    a.max_cq = 1 << 16;
    a.max_cqe = 1 << 22;
    a.max_mr = 1 << 16;
    a.max_pd = 1 << 16;
    a.max_qp_rd_atom = 16;
    a.max_res_rd_atom = 1 << 20;
    a.max_qp_init_rd_atom = 16;
    a.atomic_cap = v::IBV_ATOMIC_NONE;
    a.max_srq = 0;
    a.max_pkeys = 1;
    a.local_ca_ack_delay = 16;
    a.phys_port_cnt = 1;
}

/// Fills `ibv_query_port`'s answer for port 1: active, 4X EDR (100 Gb/s,
/// the default `cx6-100g` profile's link), MTU 4096, InfiniBand link layer.
pub fn fill_port_attr(p: &mut v::ibv_port_attr) {
    p.state = v::IBV_PORT_ACTIVE;
    p.max_mtu = v::IBV_MTU_4096;
    p.active_mtu = v::IBV_MTU_4096;
    p.gid_tbl_len = 1;
    p.port_cap_flags = 0;
    p.max_msg_sz = 1 << 31;
    p.pkey_tbl_len = 1;
    p.lid = LID;
    p.sm_lid = LID;
    p.lmc = 0;
    p.max_vl_num = 4;
    p.active_width = 2; // 4X
    p.active_speed = 32; // EDR
    p.phys_state = 5; // LinkUp
    p.link_layer = v::IBV_LINK_LAYER_INFINIBAND as u8;
}

/// The port's GID 0 (link-local, from the node GUID).
pub fn gid() -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[8..].copy_from_slice(&NODE_GUID.to_be_bytes());
    g
}
