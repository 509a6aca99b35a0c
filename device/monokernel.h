// Entry points of the persistent kernel, for its launcher (device/gpu_backend.cu).
#pragma once

#include "runtime/matrix_format.h"

namespace mk::dev {

// The kernel instantiation, as a launchable function pointer, for the weight matrices' format,
// with GEMV weights through the weight stream (stream; NVIDIA only, otherwise ignored) or registers, and
// with or without the --profile / --trace timers, for a schedule with per-domain counters (grouped) or
// flat ones only, and with attention's tile path or its warp path for long contexts (long_context;
// attention_long_context in kernel_params.h says when), for a schedule whose post-norms are folded into
// the stages after them (fold: Schedule::post_norms_folded; such kernels form x' in their GEMV prologues,
// which the others do not carry). Null for fold with grouped (not instantiated).
const void* monokernel_entry(MatrixFormat format, bool stream, bool profile, bool grouped, bool long_context, bool fold);

// The chunk steps' kernel (prefill; launched just before the token steps' kernel, with the same grid
// and shared memory) for the layers' format, with or without the profiling timers; null for the formats
// that have no chunk steps (runtime/schedule.h's plan_chunk_steps).
const void* chunk_kernel_entry(MatrixFormat format, bool profile);

}  // namespace mk::dev
