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

template <class M, class T>
std::vector<T*> matrices_of(M& model) {
  auto& w = model.weights;
  std::vector<T*> out{&w.embed};
  for (auto& l : w.layers)
    for (T* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) out.push_back(t);
  if (w.lm_head.data != w.embed.data || !w.lm_head.present()) out.push_back(&w.lm_head);
  return out;
}

// One matrix, row by row: values and per-group scales into two owned buffers.
void quantize_matrix(TensorView& t, std::vector<std::shared_ptr<const std::vector<uint8_t>>>& owned, std::mutex& owned_lock) {
  const int64_t rows = t.shape[0], cols = t.shape[1], groups = scale_groups(int(cols));
  auto values = std::make_shared<std::vector<uint8_t>>(size_t(rows * cols));
  auto scales = std::make_shared<std::vector<uint8_t>>(size_t(rows * groups) * sizeof(float));
  float* scale = reinterpret_cast<float*>(scales->data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * kScaleGroup, c1 = std::min(cols, c0 + kScaleGroup);
      float group[kScaleGroup];  // read once: at() converts from the checkpoint's dtype
      float amax = 0.f;
      for (int64_t c = c0; c < c1; ++c) {
        const float v = group[c - c0] = t.at(r * cols + c);
        if (!std::isfinite(v))
          throw BadModelError(fmt::format("tensor {}: element [{}, {}] is {}; a model with NaN or infinite weights cannot run",
                                          t.name, r, c, v));
        amax = std::max(amax, std::fabs(v));
      }
      const float s = amax > 0.f ? amax / kFp8Max : 1.0f;
      scale[r * groups + g] = s;
      for (int64_t c = c0; c < c1; ++c) (*values)[size_t(r * cols + c)] = float_to_fp8_e4m3(group[c - c0] / s);
    }
  }
  TensorView q;
  q.name = t.name;
  q.dtype = DType::F8_E4M3;
  q.shape = t.shape;
  q.data = values->data();
  q.scale.name = t.name + " (scales made at load time)";
  q.scale.dtype = DType::F32;
  q.scale.data = scales->data();
  q.scale.block_rows = 1;
  q.scale.block_cols = kScaleGroup;
  q.scale.cols = groups;
  q.scale.count = rows * groups;
  t = q;
  std::lock_guard<std::mutex> lock(owned_lock);
  owned.push_back(std::move(values));
  owned.push_back(std::move(scales));
}

}  // namespace

std::vector<TensorView*> weight_matrices(Model& model) { return matrices_of<Model, TensorView>(model); }
std::vector<const TensorView*> weight_matrices(const Model& model) { return matrices_of<const Model, const TensorView>(model); }

MatrixFormat matrix_format_for(const Model& model) {
  for (const TensorView* t : weight_matrices(model))
    if (t->dtype == DType::F8_E4M3) return MatrixFormat::FP8;
  const DType t = model.weights.layers.empty() ? model.weights.embed.dtype : model.weights.layers[0].wq.dtype;
  return t == DType::F16 ? MatrixFormat::F16 : MatrixFormat::BF16;
}

std::string fp8_scale_problem(const TensorView& t) {
  if (!t.quantized()) return fmt::format("tensor {} is fp8 without scales", t.name);
  const int64_t cols = t.shape[1];
  const TensorScale& s = t.scale;
  if (s.block_cols % kScaleGroup != 0 && s.block_cols < cols)
    return fmt::format("tensor {}: scale blocks of {} columns do not cover whole {}-column groups (the fp8 kernels read "
                       "one scale per {} columns of a row)",
                       s.name, s.block_cols, kScaleGroup, kScaleGroup);
  return {};
}

void quantize_to_fp8(Model& model, const std::function<void(int, int)>& progress) {
  const bool tied = model.weights.lm_head.data == model.weights.embed.data;
  std::vector<TensorView*> todo;
  for (TensorView* t : weight_matrices(model))
    if (t->present() && t->dtype != DType::F8_E4M3) todo.push_back(t);
  std::atomic<size_t> next{0};
  std::atomic<int> done{0};
  std::mutex lock;
  std::exception_ptr error;
  auto worker = [&] {
    for (size_t i; (i = next++) < todo.size();) {
      try {
        quantize_matrix(*todo[i], model.owned, lock);
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
  if (tied) model.weights.lm_head = model.weights.embed;
}

}  // namespace mk
