// The CPU twin of the attention op (device/ops/attention.h), in every column of the step's span, each
// exactly as a one-token step at its position computes it: q/k norm and RoPE, the K/V append if the split
// owns the column's position, then partial attention over the split's slice of the column's positions
// (its window, up to itself): (m, l, unnormalised o) per query head of the group. Positions before the
// span come from the cache, the span's own from its qkv columns (the rows it appends, bf16 as the cache
// holds them), so no split reads a row that another appends in the same step. With
// Schedule::combine_once, the group's last split to arrive combines the group's partials into the
// attention output.
#include "host/emulator/ops/ops.h"

namespace mk::emu {
namespace {

// Schedule::combine_once: the attention output of kv group g's heads in column j from their split
// partials (the same result whichever split combines).
void combine_group(EmulatorState& s, const OpCtx& c, uint32_t g, int j) {
  const int hd = s.cfg.head_dim, G = s.cfg.group_size(), S = s.schedule.attention_splits;
  const size_t o_column = size_t(j) * size_t(s.cfg.num_heads) * size_t(S) * size_t(hd);
  const size_t ml_column = size_t(j) * attention_ml_floats(size_t(s.cfg.num_heads), size_t(S));
  const size_t att_column = size_t(j) * size_t(s.cfg.q_dim());
  const size_t first = size_t(g) * size_t(G) * size_t(S), slots = size_t(G) * size_t(S);
  const float* o = s.read(c, s.att_o, o_column + first * size_t(hd), o_column + (first + slots) * size_t(hd));
  const float* ml = s.read(c, s.att_ml, ml_column + first * 2, ml_column + (first + slots) * 2);
  float* attn = s.write(c, s.att, att_column + size_t(g) * size_t(G) * size_t(hd), att_column + size_t(g + 1) * size_t(G) * size_t(hd));
  for (int k = 0; k < G; ++k)
    combine_head_splits(o + size_t(k) * size_t(S) * size_t(hd), ml + size_t(k) * size_t(S) * 2, S, hd, attn + size_t(k) * size_t(hd));
}

}  // namespace

void emulate_attention(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step) {
  const StepSpan span = s.span(c, step);
  const int pos0 = s.run.start + span.index;
  const LayerOffsets& L = s.layout.layers[in.layer];
  const int hd = s.cfg.head_dim, G = s.cfg.group_size(), S = s.schedule.attention_splits;
  const uint32_t g = in.begin, split = in.end;
  const size_t R = size_t(s.layout.qkv_rows), group_base = size_t(g) * size_t(s.layout.qkv_group_rows);
  const LayerAttention& A = s.recipe.layers[in.layer].attention;
  const size_t cache_base = (size_t(in.layer) * size_t(s.cfg.num_kv_heads) + g) * size_t(s.opt.context);

  std::vector<float> head(static_cast<size_t>(hd));
  auto prepare = [&](const float* src, uint64_t norm, int pos) {  // q/k norm (Qwen3) then RoPE, into `head`
    std::copy_n(src, hd, head.begin());
    if (s.layout.has_qk_norm) head = s.rms_norm(head.data(), size_t(hd), s.f32(norm));
    s.rope_inplace(head.data(), pos, in.layer);
  };
  auto group_of = [&](int j) {
    return s.read(c, s.qkv, size_t(j) * R + group_base, size_t(j) * R + group_base + size_t(s.layout.qkv_group_rows));
  };
  // The span's own K/V rows, as the cache holds them (bf16), from its qkv columns: every split computes
  // them, so that no split reads a row another split of this step appends.
  std::vector<uint16_t> new_k(size_t(span.count) * size_t(hd)), new_v(new_k.size());
  for (int j = 0; j < span.count; ++j) {
    const float* group = group_of(j);
    prepare(group + size_t(G) * size_t(hd), L.k_norm, pos0 + j);
    for (int d = 0; d < hd; ++d) {
      new_k[size_t(j) * size_t(hd) + size_t(d)] = float_to_bf16(head[size_t(d)]);
      new_v[size_t(j) * size_t(hd) + size_t(d)] = float_to_bf16(group[size_t(G + 1) * size_t(hd) + size_t(d)]);
    }
  }
  const float scale = A.scale;
  const size_t ml_floats = attention_ml_floats(size_t(s.cfg.num_heads), size_t(S));
  for (int j = 0; j < span.count; ++j) {
    // Column j's split of its positions, as a one-token step at its position cuts them.
    const int pos = pos0 + j;
    int p0, p1;
    attention_window_split_range(pos, A.window, S, attention_split_positions_log2(hd), int(split), &p0, &p1);
    if (p0 <= pos && pos < p1) {  // this split owns the column's position: append its K and V
      std::copy_n(new_k.begin() + std::ptrdiff_t(size_t(j) * size_t(hd)), hd,
                  s.write(c, s.k_cache, (cache_base + size_t(pos)) * size_t(hd), (cache_base + size_t(pos) + 1) * size_t(hd)));
      std::copy_n(new_v.begin() + std::ptrdiff_t(size_t(j) * size_t(hd)), hd,
                  s.write(c, s.v_cache, (cache_base + size_t(pos)) * size_t(hd), (cache_base + size_t(pos) + 1) * size_t(hd)));
    }
    // Positions before the span from the cache, the span's own from new_k / new_v.
    const int cached = std::min(p1, pos0);
    const uint16_t* K = cached > p0 ? s.read(c, s.k_cache, (cache_base + size_t(p0)) * size_t(hd), (cache_base + size_t(cached)) * size_t(hd)) : nullptr;
    const uint16_t* V = cached > p0 ? s.read(c, s.v_cache, (cache_base + size_t(p0)) * size_t(hd), (cache_base + size_t(cached)) * size_t(hd)) : nullptr;
    auto k_row = [&](int p) { return p < pos0 ? K + size_t(p - p0) * size_t(hd) : new_k.data() + size_t(p - pos0) * size_t(hd); };
    auto v_row = [&](int p) { return p < pos0 ? V + size_t(p - p0) * size_t(hd) : new_v.data() + size_t(p - pos0) * size_t(hd); };
    const float* group = group_of(j);
    for (int k = 0; k < G; ++k) {
      const size_t slot = size_t(int(g) * G + k) * size_t(S) + split;  // (query head, split)
      const size_t o_at = (size_t(j) * size_t(s.cfg.num_heads) * size_t(S) + slot) * size_t(hd);
      const size_t ml_at = size_t(j) * ml_floats + slot * 2;
      float* o = s.write(c, s.att_o, o_at, o_at + size_t(hd));
      float* ml = s.write(c, s.att_ml, ml_at, ml_at + 2);
      std::fill_n(o, hd, 0.f);
      float m = -std::numeric_limits<float>::infinity(), l = 0.f;
      if (p1 > p0) {
        prepare(group + size_t(k) * size_t(hd), L.q_norm, pos);
        std::vector<float> scores(size_t(p1 - p0));
        for (int p = p0; p < p1; ++p) {
          const uint16_t* kr = k_row(p);
          float dot = 0.f;
          for (int d = 0; d < hd; ++d) dot += head[size_t(d)] * bf16_to_float(kr[d]);
          scores[size_t(p - p0)] = dot * scale;
          m = std::max(m, dot * scale);
        }
        for (int p = p0; p < p1; ++p) {
          const float e = std::exp(scores[size_t(p - p0)] - m);
          l += e;
          const uint16_t* vr = v_row(p);
          for (int d = 0; d < hd; ++d) o[d] += e * bf16_to_float(vr[d]);
        }
      }
      ml[0] = m;
      ml[1] = l;
    }
  }
  const CombineOnce& once = s.schedule.combine_once;
  if (once.enabled && attention_last_arrival(s.read_modify_write(c, once.counter(in.layer, g)), uint32_t(S), step))
    for (int j = 0; j < span.count; ++j) combine_group(s, c, g, j);
}

}  // namespace mk::emu
