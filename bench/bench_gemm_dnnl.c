/*
 * bench_gemm_dnnl.c - oneDNN's matmuls as the prefill's yardstick (bench_gemm.h): a GEMM of the
 * model's dtype, bf16 or f16 operands with fp32 results, f32 for an f32 model. oneDNN picks its
 * code by CPUID when a primitive is created (AMX where the CPU has it). Where it creates no matmul
 * of the dtype (oneDNN 2.6 has no f16 one without AVX512-FP16), its f32 matmul stands in.
 * Debian's oneDNN runs its threads on GNU OpenMP (the build checks): the bench's thread count goes
 * to omp_set_num_threads from this thread, the one that runs the primitives, before they are
 * created. OMP_NUM_THREADS would not do: libgomp reads it when it loads, before main.
 */
#include "bench_gemm_dnnl.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <pkv/pkv.h>

#include "bench_cpu.h"

/* The CPU engine and its stream, made on first use and kept for the process. */
static dnnl_engine_t engine;
static dnnl_stream_t stream;

static int dnnl_open(void) {
  if (!engine && dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) return -1;
  if (!stream && dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success)
    return -1;
  return 0;
}

/* One matmul C[m][n] (fp32) = A[m][k] * B[k][n], A row-major, B row-major or, with b_t, stored
 * transposed ([n][k], as K in Q K^T): plain layouts, as the attention's operands lie, so oneDNN
 * packs B inside the timed call as a GEMM library does. */
typedef struct matmul {
  dnnl_primitive_desc_t pd;
  dnnl_primitive_t prim;
  dnnl_memory_t mem[3];
  dnnl_exec_arg_t args[3];
} matmul;

static dnnl_status_t matmul_desc(matmul *mm, dnnl_data_type_t dt, int64_t m, int64_t n, int64_t k,
                                 int b_t) {
  const dnnl_dims_t da = {m, k}, db = {k, n}, dc = {m, n};
  dnnl_memory_desc_t a, b, c;
  dnnl_matmul_desc_t desc;
  dnnl_memory_desc_init_by_tag(&a, 2, da, dt, dnnl_ab);
  dnnl_memory_desc_init_by_tag(&b, 2, db, dt, b_t ? dnnl_ba : dnnl_ab);
  dnnl_memory_desc_init_by_tag(&c, 2, dc, dnnl_f32, dnnl_ab);
  dnnl_status_t s = dnnl_matmul_desc_init(&desc, &a, &b, NULL, &c);
  *mm = (matmul){0};
  if (s == dnnl_success) s = dnnl_primitive_desc_create(&mm->pd, &desc, NULL, engine, NULL);
  return s;
}

/* The primitive of mm->pd over the buffers a, b, c; 0 or -1. */
static int matmul_create(matmul *mm, void *a, void *b, void *c) {
  static const int arg[3] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
  static const dnnl_query_t md[3] = {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md};
  void *buf[3] = {a, b, c};
  for (int i = 0; i < 3; i++) {
    if (dnnl_memory_create(&mm->mem[i], dnnl_primitive_desc_query_md(mm->pd, md[i], 0), engine,
                           buf[i]) != dnnl_success)
      return -1;
    mm->args[i] = (dnnl_exec_arg_t){arg[i], mm->mem[i]};
  }
  return dnnl_primitive_create(&mm->prim, mm->pd) == dnnl_success ? 0 : -1;
}

static void matmul_destroy(matmul *mm) {
  dnnl_primitive_destroy(mm->prim);
  for (int i = 0; i < 3; i++) dnnl_memory_destroy(mm->mem[i]);
  dnnl_primitive_desc_destroy(mm->pd);
}

/* Whether oneDNN makes a matmul of dt (Q K^T at 2k tokens, head_dim 128), and which code it
 * picked ("brg:avx512_core_bf16") into impl. */
static int matmul_probe(dnnl_data_type_t dt, char *impl, size_t cap) {
  matmul mm;
  const char *info = NULL;
  const int ok = dnnl_open() == 0 && matmul_desc(&mm, dt, 2048, 2048, 128, 1) == dnnl_success;
  if (ok && dnnl_primitive_desc_query(mm.pd, dnnl_query_impl_info_str, 0, &info) == dnnl_success)
    snprintf(impl, cap, "%s", info);
  else
    snprintf(impl, cap, "none");
  if (ok) matmul_destroy(&mm);
  return ok;
}

enum { NUM_TYPES = 3 };

