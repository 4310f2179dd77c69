/*
 * fuzz_util.h - what the libFuzzer harnesses share: a consumer of the input bytes (reads past the
 * end give zeros, so every input is a valid program) and a check that stops the run with a
 * message (libFuzzer saves the input as a crash).
 */
#ifndef PKV_FUZZ_UTIL_H
#define PKV_FUZZ_UTIL_H

#include <pkv/pkv.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const uint8_t *p;
  size_t n;
} fz_input;

static inline uint8_t fz_u8(fz_input *in) {
  if (in->n == 0) return 0;
  in->n--;
  return *in->p++;
}

static inline uint32_t fz_u32(fz_input *in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v = v << 8 | fz_u8(in);
  return v;
}

static inline uint64_t fz_u64(fz_input *in) {
  uint64_t hi = fz_u32(in);
  return hi << 32 | fz_u32(in);
}

/* 0 .. n-1 (n <= 256). */
static inline uint32_t fz_pick(fz_input *in, uint32_t n) { return n ? fz_u8(in) % n : 0; }

#define FZ_CHECK(cond, ...)                                                    \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, " (last error: \"%s\")\n", pkv_last_error());            \
      abort();                                                                 \
    }                                                                          \
  } while (0)

#endif /* PKV_FUZZ_UTIL_H */
