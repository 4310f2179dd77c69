// The store of the host's callbacks (pkv_store_callbacks, PKV_STORE_CALLBACK): each call goes
// through the host's table, copied at create.
#include "tiers/callback_store.h"

#include "status.h"

namespace pkv {
namespace {

// PKV_STORE_CALLBACK: the host's table (copied at create). A callback's nonzero return fails
// the call with its message, or a generic one.
class CallbackStore final : public Store {
 public:
  explicit CallbackStore(const pkv_store_callbacks &cb) : cb_(cb) {}
  const char *kind() const override { return "callback"; }

  StoreStatus exists(const StoreKey *keys, size_t n, uint8_t *out) override {
    for (size_t i = 0; i < n; ++i) out[i] = 0;
    if (!cb_.exists) return StoreStatus::failure("the host's store has no exists callback");
    char message[kMessageCap] = "";
    const int rc = cb_.exists(cb_.user, as_c(keys), uint32_t(n), out, message, kMessageCap);
    return result(rc, message, "exists");
  }

  // The host's get fills whole values only: found is 1 (kStoreFound) or 0.
  StoreStatus get(const StoreKey *keys, size_t n, uint8_t *values, size_t value_bytes,
                  uint8_t *found, uint32_t timeout_ms, uint64_t *held_bytes) override {
    for (size_t i = 0; i < n; ++i) found[i] = 0;
    for (size_t i = 0; held_bytes && i < n; ++i) held_bytes[i] = 0;
    char message[kMessageCap] = "";
    const int rc = cb_.get(cb_.user, as_c(keys), uint32_t(n), values, value_bytes, found,
                           timeout_ms, message, kMessageCap);
    if (rc != 0)
      for (size_t i = 0; i < n; ++i) found[i] = 0;
    for (size_t i = 0; i < n; ++i) found[i] = found[i] != 0;
    return result(rc, message, "get");
  }

  StoreStatus put(const StoreKey *keys, size_t n, const uint8_t *values,
                  size_t value_bytes) override {
    char message[kMessageCap] = "";
    const int rc =
        cb_.put(cb_.user, as_c(keys), uint32_t(n), values, value_bytes, message, kMessageCap);
    return result(rc, message, "put");
  }

 private:
  static constexpr uint32_t kMessageCap = 512;
  static_assert(sizeof(StoreKey) == sizeof(pkv_store_key), "one key layout inside and out");
  static const pkv_store_key *as_c(const StoreKey *k) {
    return reinterpret_cast<const pkv_store_key *>(k);
  }

  static StoreStatus result(int rc, char *message, const char *what) {
    if (rc == 0) return StoreStatus();
    message[kMessageCap - 1] = '\0';
    return StoreStatus::failure(std::string("the host's store ") + what + " failed (" +
                                std::to_string(rc) + ")" +
                                (message[0] ? std::string(": ") + message : std::string()));
  }

  pkv_store_callbacks cb_;
};

}  // namespace

std::unique_ptr<Store> make_callback_store(const pkv_store_params &p) {
  PKV_REQUIRE(p.callbacks != nullptr, "store kind CALLBACK needs callbacks");
  PKV_REQUIRE(p.callbacks->get && p.callbacks->put, "store callbacks: get and put are required");
  return std::make_unique<CallbackStore>(*p.callbacks);
}

}  // namespace pkv
