// The chunk steps' kernel (prefill; runtime/schedule.h's ChunkSchedule): a persistent kernel like the
// token steps' (device/monokernel.cu), interpreting each workgroup's chunk-step list once per chunk, its
// ops in device/ops/chunk_*.h.
#include <type_traits>

#include "device/chunk_machine.h"
#include "device/counter_wait.h"
#include "device/device_atomics.h"
#include "device/gpu.h"
#include "device/kernel_params.h"
#include "device/monokernel.h"
#include "device/ops/ops.h"
#include "device/platform.h"

namespace mk::dev {
namespace {

// One chunk op's body, not inlined: each op gets the registers to itself, with nothing of the chunk loop
// live across it. The matrix ops (ChunkMatrixOp) are inlined instead: ptxas serialises the warpgroup
// products of a called function.
template <class OpT, MatrixFormat F>
__device__ __noinline__ void run_chunk_op_call(ChunkMachine<F> m, Instr in) {
  OpT::run(m, in);
}
template <class OpT, MatrixFormat F>
__device__ __forceinline__ void run_chunk_op(ChunkMachine<F> m, const Instr& in) {
  if constexpr (std::is_base_of_v<ChunkMatrixOp, OpT>) OpT::run(m, in);
  else run_chunk_op_call<OpT, F>(m, in);
}

// Chunk-step instruction `in` (device/ops/chunk_*.h), all threads.
template <MatrixFormat F>
__device__ __forceinline__ void execute_chunk_op(const ChunkMachine<F>& m, const Instr& in) {
  switch (in.op) {
#define MK_CHUNK_OP_RUN(E, name) \
  case Op::E: return run_chunk_op<E##Op, F>(m, in);
    MK_FOR_EACH_CHUNK_OP(MK_CHUNK_OP_RUN)
#undef MK_CHUNK_OP_RUN
    default: return;
  }
}

}  // namespace

// The chunk steps (prefill): the workgroup's chunk-step list once per chunk, each instruction waiting for
// its counters (chunk lines, targets counted in chunks), running and signalling as a token step's do.
// Their own persistent kernel, launched just before the token steps' kernel on the same stream (no
// return to the host between): the kernel boundary is the prefill gate, ordering token step 0 after
// every chunk step's cache write. In the token steps' kernels, the call alone took 4 of their registers
// and made the long-context kernels spill (docs/log.md, 2026-11-26, prefill in chunk steps). A wait that gives up (a
// hung launch aborted by the host) ends the kernel; the token steps' kernel then gives up too.
template <MatrixFormat F, bool kProfile>
__global__ void __launch_bounds__(kThreads, 1) chunk_kernel(const MK_GRID_CONSTANT KernelParams p) {
  extern __shared__ __align__(1024) float4 dynamic_smem[];
  // The loop's state lives in shared memory (thread 0 advances it) and the workgroup's index is read
  // again where it is needed: nothing stays live across the op calls, whose bodies need every register
  // (a value live across a call makes the callee save it).
  __shared__ uint32_t chunk, index, ready;
  __shared__ unsigned long long t_wait, t_ready;
  if (threadIdx.x == 0) chunk = 0, index = p.chunk_wg_begin[blockIdx.x], ready = 1;
  __syncthreads();
  while (chunk < uint32_t(p.chunks)) {
    const uint32_t k = chunk, i = index, wg = blockIdx.x;
    if (i == p.chunk_wg_begin[wg + 1]) {  // the workgroup's list is done for this chunk
      __syncthreads();
      if (threadIdx.x == 0) ++chunk, index = p.chunk_wg_begin[wg];
      __syncthreads();
      continue;
    }
    const Instr& in = p.chunk_instrs[i];
    if (threadIdx.x == 0) {
      if (kProfile) t_wait = global_timer_ns();
      bool ok = true;
      for (int w = 0; ok && w < in.num_waits; ++w)
        ok = spin_until(p, p.counters + counter_word(p.chunk_first_line + in.waits[w].counter), wait_target(in.waits[w], k));
      ready = ok;
      if (kProfile) t_ready = global_timer_ns();
      p.progress[2 * wg] = kProgressChunk | k, p.progress[2 * wg + 1] = i - p.chunk_wg_begin[wg];
    }
    __syncthreads();
    if (!ready) break;
    const int done = int(k) * p.chunk_size;
    execute_chunk_op(ChunkMachine<F>{p, reinterpret_cast<uint8_t*>(dynamic_smem), k, min(p.chunk_size, p.chunk_count - done),
                                     p.chunk_start + done},
                     p.chunk_instrs[i]);
    release_block_writes();
    __syncthreads();
    if (threadIdx.x == 0) {
      const Instr& fin = p.chunk_instrs[index];
      add_release(p.counters + counter_word(p.chunk_first_line + fin.signal), 1u);
      if (kProfile) {
        unsigned long long* f = p.profile + (size_t(blockIdx.x) * kNumOps + size_t(fin.op)) * kProfileFields;
        f[kProfExec] += global_timer_ns() - t_ready;
        f[kProfWait] += t_ready - t_wait;
      }
      ++index;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0)
    p.progress[2 * blockIdx.x] = kProgressChunk | uint32_t(p.chunks), p.progress[2 * blockIdx.x + 1] = kProgressPrefillGate;
}

const void* chunk_kernel_entry(MatrixFormat format, bool profile) {
  return with_matrix_format(format, [profile](auto format_tag) {
    constexpr MatrixFormat kF = decltype(format_tag)::value;
    return profile ? reinterpret_cast<const void*>(&chunk_kernel<kF, true>) : reinterpret_cast<const void*>(&chunk_kernel<kF, false>);
  });
}

}  // namespace mk::dev
