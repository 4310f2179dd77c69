// Fixture for tests/layers: a block manager reaching up into the engine (must be refused).
#pragma once
#include "engine.h"
