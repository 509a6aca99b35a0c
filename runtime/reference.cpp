#include "runtime/reference.h"

#include <algorithm>
#include <cmath>

#include "runtime/error.h"
#include "runtime/rope.h"

namespace mk {
namespace {

using Vec = std::vector<float>;

// out = norm(x) * (offset + weight), with RMSNorm as in HF: x / sqrt(mean(x^2) + eps); Gemma's norms
// scale by (1 + weight).
Vec rms_norm(const float* x, int n, const TensorView& weight, float eps, float offset) {
  double sum_sq = 0;
  for (int i = 0; i < n; ++i) sum_sq += double(x[i]) * x[i];
  const float inv = float(1.0 / std::sqrt(sum_sq / n + double(eps)));
  Vec out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[size_t(i)] = x[i] * inv * (offset + weight.at(i));
  return out;
}

// y = W x (+ b) for W [rows, cols] as stored in the model file.
Vec matvec(const TensorView& w, const Vec& x, const TensorView* bias = nullptr) {
  const int64_t rows = w.shape[0], cols = w.shape[1];
  Vec y(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0;
    for (int64_t c = 0; c < cols; ++c) acc += double(w.at(r * cols + c)) * x[size_t(c)];
    y[size_t(r)] = float(acc) + (bias && bias->present() ? bias->at(r) : 0.0f);
  }
  return y;
}

// Rotates one head in place: pairs (i, i + half).
void apply_rope(float* head, int head_dim, const float* cos, const float* sin) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float a = head[i], b = head[i + half];
    head[i] = a * cos[i] - b * sin[i];
    head[i + half] = b * cos[i] + a * sin[i];
  }
}

}  // namespace

ReferenceModel::ReferenceModel(const Model& model, int context)
    : model_(model), cfg_(model.config), recipe_(build_step_recipe(model.config)), context_(context) {
  const size_t per_layer = size_t(context) * size_t(cfg_.kv_dim());
  k_cache_.assign(per_layer * size_t(cfg_.num_layers), 0.0f);
  v_cache_.assign(per_layer * size_t(cfg_.num_layers), 0.0f);
  // RoPE frequencies per layer: each layer's base from the recipe, the scaling from the config.
  for (const LayerRecipe& L : recipe_.layers) {
    inv_freq_.push_back(rope_inv_freq(cfg_.head_dim, L.attention.rope_theta, L.attention.rope_scaling));
  }
}

std::vector<float> ReferenceModel::forward(int32_t token) {
  const auto& c = cfg_;
  if (position_ >= context_) fail("reference: position {} is past the context of {} tokens", position_, context_);
  if (token < 0 || token >= c.vocab_size) fail("reference: token {} is outside the vocabulary [0, {})", token, c.vocab_size);
  StepState state;
  state.token = token;
  for (const Stage& st : recipe_.first) run(st, -1, state);
  for (int l = 0; l < c.num_layers; ++l)
    for (const Stage& st : recipe_.layers[size_t(l)].step) run(st, l, state);
  for (const Stage& st : recipe_.last) run(st, -1, state);
  ++position_;
  return std::move(state.logits);
}

void ReferenceModel::residual_or_projected(const Stage& st, std::vector<float> out, StepState& s) {
  if (!st.adds) {
    s.projected = std::move(out);
    return;
  }
  for (size_t i = 0; i < s.x.size(); ++i) s.x[i] += out[i];
}

