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

// The dtype a matrix has in memory when it is in format `f` (FP8: F8_E4M3, INT4: U4).
DType matrix_format_dtype(MatrixFormat f);

// The format the kernels read the layers' matrices in: FP8 or INT4 when they are quantized so, F16 for
// fp16 checkpoints, BF16 otherwise (F32 checkpoints are converted to BF16). A preset (no layers) names it
// by its embedding's dtype.
MatrixFormat matrix_format_for(const Model& model);
// The format of the embedding and the LM head (the "head"): the layers' format, except that next to
// quantized layers a head kept in 16 bits stays F16 (an fp16 LM head) or BF16. A preset names it by its
// LM head's dtype.
MatrixFormat head_format_for(const Model& model);

// Brings a loaded model's matrices into the formats the kernels will read, as `options` ask:
// - `options.quantize` Fp8 / Int4: every layer matrix not yet in that format is quantized (a checkpoint
//   already quantized in the other format is an error), and the embedding and LM head too unless
//   `options.quantize_head` is false;
// - none: a quantized checkpoint runs as stored; where only one of the embedding and an untied LM head is
//   quantized, the other is brought along (one head format per image).
// Scales: per row, one per kScaleGroup columns; FP8 amax / 448, INT4 (max - min) / 15 with a zero point,
// values rounded to nearest (even). The new tensors live in model.owned; a tied LM head stays the
// embedding. `options.on_quantize_progress(done, total)` after each matrix. Throws BadModelError naming the
// tensor and element for a NaN or infinite weight.
void prepare_matrix_formats(Model& model, const LoadOptions& options);

// Quantizes the given matrices (in place, on all cores) to `format` (FP8 or INT4).
void quantize_matrices(Model& model, const std::vector<TensorView*>& matrices, MatrixFormat format,
                       const std::function<void(int, int)>& progress = {});

// Whether the scales of quantized matrix `t` give each kScaleGroup-column group of a row one scale (and
// zero point), as the quantized matrix formats' rows carry them; an error message naming the tensor if
// not, else empty.
std::string scale_group_problem(const TensorView& t);

}  // namespace mk
