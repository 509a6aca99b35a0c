// The state an instruction runs with, shared by the ops (device/ops/): the kernel parameters, the
// activation area of shared memory, the weight stream, the step; and the GEMV engine every GEMV op calls.
// Device code only.
#pragma once

#include "device/gemv.h"
#include "device/kernel_params.h"
#include "device/ops/ops.h"
#include "device/platform.h"
#include "device/device_atomics.h"
#include "device/weight_stream.h"

namespace mk::dev {

// Profiling, thread 0: when the running instruction's inputs were in place (Machine::mark_prologue_end;
// the kernel resets and reads it). A shared variable of its own, addressed by name: a pointer or value
// in a register, live across every instruction's body, made the long-context profiling kernels spill.
__shared__ unsigned long long profile_prologue_end;

// Format: the layers' weight matrices' format (runtime/matrix_format.h; a quantized one's kernel also
// reads a 16-bit head); Stream: GEMV weights come through the weight stream (else straight into
// registers); Profile: the timers of --profile / --trace are compiled in; LongContext: attention's warp
// path (device/ops/attention.h), for launches that reach long splits (attention_long_context). Each combination is its own
// kernel, so a launch carries no code it never runs: measured 1.0% faster for Llama-3.2-1B and 1.3% for
// 3.1-8B on an H200 than one kernel with run-time switches, both with the aligned shared memory
// (docs/log.md, 2026-11-21, where one step goes). Fold: the schedule folds post-norms into the GEMVs after
// them (Schedule::post_norms_folded): every GEMV behind an RMSNorm then forms x' in its prologue. Its own
// kernels, as a run-time choice of prologue made the other kernels spill.
template <MatrixFormat Format, bool Stream, bool Profile, bool LongContext, bool Fold>
struct Machine {
  static constexpr MatrixFormat kFormat = Format;
  static constexpr bool kStream = Stream, kProfile = Profile, kLongContext = LongContext, kFold = Fold;
  // The kernels of one device: ops that only a tensor-parallel step runs (OpDefaults::kTensorParallelOnly:
  // all_reduce) compile to nothing here, so that the one-device kernels keep their code (a case of its
  // own in the dispatch made Gemma-3-1B's folding kernel 1.3% slower on an H200).
  static constexpr bool kTensorParallel = false;
  const KernelParams& p;
  float* smem;  // dynamic shared memory: the activation area (the weight stream's ring follows it)
  float* red;   // 2 * kWarps floats: the norm's partial sums, then each warp's copy of 1 / rms
  WeightStream& ws;
  uint32_t step;
  uint32_t index;  // of the running instruction in the workgroup's list

  __device__ void mark_prologue_end() {
    if constexpr (kProfile)
      if (threadIdx.x == 0) profile_prologue_end = global_timer_ns();
  }

  // The RMSNorm factor of the running GEMV (norm_input_to_planes), for its emit (lane 0).
  __device__ float inv_rms() const { return red[kWarps + warp_id()]; }
  // The prologue of a GEMV behind an RMSNorm of x (qkv, gate_up, the LM head). Fold kernels: every such
  // instruction folds the post-norm before it (Instr::folds; the step's first is a post-norm of zeros,
  // from embed): x' = x + RMSNorm(projected) from the buffer that holds x, written to the other one by the
  // stage's kWritesResidual block. kReadsAlt: the op's instructions read x_alt (kReadsResidualAlt: qkv and
  // the LM head in a folded step; gate_up reads x), fixed per op, as a run-time choice made the kernels
  // spill.
  template <bool kReadsAlt>
  __device__ void norm_prologue(const Instr& in) {
    if constexpr (kFold) {
      fold_post_norm_to_planes(kReadsAlt ? p.x_alt : p.x, p.projected, folded_post_norm(), p.dims.hidden, p.dims.rms_eps, smem, red,
                               in.flags & kWritesResidual ? (kReadsAlt ? p.x : p.x_alt) : nullptr);
      norm_planes_to_planes(staged_norm(), p.dims.hidden, p.dims.rms_eps, smem, red);
    } else {
      norm_input_to_planes(p.x, staged_norm(), p.dims.hidden, p.dims.rms_eps, smem, red);
    }
  }
  // Before the wait: the norm's weight (at `norm`) into staged_norm(), and in fold kernels the folded
  // post-norm's (at `post`) into folded_post_norm(), in one loop. Each op names the post-norm it folds
  // (the one folded_norm_layer and Instr::folds say): a choice made here from the instruction, or a loop
  // of its own, made the kernels spill.
  __device__ void stage_norm_weights(uint64_t norm, uint64_t post) {
    if constexpr (kFold) stage_two_norm_weights(f32(norm), f32(post), p.dims.hidden, staged_norm(), folded_post_norm());
    else stage_norm_weight(f32(norm), p.dims.hidden, staged_norm());
  }

