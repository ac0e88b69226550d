/*
 * pingpong.c: two tenants of a running `perf-runner serve`, in one C
 * process: "c-ping" WRITEs 64 B with immediate data into "c-pong"'s
 * region, "c-pong" checks the bytes and answers the same way, ITERS
 * times. Prints the mean round trip and exits 0 if every byte and every
 * completion was right.
 *
 *   cc -O2 -I client/include client/examples/pingpong.c \
 *      -L target/release -lperf_client -o pingpong
 *   ./pingpong perf-serve.sock [iterations]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "perf_client.h"

#define MSG 64

static int die(const char *what) {
    fprintf(stderr, "pingpong: %s: %s\n", what, perf_last_error());
    return 1;
}

/* Waits for one completion on c; returns 0 if it is `want_recv` and OK. */
static int wait_one(perf_client *c, int want_recv, perf_wc *wc) {
    for (long spins = 0; spins < 2000000000L; spins++) {
        int n = perf_poll(c, wc, 1);
        if (n < 0) return -1;
        if (n == 1) {
            if (wc->status != PERF_WC_SUCCESS || wc->is_recv != want_recv) {
                fprintf(stderr, "pingpong: completion wr_id %llu status %u recv %u\n",
                        (unsigned long long)wc->wr_id, wc->status, wc->is_recv);
                return -1;
            }
            return 0;
        }
    }
    fprintf(stderr, "pingpong: no completion\n");
    return -1;
}

static int post1(perf_client *c, perf_wr wr) {
    for (;;) {
        int n = perf_post(c, &wr, 1);
        if (n < 0) return -1;
        if (n == 1) return 0;
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s SOCKET [ITERATIONS]\n", argv[0]);
        return 2;
    }
    long iters = argc > 2 ? atol(argv[2]) : 1000;
    perf_client *ping = perf_connect(argv[1], "c-ping");
    if (!ping) return die("connect c-ping");
    perf_client *pong = perf_connect(argv[1], "c-pong");
    if (!pong) return die("connect c-pong");
    perf_mr mping, mpong;
    uint32_t qping, qpong;
    if (perf_reg_mr(ping, 2 * MSG, &mping) || perf_reg_mr(pong, 2 * MSG, &mpong)) return die("reg_mr");
    if (perf_create_qp(ping, 0, &qping) || perf_create_qp(pong, 0, &qpong)) return die("create_qp");
    if (perf_connect_qp(ping, qping, "c-pong", qpong) || perf_connect_qp(pong, qpong, "c-ping", qping))
        return die("connect_qp");

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    perf_wc wc;
    for (long i = 0; i < iters; i++) {
        perf_wr recv = {.wr_id = (uint64_t)i, .qp = qpong, .opcode = PERF_WR_RECV, .mr = mpong.index};
        perf_wr recv2 = {.wr_id = (uint64_t)i, .qp = qping, .opcode = PERF_WR_RECV, .mr = mping.index};
        if (post1(pong, recv) || post1(ping, recv2)) return die("post RECV");
        memset(mping.data, (int)(i & 0xff), MSG);
        perf_wr w = {.wr_id = (uint64_t)i, .qp = qping, .opcode = PERF_WR_WRITE_IMM, .mr = mping.index,
                     .len = MSG, .remote_addr = mpong.addr + MSG, .rkey = mpong.rkey, .imm = (uint32_t)i};
        if (post1(ping, w)) return die("post ping");
        if (wait_one(ping, 0, &wc)) return 1;
        if (wait_one(pong, 1, &wc)) return 1;
        if (!wc.has_imm || wc.imm != (uint32_t)i) {
            fprintf(stderr, "pingpong: immediate %u, expected %ld\n", wc.imm, i);
            return 1;
        }
        for (int b = 0; b < MSG; b++) {
            if (mpong.data[MSG + b] != (uint8_t)(i & 0xff)) {
                fprintf(stderr, "pingpong: iteration %ld byte %d is %u\n", i, b, mpong.data[MSG + b]);
                return 1;
            }
        }
        memcpy(mpong.data, mpong.data + MSG, MSG);
        perf_wr r = {.wr_id = (uint64_t)i, .qp = qpong, .opcode = PERF_WR_WRITE_IMM, .mr = mpong.index,
                     .len = MSG, .remote_addr = mping.addr + MSG, .rkey = mping.rkey, .imm = (uint32_t)i};
        if (post1(pong, r)) return die("post pong");
        if (wait_one(pong, 0, &wc)) return 1;
        if (wait_one(ping, 1, &wc)) return 1;
        if (memcmp(mping.data + MSG, mping.data, MSG) != 0) {
            fprintf(stderr, "pingpong: iteration %ld: the answer differs\n", i);
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / (double)iters;
    printf("%ld round trips of %d B, mean %.2f us (wall clock, simulated NIC)\n", iters, MSG, us);
    perf_disconnect(ping);
    perf_disconnect(pong);
    return 0;
}
