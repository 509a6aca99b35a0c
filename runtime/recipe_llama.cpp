// The Llama family's step recipe: Llama, Mistral, Qwen2 (q/k/v biases) and Qwen3 (q/k norms). A
// pre-norm decoder layer:
//   x += o_proj(attention(rope(qkv(rmsnorm(x)))));  x += down(silu(gate(rmsnorm(x))) * up(rmsnorm(x)))
// then logits = lm_head(rmsnorm(x)).
#include <cmath>

#include "runtime/step_recipe.h"

namespace mk {

StepRecipe llama_family_recipe(const ModelConfig& c) {
  using LW = LayerWeights;
  StepRecipe r;
  r.first = embed_stages(c);

  const uint32_t hidden = uint32_t(c.hidden_size), inter = uint32_t(c.intermediate_size);
  const uint32_t group_rows = uint32_t((c.group_size() + 2) * c.head_dim);
  LayerRecipe layer;
  layer.attention.rope_theta = c.rope_theta;
  layer.attention.rope_scaling = c.rope_scaling;
  layer.attention.scale = 1.0f / std::sqrt(float(c.head_dim));
  layer.attention.qk_norm = c.qk_norm;
  layer.attention.qkv_bias = c.qkv_bias;
  layer.activation = c.activation;
  layer.norm_eps = c.rms_norm_eps;

  Stage qkv = make_stage(Op::QKV, Spread::GroupRows, "qkv", group_rows, Buffer::Residual, Buffer::QKV);
  qkv.layer_weights = {&LW::attn_norm, &LW::wq, &LW::wk, &LW::wv};
  if (c.qkv_bias) qkv.layer_weights.insert(qkv.layer_weights.end(), {&LW::bq, &LW::bk, &LW::bv});
  Stage attention = make_stage(Op::Attention, Spread::GroupSplits, "attention", uint32_t(c.num_kv_heads), Buffer::QKV, Buffer::Attention);
  if (c.qk_norm) attention.layer_weights = {&LW::q_norm, &LW::k_norm};
  Stage o_proj = make_stage(Op::OProj, Spread::Rows, "o_proj", hidden, Buffer::Attention, Buffer::Residual, true);
  o_proj.layer_weights = {&LW::wo};
  Stage gate_up = make_stage(Op::GateUp, Spread::Rows, "gate_up", inter, Buffer::Residual, Buffer::H);
  gate_up.layer_weights = {&LW::mlp_norm, &LW::w_gate, &LW::w_up};
  Stage down = make_stage(Op::Down, Spread::Rows, "down", hidden, Buffer::H, Buffer::Residual, true);
  down.layer_weights = {&LW::w_down};
  layer.step = {qkv, attention, o_proj, gate_up, down};

  layer.chunk = chunk_layer_stages(c);
  for (int l = 0; l < c.num_layers; ++l) {
    layer.attention.window = c.layer_slides(l) ? c.sliding_window : 0;
    r.layers.push_back(layer);
  }

  r.last = head_stages(c);
  return r;
}

}  // namespace mk
