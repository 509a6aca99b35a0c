// Causal attention of a block of prompt tokens over the KV cache (prefill), one kv head per call: the G
// query heads that share it, for up to chunk_attention_tile_tokens(G) consecutive tokens. Query token t
// sits at position first_pos + t and attends keys [0, first_pos + t], whose K/V are already cached; in a
// sliding-window layer (window w > 0) only the last w of them, [first_pos + t - w + 1, first_pos + t].
//
// Arithmetic (the CPU emulator's): keys in tiles of 64 positions aligned to multiples of 64, an online
// softmax per query row across tiles (running max m, sum l of the fp32 weights, output o), the weights
// rounded to bf16 before they multiply V (they are the A operand of the P*V MMA), fp32 accumulation,
// output o / l rounded to bf16 (or f16) to nearest even. exp(x - m) is computed as exp2 with the scale
// and log2(e) folded into one multiplier, which assumes scale > 0. Keys outside a row's window score -inf;
// tiles that hold no key of any row's window are skipped, and a row whose keys in a tile are all outside
// its window takes nothing from it (its running max stays -inf and counts as 0 in the exponents).
//
// Two paths behind one interface:
// - tensor cores (MK_WARP_MMA, head_dim 32, 64 or 128): FlashAttention-2 style. A task is one query head
//   and 16 tokens (the M of the MMA); a block is 16 * max(1, 16 / G) tokens, so that G heads make 16
//   tasks. The tasks' query rows and 64-position K and V tiles are staged in shared memory with
//   cp.async; the scores S = Q K^T, the online softmax and O += P V stay in registers (P goes from the S
//   accumulators to A fragments without shared memory). For head_dim <= 64 each of the 16 warps owns a
//   task. For 128, 64 output accumulators plus 64 keys' scores do not fit 128 registers, so two warps
//   share a task: each scores half of every tile's keys, they swap row maxima (so both use the tile's
//   exact maximum) and weights through shared memory, and each sums P V over all 64 keys for half of
//   the output columns; only their fp32 row sums are added at the end. Such blocks take two rounds of 8
//   tasks. Rows are stored unpadded with the 16-byte pieces XOR-swizzled by row, which keeps ldmatrix
//   and the cp.async stores conflict-free like attention_row_stride's padding does, without the padding's
//   6-12% more shared memory (96 KiB holds the query rows and K/V slots of head_dim 128 only unpadded).
// - portable (the AMD build, and other head sizes): the same arithmetic on the FMA units, 32 query rows
//   a pass, a lane per key for the scores and a lane per output element for P V.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/kernel_params.h"

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
#include "device/async_copy.h"
#include "device/platform.h"
#include "device/tensor_core.h"
#endif

