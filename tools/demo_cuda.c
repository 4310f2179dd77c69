/*
 * demo_cuda.c - `pkv demo --device cuda`: the workload through pkv twice, first a CPU engine with
 * the host's GEMM (the reference), then a CUDA engine (PKV_DEVICE_CUDA): the model's GEMMs on
 * cuBLAS (model_cuda.c), its attention on pkv's CUDA kernels, both on one stream the demo creates
 * and gives to pkv (pkv_engine_set_stream) and to cuBLAS. The CUDA runtime and cuBLAS are loaded
 * at run time (cuda_api.c), so the tool runs where they are missing and refuses this mode there.
 *
 * The verdict. Both runs schedule the same batches (pkv's scheduler is the device's no concern)
 * and compute in f32 (weights, activations, KV), but cuBLAS and pkv's kernels sum in other orders
 * than the host, so logits differ by rounding: ~1e-6 relative per op, ~1e-5 on the logits after
 * the layers. A greedy token can flip only where its top two logits are that close. The rule:
 * each request's tokens must be the CPU run's, except that a request may part from it at a token
 * whose CPU margin (top logit minus the runner-up's) is below DEMO_CUDA_TIE_LOGITS, 100x that
 * rounding; from there on its context differs, so the rest of it is not compared. A real fault
 * (a wrong block, a stale or unwritten KV slot, a GEMM's wrong layout) moves logits by 0.1 or
 * more and flips tokens with large margins. With bf16 or f16 KV the rounding would be ~1e-2 and
 * the same rule would need a margin ~100x that; the demo keeps f32 so that the rule stays tight.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pkv/pkv.h>

#include "cli.h"
#include "cuda_api.h"
#include "demo.h"
#include "model_cuda.h"

#define DEMO_CUDA_TIE_LOGITS 2e-3f

struct demo_cuda {
  cuda_api api;
  void *stream;
  model_cuda glue;
};

int (*demo_cuda_api_load)(struct cuda_api *api, char *error, size_t cap) = cuda_api_load;

const char *demo_cuda_check(const demo_options *o) {
  if (!o->device || strcmp(o->device, "cpu") == 0) return NULL;
  if (strcmp(o->device, "cuda") != 0) return "--device must be cpu or cuda";
  if (o->store) return "--device cuda runs pkv's CPU and CUDA engines side by side: drop --store";
  if (o->hybrid) return "--device cuda runs attention layers only: drop --hybrid";
  if (o->retention) return "--device cuda runs pkv's CPU and CUDA engines: drop --retention";
  if (o->windows) return "--device cuda runs full attention: drop --windows";
  if (o->host_cache) return "--device cuda runs without a host tier: drop --host-cache";
  if (o->plot) return "--plot draws pkv demo's runs without --device cuda: drop one of them";
  return NULL;
}

void demo_cuda_close(struct demo_cuda *dc) {
  if (!dc) return;
  model_cuda_free(&dc->glue);
  if (dc->stream) dc->api.stream_destroy(dc->stream);
  cuda_api_unload(&dc->api);
  free(dc);
}

/* Whether libpkv makes a CUDA engine of the model's shape (not a build without CUDA). */
static int probe_engine(const model_config *mc, char *why, size_t cap) {
  pkv_engine_params ep;
  pkv_engine_params_init(&ep, sizeof ep);
  ep.num_layers = 1, ep.num_q_heads = mc->num_q_heads, ep.num_kv_heads = mc->num_kv_heads;
  ep.head_dim = mc->head_dim, ep.dtype = PKV_DTYPE_F32, ep.device = PKV_DEVICE_CUDA;
  ep.max_model_len = 64, ep.block_size = 16, ep.num_blocks = 4, ep.max_num_seqs = 1;
  ep.max_num_batched_tokens = 64;
  pkv_engine *e = NULL;
  const pkv_status s = pkv_engine_create(&ep, &e);
  if (s == PKV_OK) {
    pkv_engine_destroy(e);
    return 0;
  }
  snprintf(why, cap, "--device cuda: pkv makes no CUDA engine here: %s: %s%s", pkv_status_string(s),
           pkv_last_error(),
           s == PKV_ERR_NO_DEVICE ? " (a libpkv built with -Dgpu=enabled is needed)" : "");
  return -1;
}

