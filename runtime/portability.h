// Qualifiers for code shared by the CPU (reference, emulator) and the GPU kernel.
// This header includes no GPU header: it only adds __host__ __device__ when a GPU compiler reads it.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MK_HD __host__ __device__
#define MK_HD_INLINE __host__ __device__ inline __attribute__((always_inline))
#else
#define MK_HD
#define MK_HD_INLINE inline
#endif
