// The step recipe: what one token step and one chunk step (prefill) of a model do, as data built once per
// model from its config. The ordered stages of the layers and of the head, each with its op, its rows,
// the decode buffers it reads and writes and the weights it streams; and the per-layer attention data.
//
// An architecture is one function that builds its recipe (runtime/recipe_<family>.cpp, chosen by
// build_step_recipe). Everything that walks a step walks the recipe:
//   - build_schedule and build_chunk_schedule (runtime/schedule.cpp) lay its stages out over the
//     workgroups by each stage's Spread, and order them by the counters between consecutive stages;
//   - the CPU reference forward (runtime/reference.cpp) runs its stages in order, in fp32.
// The kernel and the emulator run the schedule's instructions by op (runtime/op_table.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model.h"
#include "runtime/model_config.h"
#include "runtime/schedule.h"

namespace mk {

// The decode state stages hand to each other. A stage reads what the stage before it wrote (the recipe's
// chain: check_step_recipe), so the counter between them is the only order a step needs.
enum class Buffer : uint8_t {
  Token,      // the step's input token (Sample's output, the next step's Embed's input)
  Residual,   // x, the residual stream [hidden]
  QKV,        // the layer's fused q, k, v rows, grouped by kv head [q_dim + 2 kv_dim]
  Attention,  // attention's output (or its split partials) [q_dim]
  Projected,  // a row stage's output before its norm and residual add (post-norm layers) [hidden]
  H,          // the MLP's intermediate vector [intermediate]
  Logits,     // the LM head's rows and per-block (max, argmax)
  ChunkNormed,   // chunk steps: the chunk's normed residual rows [C, hidden]
  ChunkQKV,      // chunk steps: q, k, v of the chunk [C, q_dim + 2 kv_dim]; the chunk's K/V in the cache after rope
  ChunkAttention,  // chunk steps: attention's output [C, q_dim]
  ChunkH,        // chunk steps: [C, intermediate]
  ChunkResidual,  // chunk steps: the chunk's residual rows [C, hidden]
  ChunkProjected,  // chunk steps: a matrix stage's output before its post-norm and residual add [C, hidden]
  Partials,   // tensor parallel: every device's partial of a row stage's output, per set [2][devices][hidden]
};
const char* buffer_name(Buffer b);

// How a stage's work is cut into instructions (build_schedule, build_chunk_schedule).
enum class Spread : uint8_t {
  Pinned,       // one instruction on workgroup 0 (embed, sample)
  GroupRows,    // row blocks, each inside one kv group's rows (qkv: `rows` rows per group)
  GroupSplits,  // one instruction per kv group and split of the cache (attention); waits per kv group
  Rows,         // contiguous row blocks, one per workgroup or per narrow workgroup (`rows` rows); `slot` goes
                // to every block (post_norm: which norm)
  VocabRows,    // one row block per workgroup, each with its partial-argmax slot (lm_head)
  ChunkTokens,  // the chunk's tokens split over the workgroups (a norm, rope, a post-norm)
  ChunkTiles,   // token tiles x column tiles of `tile_cols` columns (`rows` output columns)
  ChunkGroupTiles,  // attention's query-token tiles x kv groups
};

struct Stage {
  Op op = Op::Embed;
  Spread spread = Spread::Pinned;
  std::string name;         // in counter names and diagnostics: "qkv", "attention norm"
  uint32_t rows = 0;        // output rows (GroupRows: of one kv group; chunk matrix stages: output columns)
  uint32_t tile_cols = 0;   // ChunkTiles: columns of one tile
  uint16_t slot = 0;        // ChunkNorm, PostNorm, ChunkPostNorm: which norm (kAttentionNorm, kMlpNorm)
  Buffer reads = Buffer::Residual;
  Buffer writes = Buffer::Residual;
  bool adds = false;        // adds its output to `writes` (the residual add) instead of overwriting it
  // Tensor parallel (runtime/tensor_parallel.h): the stage's output and its signal go to other devices:
  // a row stage's partial into every device's Partials (slot: which set), the LM head's rows and partials
  // to the home device (device 0), the sampled token and stop flag to every device. The stage after it
  // counts every device's instructions.
  bool pushes = false;
  bool home_only = false;   // runs on the home device only; elsewhere its counter exists, its instructions do not
  uint32_t first_row = 0;   // VocabRows: the first of its `rows` rows (a device's share of the vocabulary)
  // The weights it streams, as members of LayerWeights (a layer's stages) or of ModelWeights (the head's).
  std::vector<TensorView LayerWeights::*> layer_weights;
  std::vector<TensorView ModelWeights::*> model_weights;
};

// Attention's data for one layer.
struct LayerAttention {
  float rope_theta = 10000.0f;  // the base of its RoPE frequencies
  RopeScaling rope_scaling;     // and their scaling
  int window = 0;               // sliding window in positions; 0: global
  float scale = 1.0f;           // scores are q.k * scale
  bool qk_norm = false;         // RMSNorm per head on q and k (LayerWeights::q_norm, k_norm) before RoPE
  bool qkv_bias = false;        // biases on q, k and v (LayerWeights::bq, bk, bv)
};

struct LayerRecipe {
  std::vector<Stage> step;   // a token step's stages of this layer, in order
  std::vector<Stage> chunk;  // a chunk step's
  LayerAttention attention;
  Activation activation = Activation::SiLU;
  float norm_eps = 1e-5f;
};

struct StepRecipe {
  std::vector<Stage> first;  // before the layers (embed)
  std::vector<LayerRecipe> layers;
  std::vector<Stage> last;   // after them (lm_head, sample)
  float embed_scale = 1.0f;         // the embedding rows are multiplied by it
  float norm_weight_offset = 0.0f;  // every RMSNorm scales by (offset + w): Gemma's (1 + w)
  // Tensor parallel: the devices the step is split over and the one this recipe is for (0: home).
  int devices = 1, rank = 0;
};

// The distinct RoPEs of a recipe's layers (base and scaling), in order of first use, and the index of
// each layer's: the executors keep one cos/sin table per distinct RoPE.
struct RopeKinds {
  std::vector<LayerAttention> kinds;
  std::vector<uint32_t> of_layer;
};
RopeKinds rope_kinds(const StepRecipe& recipe);

// The MLP's activation of a gate value, as transformers defines it (GELU-tanh: gelu_pytorch_tanh). The
// reference and the emulator compute with it; the kernel reproduces it (device/ops/gate_up.h).
inline float activation_value(Activation a, float g) {
  switch (a) {
    case Activation::SiLU: return g / (1.0f + std::exp(-g));
    case Activation::GeluTanh: return 0.5f * g * (1.0f + std::tanh(0.7978845608028654f * (g + 0.044715f * g * g * g)));
  }
  return g;
}

// The RoPE tables of a recipe's distinct RoPEs (rope_kinds), one after the other in its order, each
// [context][hd/2] cos, then sin: table k starts at float k * context * head_dim. The layout both
// executors read (device/kernel_params.h's rope_cos_row).
std::vector<float> rope_tables(const RopeKinds& kinds, int head_dim, int context);

// A stage with no weights (the architectures' builders add them).
Stage make_stage(Op op, Spread spread, std::string name, uint32_t rows, Buffer reads, Buffer writes, bool adds = false);

// The stages every architecture so far has before and after its layers: embed; lm_head (final norm and
// the head) and sample.
std::vector<Stage> embed_stages(const ModelConfig& config);
std::vector<Stage> head_stages(const ModelConfig& config);

// A chunk step's layer (prefill) for the layers every architecture so far has: its norms and rope are
// stages of their own (the matrix tiles read 16-bit normed rows; rope writes the chunk's K/V into the cache
// before attention reads it); q/k biases and norms as the config has them; with ModelConfig::post_norms
// (Gemma 3) o_proj and down write the projected rows and a post_norm stage adds their norm to the residual.
std::vector<Stage> chunk_layer_stages(const ModelConfig& config);

// The recipe of a model's architecture (ModelConfig::arch). Checked (check_step_recipe).
StepRecipe build_step_recipe(const ModelConfig& config);

// The architectures' builders (one file each).
StepRecipe llama_family_recipe(const ModelConfig& config);  // Llama, Mistral, Qwen2, Qwen3
StepRecipe gemma3_recipe(const ModelConfig& config);        // Gemma3ForCausalLM

// Checks a recipe's chain: every stage reads what the stage before it wrote; a token step begins by
// reading the token and ends by writing it; a chunk step's layer begins and ends with the chunk's
// residual rows; the spreads fit the step (chunk spreads only in chunk stages) and the ops fit the
// spreads. Throws mk::Error naming the layer and stage.
void check_step_recipe(const StepRecipe& recipe);

}  // namespace mk
