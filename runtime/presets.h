// Real models' shapes, for benchmarks and checks with random weights (no download needed).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/matrix_format.h"
#include "runtime/model.h"

namespace mk {

std::vector<std::string> preset_names();
// Throws mk::Error listing the known names.
ModelConfig preset_config(const std::string& name);
// A Model with this config and no weight data (the GPU backend fills it with random values): its layers'
// matrices in `format`, its embedding and LM head in `head_format` (default: `format`).
std::unique_ptr<Model> preset_model(const std::string& name, MatrixFormat format = MatrixFormat::BF16,
                                    std::optional<MatrixFormat> head_format = std::nullopt);
// The preset in the formats load_model would bring a bf16 checkpoint into with `options`.
std::unique_ptr<Model> preset_model(const std::string& name, const LoadOptions& options);

}  // namespace mk
