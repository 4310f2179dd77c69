/*
 * ranks_procs.h - the ranks of test_ranks.c in processes of their own (DESIGN.md §10): each rank
 * but 0 is a child process holding an engine of ranks PKV_RANKS_POOL, driven over a pair of pipes
 * as a host's worker would be. The pipes carry what a host's own transport would: the plan bytes
 * the decider exported (the child imports them with pkv_plan_import), the rank's q, k and v
 * (the child runs pkv_attention on its pool and sends out back), and, for the test's checks, the
 * child's whole pool and host tier.
 */
#ifndef PKV_TESTS_RANKS_PROCS_H
#define PKV_TESTS_RANKS_PROCS_H

#include <pkv/pkv.h>

#include <stdint.h>

/* Starts ranks 1 .. num_ranks - 1, rank r's engine made in its child by make_pool(r). */
void rp_start(uint32_t num_ranks, pkv_engine *(*make_pool)(uint32_t rank));
/* Stops every child; 1 when each exited with status 0. */
int rp_stop(void);

/* Each returns the child's status of the call it ran (PKV_OK, or the refusal). */
pkv_status rp_import(uint32_t rank, const void *plan, uint64_t len);
/* pkv_attention of the imported batch on `layer` of rank's stage: q, k, v of num_tokens rows
 * (row_q, row_kv floats each) in, out (row_q floats a row) back. */
pkv_status rp_attention(uint32_t rank, uint32_t layer, uint32_t num_tokens, uint32_t row_q,
                        uint32_t row_kv, const float *q, const float *k, const float *v,
                        float *out);
pkv_status rp_end(uint32_t rank);
/* The child's pool_info (its addresses are the child's), then its K, V, host K and host V
 * pools into k, v, hk, hv (bytes_per_pool and host_bytes_per_pool each; callers size them). */
pkv_status rp_dump(uint32_t rank, struct pkv_pool_info *info, void *k, void *v, void *hk, void *hv);

#endif
