// The persistent decode kernel: one workgroup per SM/CU interprets its instruction list from the schedule,
// token after token, until Sample stops the launch. Each instruction waits (acquire) on its counters,
// runs (its op: device/ops/), and signals (release) its counter. Same semantics as host/emulator/, whose
// ops (host/emulator/ops/) are the readable model of what each instruction computes.
#include "device/counter_wait.h"
#include "device/device_atomics.h"
#include "device/gpu.h"
#include "device/hw_unit.h"
#include "device/kernel_params.h"
#include "device/launch_abort.h"
#include "device/machine.h"
#include "device/monokernel.h"
#include "device/platform.h"
#include "device/weight_stream.h"
#include "runtime/decode_backend.h"

#include <type_traits>

namespace mk::dev {
namespace {

// Marks the instruction a workgroup gave up waiting for (Instr::num_waits is at most 2): every thread
// reads the instruction after the barrier that follows the waits, so the mark costs no extra load.
constexpr uint8_t kAbandoned = 0xff;

// The thread that signals each finished instruction and reports the workgroup's progress: the first of
// the second warp, so that thread 0, the weight stream's producer, is free for the next instruction.
constexpr unsigned kSignaller = MK_WARP_SIZE;

// Warp 0 waits until counter c reaches `target`. A flat counter: lane 0 polls it. A per-domain counter:
// lanes 0..D-1 poll one stripe each (an acquire load per stripe, so the warp synchronises with every
// producer whose add it counted) until the stripes sum to the target (runtime/schedule.h says why the
// sum is enough). (One thread reading the stripes in turn with relaxed loads and one fence was slower
// still: +4.9% against flat counters on an H200, where a lane per stripe is +1.2%.)
// Returns false, on every lane, if the warp gave up (a hung launch aborted by the host).
__device__ bool wait_counter(const KernelParams& p, uint32_t c, uint32_t target) {
  if (c < p.first_striped_counter) {
    const bool gave_up = lane_id() == 0 && !spin_until(p, p.counters + counter_word(c), target);
    return ballot(gave_up) == 0;
  }
  const uint32_t lane = uint32_t(lane_id());
  const unsigned* stripe = p.counters + counter_word(counter_line(c, lane, p.first_striped_counter, p.sync_domains));
  AbortableWait wait{p.abort, p.progress};
  for (;;) {
    unsigned seen = lane < p.sync_domains ? load_acquire(stripe) : 0u;
#pragma unroll
    for (int o = MK_WARP_SIZE / 2; o > 0; o >>= 1) seen += __float_as_uint(shfl_xor(__uint_as_float(seen), o));
    if (seen >= target) return true;
    spin_pause();
    // Lane 0 decides for the warp: the lanes' clock and abort-word reads could disagree.
    if (ballot(lane == 0 && wait.give_up()) != 0) return false;
  }
}

}  // namespace

// kGrouped: the schedule has per-domain counters (issue 4). Their own kernels, because supporting them in
// the flat kernels (a stripe per workgroup, warp 0 in the waits) cost 0.6% with flat counters on an H200.
template <MatrixFormat kFormat, bool kStream, bool kProfile, bool kGrouped, bool kLongContext, bool kFold>
__global__ void __launch_bounds__(kThreads, 1) monokernel(KernelParams p) {
  // Aligned to 1 KiB: the weight stream's slots and the activation planes sit at fixed offsets in it, and
  // where the static variables above left it (544 bytes in) the kernel ran 1.2-1.6% slower on an H200
  // (docs/log.md, 2026-11-21, where one step goes: the alignment that shifted with unrelated changes explains most of the
  // "code layout" effect measured before it).
  extern __shared__ __align__(1024) float4 dynamic_smem[];
  __shared__ float red[2 * kWarps];
  // Raw storage: HIP rejects __shared__ objects with constructors (Instr has member initialisers).
  __shared__ uint4 current_storage[(sizeof(Instr) + 15) / 16];
  Instr& current = *reinterpret_cast<Instr*>(current_storage);
  __shared__ uint32_t stopped;  // the step gate's decision: the launch ended (or was aborted)
  __shared__ uint32_t my_stripe;  // the stripe this workgroup adds to in per-domain counters
  __shared__ StreamState stream_state;
  // Profiling, thread 0: when the running instruction began waiting and when its inputs were ready (its
  // prologue's end: profile_prologue_end, device/machine.h). Kept in
  // shared memory rather than registers, which the instructions' bodies need more (512 threads leave 128 each).
  __shared__ unsigned long long wait_began, inputs_ready;
  const uint32_t wg = blockIdx.x;
  const uint32_t begin = p.wg_begin[wg], end = p.wg_begin[wg + 1];
  WeightStream ws{p, stream_state, reinterpret_cast<uint8_t*>(dynamic_smem) + p.stream_ring_offset, begin, end};
  if (threadIdx.x == 0) {
    ws.init();
    const unsigned unit = hw_unit_id();
    if (kProfile) p.workgroup_unit[wg] = unit;
    if constexpr (kGrouped) {
      const int domain = unit < p.unit_domain_len ? p.unit_domain[unit] : -1;
      my_stripe = domain >= 0 ? uint32_t(domain) : fallback_sync_domain(wg, p.sync_domains);
    }
  }
  __syncthreads();

  for (uint32_t step = 0; step < uint32_t(p.max_steps); ++step) {
    if (step > 0) {  // step gate: the previous step's Sample has run; did it end the launch?
      if (threadIdx.x == 0)
        stopped = spin_until(p, p.counters + counter_word(p.sample_counter), step) ? load_fresh(p.stop_flag) : 1u;
      __syncthreads();
      const bool stop = stopped != 0;
      __syncthreads();
      if (stop) break;
      if (threadIdx.x == kSignaller) p.progress[2 * wg] = step, p.progress[2 * wg + 1] = 0;  // past the gate
    }
    Machine<kFormat, kStream, kProfile, kLongContext, kFold> m{p, reinterpret_cast<float*>(dynamic_smem), red, ws, step, 0};
    bool abandoned = false;
    for (uint32_t i = begin; i < end; ++i) {
      if (threadIdx.x == 0 && kProfile) wait_began = global_timer_ns(), profile_prologue_end = 0;
      m.prestage(p.instrs[i]);  // all threads: loads that do not depend on this step's inputs
      if (threadIdx.x == 0) {
        current = p.instrs[i];
        // Weights do not depend on activations: start streaming them before waiting for the inputs.
        if constexpr (kStream) ws.top_up(step, i, p.stream_lookahead, p.stream_early);
        if constexpr (!kGrouped) {
          bool ready = true;
          for (int w = 0; ready && w < current.num_waits; ++w)
            ready = spin_until(p, p.counters + counter_word(current.waits[w].counter), wait_target(current.waits[w], step));
          if (!ready) current.num_waits = kAbandoned;
        }
      }
      if constexpr (kGrouped)
        if (warp_id() == 0) {
          sync_warp();
          // ready is the same on every lane (wait_counter), and a lane reads num_waits only while it is
          // true, so no lane reads it once lane 0 may mark it.
          bool ready = true;
          for (int w = 0; ready && w < current.num_waits; ++w)
            ready = wait_counter(p, current.waits[w].counter, wait_target(current.waits[w], step));
          if (!ready && lane_id() == 0) current.num_waits = kAbandoned;
        }
      if (threadIdx.x == 0 && kProfile) inputs_ready = global_timer_ns();
      __syncthreads();
      const Instr in = current;
      if (in.num_waits == kAbandoned) {  // a hung launch, aborted by the host: leave
        wait_async_copies();  // the prestage's copies land before the workgroup's shared memory is gone
        abandoned = true;
        break;
      }
      m.index = i;
      m.execute(in);
      release_block_writes();
      // The signal goes out from another warp than thread 0's, which goes on to the next instruction's
      // early chunks meanwhile: the release waits for the block's writes to reach L2 (~0.6 µs), and a
      // late workgroup's next instruction would wait behind it. The signaller reads what it needs of
      // the finished instruction before the barrier, after which thread 0 may replace it.
      uint32_t signal_line = 0, done_op = 0;
      unsigned long long t0 = 0, t1 = 0, tp = 0;
      if (threadIdx.x == kSignaller) {
        signal_line = kGrouped ? counter_line(current.signal, my_stripe, p.first_striped_counter, p.sync_domains) : current.signal;
        done_op = uint32_t(current.op);
        if (kProfile) t0 = wait_began, t1 = inputs_ready, tp = profile_prologue_end;
      }
      __syncthreads();
      if (threadIdx.x == 0)
        if constexpr (kStream) ws.finish(step, i);
      if (threadIdx.x == kSignaller) {
        const unsigned long long tb = kProfile ? global_timer_ns() : 0;
        // Release: covers the whole block's writes (see release_block_writes).
        add_release(p.counters + counter_word(signal_line), 1u);
        p.progress[2 * wg] = step;
        p.progress[2 * wg + 1] = i - begin + 1;
        if (kProfile) {  // this workgroup's row of the profile, addressed here rather than kept in registers
          unsigned long long* prof = p.profile + size_t(wg) * kNumOps * kProfileFields;
          const unsigned long long t2 = global_timer_ns();
          unsigned long long* f = prof + done_op * kProfileFields;
          f[kProfExec] += t2 - t1;
          f[kProfWait] += t1 - t0;
          f[kProfPrologue] += tp > t1 ? tp - t1 : 0;
          f[kProfSignal] += t2 - tb;
          if (step == uint32_t(p.trace_step)) {
            unsigned long long* tr = p.trace + size_t(i) * 4;
            tr[0] = t0, tr[1] = t1, tr[2] = tp, tr[3] = t2;
          }
        }
      }
    }
    if (abandoned) break;
  }
  if (threadIdx.x == 0)
    if constexpr (kStream) ws.drain();  // chunks issued ahead for steps that did not run
  if (threadIdx.x == kSignaller) p.progress[2 * wg + 1] = 0xffffffffu;
}

const void* monokernel_entry(MatrixFormat format, bool stream, bool profile, bool grouped, bool long_context, bool fold) {
  // Folded post-norms: their kernels are not instantiated with per-domain counters (the engine unfolds a
  // grouped schedule's post-norms), which would make 32 more kernels for an option that is off by default.
  auto pick = [&](auto format_tag, auto stream_tag, auto long_tag) -> const void* {
    constexpr MatrixFormat kF = decltype(format_tag)::value;
    constexpr bool kS = decltype(stream_tag)::value, kL = decltype(long_tag)::value;
    if (fold)
      return profile ? reinterpret_cast<const void*>(&monokernel<kF, kS, true, false, kL, true>)
                     : reinterpret_cast<const void*>(&monokernel<kF, kS, false, false, kL, true>);
    if (grouped)
      return profile ? reinterpret_cast<const void*>(&monokernel<kF, kS, true, true, kL, false>)
                     : reinterpret_cast<const void*>(&monokernel<kF, kS, false, true, kL, false>);
    return profile ? reinterpret_cast<const void*>(&monokernel<kF, kS, true, false, kL, false>)
                   : reinterpret_cast<const void*>(&monokernel<kF, kS, false, false, kL, false>);
  };
  if (fold && grouped) return nullptr;
  auto with_long = [&](auto format_tag, auto stream_tag) -> const void* {
    return long_context ? pick(format_tag, stream_tag, std::true_type{}) : pick(format_tag, stream_tag, std::false_type{});
  };
  auto with_format = [&](auto stream_tag) -> const void* {
    return with_matrix_format(format, [&](auto format_tag) { return with_long(format_tag, stream_tag); });
  };
#if defined(MK_PLATFORM_NVIDIA)
  if (stream) return with_format(std::true_type{});
#else
  (void)stream;  // AMD: no weight stream in this build (device/weight_stream.h)
#endif
  return with_format(std::false_type{});
}

}  // namespace mk::dev
