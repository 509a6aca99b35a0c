// ChunkNorm (chunk steps): for the chunk's tokens [begin, end), the layer's attention or MLP RMSNorm of
// the residual rows, stored 16-bit as the next matrix op's input; layer 0's attention norm first gathers
// the tokens' embedding rows (times ModelDims::embed_scale) into the residual stream. A warp per token.
#pragma once

#include "device/ops/op_spec.h"
#if MK_DEVICE_CODE
#include "device/chunk_machine.h"
#endif

namespace mk::dev {

struct ChunkNormOp : OpDefaults {
#if MK_DEVICE_CODE
  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    const KernelParams& p = m.p;
    const ModelDims& d = p.dims;
    const int H = d.hidden;
    const LayerOffsets& L = p.layers[in.layer];
    const float* g = m.f32(in.slot == kAttentionNorm ? L.attn_norm : L.mlp_norm);
    const bool embed = in.layer == 0 && in.slot == kAttentionNorm;
    const int end = min(int(in.end), m.tokens);
    // Rows in float4 pieces (hidden is a multiple of 32: plan_chunk_steps), 8 pieces a lane in flight.
    const int H4 = H / 4;
    for (int t = int(in.begin) + warp_id(); t < end; t += kWarps) {
      float* x = p.chunk_x + size_t(t) * size_t(H);
      float4* x4 = reinterpret_cast<float4*>(x);
      float ss = 0.f;
      if (embed) {
        const int32_t token = p.chunk_tokens[size_t(m.chunk) * size_t(p.chunk_size) + size_t(t)];
        const uint8_t* row = m.matrix(p.embed) + size_t(token) * size_t(matrix_row_bytes(d.head_format, H));
        for (int k = lane_id(); k < H; k += MK_WARP_SIZE) {
          const float v = matrix_row_element(d.head_format, row, H, k) * d.embed_scale;
          x[k] = v;
          ss += v * v;
        }
        sync_warp();  // the second pass reads the row in float4 pieces that other lanes wrote
      } else {
#pragma unroll 8
        for (int k = lane_id(); k < H4; k += MK_WARP_SIZE) {
          const float4 v = load_fresh(x4 + k);
          ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
      }
      const float inv = 1.0f / sqrtf(warp_sum(ss) / float(H) + d.rms_eps);
      uint2* out = reinterpret_cast<uint2*>(p.chunk_act + size_t(t) * size_t(p.chunk_act_cols));
      const float4* g4 = reinterpret_cast<const float4*>(g);
      // The lane reads back what it wrote itself (embed) or read before: no other thread's data.
#pragma unroll 8
      for (int k = lane_id(); k < H4; k += MK_WARP_SIZE) {
        const float4 v = load_fresh(x4 + k), w = g4[k];
        out[k] = make_uint2(uint32_t(m.to_act16(v.x * inv * w.x)) | uint32_t(m.to_act16(v.y * inv * w.y)) << 16,
                            uint32_t(m.to_act16(v.z * inv * w.z)) | uint32_t(m.to_act16(v.w * inv * w.w)) << 16);
      }
    }
  }
#endif
};

}  // namespace mk::dev
