// One workgroup's tile of C = A * B^T for prompt prefill, 128 rows by up to 256 columns, fp32
// accumulation: A holds a chunk's activations (M rows of K, row-major), B weight rows (N rows of K,
// row-major: B^T column-major). Three paths with one interface (chunk_gemm_tile):
// - Hopper (MK_WGMMA, sm_90a): warpgroup products, wgmma.mma_async m64n128k16 reading both operands from
//   shared memory (chunk_gemm_tile_wgmma; 128 x 128 and 128 x 256 tiles): 411 / 471 TFLOPS on an H200 at
//   M = 1024, K = 4096, N = 14336 (tests/gpu/chunk_gemm_check.cu; docs/performance.md).
// - Other NVIDIA targets (MK_WARP_MMA): mma.sync m16n8k16 with ldmatrix, 128 x 128 (chunk_gemm_tile_mma;
//   285 TFLOPS there), a wider tile run as two.
// - Elsewhere: an FMA loop, the same result up to summation order.
// The weight rows may be of any matrix format: quantized ones are expanded to bf16 on their way into
// shared memory (device/weight_pieces.h).
// Both tensor-core paths stage their operands with one cp.async pipeline (TileCopies): 128-byte rows (kK
// = 64 16-bit values) whose 16-byte chunks are XOR-swizzled by row, which is both what keeps ldmatrix and
// the copies free of bank conflicts without padding and the 128-byte swizzle wgmma's descriptors name.
//
// The warp path's layout (ChunkGemmShape): with kWarpsK = 2 the 16 warps form two groups of 8 that split
// every k-tile's 16-deep steps (group g takes steps g, g + 2, ...), each warp owning a 64 x 32 piece of C;
// with 1 (the default, ChunkGemmTile) 16 warps of 32 x 32. The warps' fragments are double-buffered and
// the barrier of each k-tile sits before its last MMAs (see the loop).
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/kernel_params.h"
#include "runtime/matrix_format.h"

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
#define MK_CHUNK_GEMM_DEVICE 1
#include "device/async_copy.h"
#include "device/platform.h"
#include "device/tensor_core.h"
#include "device/warpgroup_mma.h"
#include "device/weight_pieces.h"
#else
#define MK_CHUNK_GEMM_DEVICE 0
#endif

