// Weight matrices in the form the kernels read: which matrix format a model takes, and load-time
// quantization into it.
#pragma once

#include <functional>
#include <vector>

#include "runtime/matrix_format.h"
#include "runtime/model.h"

namespace mk {

// Every weight matrix of the model, the embedding and the LM head included (the LM head once when tied).
std::vector<TensorView*> weight_matrices(Model& model);
std::vector<const TensorView*> weight_matrices(const Model& model);

// The format the kernels read the matrices in: FP8 when any matrix is fp8 (quantize_to_fp8 then brings
// the rest along), F16 for fp16 checkpoints, BF16 otherwise (F32 checkpoints are converted to BF16).
MatrixFormat matrix_format_for(const Model& model);

// Quantizes to fp8 E4M3 every matrix that is not fp8 yet: per row, one scale per kScaleGroup columns,
// amax / 448, values rounded to the nearest fp8 (an all-zero group gets scale 1). The new tensors live
// in model.owned; a tied LM head stays the embedding. `progress(done, total)` after each matrix.
// Throws BadModelError naming the tensor and element for a NaN or infinite weight.
void quantize_to_fp8(Model& model, const std::function<void(int, int)>& progress = {});

// Whether the scales of a quantized matrix with `cols` columns give each kScaleGroup-column group of a
// row one scale (the FP8 matrix format's rows carry one per group); an error message naming the tensor
// if not, else empty.
std::string fp8_scale_problem(const TensorView& t);

}  // namespace mk
