#include "runtime/quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>

#include "runtime/error.h"

namespace mk {
namespace {

constexpr int kMaxScaleGroup = 128;  // the largest scale group of a quantized format (a row group's buffer)

// The layers' weight matrices (what the body format covers), layer by layer.
template <class W, class T = std::conditional_t<std::is_const_v<W>, const TensorView, TensorView>>
std::vector<T*> layer_matrices(W& w) {
  std::vector<T*> out;
  for (auto& l : w.layers)
    for (T* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) out.push_back(t);
  return out;
}

template <class M, class T>
std::vector<T*> matrices_of(M& model) {
  auto& w = model.weights;
  std::vector<T*> out{&w.embed};
  for (T* t : layer_matrices(w)) out.push_back(t);
  if (w.lm_head.data != w.embed.data || !w.lm_head.present()) out.push_back(&w.lm_head);
  return out;
}

// The quantized format whose codes a tensor of dtype `t` holds, if any.
std::optional<MatrixFormat> quantized_format_of(DType t) {
  for (const MatrixFormat f : kMatrixFormats)
    if (matrix_format_quantized(f) && matrix_format_dtype(f) == t) return f;
  return std::nullopt;
}

bool is_quantized_dtype(DType t) { return quantized_format_of(t).has_value(); }

using Owned = std::vector<std::shared_ptr<const std::vector<uint8_t>>>;

// A group of a row read once (at() converts from the checkpoint's dtype), checked finite.
void read_group(const TensorView& t, int64_t r, int64_t c0, int64_t c1, float* group) {
  const int64_t cols = t.shape[1];
  for (int64_t c = c0; c < c1; ++c) {
    const float v = group[c - c0] = t.at(r * cols + c);
    if (!std::isfinite(v))
      throw BadModelError(fmt::format("tensor {}: element [{}, {}] is {}; a model with NaN or infinite weights cannot run",
                                      t.name, r, c, v));
  }
}

// One matrix, row by row, group by group: codes, per-group scales (and zero points) into owned buffers.
template <MatrixFormat F>
void quantize_matrix(TensorView& t, Owned& owned, std::mutex& owned_lock) {
  using Codec = MatrixCodec<F>;
  constexpr DType kDType = matrix_format_dtype(F);
  constexpr bool kZeros = matrix_format_zero_points(F);
  constexpr int64_t kGroupCols = matrix_scale_group(F);
  static_assert(kGroupCols <= kMaxScaleGroup);
  const int64_t rows = t.shape[0], cols = t.shape[1], groups = scale_groups(F, int(cols));
  auto values = std::make_shared<std::vector<uint8_t>>(size_t((rows * cols * dtype_bits(kDType) + 7) / 8), uint8_t(0));
  auto scales = std::make_shared<std::vector<uint8_t>>(size_t(rows * groups) * sizeof(float));
  auto zeros = std::make_shared<std::vector<uint8_t>>(kZeros ? size_t(rows * groups) : size_t(0));
  float* scale = reinterpret_cast<float*>(scales->data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * kGroupCols, c1 = std::min(cols, c0 + kGroupCols);
      std::array<float, kMaxScaleGroup> group;
      read_group(t, r, c0, c1, group.data());
      const auto [lo, hi] = std::minmax_element(group.begin(), group.begin() + (c1 - c0));
      const GroupParams params = Codec::fit(*lo, *hi);
      scale[r * groups + g] = params.scale;
      if constexpr (kZeros) (*zeros)[size_t(r * groups + g)] = uint8_t(params.zero);
      for (int64_t c = c0; c < c1; ++c) store_code(values->data(), kDType, r * cols + c, Codec::encode(group[c - c0], params));
    }
  }
  TensorView q;
  q.name = t.name;
  q.dtype = kDType;
  q.shape = t.shape;
  q.data = values->data();
  q.scale.name = t.name + " (scales made at load time)";
  q.scale.dtype = DType::F32;
  q.scale.data = scales->data();
  q.scale.block_rows = 1;
  q.scale.block_cols = int(kGroupCols);
  q.scale.cols = groups;
  q.scale.count = rows * groups;
  if (kZeros) q.scale.zero = zeros->data();
  t = q;
  std::lock_guard<std::mutex> lock(owned_lock);
  owned.push_back(std::move(values));
  owned.push_back(std::move(scales));
  if (kZeros) owned.push_back(std::move(zeros));
}

void quantize_matrix(TensorView& t, MatrixFormat format, Owned& owned, std::mutex& owned_lock) {
  with_matrix_format(format, [&](auto f) {
    constexpr MatrixFormat F = decltype(f)::value;
    if constexpr (matrix_format_quantized(F)) quantize_matrix<F>(t, owned, owned_lock);
    else fail("tensor {}: {} is not a quantized format", t.name, matrix_format_name(F));
  });
}

}  // namespace

