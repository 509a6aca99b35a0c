// The weight stream: each workgroup's GEMV weights flow from HBM into a ring of shared-memory slots by
// bulk asynchronous copies (Hopper TMA, cp.async.bulk), issued by one thread, tracked by one mbarrier per
// slot. Why: weights do not depend on activations, so an instruction's first chunks can be in flight
// before its inputs are ready, and the bytes in flight per SM are bounded by shared memory (~180 KiB)
// rather than by registers (~64 KiB at 512 threads): the two costs the profile put first (docs/log.md).
//
// Order and ownership. The chunks of all GEMV instructions of a workgroup form one sequence (instruction
// by instruction, step by step); chunk `seq` lives in slot seq % slots. Thread 0 is the producer: it
// issues chunks in sequence order, never more than `slots` ahead of the last fully consumed one.
// Consumer warps read a chunk after (1) `issued` says it was issued and (2) its slot's mbarrier completed
// the phase of that use. Each consumed row decrements the slot's `pending` count; the producer refills a
// slot only at 0. A consumer reads the count of issued chunks first because an mbarrier phase parity
// alone cannot tell "this use has landed" from "the use two phases back has landed".
//
// NVIDIA sm_90 only. On AMD (no bulk copies to LDS here) and when the host chooses 0 slots, GEMVs use
// the register path of the kernel instead.
#pragma once

#include <cstdint>

#include "device/gpu.h"
#include "device/kernel_params.h"
#include "device/ops/ops.h"

namespace mk::dev {

#if defined(MK_PLATFORM_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define MK_HAS_BULK_COPY 1
#else
#define MK_HAS_BULK_COPY 0
#endif

struct StreamState {
  uint64_t full[kMaxStreamSlots];  // mbarrier per slot: the chunk's bytes have landed
  int pending[kMaxStreamSlots];    // rows of the slot's chunk not yet consumed
  volatile uint32_t issued;        // chunks issued so far in this launch
  uint32_t base;                   // sequence number of the current instruction's first chunk
  // Producer cursor (thread 0 only): instruction `index` (of this workgroup's list) at step `step` is
  // the one being issued; `chunks_left` of its chunks (`rows_left` rows) remain, the next one read from
  // `next_src` (per part). `loaded`: the fields below `index` describe that instruction.
  uint32_t step, index, loaded, chunks_left, rows_left;
  const uint8_t* next_src[2];
  uint32_t rows_per_chunk, row_bytes, parts;
};

// What one GEMV instruction streams: rows [begin, end) of `parts` matrices (gate_up: gate and up), each
// row `row_bytes` long; a chunk holds `rows_per_chunk` rows of every part, part after part.
struct GemvShape {
  uint64_t matrix[2];
  int parts, cols, row_bytes, rows_per_chunk;
  uint32_t begin, end;

