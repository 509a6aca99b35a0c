// Which SM/CU the calling block runs on. Device-only header.
#pragma once

#include "device/gpu.h"
#include "topology/topology.h"

namespace mk::dev {

// The hardware id of the SM/CU this block runs on, as topology/topology.h's unit_hw_id records it:
// NVIDIA %smid; AMD amd_hw_id(xcc, se, sh, cu) from HW_REG_HW_ID (and HW_REG_XCC_ID on gfx94x), decoded
// as in device/topology_probe.cu.
__device__ __forceinline__ unsigned hw_unit_id() {
#if defined(MK_PLATFORM_NVIDIA)
  unsigned smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  return smid;
#elif defined(__HIP_DEVICE_COMPILE__)
  // s_getreg_b32 immediate: register id 5:0, first bit 10:6, size-1 15:11.
  const unsigned hw_id = __builtin_amdgcn_s_getreg(4 | (0 << 6) | (31 << 11));  // HW_REG_HW_ID, all 32 bits
  const unsigned cu = (hw_id >> 8) & 0xfu;
  const unsigned sh = (hw_id >> 12) & 0x1u;
#if defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
  const unsigned se = (hw_id >> 13) & 0x3u;
  const unsigned xcc = __builtin_amdgcn_s_getreg(20 | (0 << 6) | (3 << 11)) & 0xfu;  // HW_REG_XCC_ID 3:0
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
