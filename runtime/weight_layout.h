// How the weights are laid out in device memory: one allocation, every piece 256-byte aligned, in the
// form the kernel reads fastest (docs/weight_layout.md). The emulator uses the same image on the CPU.
//
// - Matrices are row-major [out, in] in a matrix format (runtime/matrix_format.h: BF16 or F16, F32 files
//   converted to BF16; or FP8 or INT4 with per-row group scales): one for the layers' matrices, one for
//   the "head" (the embedding and the LM head), which next to quantized layers may stay 16-bit.
// - Q, K and V are fused into one matrix whose rows are grouped by kv head g:
//     [ q rows of heads g*G .. g*G+G-1 | k rows of kv head g | v rows of kv head g ],  G = heads per kv head,
//   so the rows one attention group needs are contiguous and a row block maps to one group.
// - Norm weights and biases are F32. A norm that scales by (offset + w) (Gemma's 1 + w) is stored as
//   offset + w, so every executor's RMSNorm multiplies by the stored weight.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/matrix_format.h"
#include "runtime/model.h"

namespace mk {

struct LayerOffsets {
  uint64_t attn_norm, wqkv, bqkv, q_norm, k_norm, wo, mlp_norm, w_gate, w_up, w_down;
  uint64_t post_attn_norm, post_mlp_norm;  // post-norm layers (Gemma 3); 0: none
};

struct WeightLayout {
  MatrixFormat format = MatrixFormat::BF16;       // of the layers' matrices
  MatrixFormat head_format = MatrixFormat::BF16;  // of the embedding and the LM head
  bool has_qkv_bias = false, has_qk_norm = false, has_post_norms = false;
  int qkv_rows = 0;        // q_dim + 2 * kv_dim
  int qkv_group_rows = 0;  // (G + 2) * head_dim
  uint64_t embed = 0, final_norm = 0, lm_head = 0;  // lm_head == embed when tied
  std::vector<LayerOffsets> layers;
  uint64_t total_bytes = 0;

  // Row of the fused QKV matrix holding row `r` of q (part 0), k (1) or v (2) in the model's own order.
  int qkv_row(const ModelConfig& c, int part, int r) const;
  // Bytes of one row of a matrix with `cols` columns.
  uint64_t row_bytes(int cols) const { return uint64_t(matrix_row_bytes(format, cols)); }
  uint64_t head_row_bytes(int cols) const { return uint64_t(matrix_row_bytes(head_format, cols)); }
};

// Checks the model's dimensions against the formats' row alignment; throws naming the dimension. A
// quantized head must be in the layers' format.
WeightLayout plan_weight_layout(const ModelConfig& config, MatrixFormat format, MatrixFormat head_format);
inline WeightLayout plan_weight_layout(const ModelConfig& config, MatrixFormat format) { return plan_weight_layout(config, format, format); }
// The layout of a loaded (or preset) model, in the formats its matrices are in (runtime/quantize.h).
WeightLayout plan_weight_layout(const Model& model);

// Streams the packed image piece by piece: `sink(offset, bytes, size)`, in increasing offset order.
// Converts dtypes on the way (to BF16/F16). A quantized part must be in its format already
// (runtime/quantize.h); scales are repeated per row group. Memory: one tensor at a time. Throws BadModelError naming the tensor and
// element when a value is NaN or infinite, or overflows the matrix dtype (an F32 value beyond F16's
// range): the kernels would turn it into NaN logits and decode token 0 forever.
using PackSink = std::function<void(uint64_t offset, const void* bytes, size_t size)>;
void pack_weights(const Model& model, const WeightLayout& layout, const PackSink& sink);

// Convenience for the emulator and tests: the whole image in host memory.
std::vector<uint8_t> pack_weights_to_host(const Model& model, const WeightLayout& layout);

}  // namespace mk
