// ChunkAttention (chunk steps): causal attention of a tile of the chunk's query tokens, all query heads
// of kv group `begin`, over the cache up to each token's position (the chunk's own K/V included, put
// there by chunk_rope) within the layer's window, with the layer's scale, on tensor cores
// (device/chunk_attention.h); the output, 16-bit, is o_proj's input.
#pragma once

#include "device/chunk_attention.h"
#include "device/ops/op_spec.h"
#if MK_DEVICE_CODE
#include "device/chunk_machine.h"
#endif

namespace mk::dev {

// The schedule's attention tiles (runtime/schedule.h) are the device call's on the tensor-core head sizes,
// and no more tokens than it takes on the others.
static_assert(chunk_attention_tokens(1, 64) == chunk_attention_tile_tokens(1) && chunk_attention_tokens(4, 128) == chunk_attention_tile_tokens(4) &&
                  chunk_attention_tokens(7, 32) == chunk_attention_tile_tokens(7) && chunk_attention_tokens(20, 64) == chunk_attention_tile_tokens(20),
              "chunk attention's query tiles agree between the schedule and the device");
static_assert(chunk_attention_tokens(1, 256) <= chunk_attention_tile_tokens(1) && chunk_attention_tokens(4, 256) <= chunk_attention_tile_tokens(4) &&
                  chunk_attention_tokens(7, 96) <= chunk_attention_tile_tokens(7) && chunk_attention_tokens(40, 16) <= chunk_attention_tile_tokens(40),
              "a portable chunk attention instruction takes no more tokens than the device call does");

struct ChunkAttentionOp : OpDefaults {
  static size_t smem_floats(const ModelDims& d, const Instr&) { return (chunk_attention_smem_bytes(d.head_dim, d.group_size) + 3) / 4; }
#if MK_DEVICE_CODE
  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    const KernelParams& p = m.p;
    const ModelDims& d = p.dims;
    const int per = chunk_attention_tokens(d.group_size, d.head_dim), first = int(in.slot) * per;
    const int count = min(per, m.tokens - first);
    if (count <= 0) return;
    const int hd = d.head_dim, G = d.group_size, q_dim = d.heads * hd;
    const size_t cache = (size_t(in.layer) * size_t(d.kv_heads) + in.begin) * size_t(p.context) * size_t(hd);
    const LayerAttentionParams la = layer_attention_params(d, p.layer_attention, in.layer);
    chunk_attention_block<MachineT::kF16>(p.chunk_q + size_t(first) * size_t(q_dim) + in.begin * size_t(G * hd), q_dim, p.k_cache + cache,
                                          p.v_cache + cache, m.first_pos + first, count, hd, G, la.scale, la.window,
                                          p.chunk_act + size_t(first) * size_t(p.chunk_act_cols) + in.begin * size_t(G * hd),
                                          p.chunk_act_cols, m.smem);
  }
#endif
};

}  // namespace mk::dev
