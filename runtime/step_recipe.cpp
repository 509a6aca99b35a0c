#include "runtime/step_recipe.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/error.h"
#include "runtime/rope.h"

namespace mk {

const char* buffer_name(Buffer b) {
  switch (b) {
    case Buffer::Token: return "token";
    case Buffer::Residual: return "residual";
    case Buffer::QKV: return "qkv";
    case Buffer::Attention: return "attention";
    case Buffer::Projected: return "projected";
    case Buffer::H: return "h";
    case Buffer::Logits: return "logits";
    case Buffer::ChunkNormed: return "chunk normed";
    case Buffer::ChunkQKV: return "chunk qkv";
    case Buffer::ChunkAttention: return "chunk attention";
    case Buffer::ChunkH: return "chunk h";
    case Buffer::ChunkResidual: return "chunk residual";
    case Buffer::ChunkProjected: return "chunk projected";
    case Buffer::Partials: return "partials";
  }
  return "?";
}

RopeKinds rope_kinds(const StepRecipe& recipe) {
  RopeKinds r;
  for (const LayerRecipe& L : recipe.layers) {
    const LayerAttention& a = L.attention;
    auto same = [&](const LayerAttention& k) {
      return k.rope_theta == a.rope_theta && k.rope_scaling.kind == a.rope_scaling.kind && k.rope_scaling.factor == a.rope_scaling.factor &&
             k.rope_scaling.low_freq_factor == a.rope_scaling.low_freq_factor &&
             k.rope_scaling.high_freq_factor == a.rope_scaling.high_freq_factor &&
             k.rope_scaling.original_max_position == a.rope_scaling.original_max_position;
    };
    auto it = std::find_if(r.kinds.begin(), r.kinds.end(), same);
    if (it == r.kinds.end()) it = r.kinds.insert(r.kinds.end(), a);
    r.of_layer.push_back(uint32_t(it - r.kinds.begin()));
  }
  return r;
}

std::vector<float> rope_tables(const RopeKinds& kinds, int head_dim, int context) {
  std::vector<float> tables;
  tables.reserve(kinds.kinds.size() * size_t(context) * size_t(head_dim));
  for (const LayerAttention& a : kinds.kinds) {
    const std::vector<float> table = rope_table(rope_inv_freq(head_dim, a.rope_theta, a.rope_scaling), context);
    tables.insert(tables.end(), table.begin(), table.end());
  }
  return tables;
}

Stage make_stage(Op op, Spread spread, std::string name, uint32_t rows, Buffer reads, Buffer writes, bool adds) {
  Stage s;
  s.op = op;
  s.spread = spread;
  s.name = std::move(name);
  s.rows = rows;
  s.reads = reads;
  s.writes = writes;
  s.adds = adds;
  return s;
}

std::vector<Stage> embed_stages(const ModelConfig& c) {
  Stage embed = make_stage(Op::Embed, Spread::Pinned, "embed", uint32_t(c.hidden_size), Buffer::Token, Buffer::Residual);
  embed.model_weights = {&ModelWeights::embed};
  return {embed};
}

std::vector<Stage> head_stages(const ModelConfig& c) {
  Stage lm_head = make_stage(Op::LMHead, Spread::VocabRows, "lm_head", uint32_t(c.vocab_size), Buffer::Residual, Buffer::Logits);
  lm_head.model_weights = {&ModelWeights::final_norm, &ModelWeights::lm_head};
  Stage sample = make_stage(Op::Sample, Spread::Pinned, "sample", uint32_t(c.vocab_size), Buffer::Logits, Buffer::Token);
  return {lm_head, sample};
}

std::vector<Stage> chunk_layer_stages(const ModelConfig& c) {
  using LW = LayerWeights;
  const uint32_t hidden = uint32_t(c.hidden_size), inter = uint32_t(c.intermediate_size);
  const uint32_t qkv_rows = uint32_t((c.group_size() + 2) * c.head_dim) * uint32_t(c.num_kv_heads);
  // Post-norm layers: o_proj and down write the projected rows, and a post_norm adds their norm.
  const Buffer projected = c.post_norms ? Buffer::ChunkProjected : Buffer::ChunkResidual;
  auto post_norm = [&](const char* name, uint16_t slot, TensorView LW::*weight) {
    Stage st = make_stage(Op::ChunkPostNorm, Spread::ChunkTokens, name, 0, Buffer::ChunkProjected, Buffer::ChunkResidual, true);
    st.slot = slot;
    st.layer_weights = {weight};
    return st;
  };

  Stage attention_norm = make_stage(Op::ChunkNorm, Spread::ChunkTokens, "attention norm", 0, Buffer::ChunkResidual, Buffer::ChunkNormed);
  attention_norm.slot = kAttentionNorm;
  attention_norm.layer_weights = {&LW::attn_norm};
  Stage qkv = make_stage(Op::ChunkQKV, Spread::ChunkTiles, "qkv", qkv_rows, Buffer::ChunkNormed, Buffer::ChunkQKV);
  qkv.tile_cols = kChunkMatrixCols;
  qkv.layer_weights = {&LW::wq, &LW::wk, &LW::wv};
  if (c.qkv_bias) qkv.layer_weights.insert(qkv.layer_weights.end(), {&LW::bq, &LW::bk, &LW::bv});
  Stage rope = make_stage(Op::ChunkRope, Spread::ChunkTokens, "rope", 0, Buffer::ChunkQKV, Buffer::ChunkQKV);
  if (c.qk_norm) rope.layer_weights = {&LW::q_norm, &LW::k_norm};
  Stage attention = make_stage(Op::ChunkAttention, Spread::ChunkGroupTiles, "attention", uint32_t(c.num_kv_heads), Buffer::ChunkQKV,
                               Buffer::ChunkAttention);
  Stage o_proj = make_stage(Op::ChunkOProj, Spread::ChunkTiles, "o_proj", hidden, Buffer::ChunkAttention, projected, !c.post_norms);
  o_proj.tile_cols = kChunkMatrixCols;
  o_proj.layer_weights = {&LW::wo};
  Stage mlp_norm = make_stage(Op::ChunkNorm, Spread::ChunkTokens, "mlp norm", 0, Buffer::ChunkResidual, Buffer::ChunkNormed);
  mlp_norm.slot = kMlpNorm;
  mlp_norm.layer_weights = {&LW::mlp_norm};
  // A gate_up tile's columns are kChunkMatrixCols / 2 columns of h: a gate and an up row each.
  Stage gate_up = make_stage(Op::ChunkGateUp, Spread::ChunkTiles, "gate_up", inter, Buffer::ChunkNormed, Buffer::ChunkH);
  gate_up.tile_cols = kChunkMatrixCols / 2;
  gate_up.layer_weights = {&LW::w_gate, &LW::w_up};
  Stage down = make_stage(Op::ChunkDown, Spread::ChunkTiles, "down", hidden, Buffer::ChunkH, projected, !c.post_norms);
  down.tile_cols = kChunkMatrixCols;
  down.layer_weights = {&LW::w_down};

  if (!c.post_norms) return {attention_norm, qkv, rope, attention, o_proj, mlp_norm, gate_up, down};
  return {attention_norm, qkv, rope, attention, o_proj, post_norm("attention post_norm", kAttentionNorm, &LW::post_attn_norm),
          mlp_norm, gate_up, down, post_norm("mlp post_norm", kMlpNorm, &LW::post_mlp_norm)};
}

StepRecipe build_step_recipe(const ModelConfig& config) {
  StepRecipe r;
  switch (config.arch) {
    case Arch::Llama:
    case Arch::Mistral:
    case Arch::Qwen2:
    case Arch::Qwen3: r = llama_family_recipe(config); break;
    case Arch::Gemma3: r = gemma3_recipe(config); break;
  }
  check_step_recipe(r);
  return r;
}

namespace {

bool chunk_spread(Spread s) { return s == Spread::ChunkTokens || s == Spread::ChunkTiles || s == Spread::ChunkGroupTiles; }

// The ops each spread lays out (the schedule builders' and the ops' assumptions about their instructions).
bool op_fits_spread(Op op, Spread s) {
  switch (s) {
    case Spread::Pinned: return op == Op::Embed || op == Op::Sample;
    case Spread::GroupRows: return op == Op::QKV;
    case Spread::GroupSplits: return op == Op::Attention;
    case Spread::Rows: return op == Op::OProj || op == Op::GateUp || op == Op::Down || op == Op::PostNorm || op == Op::AllReduce;
    case Spread::VocabRows: return op == Op::LMHead;
    case Spread::ChunkTokens: return op == Op::ChunkNorm || op == Op::ChunkRope || op == Op::ChunkPostNorm;
    case Spread::ChunkTiles: return op == Op::ChunkQKV || op == Op::ChunkOProj || op == Op::ChunkGateUp || op == Op::ChunkDown;
    case Spread::ChunkGroupTiles: return op == Op::ChunkAttention;
  }
  return false;
}

}  // namespace

void check_step_recipe(const StepRecipe& r) {
  if (r.first.empty() || r.last.empty()) fail("step recipe: a token step needs a stage before the layers and one after them");
  // The token step: one chain from the token back to the token.
  Buffer have = Buffer::Token;
  auto link = [&](const Stage& st, const std::string& where) {
    if (chunk_spread(st.spread)) fail("step recipe: {} stage '{}' is laid out as a chunk step's", where, st.name);
    if (!op_fits_spread(st.op, st.spread)) fail("step recipe: {} stage '{}' runs op {}, which its layout does not take", where, st.name, op_name(st.op));
    if (st.reads != have)
      fail("step recipe: {} stage '{}' reads the {} buffer, but the stage before it wrote {}", where, st.name, buffer_name(st.reads),
           buffer_name(have));
    have = st.writes;
  };
  for (const Stage& st : r.first) link(st, "the first");
  if (have != Buffer::Residual) fail("step recipe: the stages before the layers end with {}, not the residual stream", buffer_name(have));
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const LayerRecipe& L = r.layers[l];
    if (L.step.empty()) fail("step recipe: layer {} has no token-step stages", l);
    for (const Stage& st : L.step) link(st, fmt::format("layer {}", l));
    if (have != Buffer::Residual) fail("step recipe: layer {} ends with the {} buffer, not the residual stream", l, buffer_name(have));
    // A chunk step's layer: its own chain over the chunk's rows (none: the model has no chunk steps).
    Buffer chunk_have = Buffer::ChunkResidual;
    for (const Stage& st : L.chunk) {
      if (!chunk_spread(st.spread)) fail("step recipe: layer {} chunk stage '{}' is laid out as a token step's", l, st.name);
      if (!op_fits_spread(st.op, st.spread))
        fail("step recipe: layer {} chunk stage '{}' runs op {}, which its layout does not take", l, st.name, op_name(st.op));
      if (st.reads != chunk_have)
        fail("step recipe: layer {} chunk stage '{}' reads the {} buffer, but the stage before it wrote {}", l, st.name,
             buffer_name(st.reads), buffer_name(chunk_have));
      chunk_have = st.writes;
    }
    if (chunk_have != Buffer::ChunkResidual)
      fail("step recipe: layer {}'s chunk stages end with the {} buffer, not the chunk's residual rows", l, buffer_name(chunk_have));
  }
  for (const Stage& st : r.last) link(st, "the last");
  if (have != Buffer::Token) fail("step recipe: a token step ends with the {} buffer, not the next token", buffer_name(have));
  if (r.first.front().spread != Spread::Pinned || r.last.back().spread != Spread::Pinned)
    fail("step recipe: a token step begins and ends on one workgroup (the token is read and written there)");
}

}  // namespace mk
