// The CPU twin of the attention op (device/ops/attention.h): q/k norm and RoPE, the K/V append if the split owns the position, then partial attention over the
// split's slice of the cache: (m, l, unnormalised o) per query head of the group; with Schedule::combine_once,
// the group's last split to arrive combines the group's partials into the attention output.
#include "host/emulator/ops/ops.h"

namespace mk::emu {
namespace {

// Schedule::combine_once: the attention output of kv group g's heads from their split partials (the same
// result whichever split combines).
void combine_group(EmulatorState& s, const OpCtx& c, uint32_t g) {
  const int hd = s.cfg.head_dim, G = s.cfg.group_size(), S = s.schedule.attention_splits;
  const size_t first = size_t(g) * size_t(G) * size_t(S), slots = size_t(G) * size_t(S);
  const float* o = s.read(c, s.att_o, first * size_t(hd), (first + slots) * size_t(hd));
  const float* ml = s.read(c, s.att_ml, first * 2, (first + slots) * 2);
  float* attn = s.write(c, s.att, size_t(g) * size_t(G) * size_t(hd), size_t(g + 1) * size_t(G) * size_t(hd));
  for (int j = 0; j < G; ++j)
    combine_head_splits(o + size_t(j) * size_t(S) * size_t(hd), ml + size_t(j) * size_t(S) * 2, S, hd, attn + size_t(j) * size_t(hd));
}

}  // namespace

void emulate_attention(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step) {
  const int pos = s.run.start + int(step);
  const LayerOffsets& L = s.layout.layers[in.layer];
  const int hd = s.cfg.head_dim, G = s.cfg.group_size(), S = s.schedule.attention_splits;
  const uint32_t g = in.begin, split = in.end;
  const size_t group_base = size_t(g) * size_t(s.layout.qkv_group_rows);
  const float* group = s.read(c, s.qkv, group_base, group_base + size_t(s.layout.qkv_group_rows));
  const LayerAttention& A = s.recipe.layers[in.layer].attention;
  int p0, p1;  // of the layer's positions (the last `window` with a sliding window)
  attention_window_split_range(pos, A.window, S, attention_split_positions_log2(hd), int(split), &p0, &p1);
  const size_t cache_base = (size_t(in.layer) * size_t(s.cfg.num_kv_heads) + g) * size_t(s.opt.context);

  std::vector<float> head(static_cast<size_t>(hd));
  auto prepare = [&](const float* src, uint64_t norm) {  // q/k norm (Qwen3) then RoPE, into `head`
    std::copy_n(src, hd, head.begin());
    if (s.layout.has_qk_norm) head = s.rms_norm(head.data(), size_t(hd), s.f32(norm));
    s.rope_inplace(head.data(), pos, in.layer);
  };
  if (p0 <= pos && pos < p1) {  // this split owns the new position (the last split in use): append K and V
    prepare(group + size_t(G) * size_t(hd), L.k_norm);
    uint16_t* k = s.write(c, s.k_cache, (cache_base + size_t(pos)) * size_t(hd), (cache_base + size_t(pos) + 1) * size_t(hd));
    uint16_t* v = s.write(c, s.v_cache, (cache_base + size_t(pos)) * size_t(hd), (cache_base + size_t(pos) + 1) * size_t(hd));
    for (int d = 0; d < hd; ++d) {
      k[d] = float_to_bf16(head[size_t(d)]);
      v[d] = float_to_bf16(group[size_t(G + 1) * size_t(hd) + size_t(d)]);
    }
  }
  const float scale = A.scale;
  const uint16_t* K = p1 > p0 ? s.read(c, s.k_cache, (cache_base + size_t(p0)) * size_t(hd), (cache_base + size_t(p1)) * size_t(hd)) : nullptr;
  const uint16_t* V = p1 > p0 ? s.read(c, s.v_cache, (cache_base + size_t(p0)) * size_t(hd), (cache_base + size_t(p1)) * size_t(hd)) : nullptr;
  for (int j = 0; j < G; ++j) {
    const size_t slot = size_t(int(g) * G + j) * size_t(S) + split;  // (query head, split)
    float* o = s.write(c, s.att_o, slot * size_t(hd), (slot + 1) * size_t(hd));
    float* ml = s.write(c, s.att_ml, slot * 2, slot * 2 + 2);
    std::fill_n(o, hd, 0.f);
    float m = -std::numeric_limits<float>::infinity(), l = 0.f;
    if (p1 > p0) {
      prepare(group + size_t(j) * size_t(hd), L.q_norm);
      std::vector<float> scores(size_t(p1 - p0));
      for (int p = p0; p < p1; ++p) {
        float dot = 0.f;
        for (int d = 0; d < hd; ++d) dot += head[size_t(d)] * bf16_to_float(K[size_t(p - p0) * size_t(hd) + size_t(d)]);
        scores[size_t(p - p0)] = dot * scale;
        m = std::max(m, dot * scale);
      }
      for (int p = p0; p < p1; ++p) {
        const float e = std::exp(scores[size_t(p - p0)] - m);
        l += e;
        for (int d = 0; d < hd; ++d) o[d] += e * bf16_to_float(V[size_t(p - p0) * size_t(hd) + size_t(d)]);
      }
    }
    ml[0] = m;
    ml[1] = l;
  }
  const CombineOnce& once = s.schedule.combine_once;
  if (once.enabled && attention_last_arrival(s.read_modify_write(c, once.counter(in.layer, g)), uint32_t(S), step))
    combine_group(s, c, g);
}

}  // namespace mk::emu
