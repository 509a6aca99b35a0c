// PostNorm row blocks (post-norm layers: Gemma 3): x[rows] += RMSNorm(projected)[rows], with the layer's
// post-attention (Instr::slot kAttentionNorm) or post-MLP (kMlpNorm) norm weight. o_proj and down write
// `projected` (kWritesProjected) instead of adding to x; every block reads all of it for the norm's sum of
// squares, and adds its own rows.
#pragma once

#include "device/ops/op_spec.h"
#if MK_DEVICE_CODE
#include "device/gemv.h"
#endif

namespace mk::dev {

struct PostNormOp : OpDefaults {
#if MK_DEVICE_CODE
  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    const ModelDims& d = m.p.dims;
    const LayerOffsets& L = m.p.layers[in.layer];
    const float* weight = m.f32(in.slot == kAttentionNorm ? L.post_attn_norm : L.post_mlp_norm);
    float ss = 0.f;
    for_each_fresh_quad(m.p.projected, d.hidden, [] {}, [&](int, float4 v) { ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w; });
    ss = warp_sum(ss);
    if (lane_id() == 0) m.red[warp_id()] = ss;
    __syncthreads();
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += m.red[w];  // fixed order: every thread gets the same value
    const float inv = 1.0f / sqrtf(total / float(d.hidden) + d.rms_eps);
    for (uint32_t r = in.begin + threadIdx.x; r < in.end; r += kThreads)
      m.p.x[r] = load_fresh(m.p.x + r) + load_fresh(m.p.projected + r) * inv * weight[r];
    __syncthreads();  // m.red is the next instruction's
  }
#endif
};

}  // namespace mk::dev
