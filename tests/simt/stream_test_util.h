// Helpers of the emulator's stream and capture tests (test_simt_stream.cpp,
// test_simt_capture.cpp). Device memory is host memory in the emulator, so the tests look at it
// directly to see what has run and what has not.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>

#include "simt_stream.h"

extern int g_failures;

#define EXPECT(cond)                                                  \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      g_failures++;                                                   \
    }                                                                 \
  } while (0)

#define EXPECT_EQ_ERR(call, want)                                                                  \
  do {                                                                                             \
    const cudaError_t got_ = (call);                                                               \
    if (got_ != (want)) {                                                                          \
      fprintf(stderr, "FAIL %s:%d: %s returned %d, expected %s (%d)\n", __FILE__, __LINE__, #call, \
              int(got_), #want, int(want));                                                        \
      g_failures++;                                                                                \
    }                                                                                              \
  } while (0)

#define EXPECT_OK(call) EXPECT_EQ_ERR(call, cudaSuccess)

// Through a void * of its own: cudaMalloc writing a void * into a T * object is type punning.
template <class T> T *dev_alloc(size_t n) {
  void *p = nullptr;
  EXPECT_OK(cudaMalloc(&p, n * sizeof(T)));
  return static_cast<T *>(p);
}

template <class T> T *pinned_alloc(size_t n) {
  void *p = nullptr;
  EXPECT_OK(cudaHostAlloc(&p, n * sizeof(T), cudaHostAllocDefault));
  return static_cast<T *>(p);
}

// True when every byte of n elements at p is 0xFF: memory nothing has written yet.
template <class T> bool unwritten(const T *p, size_t n) {
  const unsigned char *b = reinterpret_cast<const unsigned char *>(p);
  for (size_t i = 0; i < n * sizeof(T); ++i)
    if (b[i] != 0xFF) return false;
  return true;
}

// Test groups; each leaves no stream, event, graph or allocation behind.
void test_deferred_streams();
void test_capture();
