// The floating-point operations a prompt's chunk steps perform, per op: what mk-bench divides by the
// ops' measured time to report TFLOPS. Useful work only (a multiply-add counts 2): the matrix ops'
// products and attention's two products over the causal positions, not the tiles' padding, the masked
// halves of diagonal tiles, norms or RoPE.
#pragma once

#include <cstdint>

#include "runtime/model_config.h"
#include "runtime/schedule.h"

namespace mk {

// FLOPs of chunk-step op `op` over prompt tokens at positions [first, first + tokens) of a cache that
// holds the positions before them, summed over the layers (a sliding-window layer's attention over its
// window only); 0 for the ops without products (ChunkNorm, ChunkRope, ChunkPostNorm) and for every
// token-step op.
double chunk_op_flops(const ModelConfig& c, Op op, int64_t first, int64_t tokens);

}  // namespace mk
