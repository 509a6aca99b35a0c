// The persistent decode kernel: one workgroup per SM/CU interprets its instruction list from the schedule,
// token after token, until Sample stops the launch. Each instruction waits (acquire) on its counters,
// runs, and signals (release) its counter. Same semantics as host/emulator/emulator.cpp, which is the
// readable model of what each instruction computes.
#include "device/async_copy.h"
#include "device/device_atomics.h"
#include "device/gpu.h"
#include "device/hw_unit.h"
#include "device/kernel_params.h"
#include "device/launch_abort.h"
#include "device/monokernel.h"
#include "device/weight_stream.h"
#include "runtime/decode_backend.h"

#include <type_traits>

#if defined(MK_PLATFORM_NVIDIA)
#include <cuda_fp16.h>
#else
#include <hip/hip_fp16.h>
#endif

namespace mk::dev {
namespace {

constexpr int kWarps = kThreads / MK_WARP_SIZE;

__device__ __forceinline__ int lane_id() { return int(threadIdx.x) % MK_WARP_SIZE; }
__device__ __forceinline__ int warp_id() { return int(threadIdx.x) / MK_WARP_SIZE; }

// Data produced inside this launch by other workgroups. NVIDIA: ld.global.cg (L2, bypassing the
// non-coherent L1). AMD: plain loads; the agent-scope acquire before the instruction invalidated L1 (and
// on gfx94x the non-coherent L2 lines of other XCDs).
template <typename T>
__device__ __forceinline__ T load_fresh(const T* p) {
#if defined(MK_PLATFORM_NVIDIA)
  return __ldcg(p);
#else
  return *p;
#endif
}

// Weights never change during a launch: the read-only path.
__device__ __forceinline__ uint4 load_weight(const uint4* p) {
#if defined(MK_PLATFORM_NVIDIA)
  return __ldg(p);
#else
  return *p;  // AMD: the same global_load_dwordx4; weights are never written during the launch
#endif
}

__device__ __forceinline__ float shfl_xor(float v, int mask) {
#if defined(MK_PLATFORM_NVIDIA)
  return __shfl_xor_sync(0xffffffffu, v, mask);
#else
  return __shfl_xor(v, mask);
#endif
}

__device__ __forceinline__ unsigned long long ballot(bool pred) {
#if defined(MK_PLATFORM_NVIDIA)
  return __ballot_sync(0xffffffffu, pred);
#else
  return __ballot(pred);
#endif
}

__device__ __forceinline__ void sync_warp() {
#if defined(MK_PLATFORM_NVIDIA)
  __syncwarp();
#else
  __builtin_amdgcn_wave_barrier();
#endif
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = MK_WARP_SIZE / 2; o > 0; o >>= 1) v += shfl_xor(v, o);
  return v;
}

__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }

// 8 weights (one 16-byte load) times 8 activations (a: the first four, b: the last four).
template <bool kFp16>
__device__ __forceinline__ float dot8(uint4 w, float4 a, float4 b) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
  float lo[4], hi[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kFp16) {
      __half2 h2;
      static_assert(sizeof(h2) == 4, "half2 is two halves");
      __builtin_memcpy(&h2, &words[i], 4);
      const float2 f = __half22float2(h2);
      lo[i] = f.x;
      hi[i] = f.y;
    } else {
      lo[i] = __uint_as_float(words[i] << 16);
      hi[i] = __uint_as_float(words[i] & 0xffff0000u);
    }
  }
  return lo[0] * a.x + hi[0] * a.y + lo[1] * a.z + hi[1] * a.w + lo[2] * b.x + hi[2] * b.y + lo[3] * b.z + hi[3] * b.w;
}

// The activation vector of a GEMV lives in shared memory in two planes: float4 c of the first plane holds
// elements 8c..8c+3, float4 c of the second (starting at n / 8) holds 8c+4..8c+7. A lane that multiplies
// the 16-byte weight piece c then reads two consecutive float4s of each plane: conflict-free, where the
// natural order would make lanes 32 bytes apart collide on banks.
// Float4 index, in the planes, of float4 q (elements 4q..4q+3) of an n-element vector.
__device__ __forceinline__ int plane_quad(int q, int n8) { return (q & 1) ? n8 + (q >> 1) : (q >> 1); }

// The first batch of 16-byte weight loads of two rows (the rest follow in warp_two_row_dot).
constexpr int kUnroll = 4;
constexpr int kFirst = 4;
struct FirstBatch {
  uint4 a[kFirst], b[kFirst];
};

__device__ __forceinline__ void issue_first_batch(const uint8_t* row0, const uint8_t* row1, int cols, FirstBatch& f) {
  const uint4* a = reinterpret_cast<const uint4*>(row0);
  const uint4* b = reinterpret_cast<const uint4*>(row1);
  const int n = cols / 8;
#pragma unroll
  for (int u = 0; u < kFirst; ++u) {
    const int c = lane_id() + u * MK_WARP_SIZE;
    f.a[u] = (row0 && c < n) ? load_weight(a + c) : make_uint4(0, 0, 0, 0);
    f.b[u] = (row1 && c < n) ? load_weight(b + c) : make_uint4(0, 0, 0, 0);
  }
}

