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
  layer.attention.window = c.sliding_window;
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

  // A chunk step's layer: the norms and rope are stages of their own (the matrix tiles read 16-bit
  // normed rows; rope writes the chunk's K/V into the cache before attention reads it).
  Stage attention_norm = make_stage(Op::ChunkNorm, Spread::ChunkTokens, "attention norm", 0, Buffer::ChunkResidual, Buffer::ChunkNormed);
  attention_norm.slot = kAttentionNorm;
  attention_norm.layer_weights = {&LW::attn_norm};
  Stage chunk_qkv = make_stage(Op::ChunkQKV, Spread::ChunkTiles, "qkv", group_rows * uint32_t(c.num_kv_heads), Buffer::ChunkNormed, Buffer::ChunkQKV);
  chunk_qkv.tile_cols = kChunkMatrixCols;
  chunk_qkv.layer_weights = {&LW::wq, &LW::wk, &LW::wv};
  if (c.qkv_bias) chunk_qkv.layer_weights.insert(chunk_qkv.layer_weights.end(), {&LW::bq, &LW::bk, &LW::bv});
  Stage rope = make_stage(Op::ChunkRope, Spread::ChunkTokens, "rope", 0, Buffer::ChunkQKV, Buffer::ChunkQKV);
  if (c.qk_norm) rope.layer_weights = {&LW::q_norm, &LW::k_norm};
  Stage chunk_attention = make_stage(Op::ChunkAttention, Spread::ChunkGroupTiles, "attention", uint32_t(c.num_kv_heads), Buffer::ChunkQKV,
                                Buffer::ChunkAttention);
  Stage chunk_o_proj = make_stage(Op::ChunkOProj, Spread::ChunkTiles, "o_proj", hidden, Buffer::ChunkAttention, Buffer::ChunkResidual, true);
  chunk_o_proj.tile_cols = kChunkMatrixCols;
  chunk_o_proj.layer_weights = {&LW::wo};
  Stage mlp_norm = make_stage(Op::ChunkNorm, Spread::ChunkTokens, "mlp norm", 0, Buffer::ChunkResidual, Buffer::ChunkNormed);
  mlp_norm.slot = kMlpNorm;
  mlp_norm.layer_weights = {&LW::mlp_norm};
  // A gate_up tile's columns are kChunkMatrixCols / 2 columns of h: a gate and an up row each.
  Stage chunk_gate_up = make_stage(Op::ChunkGateUp, Spread::ChunkTiles, "gate_up", inter, Buffer::ChunkNormed, Buffer::ChunkH);
  chunk_gate_up.tile_cols = kChunkMatrixCols / 2;
  chunk_gate_up.layer_weights = {&LW::w_gate, &LW::w_up};
  Stage chunk_down = make_stage(Op::ChunkDown, Spread::ChunkTiles, "down", hidden, Buffer::ChunkH, Buffer::ChunkResidual, true);
  chunk_down.tile_cols = kChunkMatrixCols;
  chunk_down.layer_weights = {&LW::w_down};
  layer.chunk = {attention_norm, chunk_qkv, rope, chunk_attention, chunk_o_proj, mlp_norm, chunk_gate_up, chunk_down};
  r.layers.assign(size_t(c.num_layers), layer);

  r.last = head_stages(c);
  return r;
}

}  // namespace mk
