// Fixture for tests/layers.
#pragma once