int demo_cuda_open(const demo_options *o, const model_config *mc, struct demo_cuda **out, char *why,
                   size_t cap) {
  *out = NULL;
  if (!o->device || strcmp(o->device, "cuda") != 0) return 0;
  struct demo_cuda *dc = calloc(1, sizeof *dc);
  char e[200];
  int n = 0, err = 0;
  if (!dc) {
    snprintf(why, cap, "out of memory");
  } else if (demo_cuda_api_load(&dc->api, e, sizeof e) != 0) {
    snprintf(why, cap,
             "--device cuda needs the CUDA 13 runtime and cuBLAS (libcudart.so.13, "
             "libcublas.so.13 on the library path, e.g. LD_LIBRARY_PATH=/usr/local/cuda/lib64): "
             "%s",
             e);
  } else if ((err = dc->api.get_device_count(&n)) != 0 || n == 0) {
    snprintf(why, cap, "--device cuda needs a GPU and its driver: cudaGetDeviceCount: %s",
             err ? dc->api.get_error_string(err) : "no CUDA device");
  } else if ((err = dc->api.set_device(0)) != 0 ||
             (err = dc->api.stream_create_with_flags(&dc->stream, CUDA_API_STREAM_NON_BLOCKING))) {
    dc->stream = NULL;
    snprintf(why, cap, "--device cuda: the GPU could not be set up: %s",
             dc->api.get_error_string(err));
  } else if (probe_engine(mc, why, cap) == 0) {
    *out = dc;
    return 0;
  }
  demo_cuda_close(dc);
  return -1;
}

/* Requests whose tokens part from the CPU run's (c) other than at a near tie; prints the verdict
 * and returns 0 when there are none. */
static int verdict(const demo_workload *w, const demo_result *c, const demo_result *g) {
  uint32_t ties = 0, bad = 0, bad_req = 0, bad_at = 0;
  float bad_margin = 0.0f, worst_tie = 0.0f;
  for (uint32_t i = 0; i < w->num_requests; i++) {
    const uint32_t n =
        c->num_generated[i] < g->num_generated[i] ? c->num_generated[i] : g->num_generated[i];
    uint32_t k = 0;
    while (k < n && c->generated[i][k] == g->generated[i][k]) k++;
    if (k == n && c->num_generated[i] == g->num_generated[i]) continue;
    /* k == n: one stopped on a token the other did not make (k is past the shorter's end) */
    const int at_token = k < c->num_generated[i];
    const float margin = at_token ? c->margin[i][k] : 0.0f;
    if (at_token && margin < DEMO_CUDA_TIE_LOGITS) {
      ties++;
      worst_tie = margin > worst_tie ? margin : worst_tie;
    } else if (bad++ == 0) {
      bad_req = i, bad_at = k, bad_margin = margin;
    }
  }
  if (bad) {
    printf("  tokens match the CPU run: NO - %u of %u requests differ where the CPU's choice was\n"
           "  no near tie; the first is request %u at generated token %u (CPU margin %.4f logits,\n"
           "  the rule allows < %.0e): a fault on the GPU path, not rounding.\n",
           bad, w->num_requests, bad_req, bad_at, bad_margin, (double)DEMO_CUDA_TIE_LOGITS);
    return -1;
  }
  if (ties == 0)
    printf("  tokens match the CPU run: yes, identical (%u requests, %llu generated tokens)\n",
           w->num_requests, (unsigned long long)g->generated_tokens);
  else
    printf("  tokens match the CPU run: yes - identical but for %u of %u requests, each parting\n"
           "  at a near tie (CPU margin at most %.2e < %.0e logits: f32 rounding decides it)\n",
           ties, w->num_requests, (double)worst_tie, (double)DEMO_CUDA_TIE_LOGITS);
  return 0;
}

