#include "tiers/store_factory.h"

#include "status.h"
#include "tiers/callback_store.h"
#include "tiers/file_store.h"
#include "tiers/redis_store.h"

namespace pkv {

std::unique_ptr<Store> make_store(const pkv_store_params &p) {
  switch (p.kind) {
    case PKV_STORE_FILE:
      return make_file_store(p);
    case PKV_STORE_REDIS:
      return make_redis_store(p);
    case PKV_STORE_CALLBACK:
      return make_callback_store(p);
    default:
      fail(PKV_ERR_INVALID_ARGUMENT, "store kind %u is not a PKV_STORE_* kind", p.kind);
  }
}

}  // namespace pkv
