// What every op declares besides its kernel body: the weights the weight stream brings it and the
// shared memory it needs. Plain C++ that the host's plan (device/kernel_plan.h) and CPU tests use, and
// that the kernel uses too. Each op's header (device/ops/<name>.h) derives its struct from OpDefaults and
// overrides what applies; its kernel body sits under MK_DEVICE_CODE.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/kernel_params.h"
#include "runtime/schedule.h"
#include "runtime/weight_layout.h"

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
#define MK_DEVICE_CODE 1
#else
#define MK_DEVICE_CODE 0
#endif

namespace mk::dev {

// The weight matrices a GEMV op streams: `parts` matrices of `cols` columns (gate_up: gate and up), of
// which an instruction reads rows [begin, end) of each.
struct GemvMatrices {
  uint64_t matrix[2] = {0, 0};
  int parts = 0;  // 0: the op reads no weight matrix
  int cols = 0;
  MatrixFormat format = MatrixFormat::BF16;  // of the matrices: the layers' (ModelDims::format) or the head's
};

struct OpDefaults {
  static constexpr bool kGemv = false;
  // Run only by the kernels of a tensor-parallel step (Machine::kTensorParallel).
  static constexpr bool kTensorParallelOnly = false;
  MK_HD_INLINE static GemvMatrices gemv(const ModelDims&, const LayerOffsets&, uint64_t /*lm_head*/) { return {}; }
  // Whether the op does its work at `step` of a launch that ingests `ingest` tokens before sampling (an
  // inactive instruction streams no weights; it still waits and signals). An op that overrides it sets
  // kEveryStep to false, so that the weight stream asks it (plan_stream_records checks the pair).
  static constexpr bool kEveryStep = true;
  MK_HD_INLINE static bool active(int /*step*/, int /*ingest*/) { return true; }
  // Floats of dynamic shared memory (the activation area) one instruction of the op needs.
  static size_t smem_floats(const ModelDims&, const Instr&) { return 0; }
#if MK_DEVICE_CODE
  // Before the instruction waits for its inputs, all threads: start loading what does not depend on them.
  template <class MachineT>
  __device__ static void prestage(MachineT&, const Instr&) {}
#endif
};

// The activation area of a GEMV behind an RMSNorm (qkv, gate_up, LM head): the normalised input, then
// the staged norm weight, hidden floats each (Machine::staged_norm), and the per-warp reduction slots.
MK_HD_INLINE size_t norm_gemv_floats(const ModelDims& d) { return size_t(2 * d.hidden + 2 * kMaxWarps); }
// The same for an instruction that may fold a post-norm (Instr::folds): its weight follows, hidden floats
// (Machine::folded_post_norm).
MK_HD_INLINE size_t norm_gemv_floats(const ModelDims& d, const Instr& in) {
  return norm_gemv_floats(d) + (in.folds != kFoldsNoNorm ? size_t(d.hidden) : 0);
}

// The activation area of a GEMV that adds to the residual stream (o_proj, down): its input, then the
// residual rows [begin, end) it adds to (Machine::residual_rows).
inline size_t residual_gemv_floats(const ModelDims& d, const Instr& in) { return gemv_residual_offset(d) + (in.end - in.begin); }

}  // namespace mk::dev