static void print_table(const demo_workload *w, const demo_result *c, const demo_result *g,
                        const model_cuda *glue) {
  printf("  %-34s %20s %20s\n", "", "pkv CPU engine", "pkv CUDA engine");
  DEMO_ROW("wall time", "%.2f s", c->wall_s, "%.2f s", g->wall_s);
  DEMO_ROW("  in the model's forward passes", "%.2f s", c->model_s, "%.2f s", g->model_s);
  DEMO_ROW("  in pkv_attention (CUDA: queued)", "%.2f s", c->attn_s, "%.2f s", g->attn_s);
  DEMO_ROW("steps", "%llu", (unsigned long long)c->steps, "%llu", (unsigned long long)g->steps);
  DEMO_ROW("generated tokens/s", "%.0f", demo_per_s((double)c->generated_tokens, c->wall_s), "%.0f",
           demo_per_s((double)g->generated_tokens, g->wall_s));
  DEMO_ROW("forward rows (tokens computed)", "%llu", (unsigned long long)c->rows, "%llu",
           (unsigned long long)g->rows);
  DEMO_ROW("GEMMs", "%s", "host", "%llu cuBLAS", (unsigned long long)glue->num_gemms);
  DEMO_ROW("prefix-cache hit tokens", "%llu", (unsigned long long)c->hit_tokens, "%llu",
           (unsigned long long)g->hit_tokens);
  DEMO_ROW("preemptions", "%llu", (unsigned long long)c->preemptions, "%llu",
           (unsigned long long)g->preemptions);
  (void)w;
}

static int run(const demo_options *o, const demo_workload *w, const model *m, demo_result *r,
               const char *name, const struct demo_cuda *dc) {
  if (demo_result_init(r, name, w) != 0) {
    fprintf(stderr, "pkv demo: out of memory\n");
    return -1;
  }
  demo_options ro = *o;
  ro.engine_device = dc ? PKV_DEVICE_CUDA : PKV_DEVICE_CPU;
  ro.cuda_stream = dc ? dc->stream : NULL;
  ro.gemm_backend = dc ? &dc->glue.backend : NULL;
  if (demo_run_paged(&ro, w, m, r) == 0) return 0;
  fprintf(stderr, "pkv demo: %s run failed: %s%s%s\n", name, r->error,
          dc && dc->glue.error[0] ? ": " : "", dc ? dc->glue.error : "");
  return -1;
}

int demo_cuda_runs(struct demo_cuda *dc, const demo_options *o, const demo_workload *w,
                   const model *m) {
  demo_result c, g;
  memset(&c, 0, sizeof c), memset(&g, 0, sizeof g);
  int rc = model_cuda_init(&dc->glue, &dc->api, dc->stream, m);
  if (rc != 0) fprintf(stderr, "pkv demo: --device cuda: %s\n", dc->glue.error);
  char size[32];
  if (rc == 0)
    printf("  GPU: weights uploaded once (%s), activations in pinned host memory mapped into the\n"
           "  GPU; one stream for pkv's kernels and cuBLAS\n\n",
           cli_format_size(dc->glue.weight_bytes, size, sizeof size));
  fflush(stdout);
  if (rc == 0) rc = run(o, w, m, &c, "pkv CPU engine", NULL);
  if (rc == 0) rc = run(o, w, m, &g, "pkv CUDA engine", dc);
  if (rc == 0) {
    print_table(w, &c, &g, &dc->glue);
    printf("\n");
    rc = verdict(w, &c, &g);
  }
  demo_result_free(&c, w), demo_result_free(&g, w);
  model_cuda_free(&dc->glue);
  return rc;
}
