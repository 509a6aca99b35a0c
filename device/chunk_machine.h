// The state a chunk-step instruction (prefill) runs with: the kernel parameters, the whole of dynamic
// shared memory (the weight stream's ring is empty until the token steps begin), the chunk, and the
// chunk-step buffers addressed by token. Shared by the chunk ops (device/ops/chunk_*.h). Device code only.
#pragma once

#include "device/chunk_gemm.h"
#include "device/gemv.h"
#include "device/kernel_params.h"
#include "device/platform.h"
#include "runtime/matrix_format.h"

namespace mk::dev {

template <MatrixFormat Format>
struct ChunkMachine {
  static constexpr MatrixFormat kFormat = Format;
  static constexpr bool kF16 = kChunkGemmF16<Format>;  // 16-bit activations: f16, else bf16
  const KernelParams& p;
  uint8_t* smem;
  uint32_t chunk;
  int tokens;     // in this chunk (C, or fewer in the last)
  int first_pos;  // position of its token 0

  __device__ const uint8_t* matrix(uint64_t offset) const { return p.weights + offset; }
  __device__ const float* f32(uint64_t offset) const { return reinterpret_cast<const float*>(p.weights + offset); }
  // The start of row r of a layer matrix (format Format) with `cols` columns.
  __device__ const uint8_t* weight_row(uint64_t offset, int cols, int r) const {
    return p.weights + offset + size_t(r) * size_t(matrix_row_bytes(Format, cols));
  }
  // The tokens [first, first + count) of a matrix op's tile (count <= 0: the tile lies past the chunk).
  __device__ int tile_first(const Instr& in) const { return int(in.slot) * kChunkMatrixTokens; }
  __device__ int tile_count(const Instr& in) const {
    const int n = tokens - tile_first(in);
    return n < kChunkMatrixTokens ? n : kChunkMatrixTokens;
  }
  __device__ uint16_t to_act16(float v) const {
    if constexpr (kF16) {
      const __half h = __float2half_rn(v);
      uint16_t bits;
      __builtin_memcpy(&bits, &h, 2);
      return bits;
    } else {
      return float_to_bf16_bits(v);
    }
  }
};

}  // namespace mk::dev
