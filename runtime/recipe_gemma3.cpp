// Gemma 3's step recipe (Gemma3ForCausalLM). A layer with four norms, each scaling by (1 + w):
//   x += post_attn_norm(o_proj(attention(rope(qk_norm(qkv(input_norm(x)))))))
//   x += post_mlp_norm(down(gelu_tanh(gate(pre_mlp_norm(x))) * up(pre_mlp_norm(x))))
// The embedding rows are scaled by sqrt(hidden_size); attention scores by query_pre_attn_scalar^-0.5.
// Sliding layers attend to the last `sliding_window` positions with their own RoPE base, unscaled; the
// global layers use rope_theta with the config's scaling. The head is tied. A chunk step's layer (prefill)
// has the same four norms (chunk_layer_stages with post-norms).
#include <cmath>

#include "runtime/step_recipe.h"

namespace mk {

StepRecipe gemma3_recipe(const ModelConfig& c) {
  using LW = LayerWeights;
  StepRecipe r;
  r.embed_scale = std::sqrt(float(c.hidden_size));
  r.norm_weight_offset = c.norm_weight_offset;
  r.first = embed_stages(c);

  const uint32_t hidden = uint32_t(c.hidden_size), inter = uint32_t(c.intermediate_size);
  Stage qkv = make_stage(Op::QKV, Spread::GroupRows, "qkv", uint32_t((c.group_size() + 2) * c.head_dim), Buffer::Residual, Buffer::QKV);
  qkv.layer_weights = {&LW::attn_norm, &LW::wq, &LW::wk, &LW::wv};
  Stage attention = make_stage(Op::Attention, Spread::GroupSplits, "attention", uint32_t(c.num_kv_heads), Buffer::QKV, Buffer::Attention);
  attention.layer_weights = {&LW::q_norm, &LW::k_norm};
  Stage o_proj = make_stage(Op::OProj, Spread::Rows, "o_proj", hidden, Buffer::Attention, Buffer::Projected);
  o_proj.layer_weights = {&LW::wo};
  Stage post_attn = make_stage(Op::PostNorm, Spread::Rows, "attention post_norm", hidden, Buffer::Projected, Buffer::Residual, true);
  post_attn.slot = kAttentionNorm;
  post_attn.layer_weights = {&LW::post_attn_norm};
  Stage gate_up = make_stage(Op::GateUp, Spread::Rows, "gate_up", inter, Buffer::Residual, Buffer::H);
  gate_up.layer_weights = {&LW::mlp_norm, &LW::w_gate, &LW::w_up};
  Stage down = make_stage(Op::Down, Spread::Rows, "down", hidden, Buffer::H, Buffer::Projected);
  down.layer_weights = {&LW::w_down};
  Stage post_mlp = make_stage(Op::PostNorm, Spread::Rows, "mlp post_norm", hidden, Buffer::Projected, Buffer::Residual, true);
  post_mlp.slot = kMlpNorm;
  post_mlp.layer_weights = {&LW::post_mlp_norm};

  const std::vector<Stage> chunk = chunk_layer_stages(c);
  for (int l = 0; l < c.num_layers; ++l) {
    LayerRecipe layer;
    const bool slides = c.layer_slides(l);
    layer.attention.rope_theta = slides && c.sliding_rope_theta > 0 ? c.sliding_rope_theta : c.rope_theta;
    layer.attention.rope_scaling = slides && c.sliding_rope_theta > 0 ? RopeScaling{} : c.rope_scaling;
    layer.attention.window = slides ? c.sliding_window : 0;
    layer.attention.scale = 1.0f / std::sqrt(c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : float(c.head_dim));
    layer.attention.qk_norm = true;
    layer.activation = c.activation;
    layer.norm_eps = c.rms_norm_eps;
    layer.step = {qkv, attention, o_proj, post_attn, gate_up, down, post_mlp};
    layer.chunk = chunk;
    r.layers.push_back(std::move(layer));
  }

  r.last = head_stages(c);
  return r;
}

}  // namespace mk