  // Where a GEMV with a norm keeps its norm weight: right after its activation vector (hidden floats).
  __device__ float* staged_norm() const { return smem + p.dims.hidden; }
  // Where one that folds a post-norm keeps that norm's weight: after its norm area (norm_gemv_floats).
  __device__ float* folded_post_norm() const { return smem + norm_gemv_floats(p.dims); }
  // Where o_proj / down keep the residual rows x[begin, end) they add to (after their activation data).
  __device__ float* residual_rows() const { return smem + gemv_residual_offset(p.dims); }
  // Thread t fetches residual row begin + t with the prologue's other loads (one round trip for all) and
  // stores it after them; rows beyond the block size (tiny grids only) are copied afterwards. An
  // instruction that writes the projected buffer instead (kWritesProjected: post-norm layers) adds its
  // rows to zeros.
  __device__ float fetch_residual(const Instr& in) const {
    return threadIdx.x < in.end - in.begin && !(in.flags & kWritesProjected) ? load_fresh(p.x + in.begin + threadIdx.x) : 0.f;
  }
  __device__ void store_residual(const Instr& in, float fetched) const {
    float* res = residual_rows();
    const uint32_t rows = in.end - in.begin;
    const bool projected = in.flags & kWritesProjected;
    if (threadIdx.x < rows) res[threadIdx.x] = fetched;
    for (uint32_t i = threadIdx.x + kThreads; i < rows; i += kThreads) res[i] = projected ? 0.f : load_fresh(p.x + in.begin + i);
  }
  // Where o_proj / down write their rows: the residual stream, or the projected buffer (above).
  __device__ float* output_rows(const Instr& in) const { return in.flags & kWritesProjected ? p.projected : p.x; }

  __device__ const uint8_t* matrix(uint64_t offset) const { return p.weights + offset; }
  __device__ const float* f32(uint64_t offset) const { return reinterpret_cast<const float*>(p.weights + offset); }

  // One GEMV instruction: `prologue()` (block-wide, ends with __syncthreads) fills the activation vector
  // (planes, at the start of smem); then each row r of [begin, end) is dotted with it and `emit(r, v0,
  // v1)` runs on lane 0 (v1: the up row's value for gate_up, else unused). Weights come through the
  // weight stream when the host gave it slots, else straight into registers. kHead: the matrix is the
  // LM head, which next to quantized layers may be 16-bit (ModelDims::head_format).
  template <bool kHead = false, typename Prologue, typename Emit>
  __device__ void gemv(const Instr& in, Prologue prologue, Emit emit) {
    GemvShape s;
    gemv_shape(p, in, &s);
    prologue();
    mark_prologue_end();
    if constexpr (kHead && matrix_format_quantized(kFormat)) {
      if (p.dims.head_format == MatrixFormat::F16) return gemv_rows<MatrixFormat::F16>(s, emit);
      if (p.dims.head_format == MatrixFormat::BF16) return gemv_rows<MatrixFormat::BF16>(s, emit);
    }
    gemv_rows<kFormat>(s, emit);
  }

  template <MatrixFormat F, typename Emit>
  __device__ void gemv_rows(const GemvShape& s, Emit emit) {
    const float4* x = reinterpret_cast<const float4*>(smem);
    if constexpr (kStream) streamed<F>(s, x, emit);
    else registers<F>(s, x, emit);
  }