  __device__ uint32_t rows() const { return end - begin; }
  __device__ uint32_t chunks() const { return (rows() + uint32_t(rows_per_chunk) - 1) / uint32_t(rows_per_chunk); }
  __device__ uint32_t rows_in_chunk(uint32_t c) const { return min(uint32_t(rows_per_chunk), rows() - c * uint32_t(rows_per_chunk)); }
};

// The GEMV shape of an instruction (its op's spec: device/ops/); false for instructions that read no
// weight matrix.
__device__ inline bool gemv_shape(const KernelParams& p, const Instr& in, GemvShape* s) {
  GemvMatrices g;
  switch (in.op) {
#define MK_OP_SHAPE(E, name)                                      \
  case Op::E:                                                     \
    if constexpr (!E##Op::kGemv) return false;                    \
    else g = E##Op::gemv(p.dims, p.layers[in.layer], p.lm_head); \
    break;
    MK_FOR_EACH_STEP_OP(MK_OP_SHAPE)
#undef MK_OP_SHAPE
    default: return false;
  }
  s->matrix[0] = g.matrix[0];
  s->matrix[1] = g.matrix[1];
  s->parts = g.parts;
  s->cols = g.cols;
  s->row_bytes = matrix_row_bytes(g.format, g.cols);
  // The same rule as plan_op_streams' (device/kernel_plan.cpp); one shared helper measured 0.2-0.4%
  // slower through the binary's layout (docs/log.md, eighteenth session).
  s->rows_per_chunk = p.stream_slots ? int(p.stream_slot_bytes) / (g.parts * s->row_bytes) : 1;
  s->begin = in.begin;
  s->end = in.end;
  return true;
}

// The same shape from the host's table (KernelParams::op_streams), for the stream's bookkeeping on thread
// 0, where the op is not known at compile time: a table entry instead of a switch over every op. (Inside
// an op's body, gemv_shape's switch folds to that op's case, and the table's loads cost registers.)
__device__ inline bool stream_shape(const KernelParams& p, const Instr& in, GemvShape* s) {
  if (unsigned(in.op) >= unsigned(kNumStepOps)) return false;
  const OpStream& o = p.op_streams[unsigned(in.op)];
  if (o.parts == 0) return false;
  const uint8_t* layer = reinterpret_cast<const uint8_t*>(p.layers + in.layer);
  for (uint32_t k = 0; k < 2; ++k)
    s->matrix[k] = k >= o.parts ? 0 : o.matrix_field[k] == kHeadMatrix ? p.lm_head : *reinterpret_cast<const uint64_t*>(layer + o.matrix_field[k]);
  s->parts = int(o.parts);
  s->cols = int(o.cols);
  s->row_bytes = int(o.row_bytes);
  s->rows_per_chunk = int(o.rows_per_chunk);
  s->begin = in.begin;
  s->end = in.end;
  return true;
}

// Chunks an instruction streams at `step`, with its shape in `s` (none when its op is inactive then).
__device__ inline uint32_t stream_chunks(const KernelParams& p, const Instr& in, uint32_t step, GemvShape* s) {
  if (!stream_shape(p, in, s)) return 0;
  if (!op_active(in, int(step), p.ingest)) return 0;
  return s->chunks();
}
__device__ inline uint32_t stream_chunks(const KernelParams& p, const Instr& in, uint32_t step) {
  GemvShape s;
  return stream_chunks(p, in, step, &s);
}

#if MK_HAS_BULK_COPY
__device__ __forceinline__ uint32_t smem_address(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(bar)), "r"(count) : "memory");
}

// Makes the initialised mbarriers visible to the async (TMA) proxy.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void mbarrier_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(bar)), "r"(bytes) : "memory");
}

// Bulk copy global -> shared; completes `bytes` of the mbarrier's transaction count when it lands.
// Weights are read once per token: evict-first keeps the activations and counters in L2.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "{ .reg .b64 policy;\n"
      "createpolicy.fractional.L2::evict_first.b64 policy, 1.0;\n"
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], policy; }" ::"r"(
          smem_address(dst)),
      "l"(src), "r"(bytes), "r"(smem_address(bar))
      : "memory");
}

