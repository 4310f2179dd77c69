// Where a store is chosen (DESIGN.md §11): pkv_store_params.kind names one of the stores beside
// store.h. The interface (store.h) knows none of its implementations; this is the one place
// that knows them all, for the store tier and store administration.
#pragma once

#include <memory>

#include "tiers/store.h"

namespace pkv {

// The store pkv_store_params describe (kind FILE, REDIS or CALLBACK). Throws
// PKV_ERR_INVALID_ARGUMENT for bad parameters and PKV_ERR_STORE (with the reason) when the store
// cannot be reached or opened at all (a missing directory that cannot be made, a refused
// connection, a wrong password).
std::unique_ptr<Store> make_store(const pkv_store_params &p);

}  // namespace pkv
