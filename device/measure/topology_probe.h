// Measures the topology of a GPU: which SM/CU belongs to which GPC/XCD (and IOD), plus the runtime's
// memory facts. Plain C++ interface: no GPU header, so host code and tools include it freely.
//
// NVIDIA (sm_90+): launches thread-block clusters (all CTAs of a cluster run on one GPC) whose CTAs
//   record %smid, and joins SMs seen in one cluster with a union-find until the map is stable.
// AMD (gfx90a / gfx94x): HIP + HSA for the CU count, name and caches; a kernel whose workgroups read
//   HW_REG_HW_ID (SE/SH/CU) and, on gfx94x, HW_REG_XCC_ID, gives CU -> XCD and the observed
//   workgroup -> XCD dispatch order. Compile-checked only (no AMD GPU has run it yet).
// MK_GPU=none: probe_topology throws mk::Error("... built without GPU support ...").
// See docs/topology.md for what is measured and what is assumed.
#pragma once

#include "topology/topology.h"

namespace mk {

struct ProbeOptions {
  int max_launches_per_size = 12;  // NVIDIA: launches per cluster size; AMD: launches in total
  int stable_launches = 3;         // stop after this many launches in a row taught nothing new
  unsigned spin_us = 20;           // how long each CTA/workgroup stays resident, so they spread out
  bool verbose = false;            // progress on stderr
};

// Throws mk::Error with a clear message: no GPU, device index out of range, an architecture the probe
// cannot handle or was not built for, a runtime call that failed, or a GPU-less build.
Topology probe_topology(int device, const ProbeOptions& options = {});

// "nvidia", "amd" or "none": what this binary's probe was built for.
const char* probe_platform();

}  // namespace mk