__device__ __forceinline__ bool mbarrier_test_parity(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{ .reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p; }"
      : "=r"(done)
      : "r"(smem_address(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

__device__ __forceinline__ void mbarrier_wait_parity(uint64_t* bar, uint32_t parity) {
  while (!mbarrier_test_parity(bar, parity)) {
  }
}
#endif

// The producer and the consumers' view of the ring. Lives in registers; the state is in shared memory.
struct WeightStream {
  const KernelParams& p;
  StreamState& st;
  uint8_t* ring;  // slots * slot_bytes of dynamic shared memory
  uint32_t list_begin, list_end;

  __device__ uint32_t slot_of(uint32_t seq) const { return seq % p.stream_slots; }
  __device__ uint8_t* slot_data(uint32_t seq) const { return ring + size_t(slot_of(seq)) * p.stream_slot_bytes; }

  // Thread 0, once per launch, before the first __syncthreads.
  __device__ void init() {
    st.issued = 0;
    st.base = 0;
    st.step = 0;
    st.index = list_begin;
    st.loaded = 0;
    st.chunks_left = 0;
#if MK_HAS_BULK_COPY
    for (uint32_t s = 0; s < p.stream_slots; ++s) {
      mbarrier_init(&st.full[s], 1);
      st.pending[s] = 0;
    }
    fence_mbarrier_init();
#endif
  }

  // Producer: puts the cursor on the next instruction with chunks left (the current one first, if not yet
  // loaded) and caches its shape; false when the launch's steps are exhausted.
  __device__ bool settle_cursor() {
    while (st.chunks_left == 0) {
      if (st.loaded) {
        if (++st.index >= list_end) st.index = list_begin, ++st.step;
      }
      if (st.step >= uint32_t(p.max_steps)) return false;
      st.loaded = 1;
      GemvShape s;
      st.chunks_left = stream_chunks(p, p.instrs[st.index], st.step, &s);
      if (st.chunks_left == 0) continue;
      st.rows_left = s.rows();
      st.rows_per_chunk = uint32_t(s.rows_per_chunk);
      st.row_bytes = uint32_t(s.row_bytes);
      st.parts = uint32_t(s.parts);
      for (int part = 0; part < s.parts; ++part) st.next_src[part] = p.weights + s.matrix[part] + size_t(s.begin) * size_t(s.row_bytes);
    }
    return true;
  }

  // Producer: issues the next chunk if it belongs to an instruction at most `lookahead` instructions after
  // (step, index) and (unless `blocking`) its slot is free. True if a chunk was issued.
  __device__ bool issue_one(uint32_t step, uint32_t index, uint32_t lookahead, bool blocking) {
#if MK_HAS_BULK_COPY
    if (!settle_cursor()) return false;
    const uint32_t len = list_end - list_begin;
    const uint64_t at = uint64_t(step) * len + (index - list_begin);
    const uint64_t cursor = uint64_t(st.step) * len + (st.index - list_begin);
    if (cursor > at + lookahead) return false;
    const uint32_t seq = st.issued, slot = slot_of(seq);
    volatile int* pending = st.pending;
    if (seq >= p.stream_slots && pending[slot] != 0) {
      if (!blocking) return false;
      while (pending[slot] != 0) __nanosleep(20);
    }
    const uint32_t rows = min(st.rows_per_chunk, st.rows_left);
    const uint32_t part_bytes = rows * st.row_bytes;
    pending[slot] = int(rows);
    __threadfence_block();
    mbarrier_expect_bytes(&st.full[slot], part_bytes * st.parts);
    uint8_t* dst = slot_data(seq);
    for (uint32_t part = 0; part < st.parts; ++part) {
      bulk_copy(dst + size_t(part) * part_bytes, st.next_src[part], part_bytes, &st.full[slot]);
      st.next_src[part] += part_bytes;
    }
    st.rows_left -= rows;
    --st.chunks_left;
    __threadfence_block();
    st.issued = seq + 1;
    return true;
#else
    (void)step, (void)index, (void)lookahead, (void)blocking;
    return false;
#endif
  }

  // Producer, before the instruction at (step, index) waits for its inputs: issues chunks of it (and of
  // up to `lookahead` instructions after it) into free slots, without waiting, until `cap` chunks are in
  // flight. All earlier instructions are done, so what is in flight is `issued - base`.
  __device__ void top_up(uint32_t step, uint32_t index, uint32_t lookahead, uint32_t cap) {
    while (st.issued - st.base < cap && issue_one(step, index, lookahead, false)) {
    }
  }

  // Producer, during a GEMV instruction: issues the rest of its chunks, waiting for free slots.
  __device__ void produce(uint32_t step, uint32_t index) {
    while (issue_one(step, index, 0, true)) {
    }
  }

  // Consumer warp: waits until chunk `seq` is in its slot.
  __device__ void wait_chunk(uint32_t seq) const {
#if MK_HAS_BULK_COPY
    if (int(threadIdx.x) % MK_WARP_SIZE == 0)
      while (st.issued <= seq) __nanosleep(20);
    __syncwarp();
    mbarrier_wait_parity(&st.full[slot_of(seq)], (seq / p.stream_slots) & 1u);
#else
    (void)seq;
#endif
  }

  // Consumer warp, lane 0, after its last read of the row (its value depends on every lane's reads).
  __device__ void release_row(uint32_t seq) const { atomicSub(&st.pending[slot_of(seq)], 1); }

  // Thread 0, before the workgroup exits: no copy may still be landing in shared memory.
  __device__ void drain() {
#if MK_HAS_BULK_COPY
    const uint32_t n = st.issued, slots = p.stream_slots;
    for (uint32_t seq = n > slots ? n - slots : 0; seq < n; ++seq) mbarrier_wait_parity(&st.full[slot_of(seq)], (seq / slots) & 1u);
#endif
  }
};

}  // namespace mk::dev
