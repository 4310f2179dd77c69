// Engine's retention calls (engine.h; DESIGN.md §4 "Retention"): a prefix's priority, pins, and
// the clock retention is measured by.
#include <chrono>
#include <cstdlib>

#include "engine.h"
#include "status.h"

namespace pkv {

void Engine::require_timeless(const Retention &r, const char *what) const {
  if (r.retention_ms == 0 || params_.ranks != PKV_RANKS_ONE ||
      params_.tp_size * params_.pp_size == 1)
    return;
  fail(PKV_ERR_UNSUPPORTED,
       "%s cache_retention_ms %u on an engine of one rank of %u (ranks ONE): each rank's engine "
       "reads its own clock, so a priority could run out on one rank and not on another and "
       "their evictions differ; give no deadline (0), or decide for every rank in one engine "
       "(ranks ALL, or ranks POOL engines importing its plans)",
       what, r.retention_ms, params_.tp_size * params_.pp_size);
}

uint32_t Engine::cache_set_priority(const int32_t *tokens, uint32_t n, const PrefixKeys &keys,
                                    Retention r) {
  require_timeless(r, "pkv_cache_set_priority:");
  require_no_batch("pkv_cache_set_priority");
  require_length(n);
  return blocks_.set_priority(keys, tokens, n, r);
}

uint64_t Engine::cache_pin(const int32_t *tokens, uint32_t n, const PrefixKeys &keys,
                           uint32_t *out_tokens) {
  require_no_batch("pkv_cache_pin");
  require_length(n);
  return blocks_.pin(keys, tokens, n, out_tokens);
}

void Engine::cache_unpin(uint64_t pin) {
  require_no_batch("pkv_cache_unpin");
  blocks_.unpin(pin);
}

void Engine::tick() noexcept {
  uint64_t ms = 0;
  if (params_.debug_flags & PKV_DEBUG_TEST_CLOCK) {
    // Tests set the clock (pkv.h): a decimal count of ms; anything else reads as 0.
    const char *text = std::getenv("PKV_TEST_CLOCK_MS");
    char *end = nullptr;
    const unsigned long long v = text ? std::strtoull(text, &end, 10) : 0;
    ms = text && end != text && *end == '\0' ? v : 0;
  } else {
    ms = uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
  }
  blocks_.set_now(ms);
  transfers_.set_now(ms);
  expire_holds();
}

}  // namespace pkv
