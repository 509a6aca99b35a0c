// Which SM/CU the calling block runs on. Device-only header.
#pragma once

#include "device/gpu.h"
#include "topology/topology.h"

namespace mk::dev {

#if defined(MK_PLATFORM_AMD)
// s_getreg_b32 immediate: register id 5:0, first bit 10:6, size-1 15:11 (LLVM AMDGPUUsage, gfx9 hwreg).
constexpr int hwreg(int id, int offset, int size) { return id | (offset << 6) | ((size - 1) << 11); }
constexpr int kHwRegHwId = 4;    // HW_REG_HW_ID (gfx9)
constexpr int kHwRegXccId = 20;  // HW_REG_XCC_ID (gfx940/941/942 only)
#endif

// The hardware id of the SM/CU this block runs on, as topology/topology.h's unit_hw_id records it:
// NVIDIA %smid; AMD amd_hw_id(xcc, se, sh, cu) from HW_REG_HW_ID (and HW_REG_XCC_ID on gfx94x).
// HW_REG_HW_ID (gfx9): WAVE_ID 3:0, SIMD_ID 5:4, PIPE_ID 7:6, CU_ID 11:8, SH_ID 12, SE_ID 14:13
// (15:13 on gfx908/gfx90a, which have up to 8 SEs), TG_ID 19:16, VM_ID 23:20, QUEUE_ID 26:24,
// STATE_ID 29:27, ME_ID 31:30. HW_REG_XCC_ID: XCC_ID 3:0.
__device__ __forceinline__ unsigned hw_unit_id() {
#if defined(MK_PLATFORM_NVIDIA)
  unsigned smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  return smid;
#elif defined(__HIP_DEVICE_COMPILE__)
  const unsigned hw_id = __builtin_amdgcn_s_getreg(hwreg(kHwRegHwId, 0, 32));
  const unsigned cu = (hw_id >> 8) & 0xfu;
  const unsigned sh = (hw_id >> 12) & 0x1u;
#if defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
  const unsigned se = (hw_id >> 13) & 0x3u;
  const unsigned xcc = __builtin_amdgcn_s_getreg(hwreg(kHwRegXccId, 0, 4)) & 0xfu;
#else
  const unsigned se = (hw_id >> 13) & 0x7u;
  const unsigned xcc = 0;
#endif
  return amd_hw_id(xcc, se, sh, cu);
#else
  return 0;  // host pass of hipcc: never executed
#endif
}

}  // namespace mk::dev