namespace mk::dev {

// A tile shape of the tensor-core path: kK elements of K per pipeline stage, kStages stages, kWarpsK warp
// groups splitting K (1: 4 x 4 warps of 32 x 32; 2: two groups of 2 x 4 warps of 64 x 32, as above).
template <int K_, int Stages_, int WarpsK_>
struct ChunkGemmShape {
  static constexpr int kM = 128, kN = 128, kK = K_, kStages = Stages_, kWarpsK = WarpsK_;
  static constexpr int kRowBytes = kK * 2;
  static constexpr int kStageBytes = (kM + kN) * kRowBytes;
  // After the loop the pipeline's area holds the partial sums of warp groups 1.. for group 0 to add.
  static constexpr int kReduceBytes = (kWarpsK - 1) * kM * kN * 4;
  // The FMA path stages 32 columns of A and B as floats, rows padded to 33 (odd: column reads of
  // consecutive rows hit distinct banks).
  static constexpr int kFmaK = 32, kFmaStride = kFmaK + 1;
  static constexpr int kFmaBytes = 2 * kM * kFmaStride * 4;
  static constexpr int kPipeBytes = kStages * kStageBytes;
  static constexpr int kMax2 = kPipeBytes > kReduceBytes ? kPipeBytes : kReduceBytes;
  static constexpr size_t kSmemBytes = size_t(kMax2 > kFmaBytes ? kMax2 : kFmaBytes);
  static_assert(kK == 32 || kK == 64, "the swizzle and the copies' chunks cover 64- and 128-byte rows");
  static_assert(kStages >= 2 && kStages <= 4, "wait_async_groups takes at most 3 groups in flight");
  static_assert(kWarpsK == 1 || kWarpsK == 2, "one or two warp groups along K");
  static_assert((kK / 16 / kWarpsK) % 2 == 0, "each warp group takes an even number of 16-deep steps a k-tile");
};

struct ChunkGemmTile : ChunkGemmShape<64, 3, 1> {};

// The warpgroup (wgmma) path's tiles: 128 x kN (128 or 256), k-tiles of 64 in kStages stages of 128-byte
// rows (the 128-byte swizzle the products' descriptors name), plus the slack that aligns the stages to
// 1024 bytes. Warpgroup g takes rows 64 (g % 2) .. + 63 of the tile. 128 x 128: warpgroups g and g + 2
// share those rows and all 128 columns and split every k-tile's four 16-deep steps (g / 2 picks a pair),
// their sums added once through shared memory at the end; 128 x 256: warpgroup g takes columns
// 128 (g / 2) .. + 127 and all four steps. Either way each warpgroup runs m64n128k16 products.
template <int N_, int Stages_ = 4>
struct ChunkGemmWgmmaShape {
  static constexpr int kM = 128, kN = N_, kK = 64, kStages = Stages_;
  static constexpr int kAhead = kStages - 2;  // k-tiles copied ahead of the one the products read
  static constexpr int kSplitK = 256 / kN;  // warpgroups sharing a 64 x 128 block of the tile
  static constexpr int kRowBytes = kK * 2;
  static constexpr int kStageBytes = (kM + kN) * kRowBytes;
  static constexpr int kAlign = 1024;
  static constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes + kAlign;
  static_assert(kN == 128 || kN == 256, "four warpgroups of m64n128 blocks");
  static_assert(kStages >= 3 && kStages <= 5, "wait_async_groups takes at most 3 groups in flight");
};

// The widest tile chunk_gemm_tile takes: 128 x kChunkGemmMaxCols. Paths whose tiles are narrower (the
// warp-level and FMA ones, 128 x 128) run a wide tile as two.
inline constexpr int kChunkGemmMaxCols = 256;

// Whether chunk_gemm_tile runs a tile of more than 128 columns at once for weights of format f, and so
// whether a chunk schedule should give such layers wide tiles (ScheduleParams::chunk_wide_tiles): 16-bit
// rows only. Quantized rows are expanded by the copying threads, whose registers the wide tile leaves too
// few of; it runs as two narrow ones, and the narrow schedule leaves the kernel more L1 (docs/performance.md).
MK_HD_INLINE constexpr bool chunk_gemm_wide_tiles(MatrixFormat f) { return !matrix_format_quantized(f); }

// Dynamic shared memory of chunk_gemm_tile for tiles of up to `cols` columns, bytes: enough for every
// path (the warpgroup path's: 129 KiB up to 128 columns, 193 KiB up to 256). The same on every platform,
// because the host's plan (device/kernel_plan.cpp) is compiled without the device's platform macros.
MK_HD_INLINE constexpr size_t chunk_gemm_smem_bytes(int cols = kChunkGemmMaxCols) {
  const size_t wgmma = cols > 128 ? ChunkGemmWgmmaShape<256>::kSmemBytes : ChunkGemmWgmmaShape<128>::kSmemBytes;
  return wgmma > ChunkGemmTile::kSmemBytes ? wgmma : ChunkGemmTile::kSmemBytes;
}
static_assert(chunk_gemm_smem_bytes() <= 200 * 1024 && chunk_gemm_smem_bytes(128) <= 130 * 1024, "the tile's shared memory budget");

#if MK_CHUNK_GEMM_DEVICE

// The products' 16-bit type for weights of format kW: f16 for f16 weights, else bf16 (the activations
// are stored in it; quantized weights are expanded to bf16, WeightPieces).
template <MatrixFormat kW>
inline constexpr bool kChunkGemmF16 = kW == MatrixFormat::F16;

namespace chunk_gemm_detail {

#if MK_WARP_MMA
// mma_k16 (tensor_core.h) for bf16, or its f16 form.
template <bool kF16>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b_lo, uint32_t b_hi) {
  mma_k16_as<kF16>(c, a, b_lo, b_hi);
}

// Byte offset within its row of 16-byte chunk `c` of row `r`. 128-byte rows (and longer): chunk c ^ (r % 8),
// so 8 consecutive rows put a given chunk in 8 distinct bank quads. 64-byte rows (two to a 128-byte line):
// chunk c ^ (r / 2 % 4), the same for the 8 rows of two lines. Only r % 8 matters, so offsets of rows 8
// apart differ by whole rows.
template <int kK>
__device__ __forceinline__ uint32_t swizzled_chunk(int r, int c) {
  if constexpr (kK == 32) return uint32_t(c ^ ((r >> 1) & 3)) << 4;
  else return uint32_t(c ^ (r & 7)) << 4;
}

// How a tile's stages are filled from global memory by all kThreads threads: thread t fills row t / 4 of
// A and rows t / 4 + 128 h of B (h < S::kN / 128), chunks t % 4 + 4 j (copy i takes j = (i + row) %
// kCopies: the two rows of 8 consecutive threads then write opposite halves of the 128-byte bank line,
// whatever the swizzle), each at its swizzled place. A stage holds S::kM rows of A, then S::kN rows of B,
// S::kRowBytes each. Rows past m_valid / n_valid are zeroed once in every stage (zero_rows) and never
// copied. A and 16-bit B rows go with cp.async. Quantized B rows (WeightPieces) go through registers:
// the pieces of k-tile kt + 1 are fetched when tile kt is stored, so their loads run while the products
// of earlier tiles do; the stages must therefore be loaded in order, 0, 1, 2, ...
template <class S, MatrixFormat kW>
struct TileCopies {
  using W = WeightPieces<kW>;
  static constexpr int kCopies = S::kK / 32;  // 16-byte copies per thread, stage and row: 4 threads a row
  static constexpr int kHalves = S::kN / S::kM;
  static_assert(kThreads == 4 * S::kM && S::kN % S::kM == 0, "a row of A and kHalves rows of B for each group of 4 threads");
  static_assert(W::kCopied || matrix_scale_group(kW) % S::kK == 0, "a k-tile's pieces share one group");
  struct Held {  // quantized B: one row's pieces of the next k-tile, and their group
    typename W::Piece piece[kCopies];
    typename W::Group group;
  };
  int chunk[kCopies];
  uint32_t so[kCopies];          // byte offset in the stage's A tile (B's rows: plus whole 128-row blocks)
  const uint16_t* ga;            // the first copy's chunk of the thread's row (null: past the valid rows)
  const uint8_t* gb[kHalves];    // its B rows: the first copy's chunk (16-bit) or the row (quantized)
  Held held[W::kCopied ? 1 : kHalves];
  int K;

