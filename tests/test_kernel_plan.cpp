// The host's plan of the kernel's resources (device/kernel_plan.h): shared memory per workgroup from the
// ops' specs, the weight stream's ring, the device memory a model needs. Expected values come from the
// models' shapes and the sizes recorded in docs/design.md, not from the plan's own formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "device/kernel_plan.h"
#include "device/ops/ops.h"
#include "runtime/presets.h"
#include "runtime/schedule.h"
#include "runtime/weight_layout.h"

namespace mk {
namespace {

constexpr size_t kHopperMaxSmem = 232448;  // 227 KiB a block may opt into on H100/H200
constexpr size_t kStaticSmem = 1024;       // the kernel's static shared variables (ptxas: "1024 bytes smem")

struct Planned {
  ModelConfig cfg;
  WeightLayout layout;
  Schedule schedule;
  dev::ModelDims dims;
};

Planned plan_for(const std::string& preset, int workgroups = 132, MatrixFormat format = MatrixFormat::BF16) {
  Planned p;
  p.cfg = preset_config(preset);
  p.layout = plan_weight_layout(p.cfg, format);
  p.schedule = build_schedule(p.cfg, ScheduleParams{workgroups});
  p.dims = dev::model_dims(p.cfg, p.layout, p.schedule);
  return p;
}

// The kernel's gate_up computes every activation as g * sigmoid(g * (c1 + c3 g^2)): SiLU and, through
// (1 + tanh(z)) / 2 = sigmoid(2z), GELU with the tanh approximation, as transformers defines them.
TEST(KernelPlan, TheActivationCoefficientsGiveSiluAndGeluTanh) {
  float c1 = 0, c3 = 0;
  auto kernel_form = [&](double g) { return g / (1.0 + std::exp(-g * (c1 + c3 * g * g))); };
  dev::mlp_activation_coefficients(Activation::SiLU, &c1, &c3);
  for (double g : {-8.0, -2.5, -0.3, 0.0, 0.7, 3.0, 9.0}) EXPECT_NEAR(kernel_form(g), g / (1.0 + std::exp(-g)), 1e-12) << g;
  dev::mlp_activation_coefficients(Activation::GeluTanh, &c1, &c3);
  for (double g : {-8.0, -2.5, -0.3, 0.0, 0.7, 3.0, 9.0}) {
    const double gelu = 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
    EXPECT_NEAR(kernel_form(g), gelu, 1e-6 * (1.0 + std::fabs(gelu))) << g;
  }
}

TEST(KernelPlan, LongestRowIsGateUpOrDown) {
  const Planned p = plan_for("llama-3.2-1b");
  // gate_up streams a gate and an up row of hidden (2048) bf16 each: 8 KiB; down a row of 8192: 16 KiB.
  EXPECT_EQ(dev::longest_gemv_row_bytes(p.dims), size_t(8192) * 2);
  const Planned q = plan_for("qwen2.5-0.5b");
  EXPECT_EQ(dev::longest_gemv_row_bytes(q.dims), size_t(4864) * 2);
}

TEST(KernelPlan, ActivationAreaCoversEveryInstruction) {
  for (const char* preset : {"llama-3.2-1b", "qwen2.5-0.5b", "llama-3.1-8b"}) {
    const Planned p = plan_for(preset);
    const size_t bytes = dev::activation_smem_bytes(p.schedule, p.dims);
    // down keeps all of h (intermediate floats) plus the residual rows it adds to.
    EXPECT_GE(bytes, size_t(p.cfg.intermediate_size) * 4) << preset;
    for (const Instr& in : p.schedule.instrs) ASSERT_LE(dev::op_smem_floats(in, p.dims) * 4, bytes) << preset;
  }
}

TEST(KernelPlan, WeightStreamSlotsAsRecordedOnHopper) {
  // docs/design.md: 3 x 48 KiB for Llama-3.2-1B (3 down rows), 3 x 56 KiB for Llama-3.1-8B (2 down rows).
  struct Case {
    const char* preset;
    uint32_t slots, slot_kib;
  };
  for (const Case c : {Case{"llama-3.2-1b", 3, 48}, Case{"llama-3.1-8b", 3, 56}}) {
    const Planned p = plan_for(c.preset);
    const size_t act = dev::activation_smem_bytes(p.schedule, p.dims);
    const dev::StreamPlan s = dev::plan_weight_stream(p.dims, act, kHopperMaxSmem, kStaticSmem, -1, 0);
    EXPECT_EQ(s.slots, c.slots) << c.preset;
    EXPECT_EQ(s.slot_bytes, c.slot_kib * 1024u) << c.preset;
    EXPECT_EQ(s.ring_offset % 128, 0u);
    EXPECT_GE(s.ring_offset, act);
    EXPECT_EQ(s.smem_bytes, size_t(s.ring_offset) + size_t(s.slots) * s.slot_bytes);
    EXPECT_LE(s.smem_bytes + kStaticSmem, kHopperMaxSmem);
  }
}

// The stages on half the workgroups: those whose weights, as 16-bit ones in 66 blocks, fit the ring a
// block. From the shapes: Qwen2.5-0.5B (ring 3 x 47 KiB = 144,384 B): qkv 1,152 x 896 x 2 = 2.06 MB (31 KB
// a block), o_proj 896 x 896 x 2 (24 KB), down 896 x 4,864 x 2 = 8.72 MB (132,065 B), gate_up twice 4,864 x
// 896 x 2 = 17.4 MB (264 KB: no). Llama-3.2-1B (3 x 48 KiB = 147,456 B): o_proj 2,048 x 2,048 x 2 = 8.39 MB
// (127 KB); qkv 3,072 x 2,048 x 2 (191 KB), down and gate_up larger: no. Llama-3.1-8B: none. The same for
// int4 layers, whose bytes would fit 1B's qkv and down too.
TEST(KernelPlan, NarrowStagesAreTheOnesWhoseHalfBlocksFitTheRing) {
  struct Case {
    const char* preset;
    size_t ring;
    uint32_t ops;
  };
  const uint32_t qkv = op_bit(Op::QKV), o_proj = op_bit(Op::OProj), down = op_bit(Op::Down);
  for (const Case c : {Case{"qwen2.5-0.5b", 3 * 47 * 1024, qkv | o_proj | down}, Case{"llama-3.2-1b", 3 * 48 * 1024, o_proj},
                       Case{"llama-3.1-8b", 3 * 56 * 1024, 0}}) {
    const Planned p = plan_for(c.preset);
    EXPECT_EQ(dev::plan_narrow_stages(p.schedule, p.dims, c.ring), c.ops) << c.preset << ": " << op_names(dev::plan_narrow_stages(p.schedule, p.dims, c.ring));
    const Planned q4 = plan_for(c.preset, 132, MatrixFormat::INT4);
    EXPECT_EQ(dev::plan_narrow_stages(q4.schedule, q4.dims, c.ring), c.ops) << c.preset << " int4";
  }
  // Qwen2.5-0.5B's down needs 132,065 bytes a block: one byte of ring less than that leaves it out; no ring
  // (weights through registers), nothing.
  const Planned q = plan_for("qwen2.5-0.5b");
  EXPECT_EQ(dev::plan_narrow_stages(q.schedule, q.dims, 132064), qkv | o_proj);
  EXPECT_EQ(dev::plan_narrow_stages(q.schedule, q.dims, 132065), qkv | o_proj | down);
  EXPECT_EQ(dev::plan_narrow_stages(q.schedule, q.dims, 0), 0u);
  EXPECT_EQ(op_names(qkv | down), "qkv,down");
  EXPECT_EQ(op_names(0), "none");
}

TEST(KernelPlan, OpStreamsNameEachOpsMatricesAndRows) {
  // Llama-3.2-1B, bf16, 48 KiB slots: the matrices each op streams (docs/weight_layout.md) and its rows:
  // qkv 3072 x 2048, o_proj 2048 x 2048, gate and up 8192 x 2048 each, down 2048 x 8192, the LM head
  // 128256 x 2048; a chunk holds as many whole rows of every part as fit in a slot.
  const Planned p = plan_for("llama-3.2-1b");
  dev::OpStream s[kNumStepOps];
  dev::plan_op_streams(p.dims, 48 * 1024, s);
  struct Want {
    Op op;
    size_t field0, field1;  // offsetof in LayerOffsets, or ~0: the LM head / no second part
    uint32_t parts, cols, row_bytes, rows_per_chunk;
  };
  constexpr size_t kHead = ~size_t(0), kNone = ~size_t(0) - 1;
  const Want want[] = {{Op::QKV, offsetof(LayerOffsets, wqkv), kNone, 1, 2048, 4096, 12},
                       {Op::OProj, offsetof(LayerOffsets, wo), kNone, 1, 2048, 4096, 12},
                       {Op::GateUp, offsetof(LayerOffsets, w_gate), offsetof(LayerOffsets, w_up), 2, 2048, 4096, 6},
                       {Op::Down, offsetof(LayerOffsets, w_down), kNone, 1, 8192, 16384, 3},
                       {Op::LMHead, kHead, kNone, 1, 2048, 4096, 12}};
  for (const Want& w : want) {
    SCOPED_TRACE(op_name(w.op));
    const dev::OpStream& o = s[int(w.op)];
    EXPECT_EQ(o.parts, w.parts);
    EXPECT_EQ(o.cols, w.cols);
    EXPECT_EQ(o.row_bytes, w.row_bytes);
    EXPECT_EQ(o.rows_per_chunk, w.rows_per_chunk);
    EXPECT_EQ(o.matrix_field[0], w.field0 == kHead ? dev::kHeadMatrix : uint16_t(w.field0));
    if (w.field1 != kNone) {
      EXPECT_EQ(o.matrix_field[1], uint16_t(w.field1));
    }
  }
  for (Op op : {Op::Embed, Op::Attention, Op::Sample}) EXPECT_EQ(s[int(op)].parts, 0u) << op_name(op);
  // Without a stream every chunk is one row.
  dev::plan_op_streams(p.dims, 0, s);
  EXPECT_EQ(s[int(Op::GateUp)].rows_per_chunk, 1u);
  // A quantized model's 16-bit head: the head's rows are bf16, the layers' int4 (4 bits and a scale and a
  // zero point per 128 columns: 2048 / 2 + 16 * 5 bytes).
  ModelConfig cfg = preset_config("llama-3.2-1b");
  const WeightLayout layout = plan_weight_layout(cfg, MatrixFormat::INT4, MatrixFormat::BF16);
  const dev::ModelDims d = dev::model_dims(cfg, layout, p.schedule);
  dev::plan_op_streams(d, 48 * 1024, s);
  EXPECT_EQ(s[int(Op::LMHead)].row_bytes, 4096u);
  EXPECT_EQ(s[int(Op::QKV)].row_bytes, 1024u + 16u * 5u);
}

TEST(KernelPlan, StreamRecordsLocateEachInstructionsRows) {
  // Llama-3.2-1B, bf16, 48 KiB slots: each instruction's record starts at its first row of its layer's
  // matrices (rows of 4096 bytes but down's 16384), in chunks of 12 rows (6 for gate_up's two parts, 3 for
  // down); the LM head's record asks whether it is active (not on prompt steps); the others stream
  // nothing.
  const Planned p = plan_for("llama-3.2-1b");
  const std::vector<dev::StreamRecord> records = dev::plan_stream_records(p.schedule, p.dims, p.layout.layers, p.layout.lm_head, 48 * 1024);
  ASSERT_EQ(records.size(), p.schedule.instrs.size());
  std::vector<int> seen(kNumStepOps, 0);
  for (size_t i = 0; i < records.size(); ++i) {
    const Instr& in = p.schedule.instrs[i];
    const dev::StreamRecord& r = records[i];
    SCOPED_TRACE(testing::Message() << "instruction " << i << " " << op_name(in.op) << " layer " << in.layer);
    EXPECT_EQ(r.op, in.op);
    EXPECT_EQ(r.every_step, in.op == Op::LMHead ? 0 : 1);
    const LayerOffsets& l = p.layout.layers[in.layer];
    const uint64_t rows = in.end - in.begin;
    auto expect_rows = [&](uint64_t m0, uint64_t m1, uint32_t parts, uint32_t row_bytes, uint32_t per_chunk) {
      EXPECT_EQ(r.parts, parts);
      EXPECT_EQ(r.rows, rows);
      EXPECT_EQ(r.row_bytes, row_bytes);
      EXPECT_EQ(r.rows_per_chunk, per_chunk);
      EXPECT_EQ(r.chunks, (rows + per_chunk - 1) / per_chunk);
      EXPECT_EQ(r.src[0], m0 + in.begin * row_bytes);
      if (parts == 2) {
        EXPECT_EQ(r.src[1], m1 + in.begin * row_bytes);
      }
    };
    ++seen[int(in.op)];
    switch (in.op) {
      case Op::QKV: expect_rows(l.wqkv, 0, 1, 4096, 12); break;
      case Op::OProj: expect_rows(l.wo, 0, 1, 4096, 12); break;
      case Op::GateUp: expect_rows(l.w_gate, l.w_up, 2, 4096, 6); break;
      case Op::Down: expect_rows(l.w_down, 0, 1, 16384, 3); break;
      case Op::LMHead: expect_rows(p.layout.lm_head, 0, 1, 4096, 12); break;
      default: EXPECT_EQ(r.rows, 0u); EXPECT_EQ(r.chunks, 0u);
    }
  }
  for (Op op : {Op::QKV, Op::OProj, Op::GateUp, Op::Down, Op::LMHead, Op::Attention}) EXPECT_GT(seen[int(op)], 0) << op_name(op);
  // Without a stream every chunk is one row.
  const std::vector<dev::StreamRecord> rows = dev::plan_stream_records(p.schedule, p.dims, p.layout.layers, p.layout.lm_head, 0);
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i].chunks, rows[i].rows) << "instruction " << i;
  // A schedule with more layers than the offsets: an error naming the instruction and the layer.
  std::vector<LayerOffsets> fewer(p.layout.layers.begin(), p.layout.layers.end() - 1);
  try {
    dev::plan_stream_records(p.schedule, p.dims, fewer, p.layout.lm_head, 48 * 1024);
    ADD_FAILURE() << "no error for a layer without offsets";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("layer 15"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("the model has 15 layers"), std::string::npos) << e.what();
  }
}

