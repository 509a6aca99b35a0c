// The GEMV building blocks shared by the ops: 16-byte weight pieces times activations kept in shared
// memory in "planes", the batched loads that fill the planes, and the RMSNorm prologue. Device code only.
#pragma once

#include <cstdint>

#include "device/async_copy.h"
#include "device/kernel_params.h"
#include "device/platform.h"

namespace mk::dev {

constexpr int kWarps = kThreads / MK_WARP_SIZE;
__device__ __forceinline__ int warp_id() { return int(threadIdx.x) / MK_WARP_SIZE; }

// How a GEMV reads a row of each matrix format (runtime/matrix_format.h): in pieces of 8 weights, piece c
// holding the row's elements 8c..8c+7, times the activations of those elements (a: the first four, b:
// the last four). A format with scales (kScaled) reads each piece's group parameters (`Group`, from the
// row's tail: shared memory or global) and folds them into the piece's sum. A scaled format also decodes
// a piece to its eight elements in units of kUnit before the scale (decode8; scale(group)), which the
// chunk steps' tiles expand to bf16 (device/weight_pieces.h).
template <MatrixFormat F>
struct RowFormat;

// A 16-byte piece of 8 16-bit weights: each word decoded to its (low, high) pair of floats by `decode`.
template <typename Decode>
__device__ __forceinline__ float dot_16bit_piece(uint4 w, float4 a, float4 b, Decode decode) {
  const float2 p0 = decode(w.x), p1 = decode(w.y), p2 = decode(w.z), p3 = decode(w.w);
  return p0.x * a.x + p0.y * a.y + p1.x * a.z + p1.y * a.w + p2.x * b.x + p2.y * b.y + p3.x * b.z + p3.y * b.w;
}

template <>
struct RowFormat<MatrixFormat::BF16> {
  using Piece = uint4;  // 8 bf16
  static constexpr bool kScaled = false;
  __device__ static __forceinline__ float dot(Piece w, float4 a, float4 b) {
    return dot_16bit_piece(w, a, b, [](uint32_t word) {
      return make_float2(__uint_as_float(word << 16), __uint_as_float(word & 0xffff0000u));
    });
  }
};

template <>
struct RowFormat<MatrixFormat::F16> {
  using Piece = uint4;  // 8 halves
  static constexpr bool kScaled = false;
  __device__ static __forceinline__ float dot(Piece w, float4 a, float4 b) {
    return dot_16bit_piece(w, a, b, [](uint32_t word) { return half2_bits_to_float2(word); });
  }
};

// fp8 E4M3: a piece is 8 bytes, decoded to halves, then to floats; the products and sums are fp32, as
// for the other formats. A piece's sum is scaled by its group's scale (and by kUnit, the decoding's
// unit).
template <>
struct RowFormat<MatrixFormat::FP8> {
  using Piece = uint2;  // 8 fp8
  static constexpr bool kScaled = true;
  using Group = float;  // the scale
#if defined(MK_PLATFORM_NVIDIA)
  // Hopper converts two fp8 to a half2 in one instruction (F2FP), exactly: every e4m3 value is a half.
  // 7% faster at Llama-3.1-8B than the bit operations below, which the AMD build uses (H200, docs/log.md).
  static constexpr float kUnit = 1.0f;
  // The four fp8 of `word` (v0 in the low byte) in units of kUnit: v01 = (v0, v1), v23 = (v2, v3).
  __device__ static __forceinline__ void decode4(uint32_t word, float2& v01, float2& v23) {
    uint32_t lo, hi;  // bytes 0, 1 and bytes 2, 3 as half2
    asm("{ .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h; }" : "=r"(lo), "=r"(hi) : "r"(word));
    v01 = half2_bits_to_float2(lo);
    v23 = half2_bits_to_float2(hi);
  }
#else
  // Each byte's exponent and mantissa bits, moved into a half's, make a half worth value / 256
  // (runtime/dtype.h): a word of four fp8 becomes two half2 with a few bit operations.
  static constexpr float kUnit = kFp8HalfScale;
  // The four fp8 of `word` (v0 in the low byte) in units of kUnit (value / 256): v01 = (v0, v1), v23 =
  // (v2, v3).
  __device__ static __forceinline__ void decode4(uint32_t word, float2& v01, float2& v23) {
    const float2 even = half2_bits_to_float2(((word & 0x00800080u) << 8) | ((word & 0x007f007fu) << 7));  // bytes 0, 2
    const float2 odd = half2_bits_to_float2((word & 0x80008000u) | ((word & 0x7f007f00u) >> 1));         // bytes 1, 3
    v01 = make_float2(even.x, odd.x);
    v23 = make_float2(even.y, odd.y);
  }
#endif
  // The piece's eight values in units of kUnit: e[k] = (elements 2k, 2k + 1).
  __device__ static __forceinline__ void decode8(Piece w, Group, float2 (&e)[4]) {
    decode4(w.x, e[0], e[1]);
    decode4(w.y, e[2], e[3]);
  }
  __device__ static __forceinline__ float scale(Group g) { return g; }
  // a.x * v0 + a.y * v1 + a.z * v2 + a.w * v3 for the four fp8 of `word`, in units of kUnit.
  __device__ static __forceinline__ float dot4(uint32_t word, float4 a) {
    float2 v01, v23;
    decode4(word, v01, v23);
    return v01.x * a.x + v01.y * a.y + v23.x * a.z + v23.y * a.w;
  }
  // The sum is first brought back from dot4's unit (a separate multiply: scale * kUnit could overflow).
  __device__ static __forceinline__ float dot(Piece w, float4 a, float4 b, Group scale) { return (dot4(w.x, a) + dot4(w.y, b)) * kUnit * scale; }
  // Piece c's group scale (after the row's `cols` values).
  __device__ static __forceinline__ Group group(const uint8_t* row, int cols, int c) {
    return reinterpret_cast<const float*>(row + cols)[c / (matrix_scale_group(MatrixFormat::FP8) / 8)];
  }
  __device__ static __forceinline__ Group group_global(const uint8_t* row, int cols, int c) {
    return load_weight(reinterpret_cast<const float*>(row + cols) + c / (matrix_scale_group(MatrixFormat::FP8) / 8));
  }
};

// int4 with a zero point per group: a piece is one 32-bit word of 8 codes (runtime/matrix_format.h's
// nibble order). Each code minus the zero point is made exactly as a half (an integer in [-15, 15]),
// then a float; products and sums are fp32, and the piece's sum is scaled by its group's scale.
template <>
struct RowFormat<MatrixFormat::INT4> {
  using Piece = uint32_t;
  static constexpr bool kScaled = true;
  struct Group {
    float scale;
    uint32_t zero;
  };
  static constexpr float kUnit = 1.0f;
  __device__ static __forceinline__ float scale(Group g) { return g.scale; }
  // The piece's eight codes minus the group's zero point, exact, as float pairs: e[k] = (elements 2k,
  // 2k + 1).
  __device__ static __forceinline__ void decode8(Piece w, Group g, float2 (&e)[4]) {
#if defined(MK_PLATFORM_NVIDIA)
    // A code q under a mask that leaves it in a half's low mantissa bits, OR 0x6400 (1024, whose ulp is
    // 1), is the half 1024 + q; minus 1024 + zero it is q - zero. A code four bits higher makes
    // 1024 + 16 q, and (1024 + 16 q) / 16 - (64 + zero) is q - zero in one fused, exact step. The word's
    // pairs (8k, 8k+1) ... sit 16 bits apart, so each mask decodes two elements.
    const __half2 base = u32_as_half2((0x6400u + g.zero) * 0x10001u);           // 1024 + zero, twice
    const __half2 base16 = u32_as_half2((0xd400u + 16u * g.zero) * 0x10001u);   // -(64 + zero), twice
    const __half2 sixteenth = u32_as_half2(0x2c002c00u);                         // 1/16, twice
    const uint32_t hi = w >> 8;
    e[0] = __half22float2(__hsub2(u32_as_half2((w & 0x000f000fu) | 0x64006400u), base));
    e[1] = __half22float2(__hfma2(u32_as_half2((w & 0x00f000f0u) | 0x64006400u), sixteenth, base16));
    e[2] = __half22float2(__hsub2(u32_as_half2((hi & 0x000f000fu) | 0x64006400u), base));
    e[3] = __half22float2(__hfma2(u32_as_half2((hi & 0x00f000f0u) | 0x64006400u), sixteenth, base16));
#else
    const int z = int(g.zero);
    auto code = [&](int i) { return float(int((w >> (4 * int4_nibble(i))) & 0xfu) - z); };
#pragma unroll
    for (int k = 0; k < 4; ++k) e[k] = make_float2(code(2 * k), code(2 * k + 1));
#endif
  }
  __device__ static __forceinline__ float dot(Piece w, float4 a, float4 b, Group g) {
    float2 e[4];
    decode8(w, g, e);
    return (e[0].x * a.x + e[0].y * a.y + e[1].x * a.z + e[1].y * a.w + e[2].x * b.x + e[2].y * b.y + e[3].x * b.z + e[3].y * b.w) * g.scale;
  }
  // Piece c's group: its scale after the row's cols / 2 bytes of codes, its zero point after the scales.
  __device__ static __forceinline__ Group group(const uint8_t* row, int cols, int c) {
    const int g = c / (matrix_scale_group(MatrixFormat::INT4) / 8);
    const uint8_t* tail = row + cols / 2;
    return {reinterpret_cast<const float*>(tail)[g], tail[4 * scale_groups(MatrixFormat::INT4, cols) + g]};
  }
  __device__ static __forceinline__ Group group_global(const uint8_t* row, int cols, int c) {
    const int g = c / (matrix_scale_group(MatrixFormat::INT4) / 8);
    const uint8_t* tail = row + cols / 2;
    return {load_weight(reinterpret_cast<const float*>(tail) + g), uint32_t(load_weight(tail + 4 * scale_groups(MatrixFormat::INT4, cols) + g))};
  }
#if defined(MK_PLATFORM_NVIDIA)
  __device__ static __forceinline__ __half2 u32_as_half2(uint32_t u) {
    __half2 h;
    __builtin_memcpy(&h, &u, 4);
    return h;
  }
#endif
};

// Piece c of a row times (a, b), with its group's parameters when the format has them: read from shared
// memory (the weight stream's slots) or from global memory (the register path).
template <MatrixFormat F>
__device__ __forceinline__ float piece_dot(typename RowFormat<F>::Piece w, const uint8_t* row, int cols, int c, float4 a, float4 b) {
  if constexpr (RowFormat<F>::kScaled) return RowFormat<F>::dot(w, a, b, RowFormat<F>::group(row, cols, c));
  else return RowFormat<F>::dot(w, a, b);
}
template <MatrixFormat F>
__device__ __forceinline__ float piece_dot_global(typename RowFormat<F>::Piece w, const uint8_t* row, int cols, int c, float4 a,
                                                  float4 b) {
  if constexpr (RowFormat<F>::kScaled) return RowFormat<F>::dot(w, a, b, RowFormat<F>::group_global(row, cols, c));
  else return RowFormat<F>::dot(w, a, b);
}

// The activation vector of a GEMV lives in shared memory in two planes: float4 c of the first plane holds
// elements 8c..8c+3, float4 c of the second (starting at n / 8) holds 8c+4..8c+7. A lane that multiplies
// the 16-byte weight piece c then reads two consecutive float4s of each plane: conflict-free, where the
// natural order would make lanes 32 bytes apart collide on banks.
// Float4 index, in the planes, of float4 q (elements 4q..4q+3) of an n-element vector.
__device__ __forceinline__ int plane_quad(int q, int n8) { return (q & 1) ? n8 + (q >> 1) : (q >> 1); }

// The first batch of weight pieces of two rows (the rest follow in warp_two_row_dot).
constexpr int kUnroll = 4;
constexpr int kFirst = 4;
template <MatrixFormat F>
struct FirstBatch {
  using Piece = typename RowFormat<F>::Piece;
  Piece a[kFirst], b[kFirst];
};

template <class Piece>
__device__ __forceinline__ Piece zero_piece() {
  Piece z;
  __builtin_memset(&z, 0, sizeof(z));
  return z;
}

template <MatrixFormat F>
__device__ __forceinline__ void issue_first_batch(const uint8_t* row0, const uint8_t* row1, int cols, FirstBatch<F>& f) {
  using Piece = typename RowFormat<F>::Piece;
  const Piece* a = reinterpret_cast<const Piece*>(row0);
  const Piece* b = reinterpret_cast<const Piece*>(row1);
  const int n = cols / 8;
#pragma unroll
  for (int u = 0; u < kFirst; ++u) {
    const int c = lane_id() + u * MK_WARP_SIZE;
    f.a[u] = (row0 && c < n) ? load_weight(a + c) : zero_piece<Piece>();
    f.b[u] = (row1 && c < n) ? load_weight(b + c) : zero_piece<Piece>();
  }
}

// One warp, two rows at once (their loads interleaved): out0 = dot(row0, x), out1 = dot(row1, x), x in
// planes; row1 may be null. `first` holds the already issued first batch.
template <MatrixFormat F>
__device__ void warp_two_row_dot(const uint8_t* row0, const uint8_t* row1, int cols, const float4* x, const FirstBatch<F>& first,
                                 float& out0, float& out1) {
  using Piece = typename RowFormat<F>::Piece;
  const Piece* a = reinterpret_cast<const Piece*>(row0);
  const Piece* b = reinterpret_cast<const Piece*>(row1);
  const int n = cols / 8;
  float acc0 = 0.f, acc1 = 0.f;
#pragma unroll
  for (int u = 0; u < kFirst; ++u) {
    const int c = lane_id() + u * MK_WARP_SIZE;
    if (c < n) {
      const float4 lo = x[c], hi = x[n + c];
      acc0 += piece_dot_global<F>(first.a[u], row0, cols, c, lo, hi);
      if (row1) acc1 += piece_dot_global<F>(first.b[u], row1, cols, c, lo, hi);
    }
  }
  for (int c0 = lane_id() + MK_WARP_SIZE * kFirst; c0 < n; c0 += MK_WARP_SIZE * kUnroll) {
    Piece wa[kUnroll], wb[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * MK_WARP_SIZE;
      wa[u] = c < n ? load_weight(a + c) : zero_piece<Piece>();
      wb[u] = (row1 && c < n) ? load_weight(b + c) : zero_piece<Piece>();
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * MK_WARP_SIZE;
      if (c < n) {
        const float4 lo = x[c], hi = x[n + c];
        acc0 += piece_dot_global<F>(wa[u], row0, cols, c, lo, hi);
        if (row1) acc1 += piece_dot_global<F>(wb[u], row1, cols, c, lo, hi);
      }
    }
  }
  out0 = warp_sum(acc0);
  out1 = warp_sum(acc1);
}

// Reads n floats (n % 8 == 0) produced in this launch, 16 bytes at a time with four loads in flight per
// thread before the first use (a plain loop would wait one L2 round trip per element), and hands each
// piece to put(q, v): its float4 index q in the planes, its value. Thread t gets pieces t, t + kThreads,
// ..., the same ones stage_norm_weight gives it; `first()` runs once, after the loads of its first batch
// are issued and before the first put.
template <typename First, typename Put>
__device__ __forceinline__ void for_each_fresh_quad(const float* src, int n, First first, Put put) {
  const float4* s4 = reinterpret_cast<const float4*>(src);
  const int n4 = n / 4, n8 = n / 8;
  constexpr int kBatch = 4;
  for (int base = int(threadIdx.x); base < n4; base += kThreads * kBatch) {
    float4 v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * kThreads;
      v[b] = i < n4 ? load_fresh(s4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    if (base == int(threadIdx.x)) first();
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * kThreads;
      if (i < n4) put(plane_quad(i, n8), v[b]);
    }
  }
}

// Copies n floats (n % 8 == 0) produced in this launch into shared memory, in planes.
__device__ inline void load_to_planes(const float* src, int n, float* dst) {
  float4* d4 = reinterpret_cast<float4*>(dst);
  for_each_fresh_quad(src, n, [] {}, [&](int q, float4 v) { d4[q] = v; });
}

// Starts copying an n-element f32 norm weight (constant) into shared memory in the planes' order; the
// copies land while the instruction waits for its inputs (norm_input_to_planes waits for them).
__device__ inline void stage_norm_weight(const float* weight, int n, float* dst) {
  const int n8 = n / 8;
  for (int q = threadIdx.x; q < n / 4; q += kThreads) copy_async_16(dst + 4 * plane_quad(q, n8), weight + 4 * q);
}

// The same for two weights at once (a norm's and a folded post-norm's), in one loop.
__device__ inline void stage_two_norm_weights(const float* a, const float* b, int n, float* dst_a, float* dst_b) {
  const int n8 = n / 8;
  for (int q = threadIdx.x; q < n / 4; q += kThreads) {
    const int at = 4 * plane_quad(q, n8);
    copy_async_16(dst_a + at, a + 4 * q);
    copy_async_16(dst_b + at, b + 4 * q);
  }
}

// Starts copying values [begin, begin + rows) of a per-row f32 constant (a bias) into dst, for a GEMV
// behind an RMSNorm of an n-element input: its emits then read them from shared memory instead of one
// L2 round trip per row after the dot product. The copies are issued by the threads that hold a piece of
// the input (thread t < n / 4), each of which waits for its copies in norm_input_to_planes before that
// function's block barrier, so the values are visible to every thread once the prologue is done.
__device__ inline void stage_norm_gemv_row_constants(const float* src, uint32_t begin, uint32_t rows, int n, float* dst) {
  const uint32_t copiers = uint32_t(min(n / 4, kThreads));
  if (threadIdx.x >= copiers) return;
  for (uint32_t r = threadIdx.x; r < rows; r += copiers) copy_async_4(dst + r, src + begin + r);
}

// The input of a GEMV behind an RMSNorm: xs = x * weight in shared memory, in planes, and 1 / rms(x), which
// the emit applies to each dot product (they are linear in xs). Deferring the factor leaves one block
// barrier on the critical path instead of three (sum of squares, then scale). Each thread handles the
// same 16-byte pieces that stage_norm_weight gave it, so its own asynchronous copies of `weight_planes`
// are all it waits for. `red`: 2 * kWarps floats; the factor ends in red[kWarps + w] for warp w, where
// that warp's emits read it (kept in a register through the GEMV, it made the kernel spill).
__device__ inline void norm_input_to_planes(const float* x, const float* weight_planes, int n, float eps, float* xs, float* red) {
  const float4* w4 = reinterpret_cast<const float4*>(weight_planes);
  float4* d4 = reinterpret_cast<float4*>(xs);
  float ss = 0.f;
  for_each_fresh_quad(x, n, [] { wait_async_copies(); }, [&](int q, float4 v) {
    const float4 w = w4[q];
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    d4[q] = make_float4(v.x * w.x, v.y * w.y, v.z * w.z, v.w * w.w);
  });
  ss = warp_sum(ss);
  if (lane_id() == 0) red[warp_id()] = ss;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += red[w];  // fixed order: every warp gets the same value
  if (lane_id() == 0) red[kWarps + warp_id()] = 1.0f / sqrtf(total / float(n) + eps);
}

// The residual after a post-norm folded into the GEMV that follows it (Instr::folds): x' = x +
// RMSNorm(projected) * post_weight, into shared memory in planes at `xs` (where the GEMV's norm then
// finds it: norm_planes_to_planes). `post_planes`: the post-norm weight, staged in the planes' order by
// stage_norm_weight; it ends holding projected * post_weight. With `x_out` set, x' is also stored there
// (the stages after read it). One block reduction, on red[kWarps, 2 * kWarps), so that the norm's after
// it (on red[0, kWarps)) writes no slot another warp may still read. Each thread handles the pieces
// stage_norm_weight gave it, as norm_input_to_planes does, and waits for its asynchronous copies (the
// norm's weight too).
__device__ inline void fold_post_norm_to_planes(const float* x, const float* projected, float* post_planes, int n, float eps,
                                                float* xs, float* red, float* x_out) {
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const float4* pr4 = reinterpret_cast<const float4*>(projected);
  float4* pw4 = reinterpret_cast<float4*>(post_planes);
  float4* d4 = reinterpret_cast<float4*>(xs);
  const int n4 = n / 4, n8 = n / 8;
  constexpr int kBatch = 4;
  float ss = 0.f;
  for (int base = int(threadIdx.x); base < n4; base += kThreads * kBatch) {
    float4 xv[kBatch], pv[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * kThreads;
      xv[b] = i < n4 ? load_fresh(x4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
      pv[b] = i < n4 ? load_fresh(pr4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    if (base == int(threadIdx.x)) wait_async_copies();
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * kThreads;
      if (i < n4) {
        const int q = plane_quad(i, n8);
        const float4 v = pv[b], w = pw4[q];
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        pw4[q] = make_float4(v.x * w.x, v.y * w.y, v.z * w.z, v.w * w.w);
        d4[q] = xv[b];
      }
    }
  }
  ss = warp_sum(ss);
  if (lane_id() == 0) red[kWarps + warp_id()] = ss;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += red[kWarps + w];  // fixed order: every thread gets the same value
  const float inv = 1.0f / sqrtf(total / float(n) + eps);
  float4* out4 = reinterpret_cast<float4*>(x_out);
  for (int i = int(threadIdx.x); i < n4; i += kThreads) {
    const int q = plane_quad(i, n8);
    const float4 a = d4[q], pw = pw4[q];
    const float4 v = make_float4(a.x + pw.x * inv, a.y + pw.y * inv, a.z + pw.z * inv, a.w + pw.w * inv);
    d4[q] = v;
    if (out4) out4[i] = v;
  }
}

// norm_input_to_planes for an input already in shared memory in planes (fold_post_norm_to_planes' x'), in
// place: xs = x * weight and 1 / rms(x) in red[kWarps + w]. The same pieces per thread, so no barrier
// before it.
__device__ inline void norm_planes_to_planes(const float* weight_planes, int n, float eps, float* xs, float* red) {
  const float4* w4 = reinterpret_cast<const float4*>(weight_planes);
  float4* d4 = reinterpret_cast<float4*>(xs);
  const int n4 = n / 4, n8 = n / 8;
  float ss = 0.f;
  for (int i = int(threadIdx.x); i < n4; i += kThreads) {
    const int q = plane_quad(i, n8);
    const float4 v = d4[q], w = w4[q];
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    d4[q] = make_float4(v.x * w.x, v.y * w.y, v.z * w.z, v.w * w.w);
  }
  ss = warp_sum(ss);
  if (lane_id() == 0) red[warp_id()] = ss;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += red[w];
  if (lane_id() == 0) red[kWarps + warp_id()] = 1.0f / sqrtf(total / float(n) + eps);
}

}  // namespace mk::dev