  template <class RowA, class RowB>
  __device__ __forceinline__ TileCopies(RowA a_row, int m_valid, RowB b_row, int n_valid, int K_) : K(K_) {
    const int t = int(threadIdx.x), row = t / 4;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      chunk[i] = t % 4 + 4 * ((i + row) % kCopies);
      so[i] = uint32_t(row * S::kRowBytes) + swizzled_chunk<S::kK>(row, chunk[i]);
    }
    ga = row < m_valid ? a_row(row) + chunk[0] * 8 : nullptr;
#pragma unroll
    for (int h = 0; h < kHalves; ++h)
      gb[h] = row + S::kM * h < n_valid ? b_row(row + S::kM * h) + (W::kCopied ? chunk[0] * 16 : 0) : nullptr;
    if constexpr (!W::kCopied) fetch(0);
  }
  __device__ static __forceinline__ uint8_t* b_block(uint8_t* stage, int h) { return stage + (S::kM + S::kM * h) * S::kRowBytes; }
  __device__ __forceinline__ void zero_rows(uint8_t* smem) const {
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int s = 0; s < S::kStages; ++s) {
      uint8_t* stage = smem + s * S::kStageBytes;
#pragma unroll
      for (int i = 0; i < kCopies; ++i) {
        if (!ga) *reinterpret_cast<uint4*>(stage + so[i]) = zero;
#pragma unroll
        for (int h = 0; h < kHalves; ++h)
          if (!gb[h]) *reinterpret_cast<uint4*>(b_block(stage, h) + so[i]) = zero;
      }
    }
  }
  // Quantized B: k-tile kt's pieces of the thread's rows into registers (none past K).
  __device__ __forceinline__ void fetch(int kt) {
    const int p0 = kt * (S::kK / 8);
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      if (!gb[h] || p0 * 8 >= K) continue;
      held[h].group = W::group(gb[h], K, p0);
#pragma unroll
      for (int i = 0; i < kCopies; ++i)
        if ((p0 + chunk[i]) * 8 < K) held[h].piece[i] = W::fetch(gb[h], p0 + chunk[i]);
    }
  }
  // The stage at `stage` gets k-tile `kt`; chunks past K (K a multiple of 8, not of kK) get zeros,
  // written over whatever an earlier tile left there.
  __device__ __forceinline__ void load(uint8_t* stage, int kt) {
    const int k0 = kt * S::kK;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    auto copy = [&](uint8_t* dst, const uint16_t* src, int i) {
      if (!src) return;
      if (k0 + chunk[i] * 8 < K) copy_async_16(dst, src + k0 + (chunk[i] - chunk[0]) * 8);
      else *reinterpret_cast<uint4*>(dst) = zero;
    };
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      copy(stage + so[i], ga, i);
#pragma unroll
      for (int h = 0; h < kHalves; ++h) {
        if constexpr (W::kCopied) {
          copy(b_block(stage, h) + so[i], reinterpret_cast<const uint16_t*>(gb[h]), i);
        } else if (gb[h]) {
          *reinterpret_cast<uint4*>(b_block(stage, h) + so[i]) =
              k0 + chunk[i] * 8 < K ? W::expand(held[h].piece[i], held[h].group) : zero;
        }
      }
    }
    if constexpr (!W::kCopied) fetch(kt + 1);
  }
};
#endif

}  // namespace chunk_gemm_detail

