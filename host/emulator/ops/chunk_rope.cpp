// The CPU twin of the chunk_rope op (device/ops/chunk_rope.h): for the chunk's tokens [begin, end), q/k
// norm and RoPE as a token step's attention applies them; K and V into the cache at the tokens'
// positions, the queries (bf16) for chunk attention.
#include "host/emulator/ops/ops.h"

namespace mk::emu {

void emulate_chunk_rope(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t chunk) {
  const LayerOffsets& L = s.layout.layers[in.layer];
  const size_t hd = size_t(s.cfg.head_dim), G = size_t(s.cfg.group_size()), Q = size_t(s.layout.qkv_rows);
  const size_t group_rows = size_t(s.layout.qkv_group_rows), q_dim = size_t(s.cfg.q_dim());
  const uint32_t end = std::min(in.end, s.chunk_length(chunk));
  std::vector<float> head(hd);
  for (uint32_t t = in.begin; t < end; ++t) {
    const int pos = s.chunk_position(chunk, t);
    const float* row = s.read(c, s.chunk_qkv, t * Q, (t + 1) * Q);
    auto prepare = [&](const float* src, uint64_t norm) {  // q/k norm (Qwen3) then RoPE, into `head`
      std::copy_n(src, hd, head.begin());
      if (s.layout.has_qk_norm) head = s.rms_norm(head.data(), hd, s.f32(norm));
      s.rope_inplace(head.data(), pos, in.layer);
    };
    uint16_t* q = s.write(c, s.chunk_q, t * q_dim, (t + 1) * q_dim);
    for (size_t g = 0; g < size_t(s.cfg.num_kv_heads); ++g) {
      const float* group = row + g * group_rows;
      for (size_t j = 0; j < G; ++j) {
        prepare(group + j * hd, L.q_norm);
        for (size_t d = 0; d < hd; ++d) q[(g * G + j) * hd + d] = float_to_bf16(head[d]);
      }
      const size_t cache_row = (size_t(in.layer) * size_t(s.cfg.num_kv_heads) + g) * size_t(s.opt.context) + size_t(pos);
      prepare(group + G * hd, L.k_norm);
      uint16_t* k = s.write(c, s.k_cache, cache_row * hd, (cache_row + 1) * hd);
      uint16_t* v = s.write(c, s.v_cache, cache_row * hd, (cache_row + 1) * hd);
      for (size_t d = 0; d < hd; ++d) {
        k[d] = float_to_bf16(head[d]);
        v[d] = float_to_bf16(group[(G + 1) * hd + d]);
      }
    }
  }
}

}  // namespace mk::emu
