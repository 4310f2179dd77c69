/*
 * bench_offload - what offloading evicted prefix blocks to the host tier costs a serving loop
 * when nothing is ever hit again (the worst case: every offload is pure overhead). The same
 * workload runs on a CPU engine with a host tier, host_offload off and on, alternating runs:
 * unique prompts (0% prefix hit rate) through pkv_submit / pkv_step / pkv_attention (every layer)
 * / pkv_commit, with a pool small enough that every admission evicts cached blocks. Reported: the
 * median time of a decode step (a step computing one token per sequence: its evictions come from
 * the decode blocks it takes) and of the whole run, with offload on against off, and the blocks
 * offloaded.
 *
 *   build/bench/bench_offload [--quick] [--threads N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

enum { BS = 16, LAYERS = 4, Q_HEADS = 32, KV_HEADS = 8, HEAD_DIM = 128, MAX_SEQS = 32 };

typedef struct run_result {
  double decode_ns; /* median decode step */
  double total_ns;  /* the whole run */
  uint64_t decode_steps, offloaded, evictions, hit_tokens;
} run_result;

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int run(int offload, uint32_t requests, uint32_t prompt_len, uint32_t new_tokens,
               uint32_t threads, run_result *out) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = LAYERS, p.num_q_heads = Q_HEADS, p.num_kv_heads = KV_HEADS, p.head_dim = HEAD_DIM;
  p.dtype = PKV_DTYPE_BF16, p.block_size = BS, p.device = PKV_DEVICE_CPU, p.num_threads = threads;
  /* Room for the running batch and a little cache: admissions evict. */
  const uint32_t seq_blocks = (prompt_len + new_tokens + BS - 1) / BS;
  p.num_blocks = MAX_SEQS * seq_blocks + seq_blocks * 4;
  p.host_num_blocks = p.num_blocks;
  p.host_offload = (uint32_t)offload;
  p.max_num_seqs = MAX_SEQS;
  p.max_num_batched_tokens = 2048;
  pkv_engine *e = NULL;
  pkv_status s = pkv_engine_create(&p, &e);
  if (s != PKV_OK) return bench_fail(NULL, "pkv_engine_create", s);
  struct pkv_pool_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  pkv_pool_info(e, &info);
  memset(info.k_base, 0, 2 * info.bytes_per_pool); /* no first-touch faults in the timed loop */
  memset(info.host_k_base, 0, 2 * info.host_bytes_per_pool);

  const size_t row = (size_t)HEAD_DIM * 2, max_rows = p.max_num_batched_tokens;
  char *q = calloc(max_rows, row * Q_HEADS), *o = calloc(max_rows, row * Q_HEADS);
  char *k = calloc(max_rows, row * KV_HEADS), *v = calloc(max_rows, row * KV_HEADS);
  int32_t *prompt = malloc(sizeof(int32_t) * prompt_len), sampled[MAX_SEQS];
  double *decode = malloc(sizeof(double) * (requests * new_tokens + 16));
  if (!q || !o || !k || !v || !prompt || !decode)
    return bench_fail(e, "malloc", PKV_ERR_OUT_OF_MEMORY);
  for (size_t i = 0; i < max_rows * row * Q_HEADS; i += 2) q[i + 1] = 0x3f; /* bf16 ~0.5..1 */
  for (size_t i = 0; i < max_rows * row * KV_HEADS; i += 2) k[i + 1] = v[i + 1] = 0x3f;
  uint64_t rng = 12345; /* the same prompts in both runs, none repeated */
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = new_tokens;
  for (uint32_t i = 0; i < requests; i++) {
    for (uint32_t t = 0; t < prompt_len; t++) prompt[t] = bench_token(&rng);
    uint64_t id = 0;
    if ((s = pkv_submit(e, prompt, prompt_len, &rp, &id)) != PKV_OK)
      return bench_fail(e, "pkv_submit", s);
  }
  for (uint32_t i = 0; i < MAX_SEQS; i++) sampled[i] = 7 + (int32_t)i;
  uint32_t nd = 0;
  const double t_run = bench_now_ns();
  for (;;) {
    const double t0 = bench_now_ns();
    pkv_batch *b = NULL;
    if ((s = pkv_step(e, &b)) != PKV_OK) return bench_fail(e, "pkv_step", s);
    if (!b) break;
    pkv_batch_view view;
    memset(&view, 0, sizeof view);
    view.struct_size = sizeof view;
    pkv_batch_info(b, &view);
    for (uint32_t l = 0; l < LAYERS && s == PKV_OK; l++) s = pkv_attention(b, l, q, k, v, o);
    if (s != PKV_OK || (s = pkv_commit(b, sampled)) != PKV_OK)
      return bench_fail(e, "pkv_attention / pkv_commit", s);
    if (view.num_tokens == view.num_seqs) decode[nd++] = bench_now_ns() - t0;
    uint64_t done[64];
    uint32_t n = 0;
    do {
      pkv_drain_finished(e, done, 64, &n);
      for (uint32_t i = 0; i < n; i++) pkv_release(e, done[i]);
    } while (n == 64);
  }
  out->total_ns = bench_now_ns() - t_run;
  qsort(decode, nd, sizeof decode[0], cmp_double);
  out->decode_ns = nd ? decode[nd / 2] : 0;
  out->decode_steps = nd;
  pkv_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  pkv_engine_stats(e, &st);
  out->offloaded = st.num_offloaded_blocks;
  out->evictions = st.num_evictions;
  out->hit_tokens = st.prefix_hit_tokens;
  free(q), free(o), free(k), free(v), free(prompt), free(decode);
  pkv_engine_destroy(e);
  return 0;
}