std::vector<TensorView*> weight_matrices(Model& model) { return matrices_of<Model, TensorView>(model); }
std::vector<const TensorView*> weight_matrices(const Model& model) { return matrices_of<const Model, const TensorView>(model); }

namespace {

// The matrix format a tensor's dtype reads as: its quantized format, F16, or BF16 (F32 is converted to it).
MatrixFormat format_of_dtype(DType t) {
  if (const auto q = quantized_format_of(t)) return *q;
  return t == DType::F16 ? MatrixFormat::F16 : MatrixFormat::BF16;
}

// The layers' format as stored: the quantized format of any quantized matrix, else the 16-bit type of
// the first matrix that has one (F32 matrices go to BF16).
MatrixFormat stored_body_format(const Model& model) {
  const std::vector<const TensorView*> matrices = layer_matrices(model.weights);
  for (const TensorView* t : matrices)
    if (const auto q = quantized_format_of(t->dtype)) return *q;
  for (const TensorView* t : matrices)
    if (t->dtype == DType::F16 || t->dtype == DType::BF16) return format_of_dtype(t->dtype);
  return MatrixFormat::BF16;
}

// `t` can be packed in format `f` without a silent change of its numbers' type: its own format, or F32
// going to a 16-bit format.
bool packs_as(const TensorView& t, MatrixFormat f) {
  return format_of_dtype(t.dtype) == f || (t.dtype == DType::F32 && !matrix_format_quantized(f));
}

}  // namespace

WeightFormats resolve_weight_formats(const Model& model) {
  const auto& w = model.weights;
  WeightFormats f;
  f.body = stored_body_format(model);
  for (const TensorView* t : layer_matrices(w))
    if (!packs_as(*t, f.body))
      fail("{}: tensor {} is {}, but the model's layer matrices are {}: the kernels run one format for all of "
           "them (a checkpoint mixing formats is not supported)",
           model.dir.string(), t->name, dtype_name(t->dtype), matrix_format_name(f.body));
  // The head (embedding and LM head): next to 16-bit layers, theirs; next to quantized layers, the
  // embedding's (both halves are quantized, or neither, once prepare_matrix_formats has run).
  f.head = matrix_format_quantized(f.body) ? format_of_dtype(w.embed.dtype) : f.body;
  for (const TensorView* t : {&w.embed, &w.lm_head})
    if (t->present() && !packs_as(*t, f.head))
      fail("{}: tensor {} is {}, but the model's embedding and LM head are packed as {}: the kernels run one "
           "format for both",
           model.dir.string(), t->name, dtype_name(t->dtype), matrix_format_name(f.head));
  if (matrix_format_quantized(f.head) && f.head != f.body)
    fail("{}: the embedding is {} next to {} layers: a quantized head must be in the layers' format",
         model.dir.string(), matrix_format_name(f.head), matrix_format_name(f.body));
  return f;
}