TEST(KernelPlan, AttentionWarpPathCostsTheWeightStreamNoSlot) {
  // The long-context kernels' attention lays out its shared memory its own way (each warp's accumulators
  // and partials); the area is the larger of the two layouts. That must not cost the weight stream a slot
  // against the tile path's layout alone, for any preset's shapes.
  for (const char* preset : {"llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "qwen2.5-0.5b", "qwen3-1.7b"}) {
    const Planned p = plan_for(preset);
    Schedule others = p.schedule;
    std::erase_if(others.instrs, [](const Instr& in) { return in.op == Op::Attention; });
    const size_t both = dev::activation_smem_bytes(p.schedule, p.dims);
    const size_t tiles_only = std::max(dev::activation_smem_bytes(others, p.dims), dev::attention_tile_smem_bytes(p.dims) + 4);
    EXPECT_GE(dev::attention_warp_smem_bytes(p.dims), size_t(p.dims.group_size * p.dims.head_dim) * 4) << preset;
    const dev::StreamPlan a = dev::plan_weight_stream(p.dims, both, kHopperMaxSmem, kStaticSmem, -1, 0);
    const dev::StreamPlan b = dev::plan_weight_stream(p.dims, tiles_only, kHopperMaxSmem, kStaticSmem, -1, 0);
    EXPECT_EQ(a.slots, b.slots) << preset << ": the activation area is " << both << " bytes, " << tiles_only
                                << " with the tile path's attention alone";
  }
}

TEST(KernelPlan, AttentionWarpPathTakesTensorCoresForHeadsOf32Or64) {
  // The warp path's tensor-core form (device/tensor_core.h) holds a kv group's heads as the 8 rows of an
  // MMA and head_dim in whole 32-column loads: Llama-3.2-1B and Qwen2.5-0.5B run it, the head_dim-128
  // models keep the FMA form.
  const std::pair<const char*, bool> cases[] = {{"llama-3.2-1b", true}, {"qwen2.5-0.5b", true}, {"llama-3.2-3b", false},
                                                {"llama-3.1-8b", false}, {"qwen3-1.7b", false}};
  for (const auto& [preset, mma] : cases) {
    const Planned p = plan_for(preset);
    EXPECT_EQ(dev::attention_warp_mma(p.dims), mma) << preset;
    // Its bf16 q rows lie over the FMA form's softmax state, which they fit, so they cost the activation
    // area nothing: a larger area takes shared memory from the L1 carve-out (docs/log.md, 2026-11-24, the warp path on tensor cores).
    const int G = p.dims.group_size, hd = p.dims.head_dim;
    if (mma) {
      EXPECT_LE(8 * attention_row_stride(hd), G * dev::attention_warp_tile_positions(hd) + 3 * dev::kMaxWarps * G) << preset;
    }
  }
  dev::ModelDims d{};
  d.group_size = 9, d.head_dim = 64;  // more heads a group than the MMA's rows
  EXPECT_FALSE(dev::attention_warp_mma(d));
  d.group_size = 8, d.head_dim = 16;
  EXPECT_FALSE(dev::attention_warp_mma(d));
  d.head_dim = 32;
  EXPECT_TRUE(dev::attention_warp_mma(d));
}

TEST(KernelPlan, LongContextKernelsFromTheMeasuredLengths) {
  // Where launches switch to the warp path (docs/log.md, 2026-11-24: warp-owned chunks; the warp path on tensor cores), by how far their
  // sequence reaches: with tensor cores, once a split holds more than 192 positions (Llama-3.2-1B: 16
  // splits a kv head, so past 3072), and at every length for Qwen2.5-0.5B (7 heads a group: the tile
  // path's 128-position tile takes its block two rounds); without, past 512 positions a split.
  const Planned llama = plan_for("llama-3.2-1b"), qwen = plan_for("qwen2.5-0.5b"), big = plan_for("llama-3.1-8b");
  ASSERT_EQ(llama.dims.attention_splits, 16);
  EXPECT_FALSE(dev::attention_long_context(llama.dims, 3072, true));
  EXPECT_TRUE(dev::attention_long_context(llama.dims, 3073, true));
  EXPECT_FALSE(dev::attention_long_context(llama.dims, 8192, false));
  EXPECT_TRUE(dev::attention_long_context(llama.dims, 8193, false));
  EXPECT_TRUE(dev::attention_long_context(qwen.dims, 1, true));
  EXPECT_FALSE(dev::attention_long_context(qwen.dims, 4096, false));
  // head_dim 128 has no tensor-core form: the FMA form's threshold either way.
  const int past = 4 * kPositionsPerSplit * big.dims.attention_splits;
  for (const bool tc : {false, true}) {
    EXPECT_FALSE(dev::attention_long_context(big.dims, past, tc));
    EXPECT_TRUE(dev::attention_long_context(big.dims, past + 1, tc));
  }
}

TEST(KernelPlan, WeightStreamRequestsAndLimits) {
  const Planned p = plan_for("llama-3.2-1b");
  const size_t act = dev::activation_smem_bytes(p.schedule, p.dims);
  // 0 slots asked: no stream, shared memory is the activation area alone.
  dev::StreamPlan s = dev::plan_weight_stream(p.dims, act, kHopperMaxSmem, kStaticSmem, 0, 0);
  EXPECT_EQ(s.slots, 0u);
  EXPECT_EQ(s.smem_bytes, act);
  // A cap on the slots is honoured.
  s = dev::plan_weight_stream(p.dims, act, kHopperMaxSmem, kStaticSmem, 2, 0);
  EXPECT_EQ(s.slots, 2u);
  // An explicit slot size smaller than one row is raised to a row (16 KiB: one down row).
  s = dev::plan_weight_stream(p.dims, act, kHopperMaxSmem, kStaticSmem, -1, 1);
  EXPECT_EQ(s.slot_bytes, 16u * 1024);
  EXPECT_GT(s.slots, 3u);  // more of the smaller slots fit than of the default 48 KiB ones
  EXPECT_LE(s.slots, uint32_t(dev::kMaxStreamSlots));
  EXPECT_LE(s.smem_bytes + kStaticSmem, kHopperMaxSmem);
  // Room for one slot only overlaps nothing: no stream.
  s = dev::plan_weight_stream(p.dims, act, act + kStaticSmem + 128 + 60 * 1024, kStaticSmem, -1, 0);
  EXPECT_EQ(s.slots, 0u);
}

TEST(KernelPlan, DeviceMemoryByPart) {
  const Planned p = plan_for("llama-3.2-1b");
  const dev::MemoryNeed need = dev::device_memory_need(p.cfg, p.layout, p.schedule, 4096, 0);
  EXPECT_EQ(need.weights, p.layout.total_bytes);
  // K and V, bf16: 16 layers x 8 kv heads x 4096 positions x 64 x 2 bytes each.
  EXPECT_EQ(need.kv_cache, size_t(2) * 16 * 8 * 4096 * 64 * 2);
  EXPECT_GT(need.other, size_t(4096) * 64 * 4);  // at least the RoPE table
  EXPECT_EQ(need.total(), need.weights + need.kv_cache + need.other);
}

// The chunk steps' buffers for Llama-3.2-1B's shapes in chunks of 1,024 tokens, written out: fp32 residual
// (2,048) and qkv (3,072) rows, 16-bit matrix input (2,048), queries (2,048) and MLP (8,192) rows, the
// chunk-step lists (48-byte instructions and a 4-byte start per workgroup, 132 + 1) and the prompt's tokens.
TEST(KernelPlan, ChunkStepBuffersAndSharedMemory) {
  Planned p = plan_for("llama-3.2-1b");
  EXPECT_EQ(dev::device_memory_need(p.cfg, p.layout, p.schedule, 4096, 0).chunk, size_t(0));
  EXPECT_EQ(dev::chunk_smem_bytes(p.schedule, p.dims), size_t(0));
  p.schedule = build_schedule(p.cfg, ScheduleParams{132, 0, false, 1, 0, 1024});
  const dev::MemoryNeed need = dev::device_memory_need(p.cfg, p.layout, p.schedule, 4096, 0);
  const size_t floats = size_t(1024) * (2048 + 3072), halves = size_t(1024) * (2048 + 2048 + 8192);
  EXPECT_EQ(need.chunk, floats * 4 + halves * 2 + p.schedule.chunk.instrs.size() * 48 + size_t(133) * 4 + size_t(4096) * 4);
  EXPECT_EQ(need.total(), need.weights + need.kv_cache + need.chunk + need.other);
  // The tiles of the matrix ops are the most any chunk op needs here: 193 KiB with the wide (256-column)
  // tiles this shape's qkv and gate_up stages take at 1,024 tokens on 132 workgroups, 129 KiB with narrow
  // ones only; both fit the block's shared memory on Hopper.
  const size_t smem = dev::chunk_smem_bytes(p.schedule, p.dims);
  EXPECT_EQ(smem, size_t(197632));
  EXPECT_LE(smem + kStaticSmem, kHopperMaxSmem);
  ScheduleParams narrow{132, 0, false, 1, 0, 1024};
  narrow.chunk_wide_tiles = false;
  p.schedule = build_schedule(p.cfg, narrow);
  for (const Instr& in : p.schedule.chunk.instrs) ASSERT_LE(in.end - in.begin, uint32_t(kChunkMatrixCols));
  EXPECT_EQ(dev::chunk_smem_bytes(p.schedule, p.dims), size_t(132096));
}

}  // namespace
}  // namespace mk
