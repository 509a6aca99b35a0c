#include "runtime/quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>

#include "runtime/error.h"

namespace mk {
namespace {

constexpr float kFp8Max = 448.0f;
constexpr int kInt4Max = 15;
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

bool is_quantized_dtype(DType t) { return t == DType::F8_E4M3 || t == DType::U4; }

MatrixFormat quantized_format_of(DType t) { return t == DType::U4 ? MatrixFormat::INT4 : MatrixFormat::FP8; }

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
void quantize_matrix(TensorView& t, MatrixFormat format, Owned& owned, std::mutex& owned_lock) {
  const int64_t rows = t.shape[0], cols = t.shape[1], groups = scale_groups(format, int(cols));
  const int64_t group_cols = matrix_scale_group(format);
  const bool int4 = format == MatrixFormat::INT4;
  auto values = std::make_shared<std::vector<uint8_t>>(size_t(int4 ? (rows * cols + 1) / 2 : rows * cols), uint8_t(0));
  auto scales = std::make_shared<std::vector<uint8_t>>(size_t(rows * groups) * sizeof(float));
  auto zeros = std::make_shared<std::vector<uint8_t>>(int4 ? size_t(rows * groups) : size_t(0));
  float* scale = reinterpret_cast<float*>(scales->data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * group_cols, c1 = std::min(cols, c0 + group_cols);
      std::array<float, kMaxScaleGroup> group;
      static_assert(matrix_scale_group(MatrixFormat::FP8) <= kMaxScaleGroup && matrix_scale_group(MatrixFormat::INT4) <= kMaxScaleGroup);
      read_group(t, r, c0, c1, group.data());
      const auto [lo, hi] = std::minmax_element(group.begin(), group.begin() + (c1 - c0));
      if (!int4) {
        const float amax = std::max(std::fabs(*lo), std::fabs(*hi));
        const float s = amax > 0.f ? amax / kFp8Max : 1.0f;
        scale[r * groups + g] = s;
        for (int64_t c = c0; c < c1; ++c) (*values)[size_t(r * cols + c)] = float_to_fp8_e4m3(group[c - c0] / s);
        continue;
      }
      // Asymmetric min-max: the 16 codes span [min, max]; a constant group (max == min) keeps its value
      // exactly as code 8 + 7 or 8 - 7 around zero point 8, a zero group as code 8.
      float s;
      int zero;
      if (*hi > *lo) {
        s = (*hi - *lo) / float(kInt4Max);
        zero = std::clamp(int(std::nearbyint(-*lo / s)), 0, kInt4Max);
      } else {
        s = *lo != 0.f ? std::fabs(*lo) / 7.0f : 1.0f;
        zero = 8;
      }
      scale[r * groups + g] = s;
      (*zeros)[size_t(r * groups + g)] = uint8_t(zero);
      for (int64_t c = c0; c < c1; ++c) {
        const int code = std::clamp(int(std::nearbyint(group[c - c0] / s)) + zero, 0, kInt4Max);
        const size_t i = size_t(r * cols + c);
        (*values)[i / 2] |= uint8_t(code << (4 * (i & 1)));
      }
    }
  }
  TensorView q;
  q.name = t.name;
  q.dtype = matrix_format_dtype(format);
  q.shape = t.shape;
  q.data = values->data();
  q.scale.name = t.name + " (scales made at load time)";
  q.scale.dtype = DType::F32;
  q.scale.data = scales->data();
  q.scale.block_rows = 1;
  q.scale.block_cols = int(group_cols);
  q.scale.cols = groups;
  q.scale.count = rows * groups;
  if (int4) q.scale.zero = zeros->data();
  t = q;
  std::lock_guard<std::mutex> lock(owned_lock);
  owned.push_back(std::move(values));
  owned.push_back(std::move(scales));
  if (int4) owned.push_back(std::move(zeros));
}

Quantize quantize_of(MatrixFormat f) { return f == MatrixFormat::INT4 ? Quantize::Int4 : Quantize::Fp8; }

}  // namespace

std::vector<TensorView*> weight_matrices(Model& model) { return matrices_of<Model, TensorView>(model); }
std::vector<const TensorView*> weight_matrices(const Model& model) { return matrices_of<const Model, const TensorView>(model); }

DType matrix_format_dtype(MatrixFormat f) {
  switch (f) {
    case MatrixFormat::F16: return DType::F16;
    case MatrixFormat::FP8: return DType::F8_E4M3;
    case MatrixFormat::INT4: return DType::U4;
    default: return DType::BF16;
  }
}

namespace {

// The matrix format a tensor's dtype reads as: its quantized format, F16, or BF16 (F32 is converted to it).
MatrixFormat format_of_dtype(DType t) {
  return is_quantized_dtype(t) ? quantized_format_of(t) : t == DType::F16 ? MatrixFormat::F16 : MatrixFormat::BF16;
}

// The layers' format as stored: the quantized format of any quantized matrix, else the 16-bit type of
// the first matrix that has one (F32 matrices go to BF16).
MatrixFormat stored_body_format(const Model& model) {
  const std::vector<const TensorView*> matrices = layer_matrices(model.weights);
  for (const TensorView* t : matrices)
    if (is_quantized_dtype(t->dtype)) return quantized_format_of(t->dtype);
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
  const int group = matrix_scale_group(quantized_format_of(t.dtype));
  if (s.block_cols % group != 0 && s.block_cols < cols)
    return fmt::format("tensor {}: scale blocks of {} columns do not cover whole {}-column groups (the kernels read "
                       "one scale per {} columns of a row)",
                       s.name, s.block_cols, group, group);
  if (t.dtype == DType::U4 && s.zero == nullptr) return fmt::format("tensor {} is int4 without zero points", t.name);
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
  if (options.quantize != Quantize::None) {
    target = options.quantize == Quantize::Int4 ? MatrixFormat::INT4 : MatrixFormat::FP8;
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
  if (options.quantize == quantize_of(target) && options.quantize_head) head_quantized = true;
  if (head_quantized)
    for (TensorView* t : head)
      if (t->dtype != dtype) todo.push_back(t);
  quantize_matrices(model, todo, target, options.on_quantize_progress);
  if (tied) w.lm_head = w.embed;
}

}  // namespace

void prepare_matrix_formats(Model& model, const LoadOptions& options) {
  bring_to_target_formats(model, options);
  model.formats = resolve_weight_formats(model);
}

}  // namespace mk
