// Tests build their models with runtime/synthetic_model.h; these names keep the tests short.
#pragma once

#include "runtime/synthetic_model.h"

namespace mk::test {
using synthetic::encode;
using synthetic::make_temp_dir;
using synthetic::TensorBytes;
using synthetic::TinyModelSpec;
using synthetic::write_safetensors;
using synthetic::write_tiny_model;
}  // namespace mk::test