  // Warp 0 (lane 0) issues the chunks; the other warps take rows j, j + kWarps - 1, ... of the
  // instruction, each row whole (no cross-warp reduction), reading weights and activations from shared
  // memory.
  template <MatrixFormat F, typename Emit>
  __device__ void streamed(const GemvShape& s, const float4* x, Emit emit) {
    if (warp_id() == 0) {
      if (lane_id() == 0) ws.produce(step, index);
      return;
    }
    using Piece = typename RowFormat<F>::Piece;
    const int n8 = s.cols / 8;
    // The warp's place in the stream, advanced row by row instead of divided out: the chunk of row j,
    // its sequence number, slot and phase, and j's row within it.
    StreamPlace at = ws.place(ws.st.base);
    uint32_t chunk = 0, in_chunk = uint32_t(warp_id() - 1);
    const uint32_t rpc = uint32_t(s.rows_per_chunk);
    for (uint32_t j = in_chunk; j < s.rows(); j += uint32_t(kWarps - 1), in_chunk += uint32_t(kWarps - 1)) {
      for (; in_chunk >= rpc; in_chunk -= rpc) ++chunk, ws.advance(at);
      ws.wait_chunk(at);
      const uint8_t* row0 = ws.slot_data(at.slot) + size_t(in_chunk) * size_t(s.row_bytes);
      const Piece* w0 = reinterpret_cast<const Piece*>(row0);
      float acc0 = 0.f, acc1 = 0.f;
      if (s.parts == 1) {
#pragma unroll 4
        for (int c = lane_id(); c < n8; c += MK_WARP_SIZE) acc0 += piece_dot<F>(w0[c], row0, s.cols, c, x[c], x[n8 + c]);
      } else {
        const uint8_t* row1 = row0 + size_t(s.rows_in_chunk(chunk)) * size_t(s.row_bytes);
        const Piece* w1 = reinterpret_cast<const Piece*>(row1);
#pragma unroll 4
        for (int c = lane_id(); c < n8; c += MK_WARP_SIZE) {
          const float4 lo = x[c], hi = x[n8 + c];
          acc0 += piece_dot<F>(w0[c], row0, s.cols, c, lo, hi);
          acc1 += piece_dot<F>(w1[c], row1, s.cols, c, lo, hi);
        }
      }
      const float v0 = warp_sum(acc0), v1 = s.parts == 1 ? 0.f : warp_sum(acc1);
      if (lane_id() == 0) {
        ws.release_row(at);
        emit(s.begin + j, v0, v1);
      }
    }
  }

  // Every warp loads its rows' weights into registers: two rows at a time (r and r + kWarps; gate_up:
  // the gate and up rows of r), so that twice the loads are in flight. (Issuing the first loads before
  // the prologue would overlap a round trip, but at 512 threads the registers it holds spill.)
  template <MatrixFormat F, typename Emit>
  __device__ void registers(const GemvShape& s, const float4* x, Emit emit) {
    auto row = [&](int part, uint32_t r) { return r < s.end ? matrix(s.matrix[part]) + size_t(r) * size_t(s.row_bytes) : nullptr; };
    const uint32_t step_rows = s.parts == 1 ? 2 * kWarps : kWarps;
    FirstBatch<F> first;
    for (uint32_t r = s.begin + uint32_t(warp_id()); r < s.end; r += step_rows) {
      const uint8_t* a = row(0, r);
      const uint8_t* b = s.parts == 1 ? row(0, r + kWarps) : row(1, r);
      issue_first_batch(a, b, s.cols, first);
      float v0, v1;
      warp_two_row_dot<F>(a, b, s.cols, x, first, v0, v1);
      if (lane_id() == 0) {
        if (s.parts == 2) {
          emit(r, v0, v1);
        } else {
          emit(r, v0, 0.f);
          if (r + kWarps < s.end) emit(r + kWarps, v1, 0.f);
        }
      }
    }
  }
  // Block argmax of the threads' (best, index), ties to the lowest index; thread 0 ends with the result.
  __device__ void block_argmax(float& best, int32_t& index) {
#pragma unroll
    for (int o = MK_WARP_SIZE / 2; o > 0; o >>= 1) {
      const float ob = shfl_xor(best, o);
      const int32_t oi = int32_t(__float_as_int(shfl_xor(__int_as_float(index), o)));
      if (ob > best || (ob == best && oi < index)) best = ob, index = oi;
    }
    __shared__ float warp_best[kWarps];
    __shared__ int32_t warp_index[kWarps];
    if (lane_id() == 0) warp_best[warp_id()] = best, warp_index[warp_id()] = index;
    __syncthreads();
    if (threadIdx.x == 0)
      for (int w = 1; w < kWarps; ++w)
        if (warp_best[w] > best || (warp_best[w] == best && warp_index[w] < index)) best = warp_best[w], index = warp_index[w];
    __syncthreads();
  }

  // Before the instruction waits for its inputs (all threads): its op's loads that do not depend on them.
  // Token steps hold only token-step ops (the chunk steps' run in ChunkMachine: device/chunk_steps.h).
  __device__ void prestage(const Instr& in) {
    switch (in.op) {
#define MK_OP_PRESTAGE(E, name) \
  case Op::E: return E##Op::prestage(*this, in);
      MK_FOR_EACH_STEP_OP(MK_OP_PRESTAGE)
#undef MK_OP_PRESTAGE
      default: return;
    }
  }

  __device__ void execute(const Instr& in) {
    switch (in.op) {
#define MK_OP_RUN(E, name)                                            \
  case Op::E:                                                         \
    if constexpr (kTensorParallel || !E##Op::kTensorParallelOnly) E##Op::run(*this, in); \
    return;
      MK_FOR_EACH_STEP_OP(MK_OP_RUN)
#undef MK_OP_RUN
      default: return;
    }
  }
};

}  // namespace mk::dev
