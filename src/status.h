// Statuses inside pkv: code throws pkv::Error; api.cpp's guard turns it into a pkv_status and
// a message. The values and strings come from the one list in pkv.h (PKV_STATUS_MAP).
#pragma once

#include <cstdarg>
#include <stdexcept>
#include <string>

#include "pkv/pkv.h"

namespace pkv {

class Error : public std::runtime_error {
 public:
  Error(pkv_status status, std::string message)
      : std::runtime_error(std::move(message)), status_(status) {}
  pkv_status status() const { return status_; }

 private:
  pkv_status status_;
};

// printf-style message; throws Error(status, message).
[[noreturn]] void fail(pkv_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

const char *status_string(pkv_status status);

}  // namespace pkv

// Argument checks read as sentences: PKV_REQUIRE(n > 0, "num_tokens must be > 0, got %u", n).
#define PKV_REQUIRE(cond, ...)                                       \
  do {                                                               \
    if (!(cond)) ::pkv::fail(PKV_ERR_INVALID_ARGUMENT, __VA_ARGS__); \
  } while (0)

// Internal consistency: a violation is a pkv bug, reported as PKV_ERR_INTERNAL, never an abort.
#define PKV_ASSERT(cond)                                                                  \
  do {                                                                                    \
    if (!(cond))                                                                          \
      ::pkv::fail(PKV_ERR_INTERNAL, "internal check failed: %s (%s:%d)", #cond, __FILE__, \
                  __LINE__);                                                              \
  } while (0)