// The FMA path (every platform; the only one where MK_WARP_MMA is 0). Thread t owns the column pair 2 (t %
// 64) and rows t / 64 + 8 i (i < 16); each k-tile of 32 is staged as floats. A is read with load_fresh (it
// may come from other workgroups of the same launch), B with load_weight (WeightPieces).
template <MatrixFormat kW, class RowA, class RowB, class Epilogue>
__device__ void chunk_gemm_tile_fma(RowA a_row, int m_valid, RowB b_row, int n_valid, int K, uint8_t* smem, Epilogue epilogue) {
  using S = ChunkGemmTile;
  constexpr bool kF16 = kChunkGemmF16<kW>;
  constexpr int kK = S::kFmaK, kStride = S::kFmaStride, kRows = 16;
  static_assert(kThreads * 8 == S::kM * kK && kThreads == 8 * S::kN / 2, "a 16-byte piece of each matrix a thread; 16 x 2 outputs");
  float* sa = reinterpret_cast<float*>(smem);
  float* sb = sa + S::kM * kStride;
  const int t = int(threadIdx.x);
  const int sr = t / 4, sc = (t % 4) * 8;  // the piece this thread stages: row sr, columns sc..sc+7
  const uint16_t* pa = sr < m_valid ? a_row(sr) + sc : nullptr;
  const uint8_t* pb = sr < n_valid ? b_row(sr) : nullptr;
  auto b_piece = [&](int k0) { return weight_piece16<kW>(pb, K, (k0 + sc) / 8); };  // the row's 8 values at k0 + sc
  const int pair = t % (S::kN / 2), row0 = t / (S::kN / 2);
  float acc[kRows][2] = {};
  auto stage = [](float* dst, uint4 w) {
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (kF16) {
        const float2 f = half2_bits_to_float2(words[i]);
        dst[2 * i] = f.x, dst[2 * i + 1] = f.y;
      } else {
        dst[2 * i] = __uint_as_float(words[i] << 16), dst[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
      }
    }
  };
  for (int k0 = 0; k0 < K; k0 += kK) {
    const bool in_k = k0 + sc < K;  // K is a multiple of 8: a piece is wholly in or out
    const uint4 zero = make_uint4(0, 0, 0, 0);
    stage(sa + sr * kStride + sc, pa && in_k ? load_fresh(reinterpret_cast<const uint4*>(pa + k0)) : zero);
    stage(sb + sr * kStride + sc, pb && in_k ? b_piece(k0) : zero);
    __syncthreads();
#pragma unroll 4
    for (int k = 0; k < kK; ++k) {
      const float b0 = sb[2 * pair * kStride + k], b1 = sb[(2 * pair + 1) * kStride + k];
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const float a = sa[(row0 + 8 * i) * kStride + k];
        acc[i][0] = fmaf(a, b0, acc[i][0]);
        acc[i][1] = fmaf(a, b1, acc[i][1]);
      }
    }
    __syncthreads();
  }
  const int n = 2 * pair;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int m = row0 + 8 * i;
    if (m < m_valid && n < n_valid) epilogue(m, n, acc[i][0], acc[i][1]);
  }
}

