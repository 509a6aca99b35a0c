// OProj row blocks: combine the attention splits of every head (flash-decoding reduction), unless each
// kv group's last attention split has (Schedule::combine_once), then x[rows] += W_o * attn.
#pragma once

#include "device/ops/op_spec.h"
#if MK_DEVICE_CODE
#include "device/gemv.h"
#endif

namespace mk::dev {

struct OProjOp : OpDefaults {
  static constexpr bool kGemv = true;
  MK_HD_INLINE static GemvMatrices gemv(const ModelDims& d, const LayerOffsets& L, uint64_t) {
    GemvMatrices g;
    g.matrix[0] = L.wo, g.parts = 1, g.cols = d.heads * d.head_dim, g.format = d.format;
    return g;
  }
  // The combined attention output in planes and every (m, l), then the residual rows it adds to.
  static size_t smem_floats(const ModelDims& d, const Instr& in) { return residual_gemv_floats(d, in); }
#if MK_DEVICE_CODE
  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    const ModelDims& d = m.p.dims;
    const int hd = d.head_dim, S = d.attention_splits;
    // Only the splits active at this length (of the layer's window) hold data (attention_window_split_range).
    const int A = active_window_splits(m.p.start + int(m.step), layer_attention_params(d, m.p.layer_attention, in.layer).window, S, d.split_positions_log2);
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
      const float residual = m.fetch_residual(in);
      float* ml = m.smem + d.heads * hd;  // after attn; the host pads att_ml to whole 16-byte pieces
      for (int i = threadIdx.x; i < int(attention_ml_floats(d) / 4); i += kThreads) copy_async_16(ml + 4 * i, m.p.att_ml + 4 * i);
      const int quads = d.heads * hd / 4;
      float4 v[kSplitsInFlight];
      auto issue = [&](int q, int s0) {
        const int hh = (q * 4) / hd, i = (q * 4) % hd;
        const float4* o = reinterpret_cast<const float4*>(m.p.att_o + size_t(hh) * S * hd + i);
#pragma unroll
        for (int k = 0; k < kSplitsInFlight; ++k)
          if (s0 + k < A) v[k] = load_fresh(o + size_t(s0 + k) * hd / 4);
      };
      if (int(threadIdx.x) < quads) issue(threadIdx.x, 0);
      wait_async_copies();
      m.store_residual(in, residual);
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
        reinterpret_cast<float4*>(m.smem)[plane_quad(q, d.heads * hd / 8)] = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
      }
      __syncthreads();
    };
    // Schedule::combine_once: each kv group's last attention split has combined the partials into att.
    auto load_attn = [&] {
      const float residual = m.fetch_residual(in);
      load_to_planes(m.p.att, d.heads * hd, m.smem);
      m.store_residual(in, residual);
      __syncthreads();
    };
    // Post-norm layers (kWritesProjected): the rows go to `projected`, their residual rows are zeros.
    const float* res = m.residual_rows();
    m.gemv(
        in, [&] { attention_combines_once(d, MachineT::kLongContext) ? load_attn() : combine(); },
        [&](uint32_t r, float v, float) { m.output_rows(in)[r] = res[r - in.begin] + v; });
  }
#endif
};

}  // namespace mk::dev
