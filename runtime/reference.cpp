#include "runtime/reference.h"

#include <algorithm>
#include <cmath>

#include "runtime/error.h"
#include "runtime/rope.h"

namespace mk {
namespace {

using Vec = std::vector<float>;

// out = norm(x) * weight, with RMSNorm as in HF: x / sqrt(mean(x^2) + eps).
Vec rms_norm(const float* x, int n, const TensorView& weight, float eps) {
  double sum_sq = 0;
  for (int i = 0; i < n; ++i) sum_sq += double(x[i]) * x[i];
  const float inv = float(1.0 / std::sqrt(sum_sq / n + double(eps)));
  Vec out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[size_t(i)] = x[i] * inv * weight.at(i);
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

float silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

ReferenceModel::ReferenceModel(const Model& model, int context)
    : model_(model), cfg_(model.config), context_(context), inv_freq_(rope_inv_freq(model.config)) {
  const size_t per_layer = size_t(context) * size_t(cfg_.kv_dim());
  k_cache_.assign(per_layer * size_t(cfg_.num_layers), 0.0f);
  v_cache_.assign(per_layer * size_t(cfg_.num_layers), 0.0f);
}

std::vector<float> ReferenceModel::forward(int32_t token) {
  const auto& c = cfg_;
  const auto& w = model_.weights;
  if (position_ >= context_) fail("reference: position {} is past the context of {} tokens", position_, context_);
  if (token < 0 || token >= c.vocab_size) fail("reference: token {} is outside the vocabulary [0, {})", token, c.vocab_size);
  const int hd = c.head_dim, pos = position_;

  Vec x(size_t(c.hidden_size));
  for (int i = 0; i < c.hidden_size; ++i) x[size_t(i)] = w.embed.at(int64_t(token) * c.hidden_size + i);

  Vec cos(size_t(hd / 2)), sin(size_t(hd / 2));
  rope_cos_sin(inv_freq_, pos, cos.data(), sin.data());
  const float scale = 1.0f / std::sqrt(float(hd));

  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = w.layers[size_t(l)];
    // Attention block.
    Vec xn = rms_norm(x.data(), c.hidden_size, L.attn_norm, c.rms_norm_eps);
    Vec q = matvec(L.wq, xn, &L.bq), k = matvec(L.wk, xn, &L.bk), v = matvec(L.wv, xn, &L.bv);
    for (int h = 0; h < c.num_heads; ++h) {
      float* qh = q.data() + size_t(h) * size_t(hd);
      if (c.qk_norm) std::copy_n(rms_norm(qh, hd, L.q_norm, c.rms_norm_eps).begin(), hd, qh);
      apply_rope(qh, hd, cos.data(), sin.data());
    }
    for (int h = 0; h < c.num_kv_heads; ++h) {
      float* kh = k.data() + size_t(h) * size_t(hd);
      if (c.qk_norm) std::copy_n(rms_norm(kh, hd, L.k_norm, c.rms_norm_eps).begin(), hd, kh);
      apply_rope(kh, hd, cos.data(), sin.data());
    }
    float* k_layer = k_cache_.data() + size_t(l) * size_t(context_) * size_t(c.kv_dim());
    float* v_layer = v_cache_.data() + size_t(l) * size_t(context_) * size_t(c.kv_dim());
    std::copy(k.begin(), k.end(), k_layer + size_t(pos) * size_t(c.kv_dim()));
    std::copy(v.begin(), v.end(), v_layer + size_t(pos) * size_t(c.kv_dim()));

    Vec attn(size_t(c.q_dim()), 0.0f);
    for (int h = 0; h < c.num_heads; ++h) {
      const int kvh = h / c.group_size();
      const float* qh = q.data() + size_t(h) * size_t(hd);
      Vec scores(size_t(pos) + 1);
      for (int p = 0; p <= pos; ++p) {
        const float* kp = k_layer + size_t(p) * size_t(c.kv_dim()) + size_t(kvh) * size_t(hd);
        double dot = 0;
        for (int d = 0; d < hd; ++d) dot += double(qh[d]) * kp[d];
        scores[size_t(p)] = float(dot) * scale;
      }
      const float m = *std::max_element(scores.begin(), scores.end());
      double denom = 0;
      for (auto& s : scores) denom += (s = std::exp(s - m));
      for (int p = 0; p <= pos; ++p) {
        const float* vp = v_layer + size_t(p) * size_t(c.kv_dim()) + size_t(kvh) * size_t(hd);
        const float prob = float(scores[size_t(p)] / denom);
        for (int d = 0; d < hd; ++d) attn[size_t(h) * size_t(hd) + size_t(d)] += prob * vp[d];
      }
    }
    Vec o = matvec(L.wo, attn);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];

    // MLP block: down(silu(gate(x)) * up(x)).
    xn = rms_norm(x.data(), c.hidden_size, L.mlp_norm, c.rms_norm_eps);
    Vec g = matvec(L.w_gate, xn), u = matvec(L.w_up, xn);
    for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
    Vec down = matvec(L.w_down, g);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }

  Vec xn = rms_norm(x.data(), c.hidden_size, w.final_norm, c.rms_norm_eps);
  ++position_;
  return matvec(w.lm_head, xn);
}

}  // namespace mk
