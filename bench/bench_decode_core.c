/*
 * bench_decode_core.c - what one core's decode kernel computes, apart from the memory: one
 * thread, one sequence, CPU time (not wall time, so another process sharing the machine changes
 * little), K/V bytes read per CPU second. With a 2k context the K/V (8 MiB for the default
 * shape) stay in the last-level cache: the kernel's arithmetic rate. With --dram the context is
 * 128k tokens (512 MiB): what one core reaches from memory. bench_attention gives the figures
 * against the machine's bandwidth; this one tells which side limits them.
 * Runs every kernel variant this CPU has (PKV_CPU_ISA), bf16, f16 and fp8 e4m3 KV, GQA 1, 4, 8.
 * With --dram it first prints what one core reads of 1 GiB as plain sums (bench_cpu.c): in order,
 * in order with a software prefetch of every line 64 KiB ahead, and in shuffled 32 KiB and 16 KiB
 * blocks (a bf16 and an e4m3 K block of this shape).
 * Usage: bench_decode_core [--dram | --ctx N] [--isa NAME] [--kv bf16|f16|e4m3] [--gqa 1|4|8]:
 * --ctx sets the context (e.g. 128: the K/V stay in L2), --isa, --kv and --gqa keep one variant,
 * one cache dtype or one GQA. Not a test; not installed.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pkv/pkv.h>

#include "bench_cpu.h"
#include "bench_util.h"

enum { KV_HEADS = 8, HEAD_DIM = 128, BLOCK = 16 };

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* GB of K/V per CPU second of one decode configuration, best of 5 rounds; < 0 on failure, 0 when
 * this CPU lacks the variant. */
static double run(const char *isa, int32_t kv_dtype, uint32_t gqa, uint32_t ctx, uint32_t calls) {
  setenv("PKV_CPU_ISA", isa, 1);
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = 1, p.num_q_heads = KV_HEADS * gqa, p.num_kv_heads = KV_HEADS,
  p.head_dim = HEAD_DIM;
  p.dtype = kv_dtype == PKV_DTYPE_F16 ? PKV_DTYPE_F16 : PKV_DTYPE_BF16;
  p.kv_dtype = kv_dtype == PKV_DTYPE_FP8_E4M3 ? kv_dtype : 0;
  p.device = PKV_DEVICE_CPU, p.block_size = BLOCK, p.num_blocks = ctx / BLOCK + 2;
  p.num_threads = 1, p.enable_prefix_caching = 0;
  pkv_engine *e = NULL;
  const pkv_status cs = pkv_engine_create(&p, &e);
  if (cs == PKV_ERR_UNSUPPORTED) return 0.0;
  if (cs != PKV_OK) return bench_fail(NULL, "pkv_engine_create", cs);
  uint64_t state = 11, id = 0;
  int32_t *tokens = malloc(sizeof(int32_t) * (ctx + 1));
  for (uint32_t i = 0; i <= ctx; i++) tokens[i] = bench_token(&state);
  pkv_status s = pkv_allocate(e, tokens, ctx, NULL, &id, NULL);
  struct pkv_pool_info pool;
  memset(&pool, 0, sizeof pool);
  pool.struct_size = sizeof pool;
  if (s == PKV_OK) s = pkv_pool_info(e, &pool);
  const size_t kv_bytes = kv_dtype == PKV_DTYPE_FP8_E4M3 ? 1 : 2;
  /* Moderate values: bf16/f16 ~0.1-0.25 with alternating signs; e4m3 codes 2^-4..2^3. */
  unsigned char *k = pool.k_base, *v = pool.v_base;
  for (size_t i = 0; s == PKV_OK && i < pool.bytes_per_pool; i++) {
    const uint8_t r = (uint8_t)bench_next(&state);
    if (kv_bytes == 1)
      k[i] = v[i] = (uint8_t)(((i & 1) << 7) | (0x18 + r % 0x38));
    else if (i & 1)
      k[i] = v[i] = (uint8_t)((kv_dtype == PKV_DTYPE_F16 ? 0x30 : 0x3e) | ((i >> 1) & 1) << 7);
    else
      k[i] = v[i] = r;
  }
  pkv_batch *b = NULL;
  if (s == PKV_OK) s = bench_open_batch(e, &id, 1, tokens + ctx, 1, &b);
  free(tokens);
  if (s != PKV_OK) {
    bench_fail(e, "setting up the sequence", s);
    pkv_engine_destroy(e);
    return -1.0;
  }
  const size_t q_elems = (size_t)p.num_q_heads * HEAD_DIM, kv_elems = (size_t)KV_HEADS * HEAD_DIM;
  uint16_t *q = calloc(q_elems, 2), *out = calloc(q_elems, 2), *kn = calloc(kv_elems, 2),
           *vn = calloc(kv_elems, 2);
  for (size_t i = 0; i < q_elems; i++)
    q[i] = (uint16_t)((p.dtype == PKV_DTYPE_F16 ? 0x3000 : 0x3e00) | (i & 0x7f) | ((i & 2) << 14));
  double best = 1e30;
  s = pkv_attention(b, 0, q, kn, vn, out); /* warm-up */
  for (int round = 0; s == PKV_OK && round < 5; round++) {
    const double c0 = cpu_seconds();
    for (uint32_t i = 0; s == PKV_OK && i < calls; i++) s = pkv_attention(b, 0, q, kn, vn, out);
    const double sec = (cpu_seconds() - c0) / calls;
    if (sec < best) best = sec;
  }
  if (s != PKV_OK) bench_fail(e, "pkv_attention", s);
  pkv_batch_abort(b);
  pkv_engine_destroy(e);
  free(q), free(out), free(kn), free(vn);
  return s == PKV_OK ? 2.0 * (ctx + 1) * kv_elems * kv_bytes / best * 1e-9 : -1.0;
}