std::string scale_group_problem(const TensorView& t) {
  if (!t.quantized()) return fmt::format("tensor {} is {} without scales", t.name, dtype_name(t.dtype));
  const int64_t cols = t.shape[1];
  const TensorScale& s = t.scale;
  const std::optional<MatrixFormat> quantized = quantized_format_of(t.dtype);
  if (!quantized) return fmt::format("tensor {} is {}, which no quantized matrix format holds", t.name, dtype_name(t.dtype));
  const MatrixFormat format = *quantized;
  const int group = matrix_scale_group(format);
  if (s.block_cols % group != 0 && s.block_cols < cols)
    return fmt::format("tensor {}: scale blocks of {} columns do not cover whole {}-column groups (the kernels read "
                       "one scale per {} columns of a row)",
                       s.name, s.block_cols, group, group);
  if (matrix_format_zero_points(format) && s.zero == nullptr)
    return fmt::format("tensor {} is {} without zero points", t.name, matrix_format_name(format));
  return {};
}

void quantize_matrices(Model& model, const std::vector<TensorView*>& todo, MatrixFormat format,
                       const std::function<void(int, int)>& progress) {
  std::atomic<size_t> next{0};
  std::atomic<int> done{0};
  std::mutex lock;
  std::exception_ptr error;
  auto worker = [&] {
    for (size_t i; (i = next++) < todo.size();) {
      try {
        quantize_matrix(*todo[i], format, model.owned, lock);
      } catch (...) {
        std::lock_guard<std::mutex> g(lock);
        if (!error) error = std::current_exception();
        next = todo.size();
      }
      const int d = ++done;
      if (progress) {
        std::lock_guard<std::mutex> g(lock);
        progress(d, int(todo.size()));
      }
    }
  };
  const unsigned n = std::max(1u, std::min(std::thread::hardware_concurrency(), unsigned(todo.size())));
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < n; ++i) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

namespace {

void bring_to_target_formats(Model& model, const LoadOptions& options) {
  auto& w = model.weights;
  const bool tied = w.lm_head.data == w.embed.data;
  const MatrixFormat stored = stored_body_format(model);
  MatrixFormat target = stored;
  if (options.quantize) {
    target = quantize_target(options, model.dir.string());
    if (matrix_format_quantized(stored) && stored != target)
      fail("model {} is stored in {}; it cannot be quantized to {} (run it as stored, without the quantize option)",
           model.dir.string(), matrix_format_name(stored), matrix_format_name(target));
  }
  if (!matrix_format_quantized(target)) return;
  const DType dtype = matrix_format_dtype(target);
  std::vector<TensorView*> todo;
  for (TensorView* t : layer_matrices(w)) {
    if (is_quantized_dtype(t->dtype) && t->dtype != dtype)
      fail("tensor {} is {}, but other matrices of model {} are {}: one quantized format per model", t->name,
           dtype_name(t->dtype), model.dir.string(), dtype_name(dtype));
    if (t->dtype != dtype) todo.push_back(t);
  }
  // The head: quantized when asked, or when either half of it is stored quantized.
  std::vector<TensorView*> head{&w.embed};
  if (!tied && w.lm_head.present()) head.push_back(&w.lm_head);
  bool head_quantized = false;
  for (TensorView* t : head) {
    if (is_quantized_dtype(t->dtype) && t->dtype != dtype)
      fail("tensor {} is {}, but the model's matrices are {}: one quantized format per model", t->name,
           dtype_name(t->dtype), dtype_name(dtype));
    head_quantized |= t->dtype == dtype;
  }
  if (options.quantize == target && options.quantize_head) head_quantized = true;
  if (head_quantized)
    for (TensorView* t : head)
      if (t->dtype != dtype) todo.push_back(t);
  quantize_matrices(model, todo, target, options.on_quantize_progress);
  if (tied) w.lm_head = w.embed;
}

}  // namespace

MatrixFormat quantize_target(const LoadOptions& options, const std::string& model_name) {
  const MatrixFormat f = *options.quantize;
  if (!matrix_format_quantized(f)) fail("model {}: load-time quantization to {} is not a quantized format", model_name, matrix_format_name(f));
  return f;
}

void prepare_matrix_formats(Model& model, const LoadOptions& options) {
  bring_to_target_formats(model, options);
  model.formats = resolve_weight_formats(model);
}

}  // namespace mk
