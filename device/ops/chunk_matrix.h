// What the chunk steps' matrix ops (chunk_qkv, chunk_o_proj, chunk_gate_up, chunk_down) share: the
// shared memory of one tensor-core tile (device/chunk_gemm.h) and the call that runs an instruction's
// tile: rows = the tile's tokens of a 16-bit activation buffer, columns = weight rows.
#pragma once

#include "device/chunk_gemm.h"
#include "device/ops/op_spec.h"
#if MK_DEVICE_CODE
#include "device/chunk_machine.h"
#endif

namespace mk::dev {

static_assert(ChunkGemmTile::kM == kChunkMatrixTokens && ChunkGemmTile::kN == kChunkMatrixCols &&
                  kChunkMatrixCols * kChunkWideFactor <= kChunkGemmMaxCols,
              "the schedule's chunk tiles (runtime/schedule.h) are the device tile's");

// Floats of shared memory a matrix instruction's tile of `cols` weight rows needs.
inline size_t chunk_matrix_smem_floats(uint32_t cols) { return (chunk_gemm_smem_bytes(int(cols)) + 3) / 4; }

// The base of the matrix ops: their shared memory, by the tile's weight rows (gate_up's are twice its
// columns of h). The chunk kernel inlines their bodies into its loop: the warpgroup products are
// asynchronous, and ptxas serialises every one of them in a function that the kernel calls.
struct ChunkMatrixOp : OpDefaults {
  static size_t smem_floats(const ModelDims&, const Instr& in) { return chunk_matrix_smem_floats(in.end - in.begin); }
};

#if MK_DEVICE_CODE
// The instruction's tile: its tokens' rows of `act` (row stride `act_cols`, K columns used) times the
// weight rows `weight_row(n)`, n < n_valid; epilogue(token, n, v0, v1) for columns n, n + 1 (n even).
template <class MachineT, class WeightRow, class Epilogue>
__device__ __forceinline__ void chunk_matrix_tile(MachineT& m, const Instr& in, const uint16_t* act, int act_cols, int K, WeightRow weight_row,
                                  int n_valid, Epilogue epilogue) {
  const int first = m.tile_first(in), count = m.tile_count(in);
  if (count <= 0) return;  // the last chunk is shorter: this tile has no tokens
  chunk_gemm_tile<MachineT::kFormat>(
      [&](int r) { return act + size_t(first + r) * size_t(act_cols); }, count, weight_row, n_valid, K, m.smem,
      [&](int r, int n, float v0, float v1) { epilogue(first + r, n, v0, v1); });
}

// The residual ops' tile (o_proj, down): residual columns [begin, end) of the tile's tokens += their rows
// of `act` (K columns used) times the rows [begin, end) of the layer matrix at `weights`; with
// kWritesProjected (post-norm layers) the products are stored to the chunk's projected rows instead.
template <class MachineT>
__device__ __forceinline__ void chunk_residual_tile(MachineT& m, const Instr& in, const uint16_t* act, int act_cols, int K, uint64_t weights) {
  chunk_matrix_tile(
      m, in, act, act_cols, K, [&](int n) { return m.weight_row(weights, K, int(in.begin) + n); }, int(in.end - in.begin),
      [&](int t, int n, float v0, float v1) {
        // Read here, after the products: held across them, the choice made the quantized kernels spill more.
        const bool projected = in.flags & kWritesProjected;
        float* x = (projected ? m.p.chunk_projected : m.p.chunk_x) + in.begin;
        float2* r = reinterpret_cast<float2*>(x + size_t(t) * size_t(m.p.dims.hidden) + n);
        const float2 old = projected ? make_float2(0.f, 0.f) : load_fresh(r);
        *r = make_float2(old.x + v0, old.y + v1);
      });
}
#endif

}  // namespace mk::dev
