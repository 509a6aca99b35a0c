#include "runtime/quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>

#include "runtime/error.h"

namespace mk {
namespace {

constexpr float kFp8Max = 448.0f;
constexpr int kInt4Max = 15;

template <class M, class T>
std::vector<T*> matrices_of(M& model) {
  auto& w = model.weights;
  std::vector<T*> out{&w.embed};
  for (auto& l : w.layers)
    for (T* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) out.push_back(t);
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
  const int64_t rows = t.shape[0], cols = t.shape[1], groups = scale_groups(int(cols));
  const bool int4 = format == MatrixFormat::INT4;
  auto values = std::make_shared<std::vector<uint8_t>>(size_t(int4 ? (rows * cols + 1) / 2 : rows * cols), uint8_t(0));
  auto scales = std::make_shared<std::vector<uint8_t>>(size_t(rows * groups) * sizeof(float));
  auto zeros = std::make_shared<std::vector<uint8_t>>(int4 ? size_t(rows * groups) : size_t(0));
  float* scale = reinterpret_cast<float*>(scales->data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * kScaleGroup, c1 = std::min(cols, c0 + kScaleGroup);
      float group[kScaleGroup];
      read_group(t, r, c0, c1, group);
      const auto [lo, hi] = std::minmax_element(group, group + (c1 - c0));
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
  q.scale.block_cols = kScaleGroup;
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

MatrixFormat matrix_format_for(const Model& model) {
  const auto& w = model.weights;
  if (w.layers.empty()) {  // a preset
    const DType t = w.embed.dtype;
    return is_quantized_dtype(t) ? quantized_format_of(t) : t == DType::F16 ? MatrixFormat::F16 : MatrixFormat::BF16;
  }
  for (const LayerWeights& l : w.layers)
    for (const TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      if (is_quantized_dtype(t->dtype)) return quantized_format_of(t->dtype);
  return w.layers[0].wq.dtype == DType::F16 ? MatrixFormat::F16 : MatrixFormat::BF16;
}

MatrixFormat head_format_for(const Model& model) {
  const MatrixFormat layers = matrix_format_for(model);
  if (!matrix_format_quantized(layers)) return layers;
  const auto& w = model.weights;
  // A preset names it by its LM head's dtype; a loaded model by its LM head (the embedding when tied).
  const DType t = w.layers.empty() || w.lm_head.present() ? w.lm_head.dtype : w.embed.dtype;
  if (is_quantized_dtype(t)) return quantized_format_of(t);
  return t == DType::F16 ? MatrixFormat::F16 : MatrixFormat::BF16;
}

std::string scale_group_problem(const TensorView& t) {
  if (!t.quantized()) return fmt::format("tensor {} is {} without scales", t.name, dtype_name(t.dtype));
  const int64_t cols = t.shape[1];
  const TensorScale& s = t.scale;
  if (s.block_cols % kScaleGroup != 0 && s.block_cols < cols)
    return fmt::format("tensor {}: scale blocks of {} columns do not cover whole {}-column groups (the kernels read "
                       "one scale per {} columns of a row)",
                       s.name, s.block_cols, kScaleGroup, kScaleGroup);
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

void prepare_matrix_formats(Model& model, const LoadOptions& options) {
  auto& w = model.weights;
  const bool tied = w.lm_head.data == w.embed.data;
  const MatrixFormat stored = matrix_format_for(model);
  MatrixFormat target = stored;
  if (options.quantize != Quantize::None) {
    target = options.quantize == Quantize::Int4 ? MatrixFormat::INT4 : MatrixFormat::FP8;
    if (matrix_format_quantized(stored) && stored != target)
      fail("model {} is stored in {}; it cannot be quantized to {} (run it as stored, without the quantize option)",
           model.dir.string(), matrix_format_name(stored), matrix_format_name(target));
  }
  if (!matrix_format_quantized(target)) return;
  const DType dtype = matrix_format_dtype(target);
  for (const LayerWeights& l : w.layers)
    for (const TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      if (is_quantized_dtype(t->dtype) && t->dtype != dtype)
        fail("tensor {} is {}, but other matrices of model {} are {}: one quantized format per model", t->name,
             dtype_name(t->dtype), model.dir.string(), dtype_name(dtype));
  std::vector<TensorView*> todo;
  for (LayerWeights& l : w.layers)
    for (TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      if (t->dtype != dtype) todo.push_back(t);
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

}  // namespace mk