namespace mk::dev {

// Query tokens per call: 16 * max(1, 16 / G) (16 warps, each taking one (query head, 16 tokens) task).
MK_HD_INLINE constexpr int chunk_attention_tile_tokens(int group_size) {
  return 16 * (group_size >= 16 ? 1 : 16 / (group_size < 1 ? 1 : group_size));
}

namespace chunk_attention_detail {
inline constexpr int kKeyTile = 64;       // positions per softmax step (the arithmetic's tiles)
inline constexpr int kTaskRows = 16;      // query rows of a warp's task: the M of the MMA
inline constexpr int kTaskSlots = 16;     // warps of a workgroup on the tensor-core path (32-lane warps)
inline constexpr int kPortableRows = 32;  // query rows a pass of the portable path
inline constexpr int kPortableKeys = 32;  // K or V rows the portable path stages at a time

MK_HD_INLINE constexpr bool mma_head_dim(int head_dim) { return head_dim == 32 || head_dim == 64 || head_dim == 128; }
// Warps that share a task (each scores 64 / split keys of a tile), and tasks a round.
MK_HD_INLINE constexpr int mma_split(int head_dim) { return head_dim >= 128 ? 2 : 1; }
MK_HD_INLINE constexpr int mma_slots(int head_dim) { return kTaskSlots / mma_split(head_dim); }
MK_HD_INLINE int mma_tasks(int group_size) { return group_size * (chunk_attention_tile_tokens(group_size) / kTaskRows); }
MK_HD_INLINE int mma_q_rows(int head_dim, int group_size) {
  const int t = mma_tasks(group_size), slots = mma_slots(head_dim);
  return kTaskRows * (t < slots ? t : slots);
}
// Bytes on the tensor-core path: the round's query rows, three K/V tile slots (K of the next tile loads
// during the current P V, V of the next during the next Q K^T), and for shared tasks a region a warp for
// the weights of its keys (bf16, 16 rows x 32 keys) that the other warp of its task needs. 56 KiB for
// head_dim 64 and G 4, 96 KiB for 128 and G 4.
MK_HD_INLINE size_t mma_smem_bytes(int head_dim, int group_size) {
  const int split = mma_split(head_dim);
  return size_t(mma_q_rows(head_dim, group_size) + 3 * kKeyTile) * size_t(head_dim) * 2 +
         (split > 1 ? size_t(kTaskSlots) * kTaskRows * (kKeyTile / split) * 2 : 0);
}
}  // namespace chunk_attention_detail

// Dynamic shared memory bytes one call needs (host-callable; <= 96 KiB for head_dim <= 128).
MK_HD_INLINE size_t chunk_attention_smem_bytes(int head_dim, int group_size) {
  namespace cd = chunk_attention_detail;
#if MK_WARP_MMA
  if (cd::mma_head_dim(head_dim)) return cd::mma_smem_bytes(head_dim, group_size);
#else
  (void)group_size;
#endif
  // Portable: the pass's query rows (bf16), one K or V slot (rows padded by one word), the pass's scores.
  return size_t(cd::kPortableRows * head_dim + cd::kPortableKeys * (head_dim + 2)) * 2 +
         size_t(cd::kPortableRows) * cd::kKeyTile * 4;
}

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
namespace chunk_attention_detail {

inline constexpr float kLog2e = 1.4426950408889634f;

// Two outputs (the first in the low half) as bf16 or IEEE f16, rounded to nearest even.
template <bool kF16Out>
__device__ __forceinline__ uint32_t pack_output(float x, float y) {
  if constexpr (kF16Out) {
    const __half2 h = __floats2half2_rn(x, y);
    uint32_t u;
    __builtin_memcpy(&u, &h, 4);
    return u;
  } else {
    return uint32_t(float_to_bf16_bits(x)) | (uint32_t(float_to_bf16_bits(y)) << 16);
  }
}

#if MK_WARP_MMA
// a ^ b, opaque to the compiler's loop-invariant hoisting (see chunk_attention_mma).
__device__ __forceinline__ uint32_t opaque_xor(uint32_t a, uint32_t b) {
  uint32_t r;
  asm volatile("xor.b32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
// 2^x, flushing results below 2^-126 to zero (one MUFU op; exp2f adds a subnormal fix-up). A weight
// that small is lost against the row's sum (>= 1) anyway.
__device__ __forceinline__ float exp2_ftz(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
// Element offset of row `row`, 16-byte piece `piece` in an unpadded tile of D-element rows. The piece
// index is XORed with 3 bits of the row so that the 8 rows one ldmatrix matrix reads (and the 8 pieces a
// quarter-warp's cp.async writes) fall on 8 distinct 16-byte bank groups. Rows of 32 elements are 4
// pieces, two rows to 128 bytes: the XOR then uses row bits 1-2 while bit 0 picks the half.
template <int D>
__device__ __forceinline__ int swizzled(int row, int piece) {
  if constexpr (D >= 64) {
    return row * D + ((piece ^ (row & 7)) << 3);
  } else {
    return row * D + ((piece ^ ((row >> 1) & 3)) << 3);
  }
}

// Cache rows [p0, p0 + 64) of K or V into a swizzled tile, rows from `valid` on zero (they lie past the
// last written position; zero keeps their masked products finite). All threads; asynchronous.
template <int D>
__device__ __forceinline__ void stage_kv(uint16_t* dst, const uint16_t* src, int p0, int valid) {
  constexpr int kPieces = kKeyTile * D / 8;
#pragma unroll
  for (int it = 0; it < (kPieces + kThreads - 1) / kThreads; ++it) {
    const int i = int(threadIdx.x) + it * kThreads;
    if (kPieces % kThreads == 0 || i < kPieces) {
      const int r = i / (D / 8), c = i % (D / 8);
      uint16_t* d = dst + swizzled<D>(r, c);
      if (r < valid) {
        copy_async_16(d, src + size_t(p0 + r) * D + c * 8);
      } else {
        *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  }
}

// Not inlined (nor the portable path): each head size then gets a register allocation of its own. All
// three inlined into one kernel spilled at 128 registers although each alone fit in 112, and the 128
// form measured 5% faster this way (H200).
template <int D, bool kF16Out>
__device__ __noinline__ void chunk_attention_mma(const uint16_t* q, int q_stride, const uint16_t* k, const uint16_t* v,
                                                 int first_pos, int tokens, int group_size, float scale, int window,
                                                 uint16_t* out, int out_stride, uint8_t* smem) {
  constexpr int kPieces = D / 8;            // 16-byte pieces a row
  constexpr int kSplit = mma_split(D);      // warps a task
  constexpr int kSlots = mma_slots(D);      // tasks a round
  constexpr int kKeys = kKeyTile / kSplit;  // keys of a tile a warp scores
  constexpr int kOut = D / 8 / kSplit;      // n-tiles of 8 output columns a warp accumulates
  constexpr int kSlotElems = kKeyTile * D;
  constexpr float kNegInf = -__builtin_huge_valf();
  const int slices = chunk_attention_tile_tokens(group_size) / kTaskRows;
  const int n_tasks = group_size * slices;
  const int q_rows = mma_q_rows(D, group_size);
  uint16_t* qs = reinterpret_cast<uint16_t*>(smem);
  uint16_t* kv = qs + q_rows * D;  // 3 tile slots
  // kSplit 2: a region a warp, where it leaves its weights (A fragments, 16 bytes a lane a 16-key step)
  // for the other warp of its task, and where that one leaves its row maxima (see below).
  uint4* xch = reinterpret_cast<uint4*>(kv + 3 * kSlotElems);

  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int half = kSplit == 2 ? (warp & 1) : 0;  // which keys this warp scores, which columns it sums
  const int last_pos = first_pos + tokens - 1;
  const float c2 = scale * kLog2e;
  uint4* my_xch = xch + warp * (kKeys / 16) * 32;
  uint4* their_xch = xch + (warp ^ 1) * (kKeys / 16) * 32;
  // A warp's row maxima go to the other warp's region, whose weights it has read by then (before the
  // barrier ahead of each tile's scores); the other reads them before it overwrites them with its own.
  float* their_max = reinterpret_cast<float*>(their_xch);
  const float* my_max_in = reinterpret_cast<const float*>(my_xch);

  // ldmatrix rows of this lane: A (Q) and transposed B (V) take matrices (rows 0-7, piece 0), (8-15, 0),
  // (0-7, 1), (8-15, 1); B (K) takes (keys 0-7, piece 0), (0-7, 1), (8-15, 0), (8-15, 1), two n-tiles
  // of 8 keys. Every row these lanes name has row & 7 == lane & 7, hence one swizzle key per lane. The
  // XOR goes through opaque_xor, so that the compiler recomputes it at each load rather than keeping a
  // register per (piece, lane) across the loop.
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_piece = lane >> 4;
  const int k_row = (lane & 7) + (lane >> 4) * 8, k_piece = (lane >> 3) & 1;
  const uint32_t swz = uint32_t(D >= 64 ? (lane & 7) : ((lane >> 1) & 3)) << 4;

  for (int round0 = 0; round0 < n_tasks; round0 += kSlots) {
    // Query rows of the round: row r is task round0 + r / 16, which is head task / slices and tokens
    // 16 * (task % slices) + r % 16.
    for (int i = int(threadIdx.x); i < q_rows * kPieces; i += kThreads) {
      const int r = i / kPieces, c = i % kPieces;
      const int task = round0 + r / kTaskRows;
      const int t = (task % slices) * kTaskRows + r % kTaskRows;
      uint16_t* d = qs + swizzled<D>(r, c);
      if (task < n_tasks && t < tokens) {
        copy_async_16(d, q + size_t(t) * q_stride + (task / slices) * D + c * 8);
      } else {
        *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
    // The round's first and last positions: of its first and last token slices (all slices if the
    // round spans a head). Its tiles: from the one holding its first row's first key.
    int round_first_t = tokens, round_last_t = 0;
    for (int task = round0; task < min(round0 + kSlots, n_tasks); ++task) {
      round_first_t = min(round_first_t, (task % slices) * kTaskRows);
      round_last_t = max(round_last_t, min((task % slices) * kTaskRows + kTaskRows, tokens) - 1);
    }
    const int n_tiles = (first_pos + round_last_t) / kKeyTile + 1;
    const int first_tile = attention_first_position(first_pos + round_first_t, window) / kKeyTile;
    // Loads in order K0, V0, K1, V1, ... into slots 0, 1, 2, 0, ...: K of tile i + 1 replaces V of tile
    // i - 1 (free once the barrier before tile i's scores is passed), V of tile i + 1 replaces K of tile
    // i (free at the barrier before tile i's P V). One group a load; each wait leaves the newest pending.
    stage_kv<D>(kv, k, first_tile * kKeyTile, last_pos + 1 - first_tile * kKeyTile);
    commit_async_group();
    stage_kv<D>(kv + kSlotElems, v, first_tile * kKeyTile, last_pos + 1 - first_tile * kKeyTile);
    commit_async_group();

    const int task = round0 + warp / kSplit;
    const int head = task / slices, t0 = (task % slices) * kTaskRows;
    const bool active = task < n_tasks && t0 < tokens;
    const int warp_min_pos = first_pos + t0;
    const int warp_max_pos = first_pos + min(t0 + kTaskRows, tokens) - 1;
    const int warp_tiles = active ? warp_max_pos / kKeyTile + 1 : 0;
    const int warp_first_tile = attention_first_position(warp_min_pos, window) / kKeyTile;
    // Positions of this lane's rows lane / 4 and lane / 4 + 8. Rows past the block's tokens (not stored)
    // attend up to their own position too: their keys past the last position are zero, so stay finite.
    const int pos0 = first_pos + t0 + (lane >> 2);
    const uint32_t q_addr = shared_address(qs) + uint32_t((warp / kSplit * kTaskRows + a_row) * D * 2);

    float o[kOut][4];  // columns half * D / 2 + [0, D / kSplit) of the task's rows
#pragma unroll
    for (int n = 0; n < kOut; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m0 = kNegInf, m1 = kNegInf, l0 = 0.f, l1 = 0.f;  // l: this lane's share of its keys' sums

    int k_slot = 0;
    for (int it = first_tile; it < n_tiles; ++it) {
      const int v_slot = k_slot == 2 ? 0 : k_slot + 1, next_slot = v_slot == 2 ? 0 : v_slot + 1;
      const int tile_pos = it * kKeyTile, key_pos = tile_pos + half * kKeys;
      wait_async_groups(1);
      __syncthreads();  // K of this tile landed; every warp is done with V (and weights) of the last one
      if (it + 1 < n_tiles) stage_kv<D>(kv + next_slot * kSlotElems, k, tile_pos + kKeyTile, last_pos + 1 - tile_pos - kKeyTile);
      commit_async_group();

      const bool work = it < warp_tiles && it >= warp_first_tile;
      // 16-key groups of the tile that some row of the task attends (the rest are skipped), and of them
      // those in this warp's keys.
      const int live = work ? min(4, (warp_max_pos - tile_pos) / 16 + 1) : 0;
      const int my_live = min(kKeys / 16, max(0, live - half * (kKeys / 16)));
      float s[kKeys / 8][4];
      // Weights as bf16 pairs, already the A fragments of P V: [16 keys][(row lane / 4, + 8) x (keys
      // 2 (lane % 4) + {0, 1}, + 8)].
      uint32_t p[kKeys / 16][4];
      float mx0 = m0, mx1 = m1;
      // Online softmax step once mx holds the tile's row maxima. A row with no key yet (its maximum still
      // -inf: outside its window so far) takes 0 for it, so that its weights and corr are 0, not NaN.
      auto softmax = [&] {
        const float mz0 = mx0 == kNegInf ? 0.f : mx0, mz1 = mx1 == kNegInf ? 0.f : mx1;
        const float corr0 = exp2_ftz((m0 - mz0) * c2), corr1 = exp2_ftz((m1 - mz1) * c2);
        const float off0 = -mz0 * c2, off1 = -mz1 * c2;
        float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n) {
          const float p00 = exp2_ftz(fmaf(s[n][0], c2, off0)), p01 = exp2_ftz(fmaf(s[n][1], c2, off0));
          const float p10 = exp2_ftz(fmaf(s[n][2], c2, off1)), p11 = exp2_ftz(fmaf(s[n][3], c2, off1));
          sum0 += p00 + p01;
          sum1 += p10 + p11;
          p[n / 2][2 * (n % 2)] = pack_bf16(p00, p01);
          p[n / 2][2 * (n % 2) + 1] = pack_bf16(p10, p11);
        }
        l0 = l0 * corr0 + sum0;
        l1 = l1 * corr1 + sum1;
        m0 = mx0;
        m1 = mx1;
#pragma unroll
        for (int n = 0; n < kOut; ++n) {
          o[n][0] *= corr0;
          o[n][1] *= corr0;
          o[n][2] *= corr1;
          o[n][3] *= corr1;
        }
      };
      if (work) {
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
        const uint32_t k_addr = shared_address(kv + k_slot * kSlotElems) + uint32_t((half * kKeys + k_row) * D * 2);
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          uint32_t a[4];
          ldmatrix_x4(a, q_addr + opaque_xor(uint32_t(2 * kk + a_piece) << 4, swz));
#pragma unroll
          for (int np = 0; np < kKeys / 16; ++np) {
            if (np < my_live) {
              uint32_t b[4];
              ldmatrix_x4(b, k_addr + uint32_t(np * 16 * D * 2) + opaque_xor(uint32_t(2 * kk + k_piece) << 4, swz));
              mma_k16(s[2 * np], a, b[0], b[1]);
              mma_k16(s[2 * np + 1], a, b[2], b[3]);
            }
          }
        }
        const int rel = pos0 - key_pos - 2 * (lane & 3);  // row lane / 4 attends key offsets <= rel
        if (key_pos + kKeys - 1 > warp_min_pos) {  // the keys reach past some row's position
#pragma unroll
          for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              if (8 * n + e > rel) s[n][e] = kNegInf;
              if (8 * n + e > rel + 8) s[n][2 + e] = kNegInf;
            }
          }
        }
        if (window > 0 && key_pos < warp_max_pos - window + 1) {  // some keys lie before some row's window
#pragma unroll
          for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              if (8 * n + e <= rel - window) s[n][e] = kNegInf;
              if (8 * n + e <= rel + 8 - window) s[n][2 + e] = kNegInf;
            }
          }
        }
        // Row maxima; a row's scores lie across the 4 lanes of a quad. m stays in score units (max
        // commutes with the positive scale).
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n) {
          mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
          mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
        }
        mx0 = fmaxf(mx0, shfl_xor(mx0, 1));
        mx0 = fmaxf(mx0, shfl_xor(mx0, 2));
        mx1 = fmaxf(mx1, shfl_xor(mx1, 1));
        mx1 = fmaxf(mx1, shfl_xor(mx1, 2));
        if (kSplit == 1) {
          softmax();  // before the barrier: s dies sooner
        } else if ((lane & 3) == 0) {
          their_max[lane >> 2] = mx0;
          their_max[(lane >> 2) + 8] = mx1;
        }
      }

      wait_async_groups(1);
      __syncthreads();  // V of this tile landed; every warp is done with K; the maxima are in
      if (it + 1 < n_tiles) stage_kv<D>(kv + k_slot * kSlotElems, v, tile_pos + kKeyTile, last_pos + 1 - tile_pos - kKeyTile);
      commit_async_group();

      if (work) {
        if (kSplit == 2) {
          mx0 = fmaxf(mx0, my_max_in[lane >> 2]);
          mx1 = fmaxf(mx1, my_max_in[(lane >> 2) + 8]);
          softmax();
        }
        // O += P V over 16-key steps: the A fragment of keys 16j.. is p[j] (this warp's keys) or, for
        // kSplit 2, the other warp's, read from its region. Columns: this warp's kOut n-tiles.
        const uint32_t v_addr = shared_address(kv + v_slot * kSlotElems) + uint32_t(a_row * D * 2 + half * kOut * 16);
        auto pv = [&](const uint32_t(&a)[4], int key0) {
#pragma unroll
          for (int dn = 0; dn < kOut / 2; ++dn) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, v_addr + uint32_t(key0 * D * 2) + opaque_xor(uint32_t(2 * dn + a_piece) << 4, swz));
            mma_k16(o[2 * dn], a, b[0], b[1]);
            mma_k16(o[2 * dn + 1], a, b[2], b[3]);
          }
        };
        if (kSplit == 2) {
          sync_warp();  // every lane has read the maxima the weights overwrite
#pragma unroll
          for (int j = 0; j < kKeys / 16; ++j) my_xch[j * 32 + lane] = make_uint4(p[j][0], p[j][1], p[j][2], p[j][3]);
          // The two warps of the task (named barrier 1 + task slot, 1..8; 0 is __syncthreads'): the
          // weights are in.
          asm volatile("bar.sync %0, 64;" ::"r"(1 + warp / 2) : "memory");
#pragma unroll
          for (int j = 0; j < kKeys / 16; ++j) {
            if (j < my_live) pv(p[j], half * kKeys + j * 16);
            if (j + kKeys / 16 * (half ^ 1) < live) {
              const uint4 t = their_xch[j * 32 + lane];
              const uint32_t a[4] = {t.x, t.y, t.z, t.w};
              pv(a, (half ^ 1) * kKeys + j * 16);
            }
          }
        } else {
#pragma unroll
          for (int j = 0; j < kKeys / 16; ++j) pv(p[j], j * 16);
        }
      }
      k_slot = next_slot;
    }

    l0 += shfl_xor(l0, 1);
    l0 += shfl_xor(l0, 2);
    l1 += shfl_xor(l1, 1);
    l1 += shfl_xor(l1, 2);
    wait_async_groups(0);
    __syncthreads();  // every warp is done with the query rows, K/V and the exchange regions
    if (kSplit == 2) {  // the row sums are those of both warps' keys
      float* my_l = reinterpret_cast<float*>(my_xch);
      const float* their_l = reinterpret_cast<const float*>(their_xch);
      if (active && (lane & 3) == 0) {
        my_l[lane >> 2] = l0;
        my_l[(lane >> 2) + 8] = l1;
      }
      __syncthreads();
      if (active) {
        l0 += their_l[lane >> 2];
        l1 += their_l[(lane >> 2) + 8];
      }
    }
    if (active) {
      const float inv0 = 1.f / l0, inv1 = 1.f / l1;
      const int ta = t0 + (lane >> 2), tb = ta + 8;
      uint16_t* out_a = out + size_t(ta) * out_stride + head * D + half * kOut * 8 + 2 * (lane & 3);
      uint16_t* out_b = out_a + size_t(8) * out_stride;
#pragma unroll
      for (int n = 0; n < kOut; ++n) {
        if (ta < tokens) *reinterpret_cast<uint32_t*>(out_a + 8 * n) = pack_output<kF16Out>(o[n][0] * inv0, o[n][1] * inv0);
        if (tb < tokens) *reinterpret_cast<uint32_t*>(out_b + 8 * n) = pack_output<kF16Out>(o[n][2] * inv1, o[n][3] * inv1);
      }
    }
    if (kSplit == 2) __syncthreads();  // the next round's maxima reuse the regions; the caller gets smem back
  }
}

#endif  // MK_WARP_MMA

// The FMA form. A pass takes query rows R = t * G + j (token-major, so a pass's rows need about the same
// tiles), kRows a warp; per 64-key tile, K is staged 32 rows at a time and a lane computes one key's
// scores for the warp's rows, the warp does the softmax over the scores kept in shared memory, then V is
// staged likewise and a lane accumulates output elements lane, lane + warp size, ...
template <bool kF16Out>
__device__ __noinline__ void chunk_attention_portable(const uint16_t* q, int q_stride, const uint16_t* k,
                                                      const uint16_t* v, int first_pos, int tokens, int head_dim,
                                                      int group_size, float scale, int window, uint16_t* out,
                                                      int out_stride, uint8_t* smem) {
  constexpr int kWs = MK_WARP_SIZE;
  constexpr int kWarps = kThreads / kWs;
  constexpr int kRows = kPortableRows / kWarps;  // query rows a warp owns in a pass
  constexpr int kPer = 256 / kWs;                // output elements a lane keeps per row (head_dim <= 256)
  constexpr int kParts = kWs / kPortableKeys;    // lanes per key in the scores (2 on 64-lane waves)
  constexpr float kNegInf = -__builtin_huge_valf();
  const int D = head_dim, G = group_size;
  const int words = D / 2;        // 32-bit words of a row
  const int slot_words = words + 1;  // odd: lanes reading one word of 32 rows hit 32 banks
  uint16_t* qs = reinterpret_cast<uint16_t*>(smem);
  uint32_t* slot = reinterpret_cast<uint32_t*>(qs + kPortableRows * D);
  float* scores = reinterpret_cast<float*>(slot + kPortableKeys * slot_words);
  const uint32_t* qw = reinterpret_cast<const uint32_t*>(qs);

  const int warp = int(threadIdx.x) / kWs, lane = int(threadIdx.x) % kWs;
  const int rows_total = tokens * G;
  const int last_pos = first_pos + tokens - 1;
  const float c2 = scale * kLog2e;
  float* my_scores = scores + warp * kRows * kKeyTile;

  // Rows [p0, p0 + kPortableKeys) of K or V into the slot (zero past the last position).
  auto stage = [&](const uint16_t* src, int p0) {
    for (int i = int(threadIdx.x); i < kPortableKeys * words; i += kThreads) {
      const int r = i / words, w = i % words;
      slot[r * slot_words + w] =
          p0 + r <= last_pos ? load_fresh(reinterpret_cast<const uint32_t*>(src + size_t(p0 + r) * D) + w) : 0u;
    }
  };

  for (int pass0 = 0; pass0 < rows_total; pass0 += kPortableRows) {
    for (int i = int(threadIdx.x); i < kPortableRows * (D / 8); i += kThreads) {
      const int r = i / (D / 8), c = i % (D / 8), R = pass0 + r;
      uint4 val = make_uint4(0u, 0u, 0u, 0u);
      if (R < rows_total) val = load_fresh(reinterpret_cast<const uint4*>(q + size_t(R / G) * q_stride + (R % G) * D) + c);
      *reinterpret_cast<uint4*>(qs + r * D + c * 8) = val;
    }
    const int row0 = pass0 + warp * kRows;  // this warp's first row
    const int pass_max_pos = first_pos + (min(pass0 + kPortableRows, rows_total) - 1) / G;
    const int pass_first_tile = attention_first_position(first_pos + pass0 / G, window) / kKeyTile;
    const int warp_max_pos = row0 < rows_total ? first_pos + (min(row0 + kRows, rows_total) - 1) / G : -1;
    int pos[kRows];
    float m[kRows], l[kRows], o[kRows][kPer];
#pragma unroll
    for (int rr = 0; rr < kRows; ++rr) {
      pos[rr] = row0 + rr < rows_total ? first_pos + (row0 + rr) / G : -1;  // -1: no row
      m[rr] = kNegInf;
      l[rr] = 0.f;
#pragma unroll
      for (int i = 0; i < kPer; ++i) o[rr][i] = 0.f;
    }

    for (int tile_pos = pass_first_tile * kKeyTile; tile_pos <= pass_max_pos; tile_pos += kKeyTile) {
      const bool work = tile_pos <= warp_max_pos;
      for (int half = 0; half < 2; ++half) {
        __syncthreads();  // the slot is free (and the pass's query rows are in)
        stage(k, tile_pos + half * kPortableKeys);
        __syncthreads();
        if (work) {
          const int key = lane % kPortableKeys, part = lane / kPortableKeys;
          const int kpos = tile_pos + half * kPortableKeys + key;
          float s[kRows];
#pragma unroll
          for (int rr = 0; rr < kRows; ++rr) s[rr] = 0.f;
          const int w_end = (part + 1) * (words / kParts);
          for (int w = part * (words / kParts); w < w_end; ++w) {
            const uint32_t kb = slot[key * slot_words + w];
            const float k0 = __uint_as_float(kb << 16), k1 = __uint_as_float(kb & 0xffff0000u);
#pragma unroll
            for (int rr = 0; rr < kRows; ++rr) {
              const uint32_t qb = qw[(warp * kRows + rr) * words + w];
              s[rr] = fmaf(__uint_as_float(qb << 16), k0, s[rr]);
              s[rr] = fmaf(__uint_as_float(qb & 0xffff0000u), k1, s[rr]);
            }
          }
#pragma unroll
          for (int rr = 0; rr < kRows; ++rr) {
            if (kParts == 2) s[rr] += shfl_xor(s[rr], kPortableKeys);
            const bool outside = kpos > pos[rr] || (window > 0 && kpos <= pos[rr] - window);
            if (part == 0) my_scores[rr * kKeyTile + half * kPortableKeys + key] = outside ? kNegInf : s[rr];
          }
        }
      }
      if (work) {
        sync_warp();
#pragma unroll
        for (int rr = 0; rr < kRows; ++rr) {
          if (pos[rr] < 0) continue;
          float* sc = my_scores + rr * kKeyTile;
          float mx = m[rr];
          for (int key = lane; key < kKeyTile; key += kWs) mx = fmaxf(mx, sc[key]);
#pragma unroll
          for (int off = kWs / 2; off > 0; off >>= 1) mx = fmaxf(mx, shfl_xor(mx, off));
          const float mz = mx == kNegInf ? 0.f : mx;  // no key of its window yet: weights and corr 0
          const float corr = exp2f((m[rr] - mz) * c2), off = -mz * c2;
          float sum = 0.f;
          for (int key = lane; key < kKeyTile; key += kWs) {
            const float pk = exp2f(fmaf(sc[key], c2, off));
            sum += pk;
            sc[key] = bf16_bits_to_float(float_to_bf16_bits(pk));  // P V's operand is bf16
          }
          l[rr] = l[rr] * corr + warp_sum(sum);
          m[rr] = mx;
#pragma unroll
          for (int i = 0; i < kPer; ++i) o[rr][i] *= corr;
        }
        sync_warp();
      }
      for (int half = 0; half < 2; ++half) {
        __syncthreads();
        stage(v, tile_pos + half * kPortableKeys);
        __syncthreads();
        if (work) {
          const uint16_t* vrow = reinterpret_cast<const uint16_t*>(slot);
          for (int key = 0; key < kPortableKeys; ++key) {
            const uint16_t* vr = vrow + key * 2 * slot_words;
#pragma unroll
            for (int i = 0; i < kPer; ++i) {
              const int d = lane + i * kWs;
              if (d < D) {
                const float vd = bf16_bits_to_float(vr[d]);
#pragma unroll
                for (int rr = 0; rr < kRows; ++rr) o[rr][i] = fmaf(my_scores[rr * kKeyTile + half * kPortableKeys + key], vd, o[rr][i]);
              }
            }
          }
        }
      }
    }

#pragma unroll
    for (int rr = 0; rr < kRows; ++rr) {
      if (pos[rr] < 0) continue;
      const int R = row0 + rr;
      uint16_t* dst = out + size_t(R / G) * out_stride + (R % G) * D;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int d = lane + i * kWs;
        if (d < D) dst[d] = uint16_t(pack_output<kF16Out>(o[rr][i] / l[rr], 0.f) & 0xffffu);
      }
    }
  }
  __syncthreads();  // the caller gets smem back
}

}  // namespace chunk_attention_detail