#if MK_WARP_MMA
// The tensor-core path for a given shape (chunk_gemm_tile uses ChunkGemmTile).
template <class S, MatrixFormat kW, class RowA, class RowB, class Epilogue>
__device__ __forceinline__ void chunk_gemm_tile_mma(RowA a_row, int m_valid, RowB b_row, int n_valid, int K, uint8_t* smem,
                                                    Epilogue epilogue) {
  using chunk_gemm_detail::swizzled_chunk;
  constexpr bool kF16 = kChunkGemmF16<kW>;
  constexpr int kK = S::kK, kRowBytes = S::kRowBytes, kStages = S::kStages, kWK = S::kWarpsK;
  constexpr int kWarps = kThreads / 32, kGroupWarps = kWarps / kWK;
  constexpr int kWarpsN = 4, kWarpsM = kGroupWarps / kWarpsN;
  constexpr int kTM = S::kM / kWarpsM, kTN = S::kN / kWarpsN;  // a warp's piece of C
  constexpr int kMI = kTM / 16, kNJ = kTN / 8;                 // its m16 and n8 tiles
  constexpr int kSteps = kK / 16 / kWK;                        // 16-deep steps per k-tile per warp group
  static_assert(kNJ % 2 == 0, "B fragments come two n8 tiles an ldmatrix_x4");
  static_assert(kSteps % 2 == 0 && kStages <= 4, "fragments alternate between two sets; wait_async_groups");

  const int t = int(threadIdx.x), lane = t % 32, warp = t / 32;
  const int group = warp / kGroupWarps, wi = warp % kGroupWarps;
  const int wm = wi / kWarpsN, wn = wi % kWarpsN;

  chunk_gemm_detail::TileCopies<S, kW> copies(a_row, m_valid, b_row, n_valid, K);
  copies.zero_rows(smem);
  auto load = [&](int s, int kt) { copies.load(smem + s * S::kStageBytes, kt); };

  // ldmatrix addresses. A (m16 x k16, matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15)):
  // lane l gives row l % 8 + 8 (l / 8 % 2) at k-chunk l / 16. B (two n8 tiles: (n 0-7, k 0-7), (0-7,
  // 8-15), (8-15, 0-7), (8-15, 8-15)): row l % 8 + 8 (l / 16) at k-chunk l / 8 % 2. A 16-deep step is two
  // chunks; this group's step j of a k-tile is step j * kWK + group, whose chunks differ from step 0's by
  // 2 j kWK, a bit above the ones the swizzle and the lane's chunk touch: an XOR of the offset.
  const uint32_t base = shared_address(smem);
  const int a_r = wm * kTM + lane % 8 + 8 * (lane / 8 % 2);
  const int b_r = wn * kTN + lane % 8 + 8 * (lane / 16);
  const uint32_t a_col = uint32_t(a_r * kRowBytes) + swizzled_chunk<kK>(lane, 2 * group + lane / 16);
  const uint32_t b_col = uint32_t(S::kM * kRowBytes + b_r * kRowBytes) + swizzled_chunk<kK>(lane, 2 * group + lane / 8 % 2);
  static_assert(kWK == 1 || kWK == 2, "step chunks as bits above 2 group + the lane's chunk");

  float acc[kMI][kNJ][4];
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNJ; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

  struct Frags {
    uint32_t a[kMI][4], b[kNJ][2];
  };
  auto load_frags = [&](Frags& f, uint32_t stage, int j) {
    const uint32_t step = uint32_t(2 * j * kWK) << 4;
#pragma unroll
    for (int n = 0; n < kNJ / 2; ++n) {
      uint32_t r[4];
      ldmatrix_x4(r, stage + (b_col ^ step) + uint32_t(n * 16 * kRowBytes));
      f.b[2 * n][0] = r[0], f.b[2 * n][1] = r[1], f.b[2 * n + 1][0] = r[2], f.b[2 * n + 1][1] = r[3];
    }
#pragma unroll
    for (int i = 0; i < kMI; ++i) ldmatrix_x4(f.a[i], stage + (a_col ^ step) + uint32_t(i * 16 * kRowBytes));
  };
  auto mma_frags = [&](const Frags& f) {
#pragma unroll
    for (int i = 0; i < kMI; ++i)
#pragma unroll
      for (int n = 0; n < kNJ; ++n) chunk_gemm_detail::mma<kF16>(acc[i][n], f.a[i], f.b[n][0], f.b[n][1]);
  };

  // The pipeline: every stage is filled from the start. The barrier that publishes tile kt + 1 comes once
  // each warp has read its last fragments of tile kt but before their MMAs: tile kt's stage is refilled at
  // once (with tile kt + kStages), and tile kt + 1's first fragments load while those MMAs run. Empty
  // groups are committed too, so that the count a wait leaves in flight stays fixed.
  const int tiles = (K + kK - 1) / kK;
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    if (s < tiles) load(s, s);
    commit_async_group();
  }
  wait_async_groups(kStages - 1);
  __syncthreads();
  Frags f[2];
  load_frags(f[0], base, 0);
  int read_stage = 0;
  for (int kt = 0; kt < tiles; ++kt) {
    const uint32_t stage = base + uint32_t(read_stage * S::kStageBytes);
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      if (j + 1 < kSteps) {
        load_frags(f[(j + 1) % 2], stage, j + 1);
      } else if (kt + 1 < tiles) {
        wait_async_groups(kStages - 2);
        __syncthreads();
        if (kt + kStages < tiles) load(read_stage, kt + kStages);
        commit_async_group();
        read_stage = read_stage == kStages - 1 ? 0 : read_stage + 1;
        load_frags(f[0], base + uint32_t(read_stage * S::kStageBytes), 0);
      }
      mma_frags(f[j % 2]);
    }
  }
  wait_async_groups(0);  // only empty groups remain; the area is reused below or by the caller
  __syncthreads();

  if constexpr (kWK == 2) {
    // Group 1's sums, [warp][register][lane] (consecutive lanes, consecutive words), for group 0 to add.
    float* red = reinterpret_cast<float*>(smem) + wi * (kMI * kNJ * 4 * 32) + lane;
    if (group == 1) {
#pragma unroll
      for (int i = 0; i < kMI; ++i)
#pragma unroll
        for (int n = 0; n < kNJ; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) red[((i * kNJ + n) * 4 + e) * 32] = acc[i][n][e];
    }
    __syncthreads();
    if (group == 0) {
#pragma unroll
      for (int i = 0; i < kMI; ++i)
#pragma unroll
        for (int n = 0; n < kNJ; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][n][e] += red[((i * kNJ + n) * 4 + e) * 32];
    }
  }
  if (group == 0) {
    // C fragment: c[0], c[1] are row lane / 4, columns 2 (lane % 4) + {0, 1}; c[2], c[3] row + 8.
#pragma unroll
    for (int i = 0; i < kMI; ++i) {
      const int m = wm * kTM + i * 16 + lane / 4;
#pragma unroll
      for (int n8 = 0; n8 < kNJ; ++n8) {
        const int n = wn * kTN + n8 * 8 + 2 * (lane % 4);
        if (n < n_valid) {  // n_valid is even: n + 1 is valid too
          if (m < m_valid) epilogue(m, n, acc[i][n8][0], acc[i][n8][1]);
          if (m + 8 < m_valid) epilogue(m + 8, n, acc[i][n8][2], acc[i][n8][3]);
        }
      }
    }
  }
  if constexpr (kWK == 2) __syncthreads();  // group 0 has read the partial sums
}
#endif

