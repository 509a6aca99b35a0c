// The host's plan of the kernel's resources, in plain C++ (CPU tests cover it; the launcher in
// device/gpu_backend.cu applies it): the shared memory a workgroup needs (the most any instruction of the
// schedule needs, from its op's spec in device/ops/), the weight stream's ring in what is left, and the
// device memory a model needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "device/kernel_params.h"
#include "runtime/model_config.h"
#include "runtime/schedule.h"
#include "runtime/weight_layout.h"

namespace mk::dev {

// The kernel's view of the model's shapes.
ModelDims model_dims(const ModelConfig& c, const WeightLayout& layout, const Schedule& schedule);

// Bytes of dynamic shared memory for the activation area: the most that any instruction's op needs.
size_t activation_smem_bytes(const Schedule& schedule, const ModelDims& d);

// Bytes of dynamic shared memory the chunk steps' instructions need (0 without chunk steps).
size_t chunk_smem_bytes(const Schedule& schedule, const ModelDims& d);

// The longest weight row a GEMV op streams, in bytes, all parts together (gate_up: a gate and an up row).
size_t longest_gemv_row_bytes(const ModelDims& d);

struct StreamPlan {
  uint32_t slots = 0;  // 0: no weight stream (weights go through registers)
  uint32_t slot_bytes = 0;
  uint32_t ring_offset = 0;  // byte offset of the ring in dynamic shared memory
  size_t smem_bytes = 0;     // dynamic shared memory in all (activation area, then the ring)
};

// What a token-step op streams through the weight stream: for each part, where its matrix is found (a
// byte offset into a layer's LayerOffsets, or kHeadMatrix: the LM head), and the rows' shape.
inline constexpr uint16_t kHeadMatrix = 0xffff;
struct OpStream {
  uint16_t matrix_field[2];
  uint32_t parts;  // 0: the op streams no weights
  uint32_t cols, row_bytes, rows_per_chunk;
};

// What each token-step op streams, from its gemv(), with chunks of `stream_slot_bytes` (0: no stream;
// then one row a chunk). Each matrix an op names must be a field of LayerOffsets or the LM head (found by
// calling gemv() with every field set to a value of its own); anything else is an error naming the op.
void plan_op_streams(const ModelDims& d, uint32_t stream_slot_bytes, OpStream (&out)[kNumStepOps]);

// KernelParams::stream_records: one per instruction of the token-step schedule, from its op's stream
// (plan_op_streams) and its layer's offsets in `layers`, with chunks of `stream_slot_bytes` (0: no
// stream). An instruction of a layer the model does not have is an error naming it.
std::vector<StreamRecord> plan_stream_records(const Schedule& schedule, const ModelDims& d, const std::vector<LayerOffsets>& layers,
                                              uint64_t lm_head, uint32_t stream_slot_bytes);

// The weight stream's ring after the activation area, in the shared memory left over (`max_smem` per
// workgroup, of which the kernel's static variables take `static_smem`): as many slots as fit, at most
// kMaxStreamSlots and at most `requested_slots` (-1: no cap, 0: no stream), each holding at least one row
// of every GEMV. Default slot size (`requested_slot_kib` 0): as many of the longest rows as fit in 56 KiB,
// so that a chunk of the longest rows wastes no slot space (48 KiB = 3 down rows for Llama-3.2-1B, 56 KiB
// = 2 for Llama-3.1-8B; measured best on an H200 against 32/40/48/56/64 KiB, docs/log.md v14). An explicit
// size is taken as is (tests use tiny slots to make the ring wrap often). Fewer than 2 slots overlap
// nothing: then no stream.
StreamPlan plan_weight_stream(const ModelDims& d, size_t activation_bytes, size_t max_smem, size_t static_smem,
                              int requested_slots, int requested_slot_kib);

// The row stages (QKV, OProj, GateUp, Down) to run on half the workgroups (ScheduleParams::narrow_ops with
// narrow_workgroups = W / 2): those whose weights, counted as 16-bit ones, fit the weight stream's ring
// (`ring_bytes`) in each of W / 2 blocks. Such a stage is latency-bound. Its blocks follow where the
// previous stage stopped (the schedule's rotation), so they run on workgroups that sat that stage out:
// their weights have landed and their inbound path is idle when the inputs come, which is where the
// stages' tails came from. A block within one fill of the ring adds no second round of streaming.
// Counted as 16-bit because a block's work follows its weights' count, not their bytes: fp8 and int4
// stages that fit in bytes but not so were slower narrowed. Measured on an H100
// (docs/log.md, 2026-11-26, narrow stages): Qwen2.5-0.5B 8-11% faster in every format, Llama-3.2-1B 0.4-2.7%
// (at depth 16384: 2.5%), Qwen3-1.7B 2%; the stages this leaves out (1B's qkv and down, Llama-3.1-8B's
// o_proj, every gate_up) were slower narrowed or no faster. `schedule`: built without narrow stages; 0
// ring bytes (no weight stream): none.
uint32_t plan_narrow_stages(const Schedule& schedule, const ModelDims& d, size_t ring_bytes);

// Device memory a model needs at a context, by part (chunk: the chunk steps' buffers).
struct MemoryNeed {
  size_t weights = 0, kv_cache = 0, chunk = 0, other = 0;
  size_t total() const { return weights + kv_cache + chunk + other; }
};
// `slack`: what the runtime itself takes besides the allocations.
MemoryNeed device_memory_need(const ModelConfig& c, const WeightLayout& layout, const Schedule& schedule, int context,
                              size_t slack = size_t(64) << 20);

}  // namespace mk::dev
