/* pkv_attention on a batch that already ended (pkv_batch_end, or pkv_batch_abort) is refused with
 * PKV_ERR_STATE, not a read of the freed batch, and the engine goes on. Its own executable: a
 * crash here must not hide the other tests' results. */
#include <stdlib.h>

#include "kv_world.h"

static const kw_config base = {"ended", 2, 4, 2, 64, PKV_DTYPE_F32, 16, 64, 2, 0, 0, 0, 3, 0, 0, 0};
static pkv_batch *seen;

static void remember(kw_world *w, pkv_batch *b, const void *q, const void *k, const void *v,
                     void *out) {
  (void)w, (void)q, (void)k, (void)v, (void)out;
  seen = b;
}

static void test_attention_after_end(void) {
  for (int abort = 0; abort < 2; abort++) {
    kw_world w;
    if (!kw_init(&w, &base)) return;
    int32_t t[9];
    kw_tokens(t, 9, 3);
    const int s = kw_alloc(&w, t, 8, NULL);
    const size_t n = (size_t)8 * 4 * 64;
    float *q = calloc(n, 4), *k = calloc(n, 4), *v = calloc(n, 4), *out = calloc(n, 4);
    w.on_batch = remember;
    if (s >= 0 && kw_step(&w, &s, NULL, 1, abort ? KW_ABORT : 0) == 0) {
      w.on_batch = NULL;
      CHECK_ERR(NULL, pkv_attention(seen, 1, q, k, v, out), PKV_ERR_STATE);
      CHECK_ERR(NULL, pkv_batch_end(seen), PKV_ERR_STATE);
      if (!abort) kw_append(&w, s, t + 8, 1);
      kw_step(&w, &s, NULL, 1, 0); /* the engine still works */
    }
    free(q), free(k), free(v), free(out);
    kw_free(&w);
  }
}

int main(void) {
  KW_RUN(test_attention_after_end);
  return kw_summary();
}
