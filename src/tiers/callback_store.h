// The host's callbacks as a store (DESIGN.md §11): PKV_STORE_CALLBACK. A callback's nonzero
// return fails the call with the host's message, or a generic one.
#pragma once

#include <memory>

#include "tiers/store.h"

namespace pkv {

// Throws PKV_ERR_INVALID_ARGUMENT when p.callbacks is null or lacks get or put.
std::unique_ptr<Store> make_callback_store(const pkv_store_params &p);

}  // namespace pkv
