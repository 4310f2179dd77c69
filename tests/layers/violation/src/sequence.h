// Fixture for tests/layers.
#pragma once
#include "block_manager.h"
