// The CPU twin of the chunk_attention op (device/ops/chunk_attention.h): causal attention of the
// instruction's query tokens (all heads of kv group `begin`) over the cache up to each token's position,
// within the layer's window, with its scale. Keys go in tiles of 64 positions aligned to multiples of 64,
// with the online softmax of the tensor-core kernel: the weights of a tile are rounded to bf16 for the
// product with V (its A operand), their fp32 values summed for the normaliser. Keys before a row's window
// take no part (the device's -inf scores), nor the tiles wholly before it.
#include "host/emulator/ops/ops.h"

namespace mk::emu {

void emulate_chunk_attention(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t chunk) {
  constexpr int kTile = 64;
  const size_t hd = size_t(s.cfg.head_dim), G = size_t(s.cfg.group_size()), q_dim = size_t(s.cfg.q_dim());
  const size_t A = s.chunk_act_cols(), g = in.begin;
  const uint32_t per = uint32_t(s.schedule.chunk.attention_tokens), first = uint32_t(in.slot) * per;
  const uint32_t last = std::max(first, std::min(first + per, s.chunk_length(chunk)));
  const LayerAttention& attention = s.recipe.layers[in.layer].attention;
  const float scale = attention.scale;
  const size_t cache_base = (size_t(in.layer) * size_t(s.cfg.num_kv_heads) + g) * size_t(s.opt.context);
  std::vector<float> o(hd), x(kTile);
  for (uint32_t t = first; t < last; ++t) {
    const int pos = s.chunk_position(chunk, t);
    const int lo = attention_first_position(pos, attention.window);  // its first key
    const uint16_t* K = s.read(c, s.k_cache, cache_base * hd, (cache_base + size_t(pos) + 1) * hd);
    const uint16_t* V = s.read(c, s.v_cache, cache_base * hd, (cache_base + size_t(pos) + 1) * hd);
    const uint16_t* q_all = s.read(c, s.chunk_q, t * q_dim + g * G * hd, t * q_dim + (g + 1) * G * hd);
    uint16_t* out = s.write(c, s.chunk_act, t * A + g * G * hd, t * A + (g + 1) * G * hd);
    for (size_t j = 0; j < G; ++j) {
      const uint16_t* q = q_all + j * hd;
      float m = -std::numeric_limits<float>::infinity(), l = 0.f;
      std::fill(o.begin(), o.end(), 0.f);
      for (int p0 = lo / kTile * kTile; p0 <= pos; p0 += kTile) {
        const int p1 = std::min(p0 + kTile, pos + 1);
        float m_new = m;
        for (int p = std::max(p0, lo); p < p1; ++p) {
          float dot = 0.f;
          for (size_t d = 0; d < hd; ++d) dot += bf16_to_float(q[d]) * bf16_to_float(K[size_t(p) * hd + d]);
          x[size_t(p - p0)] = dot * scale;
          m_new = std::max(m_new, x[size_t(p - p0)]);
        }
        const float corr = m == -std::numeric_limits<float>::infinity() ? 0.f : std::exp(m - m_new);
        l *= corr;
        for (float& v : o) v *= corr;
        for (int p = std::max(p0, lo); p < p1; ++p) {
          const float e = std::exp(x[size_t(p - p0)] - m_new);
          l += e;
          const float e16 = bf16_to_float(float_to_bf16(e));
          for (size_t d = 0; d < hd; ++d) o[d] += e16 * bf16_to_float(V[size_t(p) * hd + d]);
        }
        m = m_new;
      }
      for (size_t d = 0; d < hd; ++d) out[j * hd + d] = s.to_act16(o[d] / l);
    }
  }
}

}  // namespace mk::emu
