#include "runtime/tensor_parallel.h"

#include <fmt/format.h>

#include <cstring>

#include "runtime/error.h"
#include "runtime/schedule.h"
#include "runtime/weight_layout.h"

namespace mk {

namespace {

const uint8_t* bytes_of(const void* p) { return static_cast<const uint8_t*>(p); }

// Rows [r0, r1) of a matrix (or entries of a vector): a view of the same memory. A quantized matrix's
// scales go with its rows: the cut must fall on a block of scale rows, unless one block spans every row.
TensorView slice_rows(const TensorView& t, int64_t r0, int64_t r1) {
  if (!t.present()) return t;
  const int64_t rows = t.shape.at(0), cols = t.shape.size() == 2 ? t.shape[1] : 1, bits = dtype_bits(t.dtype);
  if ((r0 * cols * bits) % 8 != 0) throw BadModelError(fmt::format("tensor {}: a device's rows start at row {}, inside a byte", t.name, r0));
  TensorView v = t;
  v.data = bytes_of(t.data) + r0 * cols * bits / 8;
  v.shape[0] = r1 - r0;
  if (!t.quantized()) return v;
  const TensorScale& s = t.scale;
  if (s.block_rows >= rows) return v;  // one block of rows: every row's scales are the first
  if (r0 % s.block_rows != 0 || (r1 % s.block_rows != 0 && r1 != rows))
    throw BadModelError(fmt::format("tensor {}: a device's rows [{}, {}) cut its scale blocks of {} rows; tensor parallel over fewer devices",
                                    t.name, r0, r1, s.block_rows));
  const int64_t first = r0 / s.block_rows * s.cols;
  v.scale.data = bytes_of(s.data) + first * dtype_size(s.dtype);
  if (s.zero) v.scale.zero = s.zero + first;
  v.scale.count = (r1 - r0 + s.block_rows - 1) / s.block_rows * s.cols;
  return v;
}

// Columns [c0, c1) of a matrix: a copy that `owner` keeps, with its scales' columns.
TensorView slice_cols(const TensorView& t, int64_t c0, int64_t c1, Model& owner) {
  if (!t.present()) return t;
  const int64_t rows = t.shape.at(0), cols = t.shape.at(1), bits = dtype_bits(t.dtype), n = c1 - c0;
  if ((c0 * bits) % 8 != 0 || (n * bits) % 8 != 0 || (cols * bits) % 8 != 0)
    throw BadModelError(fmt::format("tensor {}: a device's columns [{}, {}) cut a byte", t.name, c0, c1));
  auto values = std::make_shared<std::vector<uint8_t>>(size_t(rows * n * bits / 8));
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(values->data() + r * n * bits / 8, bytes_of(t.data) + (r * cols + c0) * bits / 8, size_t(n * bits / 8));
  owner.owned.push_back(values);
  TensorView v = t;
  v.data = values->data();
  v.shape[1] = n;
  if (!t.quantized()) return v;
  const TensorScale& s = t.scale;
  if (s.block_cols >= cols) {  // one block of columns: a scale per row block, kept as it is
    v.scale.block_cols = n;
    return v;
  }
  if (c0 % s.block_cols != 0 || (c1 % s.block_cols != 0 && c1 != cols))
    throw BadModelError(fmt::format("tensor {}: a device's columns [{}, {}) cut its scale blocks of {} columns; tensor parallel over fewer devices",
                                    t.name, c0, c1, s.block_cols));
  const int64_t block_rows = s.count / s.cols, first = c0 / s.block_cols, keep = (n + s.block_cols - 1) / s.block_cols;
  const size_t size = size_t(dtype_size(s.dtype));
  auto scales = std::make_shared<std::vector<uint8_t>>(size_t(block_rows * keep) * (size + (s.zero ? 1 : 0)));
  uint8_t* zeros = scales->data() + size_t(block_rows * keep) * size;
  for (int64_t b = 0; b < block_rows; ++b) {
    std::memcpy(scales->data() + size_t(b * keep) * size, bytes_of(s.data) + size_t(b * s.cols + first) * size, size_t(keep) * size);
    if (s.zero) std::memcpy(zeros + b * keep, s.zero + b * s.cols + first, size_t(keep));
  }
  owner.owned.push_back(scales);
  v.scale.data = scales->data();
  v.scale.zero = s.zero ? zeros : nullptr;
  v.scale.cols = keep;
  v.scale.count = block_rows * keep;
  return v;
}

}  // namespace

ModelConfig shard_config(const ModelConfig& c, int devices) {
  ModelConfig s = c;
  s.num_heads = c.num_heads / devices;
  s.num_kv_heads = c.num_kv_heads / devices;
  s.intermediate_size = c.intermediate_size / devices;
  return s;
}

void check_tensor_parallel(const Model& model, int devices) {
  const ModelConfig& c = model.config;
  if (devices < 1 || devices > kMaxTensorParallel)
    fail("tensor parallel: {} devices asked for; 1 to {} are supported", devices, kMaxTensorParallel);
  if (devices == 1) return;
  if (c.num_kv_heads % devices != 0)
    fail("tensor parallel over {} devices: num_key_value_heads ({}) is not a multiple of {}; each device takes whole kv heads",
         devices, c.num_kv_heads, devices);
  if (c.intermediate_size % devices != 0)
    fail("tensor parallel over {} devices: intermediate_size ({}) is not a multiple of {}", devices, c.intermediate_size, devices);
  try {
    plan_weight_layout(shard_config(c, devices), model.formats.body, model.formats.head);
  } catch (const Error& e) {
    fail("tensor parallel over {} devices: a device's shard does not fit its weight format: {}", devices, e.what());
  }
}

std::unique_ptr<Model> shard_model(const Model& model, int devices, int rank) {
  const ModelConfig& c = model.config;
  auto shard = std::make_unique<Model>();
  shard->dir = model.dir;
  shard->config = shard_config(c, devices);
  shard->formats = model.formats;
  shard->files = model.files;
  shard->owned = model.owned;
  shard->weights.embed = model.weights.embed;
  shard->weights.final_norm = model.weights.final_norm;
  shard->weights.lm_head = model.weights.lm_head;
  const int64_t hd = c.head_dim, kv = shard->config.num_kv_heads, q_rows = kv * c.group_size() * hd, kv_rows = kv * hd;
  const int64_t inter = shard->config.intermediate_size;
  for (const LayerWeights& L : model.weights.layers) {
    LayerWeights S = L;  // the norms whole
    S.wq = slice_rows(L.wq, rank * q_rows, (rank + 1) * q_rows);
    S.bq = slice_rows(L.bq, rank * q_rows, (rank + 1) * q_rows);
    S.wk = slice_rows(L.wk, rank * kv_rows, (rank + 1) * kv_rows);
    S.bk = slice_rows(L.bk, rank * kv_rows, (rank + 1) * kv_rows);
    S.wv = slice_rows(L.wv, rank * kv_rows, (rank + 1) * kv_rows);
    S.bv = slice_rows(L.bv, rank * kv_rows, (rank + 1) * kv_rows);
    S.wo = slice_cols(L.wo, rank * q_rows, (rank + 1) * q_rows, *shard);
    S.w_gate = slice_rows(L.w_gate, rank * inter, (rank + 1) * inter);
    S.w_up = slice_rows(L.w_up, rank * inter, (rank + 1) * inter);
    S.w_down = slice_cols(L.w_down, rank * inter, (rank + 1) * inter, *shard);
    shard->weights.layers.push_back(std::move(S));
  }
  return shard;
}

StepRecipe tensor_parallel_recipe(const ModelConfig& shard, int devices, int rank) {
  StepRecipe r = build_step_recipe(shard);
  if (devices == 1) return r;
  r.devices = devices;
  r.rank = rank;
  for (LayerRecipe& L : r.layers) {
    std::vector<Stage> step;
    for (Stage st : L.step) {
      if (st.op != Op::OProj && st.op != Op::Down) {
        step.push_back(std::move(st));
        continue;
      }
      // The partial goes to every device; the all_reduce takes over what the stage wrote.
      const uint16_t set = st.op == Op::OProj ? 0 : 1;
      Stage sum = make_stage(Op::AllReduce, Spread::Rows, st.name + " all_reduce", uint32_t(shard.hidden_size), Buffer::Partials,
                             st.writes, st.adds);
      sum.slot = set;
      st.writes = Buffer::Partials;
      st.adds = false;
      st.pushes = true;
      st.slot = set;
      step.push_back(std::move(st));
      step.push_back(std::move(sum));
    }
    L.step = std::move(step);
    L.chunk.clear();
  }
  for (Stage& st : r.last) {
    if (st.op == Op::LMHead) {
      const auto share = split_range(uint32_t(shard.vocab_size), uint32_t(devices)).at(size_t(rank));
      st.first_row = share.first;
      st.rows = share.second - share.first;
      st.pushes = true;
    } else if (st.op == Op::Sample) {
      st.pushes = true;
      st.home_only = true;
    }
  }
  check_step_recipe(r);
  return r;
}

}  // namespace mk
