// Attention (kv group, split): q/k RMSNorm (Qwen3) and RoPE, the K/V append if the split owns this
// position, then partial attention of the group's query heads over the split's slice of the cache, with
// an online softmax. Writes (m, l, unnormalised o) per head for o_proj to combine. Two paths, each in its
// own kernels (Machine::kLongContext; the launcher picks per launch by how far its sequence reaches:
// attention_long_context in kernel_params.h):
// - tiles: the split is walked in K/V tiles staged in shared memory by the whole workgroup, each tile's
//   scores, softmax and P·V separated by block barriers. No partials to combine: faster while a split
//   holds up to a few hundred positions.
// - warp chunks: each warp owns chunks of positions and keeps its own online softmax across them, so no
//   block barrier separates scores, softmax and P·V, and later chunks are copied into the idle
//   weight-stream ring several ahead. The warps' partials are combined once at the end, which the tile
//   path does not pay. Faster for long splits (docs/log.md, 2026-11-24, warp-owned chunks). A warp's chunk runs on tensor
//   cores where the platform and model allow (MmaChunks: NVIDIA, head_dim 32 or 64, at most 8 query heads
//   a kv head), on the FMA units otherwise (FmaChunks; docs/log.md, 2026-11-24, the warp path on tensor cores).
// The tile path's code is kept exactly as before the warp path existed, and the warp path's start repeats
// it on purpose: one start shared by both (a helper) measured 0.2-0.5% slower at short depths and gained
// less at long ones (docs/log.md, 2026-11-21: v8).
#pragma once

#include "device/ops/op_spec.h"
#if MK_DEVICE_CODE
#include "device/async_copy.h"
#include "device/device_atomics.h"
#include "device/gemv.h"
#include "device/tensor_core.h"
#endif