/* The matmuls by their operands' gemm_elt. */
static const struct {
  const char *name;
  dnnl_data_type_t dt;
} TYPES[NUM_TYPES] = {[GEMM_F32] = {"oneDNN f32", dnnl_f32},
                      [GEMM_BF16] = {"oneDNN bf16", dnnl_bf16},
                      [GEMM_F16] = {"oneDNN f16", dnnl_f16}};

/* Which of TYPES oneDNN has on this CPU, and the code it picks, probed once. */
static int probed, has[NUM_TYPES];
static char impl[NUM_TYPES][64];

static void probe_all(void) {
  for (int i = 0; !probed && i < NUM_TYPES; i++)
    has[i] = matmul_probe(TYPES[i].dt, impl[i], sizeof impl[i]);
  probed = 1;
}

const char *bench_dnnl_library(void) {
  static char text[256];
  const dnnl_version_t *v = dnnl_version();
  const char *isa = dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa());
  probe_all();
  if (strncmp(isa, "cpu_isa_", 8) == 0) isa += 8;
  snprintf(text, sizeof text, "oneDNN %d.%d.%d, ISA %s (matmul bf16: %s, f16: %s, f32: %s)",
           v->major, v->minor, v->patch, isa, impl[GEMM_BF16], impl[GEMM_F16], impl[GEMM_F32]);
  return text;
}

const char *bench_dnnl_for(int32_t dtype, int *exact) {
  const gemm_elt want = dtype == PKV_DTYPE_BF16  ? GEMM_BF16
                        : dtype == PKV_DTYPE_F16 ? GEMM_F16
                                                 : GEMM_F32;
  probe_all();
  *exact = has[want];
  return has[want] ? TYPES[want].name : has[GEMM_F32] ? TYPES[GEMM_F32].name : NULL;
}

/* For each of heads / 2 q heads, S = Q K^T then O = P V on the same operands: q, k, v [n][hd],
 * p [n][n] (s itself for f32, a copy of the dtype else), s [n][n] and o [n][hd] fp32. */
typedef struct dnnl_run {
  uint32_t heads;
  matmul qk, pv;
} dnnl_run;

static int dnnl_heads(void *arg) {
  const dnnl_run *r = arg;
  for (uint32_t h = 0; h < r->heads; h++)
    if (dnnl_primitive_execute(r->qk.prim, stream, 3, r->qk.args) != dnnl_success ||
        dnnl_primitive_execute(r->pv.prim, stream, 3, r->pv.args) != dnnl_success)
      return -1;
  return dnnl_stream_wait(stream) == dnnl_success ? 0 : -1;
}

double bench_dnnl_gflops(const char *name, uint32_t n, uint32_t hd, uint32_t heads,
                         uint32_t threads, uint32_t max_runs, double *busy) {
  int t = 0;
  while (t < NUM_TYPES && strcmp(name, TYPES[t].name) != 0) t++;
  *busy = 0.0;
  if (t == NUM_TYPES) return 0.0;
  const gemm_elt elt = (gemm_elt)t;
  const size_t nh = (size_t)n * hd, nn = (size_t)n * n;
  void *q = bench_gemm_fill(nh, elt), *k = bench_gemm_fill(nh, elt), *v = bench_gemm_fill(nh, elt);
  float *s = bench_gemm_fill(nn, GEMM_F32), *o = bench_gemm_fill(nh, GEMM_F32);
  void *p = elt == GEMM_F32 ? s : bench_gemm_fill(nn, elt);
  dnnl_run r = {heads / 2 ? heads / 2 : 1, {0}, {0}};
  double sec = -1.0;
  omp_set_num_threads((int)threads); /* before the primitives: they size their work by it */
  if (q && k && v && s && o && p && dnnl_open() == 0 &&
      matmul_desc(&r.qk, TYPES[t].dt, n, n, hd, 1) == dnnl_success &&
      matmul_create(&r.qk, q, k, s) == 0 &&
      matmul_desc(&r.pv, TYPES[t].dt, n, hd, n, 0) == dnnl_success &&
      matmul_create(&r.pv, p, v, o) == 0)
    sec = bench_time_calls(dnnl_heads, &r, max_runs, threads, busy);
  matmul_destroy(&r.qk), matmul_destroy(&r.pv);
  if (p != s) free(p);
  free(q), free(k), free(v), free(s), free(o);
  return sec > 0 ? r.heads * 4.0 * (double)nn * hd / sec * 1e-9 : 0.0;
}
