// Checked arithmetic on sizes derived from parameters: a product or sum that leaves its range is
// refused with PKV_ERR_INVALID_ARGUMENT naming the field, never wrapped into a wrong figure.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "pkv/pkv.h"
#include "status.h"

namespace pkv {

// Byte counts and element offsets into the pool: kernels and pointer arithmetic index with signed
// 64-bit offsets, so nothing derived from a shape may exceed this.
constexpr uint64_t kMaxOffset = INT64_MAX;

[[noreturn]] inline void fail_range(const char *what, uint64_t limit, const std::string &terms) {
  fail(PKV_ERR_INVALID_ARGUMENT, "%s %s (%s)", what,
       limit == UINT64_MAX   ? "overflows 64 bits"
       : limit == kMaxOffset ? "exceeds 2^63-1"
                             : "is too large",
       terms.c_str());
}

// The product of factors, refused past limit. what names the field and its formula, as in
// "block_bytes = 2 x num_layers x block_size x kv_heads_per_rank x head_dim x dtype bytes"; the
// message adds the factors' values.
inline uint64_t checked_product(std::initializer_list<uint64_t> factors, uint64_t limit,
                                const char *what) {
  for (uint64_t f : factors)
    if (f == 0) return 0;  // then every partial product is representable too
  uint64_t product = 1;
  for (uint64_t f : factors)
    if (__builtin_mul_overflow(product, f, &product) || product > limit) {
      std::string terms;
      for (uint64_t g : factors) terms += (terms.empty() ? "" : " x ") + std::to_string(g);
      fail_range(what, limit, terms);
    }
  return product;
}

// a + b, refused past limit; what names the field and its formula.
inline uint64_t checked_sum(uint64_t a, uint64_t b, uint64_t limit, const char *what) {
  uint64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum) || sum > limit)
    fail_range(what, limit, std::to_string(a) + " + " + std::to_string(b));
  return sum;
}

}  // namespace pkv
