#include "runtime/prefill_flops.h"

namespace mk {

double chunk_op_flops(const ModelConfig& c, Op op, int64_t first, int64_t tokens) {
  const double T = double(tokens), L = double(c.num_layers), H = double(c.hidden_size);
  auto matrix = [&](double k, double n) { return 2.0 * T * k * n * L; };
  switch (op) {
    case Op::ChunkQKV: return matrix(H, double(c.q_dim() + 2 * c.kv_dim()));
    case Op::ChunkOProj: return matrix(double(c.q_dim()), H);
    case Op::ChunkGateUp: return matrix(H, 2.0 * double(c.intermediate_size));
    case Op::ChunkDown: return matrix(double(c.intermediate_size), H);
    case Op::ChunkAttention: {
      // Token at position p attends to min(p + 1, window) positions (window 0: p + 1): Q K^T and P V,
      // head_dim multiply-adds each. attended(n): the pairs of positions 0 .. n - 1.
      double pairs = 0;
      for (int l = 0; l < c.num_layers; ++l) {
        const double w = c.layer_slides(l) ? double(c.sliding_window) : 0.0;
        auto attended = [&](double n) { return w == 0.0 || n <= w ? n * (n + 1) / 2 : w * (w + 1) / 2 + (n - w) * w; };
        pairs += attended(double(first) + T) - attended(double(first));
      }
      return 4.0 * double(c.q_dim()) * pairs;
    }
    default: return 0.0;
  }
}

}  // namespace mk
