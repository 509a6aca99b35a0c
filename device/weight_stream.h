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

// The producer's cursor: instruction `index` (of this workgroup's list) at step `step`, `position`
// instructions after the launch's first (step * list length + place in the list), is the one being
// issued; `chunks_left` of its chunks (`rows_left` rows) remain, the next one read from `src` (per part)
// into slot `slot` (the slot of chunk `issued`, kept to avoid a modulo). `loaded`: the fields after it
// describe that instruction. Thread 0 copies it into registers for one call of the producer.
struct StreamCursor {
  uint32_t step, index, position, loaded;
  uint32_t chunks_left, rows_left, rows_per_chunk, row_bytes;
  uint32_t parts, slot;
  const uint8_t* src[2];
};

struct StreamState {
  uint64_t full[kMaxStreamSlots];  // mbarrier per slot: the chunk's bytes have landed
  int pending[kMaxStreamSlots];    // rows of the slot's chunk not yet consumed
  volatile uint32_t issued;        // chunks issued so far in this launch
  uint32_t base;                   // sequence number of the current instruction's first chunk
  StreamCursor cursor;             // thread 0 only
};

// Where a chunk is: its sequence number, its slot, and the parity of its slot's mbarrier phase.
struct StreamPlace {
  uint32_t seq, slot, phase;
};

// What one GEMV instruction streams: rows [begin, end) of `parts` matrices (gate_up: gate and up), each
// row `row_bytes` long; a chunk holds `rows_per_chunk` rows of every part, part after part.
struct GemvShape {
  uint64_t matrix[2];
  int parts, cols, row_bytes, rows_per_chunk;
  uint32_t begin, end;

  __device__ uint32_t rows() const { return end - begin; }
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
  // slower through the binary's layout (docs/log.md, 2026-11-26, the stream's shapes from a table).
  s->rows_per_chunk = p.stream_slots ? int(p.stream_slot_bytes) / (g.parts * s->row_bytes) : 1;
  s->begin = in.begin;
  s->end = in.end;
  return true;
}

