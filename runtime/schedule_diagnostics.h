// Explaining a stalled schedule: which workgroups wait for what. Used by the emulator's deadlock report
// and the GPU watchdog, so both name the stuck instruction the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/schedule.h"

namespace mk {

struct WorkgroupPosition {
  int workgroup = 0;
  uint32_t step = 0;
  bool at_step_gate = false;  // waiting for the previous step's Sample
  uint32_t instr_index = 0;   // next instruction (index into Schedule::instrs) when not at the gate
  // Chunk steps: `step` is the chunk and instr_index indexes Schedule::chunk.instrs; or waiting at the
  // prefill gate (token step 0 waits for the last chunk step).
  bool in_chunk = false, at_prefill_gate = false;
};

// Lists the blocked workgroups, earliest in canonical order first (the likely cause; later ones usually
// wait on it), with each wait's counter, target and (when known) current value. `counters`: the values
// Schedule::counter_values gives (the token steps' counters, then the chunk steps').
std::string describe_blocked(const Schedule& schedule, std::vector<WorkgroupPosition> blocked,
                             const std::vector<unsigned>* counters, size_t max_shown = 12);

}  // namespace mk
