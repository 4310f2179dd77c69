/* Retention through the scheduler (issue 30 item 3): a request's cache_priority is kept by the
 * blocks it gives back when it finishes. A tenant's system prompt submitted at priority 2 stays
 * cached through a burst of unique prompts that evicts it under plain LRU. */
#include "test_util.h"

#include "sched_util.h"

enum { BS = 4, SYSTEM = 16 };

static uint64_t submit(pkv_engine *e, int32_t first, uint32_t n, int32_t cache_priority) {
  int32_t t[64];
  tu_fill(t, n, first);
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = 2;
  rp.cache_priority = cache_priority;
  uint64_t seq = 0;
  if (!CHECK_OK(pkv_submit(e, t, n, &rp, &seq))) return 0;
  return seq;
}

/* The system prompt's cached tokens after a burst of 12 unique prompts, its own request at
 * cache_priority. */
static uint32_t system_prompt_after_burst(int32_t cache_priority, pkv_stats *out) {
  pkv_engine *e = su_engine(BS, 32, 4, 64, 128, 1);
  if (!e) return 99;
  uint64_t sys = submit(e, 100, SYSTEM, cache_priority);
  CHECK(su_run(e, 100) > 0);
  CHECK_OK(pkv_release(e, sys));
  for (int i = 0; i < 12; ++i) submit(e, 1000 * (i + 1), 20, 0);
  CHECK(su_run(e, 400) > 0);
  int32_t t[SYSTEM + 1];
  tu_fill(t, SYSTEM, 100);
  t[SYSTEM] = 7;
  uint32_t cached = 99;
  CHECK_OK(pkv_allocate_query(e, t, SYSTEM + 1, NULL, NULL, &cached));
  *out = tu_stats(e);
  CHECK_EQ_INT(out->num_evictions_low + out->num_evictions_normal + out->num_evictions_high +
                   out->num_evictions_highest,
               out->num_evictions);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
  return cached;
}

static void test_system_prompt_kept(void) {
  pkv_stats lru, kept;
  CHECK_EQ_INT(system_prompt_after_burst(0, &lru), 0); /* plain LRU: evicted */
  CHECK(lru.num_evictions > 0);
  CHECK_EQ_INT(system_prompt_after_burst(2, &kept), SYSTEM); /* priority 2: kept */
  CHECK(kept.num_evictions > 0);
  CHECK_EQ_INT(kept.num_evictions_highest, 0);
  CHECK_EQ_INT(kept.num_evictions_normal, kept.num_evictions);
}

int main(void) {
  TU_RUN(test_system_prompt_kept);
  return tu_summary();
}