// One warp, two rows at once (their loads interleaved): out0 = dot(row0, x), out1 = dot(row1, x), x in
// planes; row1 may be null. `first` holds the already issued first batch.
template <bool kFp16>
__device__ void warp_two_row_dot(const uint8_t* row0, const uint8_t* row1, int cols, const float4* x, const FirstBatch& first,
                                 float& out0, float& out1) {
  const uint4* a = reinterpret_cast<const uint4*>(row0);
  const uint4* b = reinterpret_cast<const uint4*>(row1);
  const int n = cols / 8;
  float acc0 = 0.f, acc1 = 0.f;
#pragma unroll
  for (int u = 0; u < kFirst; ++u) {
    const int c = lane_id() + u * MK_WARP_SIZE;
    if (c < n) {
      const float4 lo = x[c], hi = x[n + c];
      acc0 += dot8<kFp16>(first.a[u], lo, hi);
      if (row1) acc1 += dot8<kFp16>(first.b[u], lo, hi);
    }
  }
  for (int c0 = lane_id() + MK_WARP_SIZE * kFirst; c0 < n; c0 += MK_WARP_SIZE * kUnroll) {
    uint4 wa[kUnroll], wb[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * MK_WARP_SIZE;
      wa[u] = c < n ? load_weight(a + c) : make_uint4(0, 0, 0, 0);
      wb[u] = (row1 && c < n) ? load_weight(b + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * MK_WARP_SIZE;
      if (c < n) {
        const float4 lo = x[c], hi = x[n + c];
        acc0 += dot8<kFp16>(wa[u], lo, hi);
        if (row1) acc1 += dot8<kFp16>(wb[u], lo, hi);
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
__device__ void load_to_planes(const float* src, int n, float* dst) {
  float4* d4 = reinterpret_cast<float4*>(dst);
  for_each_fresh_quad(src, n, [] {}, [&](int q, float4 v) { d4[q] = v; });
}

// Starts copying an n-element f32 norm weight (constant) into shared memory in the planes' order; the
// copies land while the instruction waits for its inputs (norm_input_to_planes waits for them).
__device__ void stage_norm_weight(const float* weight, int n, float* dst) {
  const int n8 = n / 8;
  for (int q = threadIdx.x; q < n / 4; q += kThreads) copy_async_16(dst + 4 * plane_quad(q, n8), weight + 4 * q);
}

// The input of a GEMV behind an RMSNorm: xs = x * weight in shared memory, in planes, and 1 / rms(x), which
// the emit applies to each dot product (they are linear in xs). Deferring the factor leaves one block
// barrier on the critical path instead of three (sum of squares, then scale). Each thread handles the
// same 16-byte pieces that stage_norm_weight gave it, so its own asynchronous copies of `weight_planes`
// are all it waits for. `red`: 2 * kWarps floats; the factor ends in red[kWarps + w] for warp w, where
// that warp's emits read it (kept in a register through the GEMV, it made the kernel spill).
__device__ void norm_input_to_planes(const float* x, const float* weight_planes, int n, float eps, float* xs, float* red) {
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

template <bool kFp16>
__device__ __forceinline__ float weight_value(uint16_t bits) {
  if constexpr (kFp16) {
    return __half2float(__ushort_as_half(bits));
  } else {
    return bf16_bits_to_float(bits);
  }
}

__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// Order-preserving map of floats to unsigned keys (larger float, larger key).
__device__ __forceinline__ uint32_t float_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_float(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Shared-memory plan of the attention instruction; kernel_params.h's attention_smem_bytes sizes it.
__device__ AttentionSmem attention_smem(const ModelDims& d, float* base) {
  AttentionSmem a{};
  const int hd = d.head_dim, G = d.group_size;
  a.tile = attention_tile_positions(hd);
  a.stride = attention_row_stride(hd);
  a.group = base;
  a.cos = a.group + (G + 2) * hd;
  a.sin = a.cos + hd / 2;
  a.o = a.sin + hd / 2;
  a.m = a.o + G * hd;
  a.l = a.m + G;
  a.corr = a.l + G;
  a.scores = a.corr + G;
  a.k = reinterpret_cast<uint16_t*>(base + attention_k_offset(d));  // 16-byte aligned (so is the base)
  a.v = a.k + a.tile * a.stride;
  return a;
}

// kStream: GEMV weights come through the weight stream (else straight into registers); kProfile: the
// timers of --profile / --trace are compiled in. Each combination is its own kernel, so a launch carries no
// code it never runs: measured 1.0% faster for Llama-3.2-1B and 1.3% for 3.1-8B on an H200 than one kernel
// with run-time switches, both with the aligned shared memory (docs/log.md, fifth session).
template <bool kFp16, bool kStream, bool kProfile>
struct Machine {
  const KernelParams& p;
  float* smem;  // dynamic shared memory: the activation area (the weight stream's ring follows it)
  float* red;   // 2 * kWarps floats: the norm's partial sums, then each warp's copy of 1 / rms
  WeightStream& ws;
  uint32_t step;
  uint32_t index;  // of the running instruction in the workgroup's list
  unsigned long long prologue_end = 0;  // profiling, thread 0: when the running instruction's inputs were in place

  __device__ void mark_prologue_end() {
    if constexpr (kProfile)
      if (threadIdx.x == 0) prologue_end = global_timer_ns();
  }

  // The RMSNorm factor of the running GEMV (norm_input_to_planes), for its emit (lane 0).
  __device__ float inv_rms() const { return red[kWarps + warp_id()]; }
  __device__ void norm_prologue(const float* x) { norm_input_to_planes(x, staged_norm(), p.dims.hidden, p.dims.rms_eps, smem, red); }

  // Where a GEMV with a norm keeps its norm weight: right after its activation vector (hidden floats).
  __device__ float* staged_norm() const { return smem + p.dims.hidden; }
  // Where o_proj / down keep the residual rows x[begin, end) they add to (after their activation data).
  __device__ float* residual_rows() const { return smem + gemv_residual_offset(p.dims); }
  // Thread t fetches residual row begin + t with the prologue's other loads (one round trip for all) and
  // stores it after them; rows beyond the block size (tiny grids only) are copied afterwards.
  __device__ float fetch_residual(const Instr& in) const {
    return threadIdx.x < in.end - in.begin ? load_fresh(p.x + in.begin + threadIdx.x) : 0.f;
  }
  __device__ void store_residual(const Instr& in, float fetched) const {
    float* res = residual_rows();
    const uint32_t rows = in.end - in.begin;
    if (threadIdx.x < rows) res[threadIdx.x] = fetched;
    for (uint32_t i = threadIdx.x + kThreads; i < rows; i += kThreads) res[i] = load_fresh(p.x + in.begin + i);
  }

  __device__ const uint8_t* matrix(uint64_t offset) const { return p.weights + offset; }
  __device__ const float* f32(uint64_t offset) const { return reinterpret_cast<const float*>(p.weights + offset); }
  __device__ size_t row_bytes(int cols) const { return size_t(cols) * 2; }

  __device__ void embed() {
    const int32_t token = load_fresh(p.tokens + step);
    const uint16_t* row = reinterpret_cast<const uint16_t*>(matrix(p.embed)) + size_t(token) * size_t(p.dims.hidden);
    for (int i = threadIdx.x; i < p.dims.hidden; i += kThreads) p.x[i] = weight_value<kFp16>(row[i]);
  }

  // One GEMV instruction: `prologue()` (block-wide, ends with __syncthreads) fills the activation vector
  // (planes, at the start of smem); then each row r of [begin, end) is dotted with it and `emit(r, v0,
  // v1)` runs on lane 0 (v1: the up row's value for gate_up, else unused). Weights come through the
  // weight stream when the host gave it slots, else straight into registers.
  template <typename Prologue, typename Emit>
  __device__ void gemv(const Instr& in, Prologue prologue, Emit emit) {
    GemvShape s;
    gemv_shape(p, in, &s);
    prologue();
    mark_prologue_end();
    const float4* x = reinterpret_cast<const float4*>(smem);
    if constexpr (kStream) streamed(s, x, emit);
    else registers(s, x, emit);
  }

  // Warp 0 (lane 0) issues the chunks; the other warps take rows j, j + kWarps - 1, ... of the
  // instruction, each row whole (no cross-warp reduction), reading weights and activations from shared
  // memory.
  template <typename Emit>
  __device__ void streamed(const GemvShape& s, const float4* x, Emit emit) {
    if (warp_id() == 0) {
      if (lane_id() == 0) ws.produce(step, index);
      return;
    }
    const int n8 = s.cols / 8;
    const uint32_t base = ws.st.base, rpc = uint32_t(s.rows_per_chunk);
    for (uint32_t j = uint32_t(warp_id() - 1); j < s.rows(); j += uint32_t(kWarps - 1)) {
      const uint32_t chunk = j / rpc, seq = base + chunk;
      ws.wait_chunk(seq);
      const uint4* w0 = reinterpret_cast<const uint4*>(ws.slot_data(seq) + size_t(j % rpc) * size_t(s.row_bytes));
      float acc0 = 0.f, acc1 = 0.f;
      if (s.parts == 1) {
#pragma unroll 4
        for (int c = lane_id(); c < n8; c += MK_WARP_SIZE) acc0 += dot8<kFp16>(w0[c], x[c], x[n8 + c]);
      } else {
        const uint4* w1 = w0 + size_t(s.rows_in_chunk(chunk)) * size_t(n8);
#pragma unroll 4
        for (int c = lane_id(); c < n8; c += MK_WARP_SIZE) {
          const float4 lo = x[c], hi = x[n8 + c];
          acc0 += dot8<kFp16>(w0[c], lo, hi);
          acc1 += dot8<kFp16>(w1[c], lo, hi);
        }
      }
      const float v0 = warp_sum(acc0), v1 = s.parts == 1 ? 0.f : warp_sum(acc1);
      if (lane_id() == 0) {
        ws.release_row(seq);
        emit(s.begin + j, v0, v1);
      }
    }
  }

  // Every warp loads its rows' weights into registers: two rows at a time (r and r + kWarps; gate_up:
  // the gate and up rows of r), so that twice the loads are in flight. (Issuing the first loads before
  // the prologue would overlap a round trip, but at 512 threads the registers it holds spill.)
  template <typename Emit>
  __device__ void registers(const GemvShape& s, const float4* x, Emit emit) {
    auto row = [&](int part, uint32_t r) { return r < s.end ? matrix(s.matrix[part]) + size_t(r) * size_t(s.row_bytes) : nullptr; };
    const uint32_t step_rows = s.parts == 1 ? 2 * kWarps : kWarps;
    FirstBatch first;
    for (uint32_t r = s.begin + uint32_t(warp_id()); r < s.end; r += step_rows) {
      const uint8_t* a = row(0, r);
      const uint8_t* b = s.parts == 1 ? row(0, r + kWarps) : row(1, r);
      issue_first_batch(a, b, s.cols, first);
      float v0, v1;
      warp_two_row_dot<kFp16>(a, b, s.cols, x, first, v0, v1);
      if (lane_id() == 0) {
        if (s.parts == 2) {
          emit(r, v0, v1);
        } else {
          emit(r, v0, 0.f);
          if (r + kWarps < s.end) emit(r + kWarps, v1, 0.f);
        }
      }
    }
  }

  __device__ void qkv(const Instr& in) {
    const LayerOffsets& L = p.layers[in.layer];
    const ModelDims& d = p.dims;
    const float* bias = d.qkv_bias ? f32(L.bqkv) : nullptr;
    gemv(
        in, [&] { norm_prologue(p.x); }, [&](uint32_t r, float v, float) { p.qkv[r] = v * inv_rms() + (bias ? bias[r] : 0.f); });
  }

  // Per-head RMSNorm (Qwen3) and RoPE of one head in shared memory; one warp.
  __device__ void prepare_head(float* head, const float* norm, const float* cs, const float* sn) {
    const ModelDims& d = p.dims;
    const int hd = d.head_dim, half = hd / 2;
    if (norm) {
      float ss = 0.f;
      for (int i = lane_id(); i < hd; i += MK_WARP_SIZE) ss += head[i] * head[i];
      const float inv = 1.0f / sqrtf(warp_sum(ss) / float(hd) + d.rms_eps);
      for (int i = lane_id(); i < hd; i += MK_WARP_SIZE) head[i] = head[i] * inv * norm[i];
      sync_warp();
    }
    for (int i = lane_id(); i < half; i += MK_WARP_SIZE) {
      const float a = head[i], b = head[i + half];
      head[i] = a * cs[i] - b * sn[i];
      head[i + half] = b * cs[i] + a * sn[i];
    }
    sync_warp();
  }

  // Copies cache rows [t0, t0 + n) of K and V into the shared-memory tile, rows padded by 2 elements so
  // that a thread per position reads conflict-free.
  __device__ void stage_tile(size_t cache_base, int t0, int nt, const AttentionSmem& a) {
    const int hd = p.dims.head_dim;
    const int row8 = hd / 8;  // 16-byte pieces per K/V row
    const uint4* ksrc = reinterpret_cast<const uint4*>(p.k_cache + (cache_base + size_t(t0)) * size_t(hd));
    const uint4* vsrc = reinterpret_cast<const uint4*>(p.v_cache + (cache_base + size_t(t0)) * size_t(hd));
    constexpr int kBatch = 4;
    for (int b0 = threadIdx.x; b0 < 2 * nt * row8; b0 += kThreads * kBatch) {
      uint4 v[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int i = b0 + k * kThreads;
        v[k] = i < nt * row8 ? load_fresh(ksrc + i) : i < 2 * nt * row8 ? load_fresh(vsrc + (i - nt * row8)) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int i = b0 + k * kThreads;
        if (i >= 2 * nt * row8) break;
        const int j = i < nt * row8 ? i : i - nt * row8;
        uint16_t* dst = (i < nt * row8 ? a.k : a.v) + (j / row8) * a.stride + (j % row8) * 8;
        *reinterpret_cast<uint4*>(dst) = v[k];  // rows are 16-byte aligned (attention_row_stride)
      }
    }
  }

  // Before an attention instruction waits for this step's QKV: stages the cached rows of its first tile,
  // which do not depend on this step (positions < pos, written in earlier steps, ordered before this one
  // by the step gate), so one HBM round trip leaves the critical path. All threads.
  __device__ void attention_prestage(const Instr& in) {
    const ModelDims& d = p.dims;
    const int pos = p.start + int(step);
    int p0, p1;
    attention_split_range(pos + 1, d.attention_splits, int(in.end), &p0, &p1);
    const AttentionSmem a = attention_smem(d, smem);
    const int cached = min(min(a.tile, p1 - p0), pos - p0);
    const size_t cache_base = (size_t(in.layer) * size_t(d.kv_heads) + in.begin) * size_t(p.context);
    if (cached > 0) stage_tile(cache_base, p0, cached, a);
  }

  // Before an instruction waits for its inputs (all threads): starts loading what does not depend on this
  // step, so that its round trip overlaps the wait.
  __device__ void prestage(const Instr& in) {
    switch (in.op) {
      case Op::Attention: return attention_prestage(in);
      case Op::QKV: return stage_norm_weight(f32(p.layers[in.layer].attn_norm), p.dims.hidden, staged_norm());
      case Op::GateUp: return stage_norm_weight(f32(p.layers[in.layer].mlp_norm), p.dims.hidden, staged_norm());
      case Op::LMHead:  // not on prompt steps: lm_head() returns without waiting for the copies there
        if (int(step) + 1 >= p.ingest) stage_norm_weight(f32(p.final_norm), p.dims.hidden, staged_norm());
        return;
      default: return;
    }
  }

  // Attention for kv group g over its split of the cache, for all G query heads of the group. The cache
  // slice is walked in tiles of K/V rows staged in shared memory (one load round trip per tile), with an
  // online softmax across tiles. Writes this split's (m, l, unnormalised o) per head for o_proj.
  __device__ void attention(const Instr& in) {
    const LayerOffsets& L = p.layers[in.layer];
    const ModelDims& d = p.dims;
    const int hd = d.head_dim, half = hd / 2, G = d.group_size, S = d.attention_splits;
    const int pos = p.start + int(step);
    const uint32_t g = in.begin, split = in.end;
    int p0, p1;
    attention_split_range(pos + 1, S, int(split), &p0, &p1);
    const bool owns_new = p0 <= pos && pos < p1;
    const AttentionSmem a = attention_smem(d, smem);

    // The group's q/k/v rows and this position's RoPE cos/sin, loaded in one pass.
    const size_t base = size_t(g) * size_t(d.qkv_group_rows);
    const float* cos_row = p.rope + size_t(pos) * half;
    const float* sin_row = p.rope + size_t(p.context) * half + size_t(pos) * half;
    const int q4 = (G + 2) * hd / 4, h4 = half / 4;
    for (int i = threadIdx.x; i < q4 + 2 * h4; i += kThreads) {
      if (i < q4) reinterpret_cast<float4*>(a.group)[i] = load_fresh(reinterpret_cast<const float4*>(p.qkv + base) + i);
      else if (i < q4 + h4) reinterpret_cast<float4*>(a.cos)[i - q4] = reinterpret_cast<const float4*>(cos_row)[i - q4];
      else reinterpret_cast<float4*>(a.sin)[i - q4 - h4] = reinterpret_cast<const float4*>(sin_row)[i - q4 - h4];
    }
    __syncthreads();
    mark_prologue_end();
    if (p1 > p0 && warp_id() <= G) {  // q/k RMSNorm (Qwen3) and RoPE, a warp per head
      const bool is_k = warp_id() == G;
      const float* norm = d.qk_norm ? f32(is_k ? L.k_norm : L.q_norm) : nullptr;
      if (!is_k || owns_new) prepare_head(a.group + warp_id() * hd, norm, a.cos, a.sin);
    }
    for (int i = threadIdx.x; i < G * hd; i += kThreads) a.o[i] = 0.f;
    if (int(threadIdx.x) < G) a.m[threadIdx.x] = -INFINITY, a.l[threadIdx.x] = 0.f;
    __syncthreads();
    const size_t cache_base = (size_t(in.layer) * size_t(d.kv_heads) + g) * size_t(p.context);
    if (owns_new) {  // append this position's K and V (and put them in the first tile if they fall there)
      const bool in_first_tile = pos - p0 < a.tile;
      for (int i = threadIdx.x; i < hd; i += kThreads) {
        const uint16_t kb = float_to_bf16_bits(a.group[G * hd + i]), vb = float_to_bf16_bits(a.group[(G + 1) * hd + i]);
        p.k_cache[(cache_base + size_t(pos)) * size_t(hd) + i] = kb;
        p.v_cache[(cache_base + size_t(pos)) * size_t(hd) + i] = vb;
        if (in_first_tile) a.k[(pos - p0) * a.stride + i] = kb, a.v[(pos - p0) * a.stride + i] = vb;
      }
      __syncthreads();
    }

    const float scale = 1.0f / sqrtf(float(hd));
    for (int t0 = p0; t0 < p1; t0 += a.tile) {
      const int nt = min(a.tile, p1 - t0);
      // The first tile's cached rows were staged before the wait (attention_prestage) and its new row, if
      // any, written from the group's K/V above: the barriers since then order them.
      if (t0 != p0) {
        stage_tile(cache_base, t0, nt, a);
        __syncthreads();
      }
      // Scores, a thread per (head, position): 16-byte loads, 8 elements of K and of q (broadcast) each;
      // the loop is bound by shared-memory loads (docs/log.md, fifth session).
      for (int idx = threadIdx.x; idx < G * nt; idx += kThreads) {
        const int j = idx / nt, t = idx % nt;
        const float4* q = reinterpret_cast<const float4*>(a.group + j * hd);
        const uint4* krow = reinterpret_cast<const uint4*>(a.k + t * a.stride);
        float dot = 0.f;
#pragma unroll 1
        for (int c = 0; c < hd / 8; ++c) dot += dot8<false>(krow[c], q[2 * c], q[2 * c + 1]);  // the cache is bf16
        a.scores[j * a.tile + t] = dot * scale;
      }
      __syncthreads();
      // Online softmax across tiles, a warp per head.
      for (int j = warp_id(); j < G; j += kWarps) {
        float tmax = -INFINITY;
        for (int t = lane_id(); t < nt; t += MK_WARP_SIZE) tmax = fmaxf(tmax, a.scores[j * a.tile + t]);
#pragma unroll
        for (int o = MK_WARP_SIZE / 2; o > 0; o >>= 1) tmax = fmaxf(tmax, shfl_xor(tmax, o));
        const float m_new = fmaxf(a.m[j], tmax);
        float sum = 0.f;
        for (int t = lane_id(); t < nt; t += MK_WARP_SIZE) {
          const float e = __expf(a.scores[j * a.tile + t] - m_new);
          a.scores[j * a.tile + t] = e;
          sum += e;
        }
        sum = warp_sum(sum);
        sync_warp();
        if (lane_id() == 0) {
          const float corr = __expf(a.m[j] - m_new);  // 0 on the first tile (m = -inf)
          a.corr[j] = corr;
          a.l[j] = a.l[j] * corr + sum;
          a.m[j] = m_new;
        }
      }
      __syncthreads();
      // o = o * corr + sum_t p_t V_t, a thread per (head, element).
      for (int idx = threadIdx.x; idx < G * hd; idx += kThreads) {
        const int j = idx / hd, e = idx % hd;
        const float* pj = a.scores + j * a.tile;
        float acc = 0.f;
        for (int t = 0; t < nt; ++t) acc += pj[t] * bf16_bits_to_float(a.v[t * a.stride + e]);
        a.o[idx] = a.o[idx] * a.corr[j] + acc;
      }
      __syncthreads();
    }

    for (int idx = threadIdx.x; idx < G * hd; idx += kThreads) {
      const int j = idx / hd, e = idx % hd;
      const size_t slot = size_t(int(g) * G + j) * size_t(S) + split;
      p.att_o[slot * hd + e] = a.o[idx];
      if (e == 0) p.att_ml[slot * 2] = a.m[j], p.att_ml[slot * 2 + 1] = a.l[j];
    }
  }

  __device__ void o_proj(const Instr& in) {
    const ModelDims& d = p.dims;
    const int hd = d.head_dim, S = d.attention_splits;
    // Only the splits active at this length hold data (attention_split_range).
    const int A = active_attention_splits(p.start + int(step) + 1, S);
    // Flash-decoding reduction of the splits of every head into shared memory (planes), in one L2 round
    // trip: the (m, l) of all (head, split) go to shared memory by asynchronous copies while each thread's
    // loads of its 4 elements' partial outputs for all splits are in flight in registers; then each
    // thread weighs its own: attn = sum_s exp(m_s - M) o_s / sum_s exp(m_s - M) l_s. (Weights computed
    // once per head, then the outputs loaded, cost two round trips and three barriers: ~5 us a layer in
    // the profile at depth 1024.) More than kSplitsInFlight splits are merged batch by batch, with the
    // running max rescaled as in an online softmax. (11 in flight measured 0.5% faster than 12 on an H200,
    // and leaves the kernel a few registers of slack; 16 spilled: docs/log.md.)
    auto combine = [&] {
      constexpr int kSplitsInFlight = 11;
      const float residual = fetch_residual(in);
      float* ml = smem + d.heads * hd;  // after attn; the host pads att_ml to whole 16-byte pieces
      for (int i = threadIdx.x; i < int(attention_ml_floats(d) / 4); i += kThreads) copy_async_16(ml + 4 * i, p.att_ml + 4 * i);
      const int quads = d.heads * hd / 4;
      float4 v[kSplitsInFlight];
      auto issue = [&](int q, int s0) {
        const int hh = (q * 4) / hd, i = (q * 4) % hd;
        const float4* o = reinterpret_cast<const float4*>(p.att_o + size_t(hh) * S * hd + i);
#pragma unroll
        for (int k = 0; k < kSplitsInFlight; ++k)
          if (s0 + k < A) v[k] = load_fresh(o + size_t(s0 + k) * hd / 4);
      };
      if (int(threadIdx.x) < quads) issue(threadIdx.x, 0);
      wait_async_copies();
      store_residual(in, residual);
      __syncthreads();
      for (int q = threadIdx.x; q < quads; q += kThreads) {
        const int hh = (q * 4) / hd;
        const float2* w = reinterpret_cast<const float2*>(ml) + size_t(hh) * S;
        float M = -INFINITY, total = 0.f;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int s0 = 0; s0 < A; s0 += kSplitsInFlight) {
          if (q != int(threadIdx.x) || s0 != 0) issue(q, s0);
          float m_new = M;
          for (int s = s0; s < min(A, s0 + kSplitsInFlight); ++s)
            if (w[s].y != 0.f) m_new = fmaxf(m_new, w[s].x);  // l = 0: an empty split
          const float rescale = M == -INFINITY ? 0.f : __expf(M - m_new);
          acc.x *= rescale, acc.y *= rescale, acc.z *= rescale, acc.w *= rescale;
          total *= rescale;
#pragma unroll
          for (int k = 0; k < kSplitsInFlight; ++k)
            if (s0 + k < A && w[s0 + k].y != 0.f) {
              const float e = __expf(w[s0 + k].x - m_new);
              acc.x += e * v[k].x, acc.y += e * v[k].y, acc.z += e * v[k].z, acc.w += e * v[k].w;
              total += e * w[s0 + k].y;
            }
          M = m_new;
        }
        const float inv = 1.0f / total;  // split 0 always holds position 0: total > 0
        reinterpret_cast<float4*>(smem)[plane_quad(q, d.heads * hd / 8)] = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
      }
      __syncthreads();
    };
    const float* res = residual_rows();
    gemv(in, combine, [&](uint32_t r, float v, float) { p.x[r] = res[r - in.begin] + v; });
  }

  __device__ void gate_up(const Instr& in) {
    gemv(
        in, [&] { norm_prologue(p.x); },
        [&](uint32_t r, float g, float u) {
          const float s = inv_rms();
          g *= s;
          p.h[r] = g / (1.0f + __expf(-g)) * u * s;
        });
  }

  __device__ void down(const Instr& in) {
    const ModelDims& d = p.dims;
    auto load_h = [&] {
      const float residual = fetch_residual(in);
      load_to_planes(p.h, d.intermediate, smem);
      store_residual(in, residual);
      __syncthreads();
    };
    const float* res = residual_rows();
    gemv(in, load_h, [&](uint32_t r, float v, float) { p.x[r] = res[r - in.begin] + v; });
  }

  __device__ void lm_head(const Instr& in) {
    if (int(step) + 1 < p.ingest) return;  // a prompt step: nobody needs its logits
    float best = -INFINITY;
    int32_t best_index = int32_t(in.begin);
    gemv(in, [&] { norm_prologue(p.x); }, [&](uint32_t r, float v, float) {
      v *= inv_rms();
      p.logits[r] = v;
      if (v > best) best = v, best_index = int32_t(r);  // each warp's rows ascend: ties keep the lowest id
    });
    block_argmax(best, best_index);
    if (threadIdx.x == 0) {
      p.lm_best_value[in.slot] = best;
      p.lm_best_index[in.slot] = best_index;
    }
  }

  // Block argmax of the threads' (best, index), ties to the lowest index; thread 0 ends with the result.
  __device__ void block_argmax(float& best, int32_t& index) {
#pragma unroll
    for (int o = MK_WARP_SIZE / 2; o > 0; o >>= 1) {
      const float ob = shfl_xor(best, o);
      const int32_t oi = int32_t(__float_as_int(shfl_xor(__int_as_float(index), o)));
      if (ob > best || (ob == best && oi < index)) best = ob, index = oi;
    }
    __shared__ float warp_best[kWarps];
    __shared__ int32_t warp_index[kWarps];
    if (lane_id() == 0) warp_best[warp_id()] = best, warp_index[warp_id()] = index;
    __syncthreads();
    if (threadIdx.x == 0)
      for (int w = 1; w < kWarps; ++w)
        if (warp_best[w] > best || (warp_best[w] == best && warp_index[w] < index)) best = warp_best[w], index = warp_index[w];
    __syncthreads();
  }

  // ---- sampling (workgroup 0): runtime/sampling.h states the rule ----

  // The LM head slots' (max, argmax) merged, ties to the lowest id; a thread per slot, so that all slots'
  // loads are in flight at once (a serial loop would wait one L2 round trip per slot).
  __device__ int32_t greedy_token() {
    __shared__ int32_t chosen;
    float best = -INFINITY;
    int32_t id = INT32_MAX;
    for (int s = threadIdx.x; s < p.dims.lm_head_slots; s += kThreads) {
      const float v = load_fresh(p.lm_best_value + s);
      const int32_t i = load_fresh(p.lm_best_index + s);
      if (v > best || (v == best && i < id)) best = v, id = i;
    }
    block_argmax(best, id);
    if (threadIdx.x == 0) chosen = id;  // slots hold -inf at worst (never NaN), so some slot's id wins
    __syncthreads();
    return chosen;
  }

  // Exclusive prefix count of `pred` over the block in thread order, and the block total.
  __device__ int block_prefix_count(bool pred, int* total, int* scratch) {
    const unsigned long long mask = ballot(pred);
    const unsigned long long below = mask & ((1ull << lane_id()) - 1ull);
    if (lane_id() == 0) scratch[warp_id()] = __popcll(mask);
    __syncthreads();
    int before = 0, sum = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp_id()) before += scratch[w];
      sum += scratch[w];
    }
    __syncthreads();
    *total = sum;
    return before + __popcll(below);
  }

  __device__ int32_t sample_token() {
    const ModelDims& d = p.dims;
    const SamplingParams& sp = p.sampling;
    const int K = sp.candidate_count(d.vocab);
    uint32_t* hist = reinterpret_cast<uint32_t*>(smem);                         // kSampleBins
    unsigned long long* cand = reinterpret_cast<unsigned long long*>(hist + kSampleBins);  // kMaxCandidates
    float* values = reinterpret_cast<float*>(cand + kMaxCandidates);            // kMaxCandidates
    float* probs = values + kMaxCandidates;                                     // kMaxCandidates
    int* scratch = reinterpret_cast<int*>(probs + kMaxCandidates);              // kWarps + 4
    __shared__ uint32_t prefix, prefix_mask;
    __shared__ int remaining;

    // 1. Radix select (11 + 11 + 10 bits) of the K-th largest key.
    if (threadIdx.x == 0) prefix = 0, prefix_mask = 0, remaining = K;
    const int shifts[3] = {21, 10, 0}, widths[3] = {11, 11, 10};
    for (int pass = 0; pass < 3; ++pass) {
      const int shift = shifts[pass], bins = 1 << widths[pass];
      for (int b = threadIdx.x; b < bins; b += kThreads) hist[b] = 0;
      __syncthreads();
      const uint32_t pre = prefix, pre_mask = prefix_mask;
      for (int i = threadIdx.x; i < d.vocab; i += kThreads) {
        const uint32_t key = float_key(load_fresh(p.logits + i));
        if ((key & pre_mask) == pre) atomicAdd(hist + ((key >> shift) & uint32_t(bins - 1)), 1u);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        int cum = 0;
        for (int b = bins - 1; b >= 0; --b) {
          if (cum + int(hist[b]) >= remaining) {
            remaining -= cum;
            prefix |= uint32_t(b) << shift;
            prefix_mask |= uint32_t(bins - 1) << shift;
            break;
          }
          cum += int(hist[b]);
        }
      }
      __syncthreads();
    }
    const uint32_t threshold = prefix;
    const int greater = K - remaining;  // keys strictly above the threshold; `remaining` ties are taken

    // 2. Gather the candidates in id order: all keys above the threshold, the lowest-id ties.
    int n_greater = 0, n_equal = 0;
    for (int base = 0; base < d.vocab; base += kThreads) {
      const int i = base + int(threadIdx.x);
      const uint32_t key = i < d.vocab ? float_key(load_fresh(p.logits + i)) : 0u;
      const bool gt = i < d.vocab && key > threshold, eq = i < d.vocab && key == threshold;
      int total_gt, total_eq;
      const int at_gt = block_prefix_count(gt, &total_gt, scratch);
      const int at_eq = block_prefix_count(eq, &total_eq, scratch);
      // Sort key: logit descending, then id ascending.
      const unsigned long long composite = (unsigned long long)key << 32 | (0xffffffffu - uint32_t(i));
      if (gt) cand[n_greater + at_gt] = composite;
      if (eq && n_equal + at_eq < remaining) cand[greater + n_equal + at_eq] = composite;
      n_greater += total_gt;
      n_equal += total_eq;
    }
    int padded = 1;
    while (padded < K) padded <<= 1;
    for (int i = K + int(threadIdx.x); i < padded; i += kThreads) cand[i] = 0ull;
    __syncthreads();

    // 3. Bitonic sort, descending.
    for (int size = 2; size <= padded; size <<= 1)
      for (int stride = size / 2; stride > 0; stride >>= 1) {
        for (int i = threadIdx.x; i < padded; i += kThreads) {
          const int j = i ^ stride;
          if (j > i) {
            const bool descending = (i & size) == 0;
            const unsigned long long a = cand[i], b = cand[j];
            if ((a < b) == descending) cand[i] = b, cand[j] = a;
          }
        }
        __syncthreads();
      }

    // 4. The shared rule over the ordered candidates.
    __shared__ int32_t chosen;
    for (int i = threadIdx.x; i < K; i += kThreads) values[i] = key_float(uint32_t(cand[i] >> 32));
    __syncthreads();
    if (threadIdx.x == 0) {
      const float u = uniform01(sp.seed, uint64_t(p.start) + step);
      const int c = choose_candidate(values, K, sp, u, probs);
      chosen = int32_t(0xffffffffu - uint32_t(cand[c] & 0xffffffffull));
    }
    __syncthreads();
    return chosen;
  }

  __device__ void sample() {
    StopReason stop = StopReason::None;
    const bool sampling_step = int(step) + 1 >= p.ingest;
    if (sampling_step && p.max_new > 0) {
      const int32_t token = p.sampling.greedy() ? greedy_token() : sample_token();
      if (threadIdx.x == 0) {
        const int k = int(step) + 2 - p.ingest;  // tokens produced so far, this one included
        p.out_tokens[k - 1] = token;
        p.out_token_time_ns[k - 1] = global_timer_ns();
        p.tokens[step + 1] = token;
        // The release at system scope orders this thread's writes above (token, time) before the count.
        store_release_system(const_cast<uint32_t*>(&p.channel->token_count), uint32_t(k));
        bool eos = false;
        for (int e = 0; e < p.num_eos; ++e) eos |= p.eos[e] == token;
        if (eos) stop = StopReason::Eos;
        else if (k >= p.max_new) stop = StopReason::MaxTokens;
        else if (load_acquire_system(const_cast<const unsigned*>(p.cancel)) != 0) stop = StopReason::Cancelled;
        else if (p.start + int(step) + 1 >= p.context) stop = StopReason::ContextFull;
      }
    } else if (threadIdx.x == 0) {
      if (sampling_step) stop = StopReason::MaxTokens;  // max_new_tokens == 0: ingest only
      else if (load_acquire_system(const_cast<const unsigned*>(p.cancel)) != 0) stop = StopReason::Cancelled;
    }
    if (threadIdx.x == 0 && stop != StopReason::None) {
      *p.stop_flag = 1;
      p.channel->steps_run = step + 1;
      __threadfence_system();
      store_release_system(const_cast<uint32_t*>(&p.channel->stop_reason), uint32_t(stop));
    }
  }

  __device__ void execute(const Instr& in) {
    switch (in.op) {
      case Op::Embed: return embed();
      case Op::QKV: return qkv(in);
      case Op::Attention: return attention(in);
      case Op::OProj: return o_proj(in);
      case Op::GateUp: return gate_up(in);
      case Op::Down: return down(in);
      case Op::LMHead: return lm_head(in);
      case Op::Sample: return sample();
    }
  }
};

__device__ __forceinline__ uint32_t wait_target(const Wait& w, uint32_t step) { return w.per_step * (step + 1 - w.lag); }

// Thread 0 spins until the counter reaches the target; false if it gave up instead (the host aborted a
// hung launch, device/launch_abort.h).
__device__ bool spin_until(const KernelParams& p, const unsigned* counter, uint32_t target) {
  AbortableWait wait{p.abort};
  while (load_acquire(counter) < target) {
    spin_pause();
    if (wait.give_up()) return false;
  }
  return true;
}

// Marks the instruction a workgroup gave up waiting for (Instr::num_waits is at most 2): every thread
// reads the instruction after the barrier that follows the waits, so the mark costs no extra load.
constexpr uint8_t kAbandoned = 0xff;

// Warp 0 waits until counter c reaches `target`. A flat counter: lane 0 polls it. A per-domain counter:
// lanes 0..D-1 poll one stripe each (an acquire load per stripe, so the warp synchronises with every
// producer whose add it counted) until the stripes sum to the target (runtime/schedule.h says why the
// sum is enough). (One thread reading the stripes in turn with relaxed loads and one fence was slower
// still: +4.9% against flat counters on an H200, where a lane per stripe is +1.2%.)
// Returns false, on every lane, if the warp gave up (a hung launch aborted by the host).
__device__ bool wait_counter(const KernelParams& p, uint32_t c, uint32_t target) {
  if (c < p.first_striped_counter) {
    const bool gave_up = lane_id() == 0 && !spin_until(p, p.counters + counter_word(c), target);
    return ballot(gave_up) == 0;
  }
  const uint32_t lane = uint32_t(lane_id());
  const unsigned* stripe = p.counters + counter_word(counter_line(c, lane, p.first_striped_counter, p.sync_domains));
  AbortableWait wait{p.abort};
  for (;;) {
    unsigned seen = lane < p.sync_domains ? load_acquire(stripe) : 0u;
#pragma unroll
    for (int o = MK_WARP_SIZE / 2; o > 0; o >>= 1) seen += __float_as_uint(shfl_xor(__uint_as_float(seen), o));
    if (seen >= target) return true;
    spin_pause();
    // Lane 0 decides for the warp: the lanes' clock and abort-word reads could disagree.
    if (ballot(lane == 0 && wait.give_up()) != 0) return false;
  }
}

}  // namespace

// kGrouped: the schedule has per-domain counters (issue 4). Their own kernels, because supporting them in
// the flat kernels (a stripe per workgroup, warp 0 in the waits) cost 0.6% with flat counters on an H200.
template <bool kFp16, bool kStream, bool kProfile, bool kGrouped>
__global__ void __launch_bounds__(kThreads, 1) monokernel(KernelParams p) {
  // Aligned to 1 KiB: the weight stream's slots and the activation planes sit at fixed offsets in it, and
  // where the static variables above left it (544 bytes in) the kernel ran 1.2-1.6% slower on an H200
  // (docs/log.md, fifth session: the alignment that shifted with unrelated changes explains most of the
  // "code layout" effect measured before it).
  extern __shared__ __align__(1024) float4 dynamic_smem[];
  __shared__ float red[2 * kWarps];
  // Raw storage: HIP rejects __shared__ objects with constructors (Instr has member initialisers).
  __shared__ uint4 current_storage[(sizeof(Instr) + 15) / 16];
  Instr& current = *reinterpret_cast<Instr*>(current_storage);
  __shared__ uint32_t stopped;  // the step gate's decision: the launch ended (or was aborted)
  __shared__ uint32_t my_stripe;  // the stripe this workgroup adds to in per-domain counters
  __shared__ StreamState stream_state;
  const uint32_t wg = blockIdx.x;
  const uint32_t begin = p.wg_begin[wg], end = p.wg_begin[wg + 1];
  unsigned long long* prof = kProfile ? p.profile + size_t(wg) * kNumOps * kProfileFields : nullptr;
  WeightStream ws{p, stream_state, reinterpret_cast<uint8_t*>(dynamic_smem) + p.stream_ring_offset, begin, end};
  if (threadIdx.x == 0) {
    ws.init();
    const unsigned unit = hw_unit_id();
    if (prof) p.workgroup_unit[wg] = unit;
    if constexpr (kGrouped) {
      const int domain = unit < p.unit_domain_len ? p.unit_domain[unit] : -1;
      my_stripe = domain >= 0 ? uint32_t(domain) : fallback_sync_domain(wg, p.sync_domains);
    }
  }
  __syncthreads();

  for (uint32_t step = 0; step < uint32_t(p.max_steps); ++step) {
    if (step > 0) {  // step gate: the previous step's Sample has run; did it end the launch?
      if (threadIdx.x == 0)
        stopped = spin_until(p, p.counters + counter_word(p.sample_counter), step) ? load_fresh(p.stop_flag) : 1u;
      __syncthreads();
      const bool stop = stopped != 0;
      __syncthreads();
      if (stop) break;
      if (threadIdx.x == 0) p.progress[2 * wg] = step, p.progress[2 * wg + 1] = 0;  // past the gate
    }
    Machine<kFp16, kStream, kProfile> m{p, reinterpret_cast<float*>(dynamic_smem), red, ws, step, 0};
    bool abandoned = false;
    for (uint32_t i = begin; i < end; ++i) {
      unsigned long long t0 = 0, t1 = 0;
      if (threadIdx.x == 0 && prof) t0 = global_timer_ns();
      m.prologue_end = 0;
      m.prestage(p.instrs[i]);  // all threads: loads that do not depend on this step's inputs
      if (threadIdx.x == 0) {
        current = p.instrs[i];
        // Weights do not depend on activations: start streaming them before waiting for the inputs.
        if constexpr (kStream) ws.top_up(step, i, p.stream_lookahead, p.stream_early);
        if constexpr (!kGrouped) {
          bool ready = true;
          for (int w = 0; ready && w < current.num_waits; ++w)
            ready = spin_until(p, p.counters + counter_word(current.waits[w].counter), wait_target(current.waits[w], step));
          if (!ready) current.num_waits = kAbandoned;
        }
      }
      if constexpr (kGrouped)
        if (warp_id() == 0) {
          sync_warp();
          // ready is the same on every lane (wait_counter), and a lane reads num_waits only while it is
          // true, so no lane reads it once lane 0 may mark it.
          bool ready = true;
          for (int w = 0; ready && w < current.num_waits; ++w)
            ready = wait_counter(p, current.waits[w].counter, wait_target(current.waits[w], step));
          if (!ready && lane_id() == 0) current.num_waits = kAbandoned;
        }
      if (threadIdx.x == 0 && prof) t1 = global_timer_ns();
      __syncthreads();
      const Instr in = current;
      if (in.num_waits == kAbandoned) {  // a hung launch, aborted by the host: leave
        wait_async_copies();  // the prestage's copies land before the workgroup's shared memory is gone
        abandoned = true;
        break;
      }
      m.index = i;
      m.execute(in);
      release_block_writes();
      __syncthreads();
      if (threadIdx.x == 0) {
        const unsigned long long tb = prof ? global_timer_ns() : 0;
        // Release: covers the whole block's writes (see release_block_writes).
        const uint32_t line = kGrouped ? counter_line(in.signal, my_stripe, p.first_striped_counter, p.sync_domains) : in.signal;
        add_release(p.counters + counter_word(line), 1u);
        stream_state.base += stream_chunks(p, in, step);
        p.progress[2 * wg] = step;
        p.progress[2 * wg + 1] = i - begin + 1;
        if (prof) {
          const unsigned long long t2 = global_timer_ns();
          unsigned long long* f = prof + int(in.op) * kProfileFields;
          f[kProfExec] += t2 - t1;
          f[kProfWait] += t1 - t0;
          f[kProfPrologue] += m.prologue_end > t1 ? m.prologue_end - t1 : 0;
          f[kProfSignal] += t2 - tb;
          if (step == uint32_t(p.trace_step)) {
            unsigned long long* tr = p.trace + size_t(i) * 4;
            tr[0] = t0, tr[1] = t1, tr[2] = m.prologue_end, tr[3] = t2;
          }
        }
      }
    }
    if (abandoned) break;
  }
  if (threadIdx.x == 0) {
    if constexpr (kStream) ws.drain();  // chunks issued ahead for steps that did not run
    p.progress[2 * wg + 1] = 0xffffffffu;
  }
}

const void* monokernel_entry(bool fp16, bool stream, bool profile, bool grouped) {
  auto pick = [&](auto fp16_tag, auto stream_tag) -> const void* {
    constexpr bool kF = decltype(fp16_tag)::value, kS = decltype(stream_tag)::value;
    if (grouped) return profile ? reinterpret_cast<const void*>(&monokernel<kF, kS, true, true>) : reinterpret_cast<const void*>(&monokernel<kF, kS, false, true>);
    return profile ? reinterpret_cast<const void*>(&monokernel<kF, kS, true, false>) : reinterpret_cast<const void*>(&monokernel<kF, kS, false, false>);
  };
  using T = std::true_type;
  using F = std::false_type;
#if defined(MK_PLATFORM_NVIDIA)
  if (stream) return fp16 ? pick(T{}, T{}) : pick(F{}, T{});
#else
  (void)stream;  // AMD: no weight stream in this build (device/weight_stream.h)
#endif
  return fp16 ? pick(T{}, F{}) : pick(F{}, F{});
}

}  // namespace mk::dev
