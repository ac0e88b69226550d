//! Binds each exported symbol to the version node rdma-core gives it
//! (`libibverbs.map` defines the nodes). A program linked against
//! rdma-core asks for `ibv_reg_mr@IBVERBS_1.1`: an unversioned symbol
//! would not satisfy it.

macro_rules! versions {
    ($($node:literal: $($sym:ident),+;)+) => {
        std::arch::global_asm!($($(concat!(".symver ", stringify!($sym), ", ", stringify!($sym), "@@", $node)),+),+);
    };
}

versions! {
    "IBVERBS_1.0": ibv_create_comp_channel, ibv_destroy_comp_channel, ibv_read_sysfs_file, ibv_get_sysfs_path;
    "IBVERBS_1.1": ibv_ack_cq_events, ibv_alloc_pd, ibv_attach_mcast, ibv_close_device, ibv_create_ah,
        ibv_create_ah_from_wc, ibv_create_cq, ibv_create_qp, ibv_create_srq, ibv_dealloc_pd, ibv_dereg_mr,
        ibv_destroy_ah, ibv_destroy_cq, ibv_destroy_qp, ibv_destroy_srq, ibv_detach_mcast, ibv_free_device_list,
        ibv_get_cq_event, ibv_get_device_list, ibv_get_device_name, ibv_get_device_guid, ibv_modify_qp,
        ibv_open_device, ibv_query_device, ibv_query_gid, ibv_query_pkey, ibv_query_port, ibv_query_qp,
        ibv_reg_mr, ibv_wc_status_str, ibv_get_async_event, ibv_ack_async_event, ibv_fork_init, ibv_resize_cq,
        ibv_dontfork_range, ibv_dofork_range, ibv_node_type_str, ibv_port_state_str, ibv_event_type_str;
    "IBVERBS_1.6": ibv_qp_to_qp_ex;
    "IBVERBS_1.8": ibv_reg_mr_iova2;
    "IBVERBS_1.9": ibv_get_device_index;
    "IBVERBS_1.11": _ibv_query_gid_ex;
    "IBVERBS_PRIVATE_34": ibv_query_gid_type;
    "MLX5_1.3": mlx5dv_create_qp;
    "MLX5_1.7": mlx5dv_devx_general_cmd, mlx5dv_open_device;
    "MLX5_1.10": mlx5dv_create_mkey, mlx5dv_destroy_mkey, mlx5dv_qp_ex_from_ibv_qp_ex;
    "MLX5_1.21": mlx5dv_crypto_login, mlx5dv_dek_create, mlx5dv_dek_destroy;
    "EFA_1.1": efadv_create_qp_ex, efadv_query_device;
    "RDMACM_1.0": rdma_accept, rdma_ack_cm_event, rdma_bind_addr, rdma_connect, rdma_create_event_channel,
        rdma_create_id, rdma_create_qp, rdma_create_qp_ex, rdma_destroy_event_channel, rdma_destroy_id,
        rdma_destroy_qp, rdma_disconnect, rdma_event_str, rdma_freeaddrinfo, rdma_get_cm_event, rdma_getaddrinfo,
        rdma_listen, rdma_reject, rdma_resolve_addr, rdma_resolve_route, rdma_set_option;
}