void ReferenceModel::run(const Stage& st, int layer, StepState& s) {
  const auto& c = cfg_;
  const auto& w = model_.weights;
  const int hd = c.head_dim, pos = position_;
  switch (st.op) {
    case Op::Embed:
      s.x.assign(size_t(c.hidden_size), 0.0f);
      for (int i = 0; i < c.hidden_size; ++i) s.x[size_t(i)] = w.embed.at(int64_t(s.token) * c.hidden_size + i) * recipe_.embed_scale;
      return;
    case Op::QKV: {
      const LayerWeights& L = w.layers[size_t(layer)];
      const LayerRecipe& R = recipe_.layers[size_t(layer)];
      const Vec xn = rms_norm(s.x.data(), c.hidden_size, L.attn_norm, R.norm_eps, recipe_.norm_weight_offset);
      const bool bias = R.attention.qkv_bias;
      s.q = matvec(L.wq, xn, bias ? &L.bq : nullptr);
      s.k = matvec(L.wk, xn, bias ? &L.bk : nullptr);
      s.v = matvec(L.wv, xn, bias ? &L.bv : nullptr);
      return;
    }
    case Op::Attention: {
      const LayerWeights& L = w.layers[size_t(layer)];
      const LayerRecipe& R = recipe_.layers[size_t(layer)];
      const LayerAttention& A = R.attention;
      Vec cos(size_t(hd / 2)), sin(size_t(hd / 2));
      rope_cos_sin(inv_freq_[size_t(layer)], pos, cos.data(), sin.data());
      for (int h = 0; h < c.num_heads; ++h) {
        float* qh = s.q.data() + size_t(h) * size_t(hd);
        if (A.qk_norm) std::copy_n(rms_norm(qh, hd, L.q_norm, R.norm_eps, recipe_.norm_weight_offset).begin(), hd, qh);
        apply_rope(qh, hd, cos.data(), sin.data());
      }
      for (int h = 0; h < c.num_kv_heads; ++h) {
        float* kh = s.k.data() + size_t(h) * size_t(hd);
        if (A.qk_norm) std::copy_n(rms_norm(kh, hd, L.k_norm, R.norm_eps, recipe_.norm_weight_offset).begin(), hd, kh);
        apply_rope(kh, hd, cos.data(), sin.data());
      }
      float* k_layer = k_cache_.data() + size_t(layer) * size_t(context_) * size_t(c.kv_dim());
      float* v_layer = v_cache_.data() + size_t(layer) * size_t(context_) * size_t(c.kv_dim());
      std::copy(s.k.begin(), s.k.end(), k_layer + size_t(pos) * size_t(c.kv_dim()));
      std::copy(s.v.begin(), s.v.end(), v_layer + size_t(pos) * size_t(c.kv_dim()));
      // A sliding window of w positions: the last w, this one included.
      const int first = A.window > 0 ? std::max(0, pos - A.window + 1) : 0;
      s.attn.assign(size_t(c.q_dim()), 0.0f);
      for (int h = 0; h < c.num_heads; ++h) {
        const int kvh = h / c.group_size();
        const float* qh = s.q.data() + size_t(h) * size_t(hd);
        Vec scores(size_t(pos - first) + 1);
        for (int p = first; p <= pos; ++p) {
          const float* kp = k_layer + size_t(p) * size_t(c.kv_dim()) + size_t(kvh) * size_t(hd);
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += double(qh[d]) * kp[d];
          scores[size_t(p - first)] = float(dot) * A.scale;
        }
        const float m = *std::max_element(scores.begin(), scores.end());
        double denom = 0;
        for (auto& sc : scores) denom += (sc = std::exp(sc - m));
        for (int p = first; p <= pos; ++p) {
          const float* vp = v_layer + size_t(p) * size_t(c.kv_dim()) + size_t(kvh) * size_t(hd);
          const float prob = float(scores[size_t(p - first)] / denom);
          for (int d = 0; d < hd; ++d) s.attn[size_t(h) * size_t(hd) + size_t(d)] += prob * vp[d];
        }
      }
      return;
    }
    case Op::OProj: return residual_or_projected(st, matvec(w.layers[size_t(layer)].wo, s.attn), s);
    case Op::PostNorm: {
      const LayerWeights& L = w.layers[size_t(layer)];
      const Vec n = rms_norm(s.projected.data(), c.hidden_size, st.slot == kAttentionNorm ? L.post_attn_norm : L.post_mlp_norm,
                             recipe_.layers[size_t(layer)].norm_eps, recipe_.norm_weight_offset);
      for (size_t i = 0; i < s.x.size(); ++i) s.x[i] += n[i];
      return;
    }
    // One device's partial is the whole sum: a tensor-parallel recipe's stages run on the full model.
    case Op::AllReduce: return residual_or_projected(st, s.projected, s);
    case Op::GateUp: {
      const LayerWeights& L = w.layers[size_t(layer)];
      const LayerRecipe& R = recipe_.layers[size_t(layer)];
      const Vec xn = rms_norm(s.x.data(), c.hidden_size, L.mlp_norm, R.norm_eps, recipe_.norm_weight_offset);
      s.h = matvec(L.w_gate, xn);
      const Vec u = matvec(L.w_up, xn);
      for (size_t i = 0; i < s.h.size(); ++i) s.h[i] = activation_value(R.activation, s.h[i]) * u[i];
      return;
    }
    case Op::Down: return residual_or_projected(st, matvec(w.layers[size_t(layer)].w_down, s.h), s);
    case Op::LMHead: {
      const Vec xn = rms_norm(s.x.data(), c.hidden_size, w.final_norm, c.rms_norm_eps, recipe_.norm_weight_offset);
      s.logits = matvec(w.lm_head, xn);
      return;
    }
    case Op::Sample: return;  // the reference returns the logits; sampling is checked on its own
    default: fail("reference: the token step has no stage of op {}", op_name(st.op));
  }
}

}  // namespace mk