namespace mk::dev {

struct AttentionOp : OpDefaults {
  // The larger of the two paths' areas.
  static size_t smem_floats(const ModelDims& d, const Instr&) { return attention_smem_bytes(d) / sizeof(float) + 1; }
#if MK_DEVICE_CODE
  // Where the instruction keeps what in shared memory; kernel_params.h's attention_smem_bytes sizes it.
  __device__ static AttentionSmem smem_plan(const ModelDims& d, float* base) {
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

  __device__ static AttentionWarpSmem warp_smem_plan(const ModelDims& d, float* base) {
    AttentionWarpSmem a{};
    const int hd = d.head_dim, G = d.group_size;
    a.tile = attention_warp_tile_positions(hd);
    a.stride = attention_row_stride(hd);
    a.rows = a.tile / kWarps;
    a.rows_log2 = __ffs(a.rows) - 1;
    a.row8_log2 = __ffs(hd / 8) - 1;
    a.group = base;
    a.cos = a.group + (G + 2) * hd;
    a.sin = a.cos + hd / 2;
    a.acc = a.sin + hd / 2;
    a.probs = a.acc + kMaxWarps * attention_warp_acc_floats(d, 32);
    a.state = a.probs + G * a.tile;
    a.q_hi = reinterpret_cast<uint16_t*>(a.probs);  // 16-byte aligned for head_dim 32 or 64
    a.q_lo = a.q_hi + 8 * a.stride;
    a.k = reinterpret_cast<uint16_t*>(base + attention_warp_k_offset(d));  // 16-byte aligned (so is the base)
    a.v = a.k + a.tile * a.stride;
    a.parts = base + attention_warp_k_offset(d);
    return a;
  }
  // Per-head RMSNorm (Qwen3) and RoPE of one head in shared memory; one warp.
  template <class MachineT>
  __device__ static void prepare_head(MachineT& m, float* head, const float* norm, const float* cs, const float* sn) {
    const ModelDims& d = m.p.dims;
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

  // Copies cache rows [t0, t0 + nt) of K and V into the shared-memory tile of either path's layout (rows
  // padded: attention_row_stride).
  template <class MachineT, class Smem>
  __device__ static void stage_tile(MachineT& m, size_t cache_base, int t0, int nt, const Smem& a) {
    const int hd = m.p.dims.head_dim;
    const int row8 = hd / 8;  // 16-byte pieces per K/V row
    const uint4* ksrc = reinterpret_cast<const uint4*>(m.p.k_cache + (cache_base + size_t(t0)) * size_t(hd));
    const uint4* vsrc = reinterpret_cast<const uint4*>(m.p.v_cache + (cache_base + size_t(t0)) * size_t(hd));
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
  template <class MachineT>
  __device__ static void prestage(MachineT& m, const Instr& in) {
    if constexpr (MachineT::kLongContext) {
      stage_first_tile(m, in, warp_smem_plan(m.p.dims, m.smem));
      return;
    }
    const ModelDims& d = m.p.dims;
    const int pos = m.p.start + int(m.step);
    int p0, p1;
    attention_window_split_range(pos, layer_attention_params(d, m.p.layer_attention, in.layer).window, d.attention_splits, d.split_positions_log2, int(in.end), &p0, &p1);
    const AttentionSmem a = smem_plan(d, m.smem);
    const int cached = min(min(a.tile, p1 - p0), pos - p0);
    const size_t cache_base = (size_t(in.layer) * size_t(d.kv_heads) + in.begin) * size_t(m.p.context);
    if (cached > 0) stage_tile(m, cache_base, p0, cached, a);
  }
  // The same for the warp path's layout.
  template <class MachineT>
  __device__ static void stage_first_tile(MachineT& m, const Instr& in, const AttentionWarpSmem& a) {
    const ModelDims& d = m.p.dims;
    const int pos = m.p.start + int(m.step);
    int p0, p1;
    attention_window_split_range(pos, layer_attention_params(d, m.p.layer_attention, in.layer).window, d.attention_splits, d.split_positions_log2, int(in.end), &p0, &p1);
    const int cached = min(min(a.tile, p1 - p0), pos - p0);
    const size_t cache_base = (size_t(in.layer) * size_t(d.kv_heads) + in.begin) * size_t(m.p.context);
    if (cached > 0) stage_tile(m, cache_base, p0, cached, a);
  }

  // Attention for kv group g over its split of the cache, for all G query heads of the group: this split's
  // (m, l, unnormalised o) per head, by the warp path in the long-context kernels, else the tile path; then,
  // on the tile path with ModelDims::combine_once, the group's last split to arrive combines the group's
  // partials. The long-context kernels leave the combine to o_proj: with it in their attention (not
  // executed where combine_once is off) Llama-3.2-1B ran 2.1-2.5% slower at depth 16384, and with the
  // group kept in registers across the warp path they spilled (docs/log.md, 2026-11-26, a wide head's split is one tile).
  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    if constexpr (MachineT::kLongContext) {
      run_warps(m, in);
    } else {
      run_tiles(m, in);
      if (attention_combines_once(m.p.dims, MachineT::kLongContext))
        combine_if_last(m, uint32_t(in.layer) * uint32_t(m.p.dims.kv_heads) + in.begin);
    }
  }

  // Flash-decoding reduction once per kv group (Schedule::combine_once): each split adds to its group's
  // arrival counter (acquire + release) after writing its partial; the add that completes the step's count
  // has seen every split's partial, and its workgroup combines them, a thread per output element of the
  // group's heads: attn = sum_s exp(m_s - M) o_s / sum_s exp(m_s - M) l_s. Its writes are released with
  // the instruction's signal, which o_proj waits for.
  // `layer_group`: layer x kv heads + the kv group (its arrival counter's index after arrivals_first).
  static constexpr int kCombineBatch = 16;  // splits whose loads a thread keeps in flight at once
  template <class MachineT>
  __device__ static void combine_if_last(MachineT& m, uint32_t layer_group) {
    const ModelDims& d = m.p.dims;
    const int hd = d.head_dim, G = d.group_size, S = d.attention_splits;
    __shared__ uint32_t last;
    release_block_writes();
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned* arrivals = m.p.counters + counter_word(m.p.arrivals_first + layer_group);
      last = attention_last_arrival(fetch_add_acq_rel(arrivals, 1u), uint32_t(S), m.step) ? 1u : 0u;
    }
    __syncthreads();
    if (!last) return;
    const uint32_t group = layer_group % uint32_t(d.kv_heads);
    const int A = active_window_splits(m.p.start + int(m.step), layer_attention_params(d, m.p.layer_attention, int(layer_group / uint32_t(d.kv_heads))).window, S,
                                       d.split_positions_log2);
    // A thread per output element of the group's heads loads every split's (m, l) of its head and o of its
    // element straight into registers, all in flight at once (one round trip from L2, no block barrier),
    // in batches of kCombineBatch splits with the running max rescaled between batches.
    const int GH = G * hd;
    const float* src_o = m.p.att_o + size_t(group) * size_t(G * S * hd);  // the group's first (head, split)
    const float2* src_ml = reinterpret_cast<const float2*>(m.p.att_ml) + size_t(group) * size_t(G * S);
#pragma unroll 1
    for (int idx = threadIdx.x; idx < GH; idx += kThreads) {
      const int j = idx / hd;
      const float2* w = src_ml + j * S;
      const float* o = src_o + size_t(j) * size_t(S * hd) + size_t(idx - j * hd);
      float M = -INFINITY, acc = 0.f, total = 0.f;
#pragma unroll 1
      for (int k0 = 0; k0 < A; k0 += kCombineBatch) {
        float2 wk[kCombineBatch];
        float ok[kCombineBatch];
#pragma unroll
        for (int k = 0; k < kCombineBatch; ++k) {
          const bool in = k0 + k < A;
          wk[k] = in ? load_fresh(w + k0 + k) : make_float2(0.f, 0.f);
          ok[k] = in ? load_fresh(o + size_t(k0 + k) * size_t(hd)) : 0.f;
        }
        float Mb = M;
#pragma unroll
        for (int k = 0; k < kCombineBatch; ++k)
          if (wk[k].y != 0.f) Mb = fmaxf(Mb, wk[k].x);  // l = 0: an empty split (or none)
        const float r = __expf(M - Mb);  // 0 on the first batch: M = -inf, and Mb is finite (split 0 holds position 0)
        acc *= r, total *= r;
#pragma unroll
        for (int k = 0; k < kCombineBatch; ++k)
          if (wk[k].y != 0.f) {
            const float f = __expf(wk[k].x - Mb);
            acc += f * ok[k], total += f * wk[k].y;
          }
        M = Mb;
      }
      m.p.att[size_t(group) * size_t(GH) + size_t(idx)] = acc / total;  // split 0 holds position 0
    }
  }

  // The tile path: the cache slice is walked in tiles of K/V rows staged in shared memory (one load round
  // trip per tile), with an online softmax across tiles, each step by the whole workgroup.
  template <class MachineT>
  __device__ static void run_tiles(MachineT& m, const Instr& in) {
    const LayerOffsets& L = m.p.layers[in.layer];
    const ModelDims& d = m.p.dims;
    const int hd = d.head_dim, half = hd / 2, G = d.group_size, S = d.attention_splits;
    const int pos = m.p.start + int(m.step);
    const uint32_t g = in.begin, split = in.end;
    const LayerAttentionParams la = layer_attention_params(d, m.p.layer_attention, in.layer);
    int p0, p1;
    attention_window_split_range(pos, la.window, S, d.split_positions_log2, int(split), &p0, &p1);
    const bool owns_new = p0 <= pos && pos < p1;
    const AttentionSmem a = smem_plan(d, m.smem);

    // The group's q/k/v rows and this position's RoPE cos/sin, loaded in one pass.
    const size_t base = size_t(g) * size_t(d.qkv_group_rows);
    const float* cos_row = rope_cos_row(m.p, la, pos);
    const float* sin_row = cos_row + size_t(m.p.context) * half;
    const int q4 = (G + 2) * hd / 4, h4 = half / 4;
    for (int i = threadIdx.x; i < q4 + 2 * h4; i += kThreads) {
      if (i < q4) reinterpret_cast<float4*>(a.group)[i] = load_fresh(reinterpret_cast<const float4*>(m.p.qkv + base) + i);
      else if (i < q4 + h4) reinterpret_cast<float4*>(a.cos)[i - q4] = reinterpret_cast<const float4*>(cos_row)[i - q4];
      else reinterpret_cast<float4*>(a.sin)[i - q4 - h4] = reinterpret_cast<const float4*>(sin_row)[i - q4 - h4];
    }
    __syncthreads();
    m.mark_prologue_end();
    if (p1 > p0 && warp_id() <= G) {  // q/k RMSNorm (Qwen3) and RoPE, a warp per head
      const bool is_k = warp_id() == G;
      const float* norm = d.qk_norm ? m.f32(is_k ? L.k_norm : L.q_norm) : nullptr;
      if (!is_k || owns_new) prepare_head(m, a.group + warp_id() * hd, norm, a.cos, a.sin);
    }
    for (int i = threadIdx.x; i < G * hd; i += kThreads) a.o[i] = 0.f;
    if (int(threadIdx.x) < G) a.m[threadIdx.x] = -INFINITY, a.l[threadIdx.x] = 0.f;
    __syncthreads();
    const size_t cache_base = (size_t(in.layer) * size_t(d.kv_heads) + g) * size_t(m.p.context);
    if (owns_new) {  // append this position's K and V (and put them in the first tile if they fall there)
      const bool in_first_tile = pos - p0 < a.tile;
      for (int i = threadIdx.x; i < hd; i += kThreads) {
        const uint16_t kb = float_to_bf16_bits(a.group[G * hd + i]), vb = float_to_bf16_bits(a.group[(G + 1) * hd + i]);
        m.p.k_cache[(cache_base + size_t(pos)) * size_t(hd) + i] = kb;
        m.p.v_cache[(cache_base + size_t(pos)) * size_t(hd) + i] = vb;
        if (in_first_tile) a.k[(pos - p0) * a.stride + i] = kb, a.v[(pos - p0) * a.stride + i] = vb;
      }
      __syncthreads();
    }

    const float scale = la.scale;
    for (int t0 = p0; t0 < p1; t0 += a.tile) {
      const int nt = min(a.tile, p1 - t0);
      // The first tile's cached rows were staged before the wait (attention_prestage) and its new row, if
      // any, written from the group's K/V above: the barriers since then order them.
      if (t0 != p0) {
        stage_tile(m, cache_base, t0, nt, a);
        __syncthreads();
      }
      // Scores, a thread per (head, position): 16-byte loads, 8 elements of K and of q (broadcast) each;
      // the loop is bound by shared-memory loads (docs/log.md, 2026-11-21, where one step goes).
      for (int idx = threadIdx.x; idx < G * nt; idx += kThreads) {
        const int j = idx / nt, t = idx % nt;
        const float4* q = reinterpret_cast<const float4*>(a.group + j * hd);
        const uint4* krow = reinterpret_cast<const uint4*>(a.k + t * a.stride);
        float dot = 0.f;
#pragma unroll 1
        for (int c = 0; c < hd / 8; ++c) dot += RowFormat<MatrixFormat::BF16>::dot(krow[c], q[2 * c], q[2 * c + 1]);  // the cache is bf16
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
      m.p.att_o[slot * hd + e] = a.o[idx];
      if (e == 0) m.p.att_ml[slot * 2] = a.m[j], m.p.att_ml[slot * 2 + 1] = a.l[j];
    }
  }

  // The warp path: the start as on the tile path (q also takes the scores' scale), then warp_chunks.
  template <class MachineT>
  __device__ static void run_warps(MachineT& m, const Instr& in) {
    const LayerOffsets& L = m.p.layers[in.layer];
    const ModelDims& d = m.p.dims;
    const int hd = d.head_dim, half = hd / 2, G = d.group_size, S = d.attention_splits;
    const int pos = m.p.start + int(m.step);
    const uint32_t g = in.begin, split = in.end;
    const LayerAttentionParams la = layer_attention_params(d, m.p.layer_attention, in.layer);
    int p0, p1;
    attention_window_split_range(pos, la.window, S, d.split_positions_log2, int(split), &p0, &p1);
    const bool owns_new = p0 <= pos && pos < p1;
    const AttentionWarpSmem a = warp_smem_plan(d, m.smem);

    // The group's q/k/v rows and this position's RoPE cos/sin, loaded in one pass.
    const size_t base = size_t(g) * size_t(d.qkv_group_rows);
    const float* cos_row = rope_cos_row(m.p, la, pos);
    const float* sin_row = cos_row + size_t(m.p.context) * half;
    const int q4 = (G + 2) * hd / 4, h4 = half / 4;
    for (int i = threadIdx.x; i < q4 + 2 * h4; i += kThreads) {
      if (i < q4) reinterpret_cast<float4*>(a.group)[i] = load_fresh(reinterpret_cast<const float4*>(m.p.qkv + base) + i);
      else if (i < q4 + h4) reinterpret_cast<float4*>(a.cos)[i - q4] = reinterpret_cast<const float4*>(cos_row)[i - q4];
      else reinterpret_cast<float4*>(a.sin)[i - q4 - h4] = reinterpret_cast<const float4*>(sin_row)[i - q4 - h4];
    }
    __syncthreads();
    m.mark_prologue_end();
    if (p1 > p0 && warp_id() <= G) {  // q/k RMSNorm (Qwen3) and RoPE, a warp per head
      const bool is_k = warp_id() == G;
      const float* norm = d.qk_norm ? m.f32(is_k ? L.k_norm : L.q_norm) : nullptr;
      if (!is_k || owns_new) prepare_head(m, a.group + warp_id() * hd, norm, a.cos, a.sin);
      if (!is_k) {  // q takes the scores' scale here, once
        const float scale = la.scale;
        for (int i = lane_id(); i < hd; i += MK_WARP_SIZE) a.group[warp_id() * hd + i] *= scale;
      }
    }
#if MK_WARP_MMA
    if (p1 > p0 && warp_id() < 8 && attention_warp_mma(d)) {  // q as bf16 hi + lo rows for the MMAs; rows >= G zero
      const int j = warp_id();
      for (int i = lane_id(); i < hd; i += MK_WARP_SIZE) {  // each lane reads what it scaled above
        const float x = j < G ? a.group[j * hd + i] : 0.f;
        const uint16_t hi = float_to_bf16_bits(x);
        a.q_hi[j * a.stride + i] = hi;
        a.q_lo[j * a.stride + i] = float_to_bf16_bits(x - bf16_bits_to_float(hi));
      }
    }
#endif
    __syncthreads();
    const size_t cache_base = (size_t(in.layer) * size_t(d.kv_heads) + g) * size_t(m.p.context);
    if (owns_new) {  // append this position's K and V (and put them in the first tile if they fall there)
      const bool in_first_tile = pos - p0 < a.tile;
      for (int i = threadIdx.x; i < hd; i += kThreads) {
        const uint16_t kb = float_to_bf16_bits(a.group[G * hd + i]), vb = float_to_bf16_bits(a.group[(G + 1) * hd + i]);
        m.p.k_cache[(cache_base + size_t(pos)) * size_t(hd) + i] = kb;
        m.p.v_cache[(cache_base + size_t(pos)) * size_t(hd) + i] = vb;
        if (in_first_tile) a.k[(pos - p0) * a.stride + i] = kb, a.v[(pos - p0) * a.stride + i] = vb;
      }
      __syncthreads();
    }

    warp_chunks(m, a, cache_base, p0, p1, size_t(int(g) * G) * size_t(S) + split);
  }

  // Lanes' rounds in a warp: one chunk's (head, position) scores take at most 4 (G <= 16 and tile <= 128
  // make G * rows <= 4 * 32), the group's (head, 8 output elements) accumulators at most 4 (G * head_dim
  // <= 1024: attention_warp_path_supported, checked on the host before this path is launched).
  static constexpr int kRounds = 4;
  // 16-byte pieces of K and V a lane loads for one chunk (attention_warp_tile_positions bounds it).
  static constexpr int kChunkPieces = 4;

  // Copies the K and V rows of cache positions [t0, t0 + n) (n <= a.rows) into this warp's rows of the
  // tile: piece lane + k * MK_WARP_SIZE of the chunk's K rows, then of its V rows.
  template <class MachineT>
  __device__ static void load_chunk(MachineT& m, size_t cache_base, int t0, int n, const AttentionWarpSmem& a,
                                    uint16_t* krows, uint16_t* vrows) {
    const int hd = m.p.dims.head_dim, row8 = hd / 8, half = a.rows * row8;
    const uint4* ksrc = reinterpret_cast<const uint4*>(m.p.k_cache + (cache_base + size_t(t0)) * size_t(hd));
    const uint4* vsrc = reinterpret_cast<const uint4*>(m.p.v_cache + (cache_base + size_t(t0)) * size_t(hd));
    uint4 piece[kChunkPieces];
#pragma unroll
    for (int k = 0; k < kChunkPieces; ++k) {
      const int i = lane_id() + k * MK_WARP_SIZE, j = i < half ? i : i - half;
      piece[k] = i < 2 * half && j < n * row8 ? load_fresh((i < half ? ksrc : vsrc) + j) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int k = 0; k < kChunkPieces; ++k) {
      const int i = lane_id() + k * MK_WARP_SIZE, j = i < half ? i : i - half;
      if (i < 2 * half)
        *reinterpret_cast<uint4*>((i < half ? krows : vrows) + (j >> a.row8_log2) * a.stride + (j & (row8 - 1)) * 8) = piece[k];
    }
  }

  // One lane's 8 output elements of one head: o = o * cr + sum over the chunk's nv positions of p_t V_t,
  // with `v` at the lane's 8 elements of the chunk's first V row.
  __device__ static void pv_update(float (&o)[8], float cr, const float* p, const uint16_t* v, int stride, int nv) {
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] *= cr;
#pragma unroll 1
    for (int t = 0; t < nv; ++t) {
      const float pt = p[t];
      const uint4 row = *reinterpret_cast<const uint4*>(v + t * stride);
      const uint32_t words[4] = {row.x, row.y, row.z, row.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        o[2 * k] += pt * __uint_as_float(words[k] << 16);
        o[2 * k + 1] += pt * __uint_as_float(words[k] & 0xffff0000u);
      }
    }
  }

  // A warp's scores, online softmax and P·V over its chunks, on the FMA units (every platform and model
  // the warp path runs). Score lanes: lane + r * MK_WARP_SIZE = head * rows + position (a head's `rows`
  // lanes are adjacent, so its softmax reductions stay among them). P·V lanes: lane + r * MK_WARP_SIZE =
  // head * (hd / 8) + piece, 8 output elements each; the first round's accumulators stay in registers,
  // later rounds' in the warp's part of a.acc (registers are what limits this kernel). The running max and
  // sum per head, and the chunk's softmax weights, are in the warp's shared memory.
  struct FmaChunks {
    const AttentionWarpSmem& a;
    int hd, G, R, row8, lane;
    float *probs, *corr, *m_run, *l_run, *acc_more;
    float acc0[8];

    __device__ FmaChunks(const ModelDims& d, const AttentionWarpSmem& smem, int w)
        : a(smem), hd(d.head_dim), G(d.group_size), R(smem.rows), row8(d.head_dim / 8), lane(lane_id()) {
      probs = a.probs + w * G * R;
      corr = a.state + w * 3 * G;  // per head: the rescale factor of this chunk, the running max, sum
      m_run = corr + G;
      l_run = m_run + G;
      acc_more = a.acc + w * attention_warp_acc_floats(d, MK_WARP_SIZE);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc0[e] = 0.f;
      for (int j = lane; j < G; j += MK_WARP_SIZE) m_run[j] = -INFINITY, l_run[j] = 0.f;
      for (int i = lane; i < attention_warp_acc_floats(d, MK_WARP_SIZE); i += MK_WARP_SIZE) acc_more[i] = 0.f;
      sync_warp();
    }

    // The chunk's nv positions: K rows at kr, V rows at vr (a.stride apart).
    __device__ void chunk(const ModelDims&, const AttentionWarpSmem&, const uint16_t* kr, const uint16_t* vr, int nv) {
      // Scores and the online softmax update, per (head, position) lane.
#pragma unroll 1
      for (int r = 0; r < kRounds; ++r) {
        if (r * MK_WARP_SIZE >= G * R) break;  // warp-uniform
        const int i = lane + r * MK_WARP_SIZE, h = i >> a.rows_log2, t = i & (R - 1);
        const bool pair = i < G * R, valid = pair && t < nv;
        float s = -INFINITY;
        if (valid) {
          const float4* q = reinterpret_cast<const float4*>(a.group + h * hd);
          const uint4* krow = reinterpret_cast<const uint4*>(kr + t * a.stride);
          float dot = 0.f;
#pragma unroll 1
          for (int p = 0; p < row8; ++p) dot += RowFormat<MatrixFormat::BF16>::dot(krow[p], q[2 * p], q[2 * p + 1]);  // the cache is bf16
          s = dot;  // q carries the 1 / sqrt(head_dim) (prepare_head)
        }
        float cmax = s;
        for (int o = R / 2; o > 0; o >>= 1) cmax = fmaxf(cmax, shfl_xor(cmax, o));
        const float m_old = pair ? m_run[h] : -INFINITY;
        const float m_new = fmaxf(m_old, cmax);
        const float e = valid ? __expf(s - m_new) : 0.f;
        float csum = e;
        for (int o = R / 2; o > 0; o >>= 1) csum += shfl_xor(csum, o);
        sync_warp();  // every lane has read m_run before lane t == 0 updates it
        if (pair) {
          probs[i] = e;
          if (t == 0) {
            const float cr = __expf(m_old - m_new);  // 0 on the warp's first chunk (m = -inf)
            corr[h] = cr;
            l_run[h] = l_run[h] * cr + csum;
            m_run[h] = m_new;
          }
        }
      }
      sync_warp();
      // o = o * corr + sum_t p_t V_t: one 16-byte load of V per position and lane.
      if (lane < G * row8) {
        const int h = lane >> a.row8_log2;
        pv_update(acc0, corr[h], probs + h * R, vr + (lane & (row8 - 1)) * 8, a.stride, nv);
      }
#pragma unroll 1
      for (int i = lane + MK_WARP_SIZE; i < G * row8; i += MK_WARP_SIZE) {
        float4* more = reinterpret_cast<float4*>(acc_more + (i - MK_WARP_SIZE) * 8);
        const float4 lo = more[0], hi = more[1];
        float o[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        const int h = i >> a.row8_log2;
        pv_update(o, corr[h], probs + h * R, vr + (i & (row8 - 1)) * 8, a.stride, nv);
        more[0] = make_float4(o[0], o[1], o[2], o[3]);
        more[1] = make_float4(o[4], o[5], o[6], o[7]);
      }
    }

    // The warp's partial into `mine`: the G x hd unnormalised output, then m and l per head.
    __device__ void write_part(const ModelDims&, float* mine) const {
      for (int i = lane; i < G * row8; i += MK_WARP_SIZE) {
        float4* dst = reinterpret_cast<float4*>(mine + i * 8);  // head h's elements at h * hd
        if (i < MK_WARP_SIZE) {
          dst[0] = make_float4(acc0[0], acc0[1], acc0[2], acc0[3]);
          dst[1] = make_float4(acc0[4], acc0[5], acc0[6], acc0[7]);
        } else {
          const float4* src = reinterpret_cast<const float4*>(acc_more + (i - MK_WARP_SIZE) * 8);
          dst[0] = src[0], dst[1] = src[1];
        }
      }
      for (int j = lane; j < G; j += MK_WARP_SIZE) mine[G * hd + j] = m_run[j], mine[G * hd + G + j] = l_run[j];
    }
  };

#if MK_WARP_MMA
  // The same on tensor cores (attention_warp_mma: G <= 8, head_dim 32 or 64, chunks of 8 positions), as
  // two MMAs per chunk:
  // - scores S = q K^T, m16n8k16 over head_dim: A's rows 0-7 are the group's heads' q rounded to bf16
  //   (q_hi), rows 8-15 what the rounding left (q_lo), summed after;
  // - O^T += V^T P^T, m16n8k8 over the chunk's positions, 16 output columns a tile, the heads as the 8
  //   columns (O^T rather than O: with the heads as rows, each accumulator quad would be half empty).
  // Lane (g = lane / 4, c = lane % 4) holds the scores of head g at positions 2c, 2c + 1, which is the B
  // fragment P^T needs, so the softmax stays in the lane (a head's max over its 8 positions: two shuffles
  // among its four lanes), and outputs g, g + 8 of every 16 columns of heads 2c, 2c + 1 (their rescale
  // factors come from those heads' lanes). P also goes in as bf16 hi + lo parts; with q's, that keeps the
  // products at ~16 bits of mantissa, as close to the FMA form as the tests require; K and V are bf16
  // already. Heads >= G compute on zero q and are never written.
  struct MmaChunks {
    // 16-column tile t of O^T: o[t] = outputs 16t + g of heads 2c, 2c + 1, then 16t + g + 8 of them.
    float o[4][4];
    float m_run = -INFINITY, l_part = 0.f;  // head g's running max; this lane's share of its sum

    __device__ MmaChunks(const ModelDims&, const AttentionWarpSmem&, int) {
#pragma unroll
      for (int t = 0; t < 4; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.f;
    }

    // Tile t += (V^T P^T) with the rescale of heads 2c, 2c + 1 first; v_lo / v_hi: its A fragments.
    __device__ static void pv_tile(float (&t)[4], float cr0, float cr1, uint32_t v_lo, uint32_t v_hi, uint32_t p_hi,
                                   uint32_t p_lo) {
      t[0] *= cr0, t[1] *= cr1, t[2] *= cr0, t[3] *= cr1;
      mma_k8(t, v_lo, v_hi, p_hi);
      mma_k8(t, v_lo, v_hi, p_lo);
    }

    __device__ void chunk(const ModelDims& d, const AttentionWarpSmem& a, const uint16_t* kr, const uint16_t* vr, int nv) {
      const int lane = lane_id(), c = lane & 3, hd = d.head_dim;
      // ldmatrix rows: lane l gives row l % 8 of matrix l / 8 (8 columns each). Positions past the
      // chunk's end read its last row (finite data; their weights are 0).
      const uint32_t row = uint32_t((min(lane & 7, nv - 1) * a.stride + (lane >> 3) * 8) * 2);
      const uint32_t k_row = shared_address(kr) + row;
      // A 16 x 16 block of q: rows 0-7 q_hi, rows 8-15 q_lo (right after it), so one MMA gives both
      // parts' scores; lanes 0-15 give the rows at columns 0-7, lanes 16-31 at columns 8-15. Its address
      // is derived here rather than kept across chunks (registers are what limits this kernel).
      const uint32_t q_row = shared_address(a.q_hi + (lane & 15) * a.stride + (lane >> 4) * 8);
      float s[4] = {0.f, 0.f, 0.f, 0.f};  // rows g: q_hi's scores, rows g + 8: q_lo's
#pragma unroll
      for (int q = 0; q < 2; ++q) {  // 32 columns of head_dim (two k16 steps) per round
        if (q * 32 >= hd) break;
        uint32_t k4[4], q4[4];
        ldmatrix_x4(k4, k_row + q * 64);
        ldmatrix_x4(q4, q_row + q * 64);
        mma_k16(s, q4, k4[0], k4[1]);
        ldmatrix_x4(q4, q_row + q * 64 + 32);
        mma_k16(s, q4, k4[2], k4[3]);
      }
      float s0 = s[0] + s[2], s1 = s[1] + s[3];
      if (2 * c >= nv) s0 = -INFINITY;  // q carries the 1 / sqrt(head_dim) (prepare_head)
      if (2 * c + 1 >= nv) s1 = -INFINITY;
      float cmax = fmaxf(s0, s1);
      cmax = fmaxf(cmax, shfl_xor(cmax, 1));
      cmax = fmaxf(cmax, shfl_xor(cmax, 2));  // position 0 is valid: finite
      const float m_new = fmaxf(m_run, cmax);
      const float cr = __expf(m_run - m_new);  // 0 on the warp's first chunk (m = -inf)
      const float p0 = __expf(s0 - m_new), p1 = __expf(s1 - m_new);
      l_part = l_part * cr + (p0 + p1);
      m_run = m_new;
      const uint32_t p_hi = pack_bf16(p0, p1), p_lo = pack_bf16_residual(p0, p1, p_hi);
      const float cr0 = shfl(cr, 8 * c), cr1 = shfl(cr, 8 * c + 4);  // of heads 2c and 2c + 1
      const uint32_t v_row = shared_address(vr) + row;
#pragma unroll
      for (int q = 0; q < 2; ++q) {  // 32 output columns (two 16-column tiles) per round
        if (q * 32 >= hd) break;
        uint32_t v4[4];
        ldmatrix_x4_trans(v4, v_row + q * 64);
        pv_tile(o[2 * q], cr0, cr1, v4[0], v4[1], p_hi, p_lo);
        pv_tile(o[2 * q + 1], cr0, cr1, v4[2], v4[3], p_hi, p_lo);
      }
    }

    __device__ void write_part(const ModelDims& d, float* mine) const {
      const int G = d.group_size, hd = d.head_dim, g = lane_id() >> 2, c = lane_id() & 3;
      float l = l_part + shfl_xor(l_part, 1);
      l += shfl_xor(l, 2);
      if (g < G && c == 0) mine[G * hd + g] = m_run, mine[G * hd + G + g] = l;
      auto put = [&](int t, float x0, float x1, float x2, float x3) {
        if (2 * c < G) mine[2 * c * hd + 16 * t + g] = x0, mine[2 * c * hd + 16 * t + g + 8] = x2;
        if (2 * c + 1 < G) mine[(2 * c + 1) * hd + 16 * t + g] = x1, mine[(2 * c + 1) * hd + 16 * t + g + 8] = x3;
      };
#pragma unroll
      for (int t = 0; t < 4; ++t)
        if (t * 16 < hd) put(t, o[t][0], o[t][1], o[t][2], o[t][3]);
    }
  };
#endif

  // Up to this many chunks of a warp are in flight in the weight-stream ring while it computes one.
  static constexpr int kMaxAhead = 4;

  // Starts asynchronous copies of the K and V rows of cache positions [t0, t0 + n) (n <= a.rows) into a
  // chunk buffer: a.rows rows of K, then a.rows rows of V, a.stride elements apart. A lane copies pieces
  // lane + k * MK_WARP_SIZE of the K rows and the same of the V rows; as head_dim / 8 divides the warp
  // size, all of a lane's pieces sit in one column, MK_WARP_SIZE / (head_dim / 8) rows apart, so only
  // two bases move with k (the per-piece address arithmetic was most of this path's issue cost).
  template <class MachineT>
  __device__ static void copy_chunk_async(MachineT& m, size_t cache_base, int t0, int n, const AttentionWarpSmem& a,
                                          uint16_t* buf) {
    const int hd = m.p.dims.head_dim, row8 = hd / 8, half = a.rows * row8, lane = lane_id();
    const size_t first = (cache_base + size_t(t0)) * size_t(hd) + size_t(lane) * 8;
    const uint16_t* ksrc = m.p.k_cache + first;
    const uint16_t* vsrc = m.p.v_cache + first;
    uint16_t* dst = buf + (lane >> a.row8_log2) * a.stride + (lane & (row8 - 1)) * 8;
    const int round_rows = MK_WARP_SIZE >> a.row8_log2;
#pragma unroll
    for (int k = 0; k < kChunkPieces / 2; ++k) {  // half <= kChunkPieces / 2 * MK_WARP_SIZE
      const int j = lane + k * MK_WARP_SIZE;
      if (j < half && j < n * row8) {
        copy_async_16(dst + k * round_rows * a.stride, ksrc + k * MK_WARP_SIZE * 8);
        copy_async_16(dst + (a.rows + k * round_rows) * a.stride, vsrc + k * MK_WARP_SIZE * 8);
      }
    }
  }

  template <class MachineT>
  __device__ static void warp_chunks(MachineT& m, const AttentionWarpSmem& a, size_t cache_base, int p0, int p1, size_t slot0) {
#if MK_WARP_MMA
    if (attention_warp_mma(m.p.dims)) {
      warp_chunks_with<MmaChunks>(m, a, cache_base, p0, p1, slot0);
      return;
    }
#endif
    warp_chunks_with<FmaChunks>(m, a, cache_base, p0, p1, slot0);
  }

  // The warp path. The split's positions go in chunks of a.rows to the warps in turn (chunk c to warp
  // c % warps). Chunk c < warps lies in the first tile, staged before the wait, in the rows warp c owns. A
  // warp keeps, per head, its own running max m, sum l and unnormalised output o across its chunks
  // (Chunks: FmaChunks or MmaChunks), so no block barrier separates scores, softmax and P·V (the
  // barriers between them were most of a tile's time at long contexts: docs/log.md, 2026-11-24, attention's K/V tries). At
  // the end the warps' partials are combined in shared memory and this split's (m, l, o) per head
  // written (head j's at slot0 + j * splits).
  template <class Chunks, class MachineT>
  __device__ static void warp_chunks_with(MachineT& m, const AttentionWarpSmem& a, size_t cache_base, int p0, int p1,
                                          size_t slot0) {
    const ModelDims& d = m.p.dims;
    const int hd = d.head_dim, G = d.group_size, S = d.attention_splits;
    const int w = warp_id(), lane = lane_id(), R = a.rows, n = p1 - p0;
    uint16_t* krows = a.k + w * R * a.stride;  // its V rows are a.tile rows on (a.v)
    Chunks math(d, a, w);
    // The warp's chunks: k-th at c = w + k * warps. Chunk 0 is in the first tile; later ones come through
    // `ahead` buffers of the weight-stream ring, which is idle during attention unless the stream may
    // issue ahead of the running instruction (then they are copied into the warp's tile rows in turn).
    const int chunk_elems = 2 * R * a.stride;  // K rows, then V rows
    int ahead = 0;
    uint16_t* ring = nullptr;
    if constexpr (MachineT::kStream) {
      if (m.p.stream_lookahead == 0) {
        ahead = min(int(m.p.stream_slots * m.p.stream_slot_bytes / uint32_t(kWarps * chunk_elems * 2)), kMaxAhead);
        ring = reinterpret_cast<uint16_t*>(m.ws.ring) + size_t(w) * size_t(ahead) * size_t(chunk_elems);
      }
    }
    const int chunks = (n + R - 1) >> a.rows_log2;
    const int my_chunks = chunks > w ? (chunks - w + kWarps - 1) / kWarps : 0;
    // Chunk k (k >= 1) into ring buffer (k - 1) % ahead as one group of copies; a group is committed even
    // past the last chunk, so that chunk k always has ahead - 1 groups after it.
    auto issue = [&](int k, uint16_t* buf) {
      if (k < my_chunks) {
        const int t0 = (w + k * kWarps) * R;
        copy_chunk_async(m, cache_base, p0 + t0, min(R, n - t0), a, buf);
      }
      commit_async_group();
    };
    for (int k = 1; k <= ahead; ++k) issue(k, ring + (k - 1) * chunk_elems);
    int buffer = 0;  // (k - 1) % ahead
    for (int k = 0; k < my_chunks; ++k) {
      const int t0 = (w + k * kWarps) * R, nv = min(R, n - t0);
      uint16_t* kr = krows;
      int k_to_v = a.tile * a.stride;
      if (k >= 1 && ahead > 0) {
        wait_async_groups(ahead - 1);
        sync_warp();  // every lane's copies of the chunk have landed
        kr = ring + buffer * chunk_elems;
        k_to_v = R * a.stride;
      } else if (k >= 1) {  // this warp's tile rows are free (the sync_warp ending the previous chunk)
        load_chunk(m, cache_base, p0 + t0, nv, a, krows, krows + k_to_v);
        sync_warp();
      }
      const uint16_t* vr = kr + k_to_v;
      math.chunk(d, a, kr, vr, nv);
      sync_warp();  // the chunk's rows, weights and factors are read before the next chunk replaces them
      if (k >= 1 && ahead > 0) {
        issue(k + ahead, kr);  // into the buffer just read
        buffer = buffer + 1 == ahead ? 0 : buffer + 1;
      }
    }
    if (ahead > 0) {  // the ring is the weight stream's again once the instruction ends
      wait_async_copies();
      fence_shared_for_async_proxy();
    }

    // The warps' partials: each warp's o, then its (m, l) per head, in a.parts (over the tile, which every
    // warp is done with after the barrier); then a thread per (head, element) combines them in warp order.
    __syncthreads();
    const int part = attention_part_floats(d);
    math.write_part(d, a.parts + w * part);
    __syncthreads();
    // A warp per head: lane v weighs warp v's partial by exp(m_v - max), and the head's (m, l) are written.
    float* weight = a.probs;  // warps x G (the softmax weights' space, free now)
    for (int j = w; j < G; j += kWarps) {
      const float* mj = a.parts + G * hd + j;  // warp v's m for head j at mj[v * part], its l G floats on
      const float mv = lane < kWarps ? mj[lane * part] : -INFINITY;
      float mx = mv;
#pragma unroll
      for (int o = MK_WARP_SIZE / 2; o > 0; o >>= 1) mx = fmaxf(mx, shfl_xor(mx, o));
      const float f = mx > -INFINITY ? __expf(mv - mx) : 0.f;  // 0 for a warp without positions (m = -inf)
      const float l = warp_sum(lane < kWarps ? mj[lane * part + G] * f : 0.f);
      if (lane < kWarps) weight[j * kWarps + lane] = f;
      if (lane == 0) {
        const size_t slot = slot0 + size_t(j) * size_t(S);
        m.p.att_ml[slot * 2] = mx, m.p.att_ml[slot * 2 + 1] = l;
      }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < G * hd; idx += kThreads) {
      const int j = idx / hd;
      const float* wj = weight + j * kWarps;
      float o = 0.f;
#pragma unroll 4
      for (int v = 0; v < kWarps; ++v) o += a.parts[v * part + idx] * wj[v];
      m.p.att_o[(slot0 + size_t(j) * size_t(S)) * hd + idx % hd] = o;
    }
  }
#endif
};

}  // namespace mk::dev
