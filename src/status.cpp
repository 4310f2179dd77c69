#include "status.h"

#include <cstdio>
#include <vector>

namespace pkv {

void fail(pkv_status status, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string message(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(&message[0], message.size() + 1, fmt, args);
  va_end(args);
  throw Error(status, std::move(message));
}

const char *status_string(pkv_status status) {
  switch (status) {
#define PKV_STATUS_CASE_(name, value, message) \
  case value:                                  \
    return message;
    PKV_STATUS_MAP(PKV_STATUS_CASE_)
#undef PKV_STATUS_CASE_
  }
  return "unknown status";
}

}  // namespace pkv