// Chunks instruction `record` streams at `step` (none when its op is inactive then).
__device__ inline uint32_t record_chunks(const KernelParams& p, const StreamRecord& record, uint32_t step) {
  if (!record.every_step && !op_active(record.op, int(step), p.ingest)) return 0;
  return record.chunks;
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

  __device__ uint8_t* slot_data(uint32_t slot) const { return ring + size_t(slot) * p.stream_slot_bytes; }
  // Chunk `seq`'s place: one division, then `advance` from chunk to chunk.
  __device__ StreamPlace place(uint32_t seq) const { return {seq, seq % p.stream_slots, (seq / p.stream_slots) & 1u}; }
  __device__ void advance(StreamPlace& at) const {
    ++at.seq;
    if (++at.slot == p.stream_slots) at.slot = 0, at.phase ^= 1u;
  }

  // Thread 0, once per launch, before the first __syncthreads.
  __device__ void init() {
    st.issued = 0;
    st.base = 0;
    st.cursor = StreamCursor{};
    st.cursor.index = list_begin;
#if MK_HAS_BULK_COPY
    for (uint32_t s = 0; s < p.stream_slots; ++s) {
      mbarrier_init(&st.full[s], 1);
      st.pending[s] = 0;
    }
    fence_mbarrier_init();
#endif
  }

  // Producer: puts the cursor on the next instruction with chunks left (the current one first, if not yet
  // loaded), from its record; false when the launch's steps are exhausted.
  __device__ bool settle(StreamCursor& c) const {
    while (c.chunks_left == 0) {
      if (c.loaded) {
        ++c.position;
        if (++c.index >= list_end) c.index = list_begin, ++c.step;
      }
      if (c.step >= uint32_t(p.max_steps)) return false;
      c.loaded = 1;
      const StreamRecord& r = p.stream_records[c.index];
      c.chunks_left = record_chunks(p, r, c.step);
      if (c.chunks_left == 0) continue;
      c.rows_left = r.rows;
      c.rows_per_chunk = r.rows_per_chunk;
      c.row_bytes = r.row_bytes;
      c.parts = r.parts;
      c.src[0] = p.weights + r.src[0];
      c.src[1] = p.weights + r.src[1];
    }
    return true;
  }

  // Producer: issues up to `max_chunks` chunks in sequence order, each of an instruction at most
  // `lookahead` instructions after position `at`. A chunk whose slot is still being read stops it, or
  // (kBlocking) is waited for. Returns the chunks issued. Consumers see a chunk once `issued` counts it:
  // while they run (kBlocking: the GEMV's own chunks) each chunk is published as it goes, else once at
  // the end. Between instructions the cursor is copied into registers for the call; inside a GEMV's body
  // (kBlocking) it stays in shared memory, where registers are scarce (the copy made the long-context
  // kernels spill).
  template <bool kBlocking>
  __device__ uint32_t issue(uint32_t at, uint32_t lookahead, uint32_t max_chunks) {
#if MK_HAS_BULK_COPY
    StreamCursor copy;
    if constexpr (!kBlocking) copy = st.cursor;
    StreamCursor& c = kBlocking ? st.cursor : copy;
    const uint32_t first = st.issued;
    uint32_t seq = first;
    volatile int* pending = st.pending;
    while (seq - first < max_chunks && settle(c) && c.position <= at + lookahead) {
      if (seq >= p.stream_slots && pending[c.slot] != 0) {
        if constexpr (!kBlocking) break;
        else
          while (pending[c.slot] != 0) __nanosleep(20);
      }
      const uint32_t rows = min(c.rows_per_chunk, c.rows_left);
      const uint32_t part_bytes = rows * c.row_bytes;
      pending[c.slot] = int(rows);
      mbarrier_expect_bytes(&st.full[c.slot], part_bytes * c.parts);
      uint8_t* dst = slot_data(c.slot);
      bulk_copy(dst, c.src[0], part_bytes, &st.full[c.slot]);
      c.src[0] += part_bytes;
      if (c.parts > 1) {
        bulk_copy(dst + part_bytes, c.src[1], part_bytes, &st.full[c.slot]);
        c.src[1] += part_bytes;
      }
      c.rows_left -= rows;
      --c.chunks_left;
      if (++c.slot == p.stream_slots) c.slot = 0;
      ++seq;
      if constexpr (kBlocking) {
        __threadfence_block();
        st.issued = seq;
      }
    }
    if constexpr (!kBlocking) {
      if (seq != first) {
        __threadfence_block();
        st.issued = seq;
      }
      st.cursor = copy;
    }
    return seq - first;
#else
    (void)at, (void)lookahead, (void)max_chunks;
    return 0;
#endif
  }

  // Position of instruction `index` of this workgroup's list at `step` (StreamCursor::position).
  __device__ uint32_t position(uint32_t step, uint32_t index) const { return step * (list_end - list_begin) + (index - list_begin); }

  // Producer, before the instruction at (step, index) waits for its inputs: issues chunks of it (and of
  // up to `lookahead` instructions after it) into free slots, without waiting, until `cap` chunks are in
  // flight. All earlier instructions are done, so what is in flight is `issued - base`.
  __device__ void top_up(uint32_t step, uint32_t index, uint32_t lookahead, uint32_t cap) {
    const uint32_t in_flight = st.issued - st.base;
    if (in_flight < cap) issue<false>(position(step, index), lookahead, cap - in_flight);
  }

  // Producer, during a GEMV instruction: issues the rest of its chunks, waiting for free slots.
  __device__ void produce(uint32_t step, uint32_t index) { issue<true>(position(step, index), 0, ~0u); }

  // Thread 0, once instruction `index` has run: the next instruction's chunks follow its chunks.
  __device__ void finish(uint32_t step, uint32_t index) { st.base += record_chunks(p, p.stream_records[index], step); }

  // Consumer warp: waits until chunk `at` is in its slot.
  __device__ void wait_chunk(const StreamPlace& at) const {
#if MK_HAS_BULK_COPY
    if (int(threadIdx.x) % MK_WARP_SIZE == 0)
      while (st.issued <= at.seq) __nanosleep(20);
    __syncwarp();
    mbarrier_wait_parity(&st.full[at.slot], at.phase);
#else
    (void)at;
#endif
  }

  // Consumer warp, lane 0, after its last read of the row (its value depends on every lane's reads).
  __device__ void release_row(const StreamPlace& at) const { atomicSub(&st.pending[at.slot], 1); }

  // Thread 0, before the workgroup exits: no copy may still be landing in shared memory.
  __device__ void drain() {
#if MK_HAS_BULK_COPY
    const uint32_t n = st.issued;
    for (StreamPlace at = place(n > p.stream_slots ? n - p.stream_slots : 0); at.seq < n; advance(at))
      mbarrier_wait_parity(&st.full[at.slot], at.phase);
#endif
  }
};

}  // namespace mk::dev