#if MK_WGMMA
// The warpgroup path (ChunkGemmWgmmaShape<kN>). All threads copy (TileCopies, as the warp path); k-tile
// kt + 2 is copied while the products of tiles kt and kt - 1 run. Each k-tile: the copies of tile kt have
// landed and are made visible to the products' proxy, one barrier publishes them (and says that every
// warpgroup's products of tile kt - 2 are done, so its stage, (kt + 2) % 4, may be refilled), then each
// warpgroup issues its steps of tile kt and waits until only those are running.
template <class S, MatrixFormat kW, class RowA, class RowB, class Epilogue>
__device__ __forceinline__ void chunk_gemm_tile_wgmma(RowA a_row, int m_valid, RowB b_row, int n_valid, int K, uint8_t* smem_in,
                                                      Epilogue epilogue) {
  constexpr bool kF16 = kChunkGemmF16<kW>;
  constexpr int kSplitK = S::kSplitK, kSteps = 4 / kSplitK;  // a warpgroup's 16-deep steps of a k-tile
  constexpr int kAhead = S::kAhead;
  static_assert(kThreads == 512, "four warpgroups");
  const int t = int(threadIdx.x), group = t / 128, half = group % 2, second = group / 2;
  const int part = kSplitK > 1 ? second : 0;      // which of the k-tile's steps (128 x 128)
  const int col0 = kSplitK > 1 ? 0 : 128 * second;  // the warpgroup's first column (128 x 256)
  uint8_t* smem = smem_in + ((S::kAlign - (shared_address(smem_in) & (S::kAlign - 1))) & (S::kAlign - 1));
  const uint32_t base = shared_address(smem);

  chunk_gemm_detail::TileCopies<S, kW> copies(a_row, m_valid, b_row, n_valid, K);
  copies.zero_rows(smem);
  const int tiles = (K + S::kK - 1) / S::kK;
  for (int s = 0; s < kAhead; ++s) {
    if (s < tiles) copies.load(smem + s * S::kStageBytes, s);
    commit_async_group();
  }
  // Tile 0's first product overwrites the accumulators (no zeros written before: a register write
  // where a product may still run makes ptxas serialise the products).
  float acc[64];
  auto tile = [&](int kt, int accumulate) {
    wait_async_groups(kAhead - 1);  // this thread's copies of tile kt (later tiles' may be in flight)
    fence_proxy_async_shared();
    __syncthreads();
    if (kt + kAhead < tiles) copies.load(smem + ((kt + kAhead) % S::kStages) * S::kStageBytes, kt + kAhead);
    commit_async_group();
    const uint32_t stage = base + uint32_t((kt % S::kStages) * S::kStageBytes);
    const uint32_t a = stage + uint32_t(half * 64 * S::kRowBytes), b = stage + uint32_t((S::kM + col0) * S::kRowBytes);
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      const uint32_t step = uint32_t((kSplitK * j + part) * 32);  // 16 elements of 2 bytes
      wgmma_m64n128k16<kF16>(acc, wgmma_desc_sw128(a + step), wgmma_desc_sw128(b + step), j == 0 ? accumulate : 1);
    }
    wgmma_commit();
    wgmma_wait<1>();  // no fence of the accumulators here: the product still running owns them
  };
  tile(0, 0);
  for (int kt = 1; kt < tiles; ++kt) tile(kt, 1);
  wgmma_wait<0>();
  wgmma_fence_operands(acc);
  wait_async_groups(0);  // only empty groups remain; the area is reused below
  __syncthreads();

  // The tile goes to shared memory (the pipeline's area), fp32, rows of kN + 4 floats (the pad spreads
  // the fragment stores' rows over the banks); 128 x 128: the second pair stores, the first adds its sums
  // to them. Then every thread runs the epilogue on consecutive column pairs of a row, the accumulators
  // dead by then (the kernel runs this body inline, so the two phases must not hold registers at once).
  constexpr int kN = S::kN, kStride = kN + 4;
  static_assert(S::kM * kStride * 4 <= S::kStages * S::kStageBytes, "the fp32 tile fits in the pipeline's area");
  float* tile_out = reinterpret_cast<float*>(smem);
  const int lane = t % 32, warp = t % 128 / 32;
  const int m0 = half * 64 + warp * 16 + lane / 4;
  auto put = [&](bool add) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int n = col0 + 8 * j + 2 * (lane % 4);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float2* at = reinterpret_cast<float2*>(tile_out + (m0 + 8 * r) * kStride + n);
        float2 v = make_float2(acc[4 * j + 2 * r], acc[4 * j + 2 * r + 1]);
        if (add) {
          const float2 o = *at;
          v.x += o.x, v.y += o.y;
        }
        *at = v;
      }
    }
  };
  if constexpr (kSplitK > 1) {
    if (second == 1) put(false);
    __syncthreads();
    if (second == 0) put(true);
  } else {
    put(false);
  }
  __syncthreads();
  for (int idx = t; idx < m_valid * (kN / 2); idx += kThreads) {
    const int m = idx / (kN / 2), n = 2 * (idx % (kN / 2));
    if (n < n_valid) {  // n_valid is even: n + 1 is valid too
      const float2 v = *reinterpret_cast<const float2*>(tile_out + m * kStride + n);
      epilogue(m, n, v.x, v.y);
    }
  }
  __syncthreads();  // every thread is done with the tile in shared memory
}
#endif

