// Weight matrices in the forms the kernels read: which matrix formats a model takes (the layers' and the
// head's), and load-time quantization into them.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/matrix_format.h"
#include "runtime/model.h"

namespace mk {

// Every weight matrix of the model, the embedding and the LM head included (the LM head once when tied).
std::vector<TensorView*> weight_matrices(Model& model);
std::vector<const TensorView*> weight_matrices(const Model& model);

// The formats the kernels read a loaded model's matrices in, from its tensors' dtypes: the layers' (FP8 or
// INT4 when they are quantized so, F16 for fp16 checkpoints, BF16 otherwise; F32 is converted to the
// 16-bit format) and the head's (the layers' next to 16-bit layers; next to quantized layers, the
// embedding's: quantized with them, or kept in 16 bits). A tensor that does not fit them (an F16 matrix
// among BF16 ones, an LM head in another type than the embedding, a quantized head in another format) is
// an error naming it: nothing is converted silently. prepare_matrix_formats stores the result in
// Model::formats; the rest reads it there.
WeightFormats resolve_weight_formats(const Model& model);

// `options.quantize` (set) as the format to quantize `model_name`'s matrices to: a quantized format, or an
// error naming it.
MatrixFormat quantize_target(const LoadOptions& options, const std::string& model_name);

// Brings a loaded model's matrices into the formats the kernels will read, as `options` ask:
// - `options.quantize` a quantized format (FP8, INT4): every layer matrix not yet in that format is quantized (a checkpoint
//   already quantized in the other format is an error), and the embedding and LM head too unless
//   `options.quantize_head` is false;
// - none: a quantized checkpoint runs as stored; where only one of the embedding and an untied LM head is
//   quantized, the other is brought along (one head format per image).
// Then sets model.formats (resolve_weight_formats).
// Scales: per row, one per matrix_scale_group(format) columns, as the format's MatrixCodec fits them
// (runtime/matrix_format.h: FP8 amax / 448, INT4 (max - min) / 15 with a zero point), values rounded to
// nearest (even). The new tensors live in model.owned; a tied LM head stays the
// embedding. `options.on_quantize_progress(done, total)` after each matrix. Throws BadModelError naming the
// tensor and element for a NaN or infinite weight.
void prepare_matrix_formats(Model& model, const LoadOptions& options);

// Quantizes the given matrices (in place, on all cores) to `format` (FP8 or INT4).
void quantize_matrices(Model& model, const std::vector<TensorView*>& matrices, MatrixFormat format,
                       const std::function<void(int, int)>& progress = {});

// Whether the scales of quantized matrix `t` give each matrix_scale_group(format)-column group of a row one scale (and
// zero point), as the quantized matrix formats' rows carry them; an error message naming the tensor if
// not, else empty.
std::string scale_group_problem(const TensorView& t);

}  // namespace mk
