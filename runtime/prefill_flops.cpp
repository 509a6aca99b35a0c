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
      // Token at position p attends to p + 1 positions: Q K^T and P V, head_dim multiply-adds each.
      const double pairs = T * double(first) + T * (T + 1) / 2;
      return 4.0 * double(c.q_dim()) * pairs * L;
    }
    default: return 0.0;
  }
}

}  // namespace mk
