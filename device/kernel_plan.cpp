#include "device/kernel_plan.h"

#include <algorithm>
#include <cstring>

#include "device/ops/ops.h"
#include "runtime/decode_buffers.h"
#include "runtime/error.h"
#include "runtime/step_recipe.h"

namespace mk::dev {

ModelDims model_dims(const ModelConfig& c, const WeightLayout& layout, const Schedule& schedule) {
  // Attention's data is uniform unless some layer's window, scale or RoPE differs from layer 0's.
  const StepRecipe recipe = build_step_recipe(c);
  const RopeKinds ropes = rope_kinds(recipe);
  const LayerAttention& first = recipe.layers.at(0).attention;
  bool per_layer = ropes.kinds.size() > 1;
  for (const LayerRecipe& L : recipe.layers) per_layer |= L.attention.window != first.window || L.attention.scale != first.scale;
  float act_linear = 1.0f, act_cubic = 0.0f;
  mlp_activation_coefficients(c.activation, &act_linear, &act_cubic);
  return ModelDims{c.hidden_size, c.intermediate_size, c.num_layers, c.num_heads, c.num_kv_heads,
                   c.head_dim, c.group_size(), c.vocab_size, layout.qkv_rows, layout.qkv_group_rows,
                   schedule.attention_splits, schedule.lm_head_slots, c.rms_norm_eps, c.qkv_bias,
                   c.qk_norm, layout.format, layout.head_format, schedule.combine_once.enabled,
                   attention_split_positions_log2(c.head_dim), act_linear, act_cubic, recipe.embed_scale,
                   per_layer, first.window, first.scale};
}

size_t activation_smem_bytes(const Schedule& schedule, const ModelDims& d) {
  size_t floats = 0;
  for (const Instr& in : schedule.instrs) floats = std::max(floats, op_smem_floats(in, d));
  return floats * sizeof(float);
}

size_t chunk_smem_bytes(const Schedule& schedule, const ModelDims& d) {
  size_t floats = 0;
  for (const Instr& in : schedule.chunk.instrs) floats = std::max(floats, op_smem_floats(in, d));
  return floats * sizeof(float);
}

size_t longest_gemv_row_bytes(const ModelDims& d) {
  size_t longest = 0;
  for (int op = 0; op < kNumOps; ++op) {
    Instr in;
    in.op = Op(op);
    const GemvMatrices g = op_gemv(in, d, LayerOffsets{}, 0);
    if (g.parts > 0) longest = std::max(longest, size_t(g.parts) * size_t(matrix_row_bytes(g.format, g.cols)));
  }
  return longest;
}

uint32_t plan_narrow_stages(const Schedule& schedule, const ModelDims& d, size_t ring_bytes) {
  const size_t half = size_t(schedule.num_workgroups / 2);
  if (ring_bytes == 0 || half == 0) return 0;
  uint32_t ops = 0;
  for (Op op : {Op::QKV, Op::OProj, Op::GateUp, Op::Down}) {
    size_t rows = 0;  // of one layer's stage, as the schedule cut it
    for (const Instr& in : schedule.instrs)
      if (in.op == op && in.layer == 0) rows += in.end - in.begin;
    Instr probe{};
    probe.op = op;
    const GemvMatrices g = op_gemv(probe, d, LayerOffsets{}, 0);
    const size_t bytes16 = rows * size_t(g.parts) * size_t(g.cols) * 2;  // its weights as 16-bit ones
    if (rows > 0 && (bytes16 + half - 1) / half <= ring_bytes) ops |= op_bit(op);
  }
  return ops;
}

void plan_op_streams(const ModelDims& d, uint32_t stream_slot_bytes, OpStream (&out)[kNumStepOps]) {
  constexpr uint64_t kFieldMark = uint64_t(1) << 40, kHeadMark = uint64_t(1) << 41;
  constexpr int kFields = int(sizeof(LayerOffsets) / sizeof(uint64_t));
  static_assert(sizeof(LayerOffsets) == kFields * sizeof(uint64_t), "LayerOffsets holds only 64-bit offsets");
  uint64_t marks[kFields];
  for (int f = 0; f < kFields; ++f) marks[f] = kFieldMark + uint64_t(f) * sizeof(uint64_t);
  LayerOffsets probe;
  std::memcpy(&probe, marks, sizeof(probe));
  for (int op = 0; op < kNumStepOps; ++op) {
    Instr in;
    in.op = Op(op);
    const GemvMatrices g = op_gemv(in, d, probe, kHeadMark);
    OpStream& o = out[op];
    o = OpStream{};
    o.parts = uint32_t(g.parts);
    if (g.parts == 0) continue;
    for (int k = 0; k < g.parts; ++k) {
      const uint64_t m = g.matrix[k];
      if (m == kHeadMark) {
        o.matrix_field[k] = kHeadMatrix;
      } else if (m >= kFieldMark && m < kFieldMark + sizeof(LayerOffsets) && (m - kFieldMark) % sizeof(uint64_t) == 0) {
        o.matrix_field[k] = uint16_t(m - kFieldMark);
      } else {
        fail("op {}: its weight matrix {} is neither a LayerOffsets field nor the LM head", op_name(Op(op)), k);
      }
    }
    o.cols = uint32_t(g.cols);
    o.row_bytes = uint32_t(matrix_row_bytes(g.format, g.cols));
    // The same rule as gemv_shape's (device/weight_stream.h), which the kernel's ops use.
    o.rows_per_chunk = stream_slot_bytes ? stream_slot_bytes / (uint32_t(g.parts) * o.row_bytes) : 1u;
  }
}

std::vector<StreamRecord> plan_stream_records(const Schedule& schedule, const ModelDims& d, const std::vector<LayerOffsets>& layers,
                                              uint64_t lm_head, uint32_t stream_slot_bytes) {
  OpStream streams[kNumStepOps];
  plan_op_streams(d, stream_slot_bytes, streams);
  for (int op = 0; op < kNumStepOps; ++op)
    if (op_every_step(Op(op)) && (!op_active(Op(op), 0, 1 << 30) || !op_active(Op(op), 1 << 30, 0)))
      fail("op {}: active() depends on the step but kEveryStep is true (device/ops/op_spec.h)", op_name(Op(op)));
  std::vector<StreamRecord> records(schedule.instrs.size());
  for (size_t i = 0; i < schedule.instrs.size(); ++i) {
    const Instr& in = schedule.instrs[i];
    StreamRecord& r = records[i];  // value-initialised: a record that streams nothing
    r.op = in.op;
    r.every_step = op_every_step(in.op) ? 1 : 0;
    if (unsigned(in.op) >= unsigned(kNumStepOps) || streams[int(in.op)].parts == 0 || in.end <= in.begin) continue;
    const OpStream& o = streams[int(in.op)];
    for (uint32_t k = 0; k < o.parts; ++k) {
      uint64_t matrix = lm_head;
      if (o.matrix_field[k] != kHeadMatrix) {
        if (in.layer >= layers.size())
          fail("instruction {} ({} of layer {}): the model has {} layers", i, op_name(in.op), in.layer, layers.size());
        std::memcpy(&matrix, reinterpret_cast<const uint8_t*>(&layers[in.layer]) + o.matrix_field[k], sizeof(matrix));
      }
      r.src[k] = matrix + uint64_t(in.begin) * o.row_bytes;
    }
    r.parts = uint8_t(o.parts);
    r.rows = in.end - in.begin;
    r.rows_per_chunk = o.rows_per_chunk;
    r.row_bytes = o.row_bytes;
    r.chunks = (r.rows + o.rows_per_chunk - 1) / o.rows_per_chunk;
  }
  return records;
}

StreamPlan plan_weight_stream(const ModelDims& d, size_t activation_bytes, size_t max_smem, size_t static_smem,
                              int requested_slots, int requested_slot_kib) {
  StreamPlan plan;
  plan.smem_bytes = activation_bytes;
  if (requested_slots == 0) return plan;
  constexpr size_t kDefaultSlotLimit = 56 * 1024;
  const size_t longest_row = longest_gemv_row_bytes(d);
  const size_t slot = requested_slot_kib > 0 ? std::max(longest_row, size_t(requested_slot_kib) * 1024)
                                             : std::max(longest_row, kDefaultSlotLimit / longest_row * longest_row);
  const size_t ring_offset = (activation_bytes + 127) / 128 * 128;
  const size_t room = max_smem > static_smem + ring_offset ? max_smem - static_smem - ring_offset : 0;
  size_t slots = std::min(room / slot, size_t(kMaxStreamSlots));
  if (requested_slots > 0) slots = std::min(slots, size_t(requested_slots));
  if (slots < 2) return plan;
  plan.slots = uint32_t(slots);
  plan.slot_bytes = uint32_t(slot);
  plan.ring_offset = uint32_t(ring_offset);
  plan.smem_bytes = ring_offset + slots * slot;
  return plan;
}

MemoryNeed device_memory_need(const ModelConfig& c, const WeightLayout& layout, const Schedule& schedule, int context,
                              size_t slack) {
  MemoryNeed need;
  need.weights = layout.total_bytes;
  const DecodeBufferBytes state = decode_buffer_bytes(DecodeShapes::of(c, layout, schedule, context));
  need.kv_cache = state.kv_cache;
  need.chunk = state.chunk + schedule.chunk.instrs.size() * sizeof(Instr) + schedule.chunk.wg_begin.size() * sizeof(uint32_t);
  // A RoPE table per distinct RoPE of the layers (Gemma 3: its sliding and its global layers').
  const size_t rope_tables = rope_kinds(build_step_recipe(c)).kinds.size();
  const size_t rope = rope_tables * size_t(context) * size_t(c.head_dim) * sizeof(float);
  const size_t token_lists = schedule.instrs.size() * (sizeof(Instr) + sizeof(StreamRecord)) + schedule.wg_begin.size() * sizeof(uint32_t);
  need.other = rope + (state.total - state.kv_cache - state.chunk) + token_lists + slack;
  return need;
}

}  // namespace mk::dev