// A tile of n_valid columns as 128-column ones, one after another: run(b_row, n_valid, epilogue) for each,
// with its own weight rows and columns.
template <class RowB, class Epilogue, class Run>
__device__ __forceinline__ void for_each_narrow_tile(RowB b_row, int n_valid, Epilogue epilogue, Run run) {
  for (int n0 = 0; n0 < n_valid; n0 += 128) {
    auto b = [&](int n) { return b_row(n0 + n); };
    auto epi = [&](int m, int n, float v0, float v1) { epilogue(m, n0 + n, v0, v1); };
    run(b, n_valid - n0 < 128 ? n_valid - n0 : 128, epi);
  }
}

// chunk_gemm_tile on the 128 x 128 tiles of the warp-level path (the FMA path where that is absent).
template <MatrixFormat kW, class RowA, class RowB, class Epilogue>
__device__ void chunk_gemm_tile_narrow(RowA a_row, int m_valid, RowB b_row, int n_valid, int K, uint8_t* smem, Epilogue epilogue) {
  for_each_narrow_tile(b_row, n_valid, epilogue, [&](auto b, int nv, auto epi) {
#if MK_WARP_MMA
    chunk_gemm_tile_mma<ChunkGemmTile, kW>(a_row, m_valid, b, nv, K, smem, epi);
#else
    chunk_gemm_tile_fma<kW>(a_row, m_valid, b, nv, K, smem, epi);
#endif
  });
}

