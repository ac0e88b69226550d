/*
 * perf_client.h: the C API of the PeRF-rs daemon's client library
 * (`perf-runner serve`; docs/shm-abi.md). Link with libperf_client
 * (cdylib or staticlib built from the perf-client crate).
 *
 * Functions returning int give 0 (or a count) on success and -1 on
 * error; perf_last_error() then says why (per thread). One thread drives
 * one perf_client.
 */
#ifndef PERF_CLIENT_H
#define PERF_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct perf_client perf_client;

/* A registered region: `data` is `len` bytes shared with the daemon. */
typedef struct {
    uint32_t index; /* for perf_wr.mr */
    uint32_t rkey;  /* for a peer's perf_wr.rkey */
    uint64_t addr;  /* a peer's perf_wr.remote_addr is addr + offset */
    uint64_t len;
    uint8_t *data;
} perf_mr;

enum perf_opcode {
    PERF_WR_WRITE = 1,
    PERF_WR_WRITE_IMM = 2,
    PERF_WR_SEND = 3,
    PERF_WR_RECV = 4,
    PERF_WR_READ = 5,
};

/* Status codes of perf_wc.status (ibv_wc_status meanings). */
enum perf_wc_status {
    PERF_WC_SUCCESS = 0,
    PERF_WC_LOC_LEN_ERR = 1,
    PERF_WC_LOC_QP_OP_ERR = 2,
    PERF_WC_LOC_PROT_ERR = 3,
    PERF_WC_WR_FLUSH_ERR = 4,
    PERF_WC_REM_INV_REQ_ERR = 5,
    PERF_WC_REM_ACCESS_ERR = 6,
    PERF_WC_REM_OP_ERR = 7,
    PERF_WC_RETRY_EXC_ERR = 8,
    PERF_WC_RNR_RETRY_EXC_ERR = 9,
};

typedef struct {
    uint64_t wr_id;
    uint64_t offset;      /* into region `mr` */
    uint64_t remote_addr; /* WRITE, WRITE_IMM, READ */
    uint32_t qp;
    uint32_t opcode;      /* enum perf_opcode */
    uint32_t mr;          /* perf_mr.index */
    uint32_t len;
    uint32_t rkey;        /* WRITE, WRITE_IMM, READ */
    uint32_t imm;         /* WRITE_IMM */
} perf_wr;

typedef struct {
    uint64_t wr_id;
    uint64_t latency_ns;
    uint32_t qp;
    uint32_t byte_len;
    uint32_t imm;
    uint8_t status;  /* enum perf_wc_status */
    uint8_t is_recv;
    uint8_t has_imm;
    uint8_t pad;
} perf_wc;

/* Connects to the daemon at `socket` as tenant `tenant` (NULL: the
 * daemon's choice). NULL on error. */
perf_client *perf_connect(const char *socket, const char *tenant);
/* Closes the connection; the daemon flushes what is in flight. */
void perf_disconnect(perf_client *c);
/* Why the last call on this thread failed (valid until the next call). */
const char *perf_last_error(void);
/* Registers a new zeroed region of `len` bytes. */
int perf_reg_mr(perf_client *c, size_t len, perf_mr *out);
/* Creates a QP in traffic class `tc`; its index in *qp. */
int perf_create_qp(perf_client *c, uint8_t tc, uint32_t *qp);
/* Connects QP `qp` to QP `peer_qp` of tenant `peer`. */
int perf_connect_qp(perf_client *c, uint32_t qp, const char *peer, uint32_t peer_qp);
/* Posts up to n requests as one post list: how many were taken (fewer
 * when the ring is full), or -1. */
int perf_post(perf_client *c, const perf_wr *wrs, size_t n);
/* Takes up to `max` completions into `out`: how many. */
int perf_poll(perf_client *c, perf_wc *out, size_t max);

#ifdef __cplusplus
}
#endif

#endif