int main(int argc, char **argv) {
  int quick = 0;
  uint32_t threads = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      quick = 1;
    else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      threads = (uint32_t)atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--quick] [--threads N]\n", argv[0]);
      return 2;
    }
  }
  const uint32_t requests = quick ? 32 : 96, prompt_len = 256, new_tokens = 64,
                 reps = quick ? 1 : 5;
  char th[32];
  snprintf(th, sizeof th, threads ? "%u threads" : "a thread per core", threads);
  printf("pkv bench_offload: CPU engine (%s), %u layers, %u q / %u kv heads of %u, bf16, "
         "block size %u;\n%u unique prompts of %u tokens, %u new tokens each, up to %u running; "
         "host tier = pool size\n\n",
         th, LAYERS, Q_HEADS, KV_HEADS, HEAD_DIM, BS, requests, prompt_len, new_tokens, MAX_SEQS);
  printf("%4s %8s %14s %12s %12s %12s %10s\n", "rep", "offload", "decode step us", "run ms",
         "evictions", "offloaded", "hit tokens");
  double dec[2][8], tot[2][8];
  for (uint32_t r = 0; r < reps; r++)
    for (int off = 0; off < 2; off++) {
      run_result res = {0};
      if (run(off, requests, prompt_len, new_tokens, threads, &res) != 0) return 1;
      dec[off][r] = res.decode_ns, tot[off][r] = res.total_ns;
      printf("%4u %8s %14.1f %12.1f %12llu %12llu %10llu\n", r, off ? "on" : "off",
             res.decode_ns / 1e3, res.total_ns / 1e6, (unsigned long long)res.evictions,
             (unsigned long long)res.offloaded, (unsigned long long)res.hit_tokens);
    }
  const double d_off = bench_median(dec[0], reps), d_on = bench_median(dec[1], reps);
  const double t_off = bench_median(tot[0], reps), t_on = bench_median(tot[1], reps);
  printf(
      "\nmedians: decode step %.1f us off, %.1f us on (%+.2f%%); whole run %.1f ms off, %.1f ms on "
      "(%+.2f%%)\n",
      d_off / 1e3, d_on / 1e3, 100 * (d_on - d_off) / d_off, t_off / 1e6, t_on / 1e6,
      100 * (t_on - t_off) / t_off);
  return 0;
}
