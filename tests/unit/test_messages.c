/* Refusals say what was wrong and what to do, in pkv.h's terms (issue 26 item 5): the message
 * text of a stale batch handle (in its engine's error too), of pkv_batch_end on a batch of
 * pkv_step (which stays open), of too small a budget (bytes with a unit that shows them, and the
 * field to raise) and of a CUDA device where there is none (the device field named). */
#include "test_util.h"

/* The message contains every one of the NULL-terminated words; prints it when not. */
static int says(const char *msg, const char *const *words, const char *file, int line) {
  int ok = msg != NULL;
  for (const char *const *w = words; ok && *w != NULL; w++) ok = strstr(msg, *w) != NULL;
  if (!ok) printf("     message: \"%s\"\n", msg ? msg : "(null)");
  return tu_result_(ok, file, line, "the message says each word");
}
#define SAYS(msg, ...) says((msg), (const char *const[]){__VA_ARGS__, NULL}, __FILE__, __LINE__)

/* A stale handle's refusal reaches its engine's error (examples/basic.c's CHECK printed an empty
 * reason before), also while a newer batch of that engine is open; after the engine is gone it is
 * only in pkv_last_error(). */
static void test_stale_handle(void) {
  pkv_engine *e = tu_engine(4, 16, 0);
  if (!e) return;
  int32_t t[6];
  tu_fill(t, 6, 1);
  uint64_t s = tu_alloc(e, t, 6, NULL);
  pkv_batch *old = NULL, *cur = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, &s, NULL, 1, &old))) return;
  CHECK_OK(pkv_batch_end(old));
  CHECK_ERR(e, pkv_batch_end(old), PKV_ERR_STATE);
  SAYS(pkv_engine_last_error(e), "batch is not open", "it ended", "pkv_batch_begin or pkv_step");
  CHECK(strcmp(pkv_engine_last_error(e), pkv_last_error()) == 0);
  CHECK_OK(pkv_append(e, s, t, 1));
  CHECK_EQ_INT(pkv_engine_last_error(e)[0], 0); /* a call that succeeds clears it */
  if (!CHECK_OK(pkv_batch_begin(e, &s, NULL, 1, &cur))) return;
  float x[64];
  CHECK_ERR(e, pkv_attention(old, 0, x, x, x, x), PKV_ERR_STATE);
  SAYS(pkv_engine_last_error(e), "batch is not open");
  pkv_batch_abort(old); /* ignored, and quiet: the engine's error is the last failed call's */
  SAYS(pkv_engine_last_error(e), "batch is not open", "pkv_batch_begin or pkv_step");
  CHECK_EQ_INT(tu_info(e, s).in_batch, 1); /* the newer batch is untouched */
  CHECK_OK(pkv_batch_end(cur));
  /* A second engine's error is not touched by the first's stale handle. */
  pkv_engine *other = tu_engine(4, 16, 0);
  if (other) {
    CHECK_STATUS(pkv_batch_end(old), PKV_ERR_STATE);
    CHECK_EQ_INT(pkv_engine_last_error(other)[0], 0);
    pkv_engine_destroy(other);
  }
  pkv_engine_destroy(e);
  /* No engine any more: the thread's error says so. */
  CHECK_STATUS(pkv_batch_end(cur), PKV_ERR_STATE);
  SAYS(pkv_last_error(), "batch is not open", "its engine was destroyed");
  CHECK_STATUS(pkv_batch_end((pkv_batch *)(uintptr_t)0x1000), PKV_ERR_STATE);
  SAYS(pkv_last_error(), "no batch handle", "pkv_batch_begin and pkv_step give them");
}

/* pkv_batch_end on a batch of pkv_step: refused, the batch stays open (pkv_step refuses another),
 * and pkv_batch_abort ends it; pkv_commit on a batch of pkv_batch_begin likewise. */
static void test_wrong_end(void) {
  pkv_engine *e = tu_engine(4, 16, 0);
  if (!e) return;
  int32_t t[6];
  tu_fill(t, 6, 1);
  uint64_t r = 0;
  CHECK_OK(pkv_submit(e, t, 6, NULL, &r));
  pkv_batch *b = NULL, *b2 = NULL;
  if (!CHECK_OK(pkv_step(e, &b)) || !CHECK(b != NULL)) return;
  CHECK_ERR(e, pkv_batch_end(b), PKV_ERR_STATE);
  SAYS(pkv_engine_last_error(e), "a batch of pkv_step ends with pkv_commit", "pkv_batch_abort",
       "stays open");
  CHECK_ERR(e, pkv_step(e, &b2), PKV_ERR_STATE); /* still open, and said how it ends */
  SAYS(pkv_engine_last_error(e), "pkv_step: a batch is already open",
       "it came from pkv_step: pkv_commit, or pkv_batch_abort");
  uint64_t m = tu_alloc(e, t, 3, NULL);
  CHECK_ERR(e, pkv_batch_begin(e, &m, NULL, 1, &b2), PKV_ERR_STATE);
  SAYS(pkv_engine_last_error(e), "pkv_batch_begin: a batch is already open",
       "pkv_commit, or pkv_batch_abort");
  CHECK_ERR(e, pkv_reset_prefix_cache(e), PKV_ERR_STATE);
  SAYS(pkv_engine_last_error(e), "pkv_reset_prefix_cache: a batch is already open");
  pkv_batch_abort(b);
  if (CHECK_OK(pkv_step(e, &b)) && CHECK(b != NULL)) /* the abort ended it: planned again */
    pkv_batch_abort(b);
  uint64_t s = tu_alloc(e, t, 5, NULL);
  if (CHECK_OK(pkv_batch_begin(e, &s, NULL, 1, &b))) {
    CHECK_ERR(e, pkv_step(e, &b2), PKV_ERR_STATE);
    SAYS(pkv_engine_last_error(e),
         "it came from pkv_batch_begin: pkv_batch_end, or pkv_batch_abort");
    int32_t tok = 1;
    CHECK_ERR(e, pkv_commit(b, &tok), PKV_ERR_STATE);
    SAYS(pkv_engine_last_error(e), "pkv_batch_begin ends with pkv_batch_end or pkv_batch_abort",
         "stays open");
    CHECK_OK(pkv_batch_end(b));
  }
  pkv_engine_destroy(e);
}

