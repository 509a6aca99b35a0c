// The memory-system ceilings every benchmark prints next to its numbers (docs/benchmarks.md).
#pragma once

#include <cstddef>

namespace mk {

struct BandwidthCeilings {
  double read_gbps = 0;  // streaming read: 16-byte loads over a buffer far larger than L2, full grid
  double copy_gbps = 0;  // device-to-device copy, counting bytes read + bytes written
  size_t buffer_bytes = 0;
};

// Measures both on the current GPU (best of `reps`); throws mk::Error on a GPU error.
BandwidthCeilings measure_bandwidth(size_t buffer_bytes = size_t(4) << 30, int reps = 7);

}  // namespace mk