// The tile C = A * B^T (128 rows x up to kChunkGemmMaxCols columns, fp32 accumulation). B holds weight
// rows of format kW; A is 16-bit of the products' type (kChunkGemmF16<kW>: f16 for f16 weights, else
// bf16). a_row(m) (m < m_valid <= 128): const uint16_t* to row m of A, K elements; b_row(n) (n < n_valid
// <= kChunkGemmMaxCols): const uint8_t* to the start of row n of B, a row of K columns in format kW
// (runtime/matrix_format.h; a quantized element counts as its bf16 rounding, device/weight_pieces.h);
// both 16-byte aligned; rows past m_valid / n_valid count as zero. K: a positive multiple of 8 (the
// callers' multiples of 32 included) and of matrix_cols_multiple(kW). n_valid: even.
// epilogue(m, n, v0, v1) runs once for every m < m_valid and even n < n_valid with v0 = C[m][n], v1 =
// C[m][n + 1], on the thread holding them; it must not touch `smem`. smem: chunk_gemm_smem_bytes(n_valid) of
// dynamic shared memory, 16-byte aligned (the warpgroup path aligns it to 1024 bytes itself), used by no
// one else from a barrier before the call; on return every thread is done with it. All kThreads threads
// call it (it has barriers). A's rows may have been written by other workgroups of the launch (after the
// caller's acquire): the copies read through L2 (cp.async.cg; load_fresh on the FMA path). The same
// inputs give the same bits (fixed summation order, no atomics).
template <MatrixFormat kW, class RowA, class RowB, class Epilogue>
__device__ __forceinline__ void chunk_gemm_tile(RowA a_row, int m_valid, RowB b_row, int n_valid, int K, uint8_t* smem, Epilogue epilogue) {
#if MK_WGMMA
  if constexpr (!chunk_gemm_wide_tiles(kW)) {
    for_each_narrow_tile(b_row, n_valid, epilogue, [&](auto b, int nv, auto epi) {
      chunk_gemm_tile_wgmma<ChunkGemmWgmmaShape<128>, kW>(a_row, m_valid, b, nv, K, smem, epi);
    });
  } else if (n_valid > 128) {
    chunk_gemm_tile_wgmma<ChunkGemmWgmmaShape<256>, kW>(a_row, m_valid, b_row, n_valid, K, smem, epilogue);
  } else {
    chunk_gemm_tile_wgmma<ChunkGemmWgmmaShape<128>, kW>(a_row, m_valid, b_row, n_valid, K, smem, epilogue);
  }
#else
  chunk_gemm_tile_narrow<kW>(a_row, m_valid, b_row, n_valid, K, smem, epilogue);
#endif
}

#endif  // MK_CHUNK_GEMM_DEVICE

}  // namespace mk::dev