/* A 1 KiB budget: the bytes needed and missing in a unit that shows them (it said "0.0 MiB
 * missing"), and the field to raise. */
static void test_small_budget(void) {
  pkv_engine_params p;
  tu_params(&p, 16,
            0); /* f32, 2 layers, 2 kv heads of 8: a block of 2 x 2 x 16 x 2 x 8 x 4 = 4096 bytes */
  p.max_model_len = 64; /* 4 blocks: 16384 bytes */
  p.kv_cache_bytes = 1024;
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  CHECK_STATUS(pkv_profile(&p, &b), PKV_ERR_OUT_OF_MEMORY);
  CHECK_EQ_INT(b.block_bytes, 4096);
  CHECK_EQ_INT(b.shortfall_bytes, 16384 - 1024);
  SAYS(pkv_last_error(), "one sequence of max_model_len 64 needs 4 blocks of 4.00 KiB (4096 bytes)",
       "16.0 KiB (16384 bytes)", "the KV budget (kv_cache_bytes) is 1.00 KiB (1024 bytes)",
       "15.0 KiB (15360 bytes) missing", "Raise kv_cache_bytes to at least 16384",
       "lower max_model_len");
  CHECK(strstr(pkv_last_error(), "MiB") == NULL);
  /* Under a byte count: bytes. */
  p.kv_cache_bytes = 16383;
  CHECK_STATUS(pkv_profile(&p, &b), PKV_ERR_OUT_OF_MEMORY);
  SAYS(pkv_last_error(), "1 bytes missing");
  /* From the formula: the fields of the formula to change. */
  p.kv_cache_bytes = 0;
  p.memory_total_bytes = 8192;
  p.memory_utilization = 0.5;
  CHECK_STATUS(pkv_profile(&p, &b), PKV_ERR_OUT_OF_MEMORY);
  SAYS(pkv_last_error(),
       "total x memory_utilization - used - reserve_bytes) is 4.00 KiB (4096 bytes)",
       "12.0 KiB (12288 bytes) missing", "Raise memory_utilization (now 0.5) or memory_total_bytes",
       "lower reserve_bytes or memory_used_bytes");
  p.memory_used_bytes = 6144; /* 4096 - 6144 < 0: a budget of 0, and by how much */
  CHECK_STATUS(pkv_profile(&p, &b), PKV_ERR_OUT_OF_MEMORY);
  SAYS(pkv_last_error(), "is 0 bytes",
       "exceed total x memory_utilization by 2.00 KiB (2048 bytes)");
  /* A fixed pool: the blocks it needs. */
  p.memory_used_bytes = 0;
  p.num_blocks = 2;
  CHECK_STATUS(pkv_profile(&p, &b), PKV_ERR_INVALID_ARGUMENT);
  SAYS(pkv_last_error(), "num_blocks 2 cannot hold one sequence of max_model_len 64",
       "Raise num_blocks to at least 4");
  /* pkv_engine_create says the same. */
  pkv_engine *e = NULL;
  p.num_blocks = 0;
  p.memory_total_bytes = 0;
  p.kv_cache_bytes = 1024;
  CHECK_STATUS(pkv_engine_create(&p, &e), PKV_ERR_OUT_OF_MEMORY);
  SAYS(pkv_last_error(), "15.0 KiB (15360 bytes) missing", "Raise kv_cache_bytes");
  CHECK(e == NULL);
}

/* device CUDA without a usable GPU: PKV_ERR_NO_DEVICE naming the device field and the way out.
 * (On a machine with a GPU there is nothing to refuse: skipped then, said so.) */
static void test_no_device(void) {
  pkv_engine_params p;
  tu_params(&p, 16, 8);
  p.device = PKV_DEVICE_CUDA;
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  const pkv_status s = pkv_profile(&p, &b);
  if (s == PKV_OK) {
    printf("     (a CUDA GPU is usable here: no refusal to check)\n");
    return;
  }
  CHECK_STATUS(s, PKV_ERR_NO_DEVICE);
  SAYS(pkv_last_error(), "device is PKV_DEVICE_CUDA (device_id 0)", "Set device to PKV_DEVICE_CPU",
       "PKV_DEVICE_AUTO");
  pkv_engine *e = NULL;
  CHECK_STATUS(pkv_engine_create(&p, &e), PKV_ERR_NO_DEVICE);
  SAYS(pkv_last_error(), "device is PKV_DEVICE_CUDA", "Set device to PKV_DEVICE_CPU");
}

int main(void) {
  TU_RUN(test_stale_handle);
  TU_RUN(test_wrong_end);
  TU_RUN(test_small_budget);
  TU_RUN(test_no_device);
  return tu_summary();
}
