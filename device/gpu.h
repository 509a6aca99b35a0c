// The one place that includes a GPU runtime header. Device code is written in HIP's spelling; on NVIDIA
// this thin layer maps those names onto CUDA (Debian's HIP-on-NVIDIA headers do not build with CUDA 13).
// Only device/ may include this file.
#pragma once

#if defined(MK_PLATFORM_AMD)
#include <hip/hip_runtime.h>
#define MK_WARP_SIZE 64  // CDNA (gfx90a/gfx94x) wavefronts are 64 lanes wide
#elif defined(MK_PLATFORM_NVIDIA)
#include <cuda_runtime.h>
#define MK_WARP_SIZE 32

// --- runtime API: types and constants
#define hipError_t cudaError_t
#define hipSuccess cudaSuccess
#define hipErrorNotReady cudaErrorNotReady
#define hipStream_t cudaStream_t
#define hipEvent_t cudaEvent_t
#define hipDeviceProp_t cudaDeviceProp
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipHostMallocMapped cudaHostAllocMapped
#define hipHostMallocDefault cudaHostAllocDefault
#define hipStreamNonBlocking cudaStreamNonBlocking
#define hipFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize
#define hipDeviceAttributeCooperativeLaunch cudaDevAttrCooperativeLaunch
#define hipDeviceAttributeMultiprocessorCount cudaDevAttrMultiProcessorCount
#define hipDeviceAttributeMaxSharedMemoryPerBlock cudaDevAttrMaxSharedMemoryPerBlockOptin
#define hipDeviceAttributeL2CacheSize cudaDevAttrL2CacheSize
#define hipDeviceAttributeClockRate cudaDevAttrClockRate
#define hipDeviceAttributeMemoryClockRate cudaDevAttrMemoryClockRate
#define hipDeviceAttributeMemoryBusWidth cudaDevAttrGlobalMemoryBusWidth

// --- runtime API: functions
#define hipGetErrorString cudaGetErrorString
#define hipGetErrorName cudaGetErrorName
#define hipGetLastError cudaGetLastError
#define hipPeekAtLastError cudaPeekAtLastError
#define hipGetDeviceCount cudaGetDeviceCount
#define hipGetDevice cudaGetDevice
#define hipSetDevice cudaSetDevice
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipMemGetInfo cudaMemGetInfo
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipHostMalloc cudaHostAlloc
#define hipHostFree cudaFreeHost
#define hipHostGetDevicePointer cudaHostGetDevicePointer
#define hipMemcpy cudaMemcpy
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemset cudaMemset
#define hipMemsetAsync cudaMemsetAsync
#define hipStreamCreateWithFlags cudaStreamCreateWithFlags
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamSynchronize cudaStreamSynchronize
#define hipStreamQuery cudaStreamQuery
#define hipEventCreate cudaEventCreate
#define hipEventDestroy cudaEventDestroy
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventElapsedTime cudaEventElapsedTime
#define hipFuncSetAttribute(f, a, v) cudaFuncSetAttribute(f, a, v)
#define hipFuncAttributes cudaFuncAttributes
#define hipFuncGetAttributes cudaFuncGetAttributes
#define hipOccupancyMaxActiveBlocksPerMultiprocessor cudaOccupancyMaxActiveBlocksPerMultiprocessor
#define hipLaunchCooperativeKernel cudaLaunchCooperativeKernel
#define hipLaunchKernelGGL(kernel, grid, block, shmem, stream, ...) \
  kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)

#else
#error "device/gpu.h needs MK_PLATFORM_AMD or MK_PLATFORM_NVIDIA (set by device/CMakeLists.txt)"
#endif

#include <cstdio>
#include <string>

#include "runtime/error.h"

// Checks a runtime call; on failure throws mk::Error with the call, the error name and the location.
#define MK_GPU_CHECK(call)                                                                       \
  do {                                                                                           \
    hipError_t mk_err_ = (call);                                                                 \
    if (mk_err_ != hipSuccess)                                                                   \
      mk::fail("{}:{}: {} failed: {} ({})", __FILE__, __LINE__, #call, hipGetErrorName(mk_err_), \
               hipGetErrorString(mk_err_));                                                      \
  } while (0)

namespace mk::dev {

// Makes `device` current for a scope and restores the caller's device afterwards.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    MK_GPU_CHECK(hipGetDevice(&previous_));
    MK_GPU_CHECK(hipSetDevice(device));
  }
  ~CurrentDevice() { (void)hipSetDevice(previous_); }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace mk::dev
