// Every op's header (runtime/op_table.h lists the ops; each has device/ops/<name>.h defining <Enum>Op).
#pragma once

#include "device/ops/all_reduce.h"
#include "device/ops/attention.h"
#include "device/ops/chunk_attention.h"
#include "device/ops/chunk_down.h"
#include "device/ops/chunk_gate_up.h"
#include "device/ops/chunk_norm.h"
#include "device/ops/chunk_o_proj.h"
#include "device/ops/chunk_post_norm.h"
#include "device/ops/chunk_qkv.h"
#include "device/ops/chunk_rope.h"
#include "device/ops/down.h"
#include "device/ops/embed.h"
#include "device/ops/gate_up.h"
#include "device/ops/lm_head.h"
#include "device/ops/o_proj.h"
#include "device/ops/post_norm.h"
#include "device/ops/qkv.h"
#include "device/ops/sample.h"

namespace mk::dev {

// Fails to compile when an op of the table has no header above.
#define MK_OP_HAS_TYPE(E, name) static_assert(sizeof(E##Op) > 0, "device/ops/" #name ".h: define " #E "Op");
MK_FOR_EACH_OP(MK_OP_HAS_TYPE)
#undef MK_OP_HAS_TYPE

// The weight matrices instruction `in` streams (parts = 0: none), from its op's spec.
MK_HD_INLINE GemvMatrices op_gemv(const Instr& in, const ModelDims& d, const LayerOffsets& layer, uint64_t lm_head) {
  switch (in.op) {
#define MK_OP_GEMV(E, name) \
  case Op::E: return E##Op::gemv(d, layer, lm_head);
    MK_FOR_EACH_OP(MK_OP_GEMV)
#undef MK_OP_GEMV
  }
  return {};
}

// Whether an instruction of `op` does its work at this step (OpDefaults::active).
MK_HD_INLINE bool op_active(Op op, int step, int ingest) {
  switch (op) {
#define MK_OP_ACTIVE(E, name) \
  case Op::E: return E##Op::active(step, ingest);
    MK_FOR_EACH_OP(MK_OP_ACTIVE)
#undef MK_OP_ACTIVE
  }
  return true;
}
MK_HD_INLINE bool op_active(const Instr& in, int step, int ingest) { return op_active(in.op, step, ingest); }

// Whether `op` is active at every step (OpDefaults::kEveryStep).
inline bool op_every_step(Op op) {
  switch (op) {
#define MK_OP_EVERY_STEP(E, name) \
  case Op::E: return E##Op::kEveryStep;
    MK_FOR_EACH_OP(MK_OP_EVERY_STEP)
#undef MK_OP_EVERY_STEP
  }
  return true;
}

// Floats of dynamic shared memory instruction `in` needs (the host's plan: device/kernel_plan.h).
inline size_t op_smem_floats(const Instr& in, const ModelDims& d) {
  switch (in.op) {
#define MK_OP_SMEM(E, name) \
  case Op::E: return E##Op::smem_floats(d, in);
    MK_FOR_EACH_OP(MK_OP_SMEM)
#undef MK_OP_SMEM
  }
  return 0;
}

}  // namespace mk::dev
