// Attention (kv group, split): q/k RMSNorm (Qwen3) and RoPE, the K/V append if the split owns this
// position, then partial attention of the group's query heads over the split's slice of the cache, walked
// in K/V tiles staged in shared memory with an online softmax. Writes (m, l, unnormalised o) per head for
// o_proj to combine.
#pragma once

#include "device/ops/op_spec.h"
#if MK_DEVICE_CODE
#include "device/gemv.h"
#endif

namespace mk::dev {

struct AttentionOp : OpDefaults {
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

  // Copies cache rows [t0, t0 + n) of K and V into the shared-memory tile, rows padded by 2 elements so
  // that a thread per position reads conflict-free.
  template <class MachineT>
  __device__ static void stage_tile(MachineT& m, size_t cache_base, int t0, int nt, const AttentionSmem& a) {
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
    const ModelDims& d = m.p.dims;
    const int pos = m.p.start + int(m.step);
    int p0, p1;
    attention_split_range(pos + 1, d.attention_splits, int(in.end), &p0, &p1);
    const AttentionSmem a = smem_plan(d, m.smem);
    const int cached = min(min(a.tile, p1 - p0), pos - p0);
    const size_t cache_base = (size_t(in.layer) * size_t(d.kv_heads) + in.begin) * size_t(m.p.context);
    if (cached > 0) stage_tile(m, cache_base, p0, cached, a);
  }

  // Attention for kv group g over its split of the cache, for all G query heads of the group. The cache
  // slice is walked in tiles of K/V rows staged in shared memory (one load round trip per tile), with an
  // online softmax across tiles. Writes this split's (m, l, unnormalised o) per head for o_proj.
  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    const LayerOffsets& L = m.p.layers[in.layer];
    const ModelDims& d = m.p.dims;
    const int hd = d.head_dim, half = hd / 2, G = d.group_size, S = d.attention_splits;
    const int pos = m.p.start + int(m.step);
    const uint32_t g = in.begin, split = in.end;
    int p0, p1;
    attention_split_range(pos + 1, S, int(split), &p0, &p1);
    const bool owns_new = p0 <= pos && pos < p1;
    const AttentionSmem a = smem_plan(d, m.smem);

    // The group's q/k/v rows and this position's RoPE cos/sin, loaded in one pass.
    const size_t base = size_t(g) * size_t(d.qkv_group_rows);
    const float* cos_row = m.p.rope + size_t(pos) * half;
    const float* sin_row = m.p.rope + size_t(m.p.context) * half + size_t(pos) * half;
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

    const float scale = 1.0f / sqrtf(float(hd));
    for (int t0 = p0; t0 < p1; t0 += a.tile) {
      const int nt = min(a.tile, p1 - t0);
      // The first tile's cached rows were staged before the wait (attention_prestage) and its new row, if
      // any, written from the group's K/V above: the barriers since then order them.
      if (t0 != p0) {
        stage_tile(m, cache_base, t0, nt, a);
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
      m.p.att_o[slot * hd + e] = a.o[idx];
      if (e == 0) m.p.att_ml[slot * 2] = a.m[j], m.p.att_ml[slot * 2 + 1] = a.l[j];
    }
  }
#endif
};

}  // namespace mk::dev