// q: bf16, query head j (0..G-1) of token t at q + t * q_stride + j * head_dim (already RoPE'd); rows
// 16-byte aligned (q_stride a multiple of 8). k, v: bf16 cache rows of this kv head, position p at
// k + p * head_dim (v likewise), 16-byte aligned; rows past first_pos + tokens - 1 are never read.
// out: head j of token t at out + t * out_stride + j * head_dim, bf16 or IEEE f16 (kF16Out); 4-byte
// aligned (out_stride even). 1 <= tokens <= chunk_attention_tile_tokens(G); scale > 0; window: the
// layer's sliding window in positions, 0 for none; head_dim a multiple of 16 up to 256 (32, 64, 128 on
// tensor cores). All threads; smem: chunk_attention_smem_bytes.
template <bool kF16Out>
__device__ void chunk_attention_block(const uint16_t* q, int q_stride, const uint16_t* k, const uint16_t* v, int first_pos,
                                      int tokens, int head_dim, int group_size, float scale, int window, uint16_t* out,
                                      int out_stride, uint8_t* smem) {
  namespace cd = chunk_attention_detail;
  if (tokens <= 0) {
    __syncthreads();
    return;
  }
#if MK_WARP_MMA
  switch (head_dim) {
    case 32: cd::chunk_attention_mma<32, kF16Out>(q, q_stride, k, v, first_pos, tokens, group_size, scale, window, out, out_stride, smem); return;
    case 64: cd::chunk_attention_mma<64, kF16Out>(q, q_stride, k, v, first_pos, tokens, group_size, scale, window, out, out_stride, smem); return;
    case 128: cd::chunk_attention_mma<128, kF16Out>(q, q_stride, k, v, first_pos, tokens, group_size, scale, window, out, out_stride, smem); return;
    default: break;
  }
#endif
  cd::chunk_attention_portable<kF16Out>(q, q_stride, k, v, first_pos, tokens, head_dim, group_size, scale, window, out, out_stride, smem);
}
#endif  // device code

}  // namespace mk::dev
