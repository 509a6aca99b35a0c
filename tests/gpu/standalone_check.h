// What the standalone GPU checks (tests/gpu/*_check.cu, built with nvcc by hand, not CMake) share: the
// NVIDIA platform macro the device headers need, and CHECK, which exits 2 naming a failed CUDA call.
#pragma once

#ifndef MK_PLATFORM_NVIDIA
#define MK_PLATFORM_NVIDIA
#endif

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                                      \
  do {                                                                                                   \
    cudaError_t e_ = (call);                                                                             \
    if (e_ != cudaSuccess) {                                                                             \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                                      \
    }                                                                                                    \
  } while (0)
