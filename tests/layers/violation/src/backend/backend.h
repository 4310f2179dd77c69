// Fixture for tests/layers: a backend reaching up into the sequences (must be refused).
#pragma once
#include "sequence.h"