static int usage(const char *argv0) {
  fprintf(stderr, "usage: %s [--dram | --ctx N] [--isa NAME] [--kv bf16|f16|e4m3] [--gqa 1|4|8]\n",
          argv0);
  return 2;
}

int main(int argc, char **argv) {
  int dram = 0;
  uint32_t ctx = 2048;
  const char *only_isa = NULL, *only_kv = NULL;
  uint32_t only_gqa = 0;
  for (int a = 1; a < argc; a++) {
    if (strcmp(argv[a], "--dram") == 0)
      dram = 1, ctx = 131072;
    else if (strcmp(argv[a], "--ctx") == 0 && a + 1 < argc && atoi(argv[a + 1]) >= 16)
      ctx = (uint32_t)atoi(argv[++a]);
    else if (strcmp(argv[a], "--isa") == 0 && a + 1 < argc)
      only_isa = argv[++a];
    else if (strcmp(argv[a], "--kv") == 0 && a + 1 < argc)
      only_kv = argv[++a];
    else if (strcmp(argv[a], "--gqa") == 0 && a + 1 < argc &&
             (atoi(argv[a + 1]) == 1 || atoi(argv[a + 1]) == 4 || atoi(argv[a + 1]) == 8))
      only_gqa = (uint32_t)atoi(argv[++a]);
    else
      return usage(argv[0]);
  }
  const uint32_t calls = ctx >= 65536 ? 2 : (uint32_t)(80 * 1024 / ctx);
  printf("pkv bench_decode_core: 1 thread, 1 sequence of %u tokens (%s), %d kv heads x head_dim %d,"
         " GB of K/V per CPU second, best of 5\n",
         ctx,
         dram || ctx >= 32768 ? "K/V in DRAM"
         : ctx > 256          ? "K/V in the LLC"
                              : "K/V in L2",
         KV_HEADS, HEAD_DIM);
  if (dram) {
    const size_t bytes = (size_t)1 << 30;
    uint64_t *buf = bench_probe_buffer(bytes);
    if (!buf) {
      fprintf(stderr, "bench_decode_core: no memory for the 1 GiB probes\n");
      return 1;
    }
    printf(
        "one core's plain reads of 1 GiB (best of 3): in order %.1f GB/s; in order with a software prefetch of "
        "every line 64 KiB ahead %.1f; shuffled 32 KiB blocks %.1f; shuffled 16 KiB blocks %.1f\n",
        bench_probe(buf, bytes, 1, 3), bench_probe_prefetched(buf, bytes, 65536, 1, 3),
        bench_probe_blocks(buf, bytes, 32768, 1, 3), bench_probe_blocks(buf, bytes, 16384, 1, 3));
    bench_probe_buffer_free(buf, bytes);
  }
  printf("%-12s %-5s %8s %8s %8s\n", "kernels", "kv", "GQA 1", "GQA 4", "GQA 8");
  const char *isas[] = {"avx512-bf16", "avx512", "avx2", "baseline"};
  const struct {
    const char *name;
    int32_t dtype;
  } kinds[] = {{"bf16", PKV_DTYPE_BF16}, {"f16", PKV_DTYPE_F16}, {"e4m3", PKV_DTYPE_FP8_E4M3}};
  const uint32_t gqas[] = {1, 4, 8};
  int rc = 0;
  for (int i = 0; i < 4; i++)
    for (int d = 0; d < 3; d++) {
      if ((only_isa && strcmp(only_isa, isas[i]) != 0) ||
          (only_kv && strcmp(only_kv, kinds[d].name) != 0))
        continue;
      double gbs[3] = {0};
      int ran[3] = {0}, lacks = 0;
      for (int g = 0; g < 3; g++) {
        if (only_gqa && gqas[g] != only_gqa) continue;
        gbs[g] = run(isas[i], kinds[d].dtype, gqas[g], ctx, calls);
        ran[g] = 1;
        if (gbs[g] < 0) rc = 1;
        lacks |= gbs[g] == 0.0;
      }
      if (lacks) {
        if (d == 0) printf("%-12s (this CPU lacks it)\n", isas[i]);
        continue;
      }
      printf("%-12s %-5s", isas[i], kinds[d].name);
      for (int g = 0; g < 3; g++)
        if (!ran[g] || gbs[g] < 0)
          printf(" %8s", ran[g] ? "failed" : "-");
        else
          printf(" %8.1f", gbs[g]);
      printf("\n");
      fflush(stdout);
    }
  return rc;
}
