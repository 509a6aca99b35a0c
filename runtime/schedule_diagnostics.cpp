#include "runtime/schedule_diagnostics.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

namespace mk {

std::string describe_blocked(const Schedule& s, std::vector<WorkgroupPosition> blocked, const std::vector<unsigned>* counters,
                             size_t max_shown) {
  auto order = [&](const WorkgroupPosition& p) {
    // Chunk steps come before the prefill gate, which comes before the token steps.
    const int phase = p.in_chunk ? 0 : p.at_prefill_gate ? 1 : 2;
    const uint32_t seq = p.in_chunk ? s.chunk.instrs[p.instr_index].seq
                         : p.at_step_gate || p.at_prefill_gate ? 0
                                                                : s.instrs[p.instr_index].seq + 1;  // a gate comes before the step
    return std::make_tuple(phase, p.step, seq, p.workgroup);
  };
  std::sort(blocked.begin(), blocked.end(), [&](const auto& a, const auto& b) { return order(a) < order(b); });
  std::string text;
  auto now = [&](uint32_t counter) { return counters ? fmt::format(" (now {})", (*counters)[counter]) : std::string(); };
  const uint32_t chunk_base = s.num_counters();  // where the chunk counters' values start in `counters`
  auto chunk_wait = [&](uint32_t counter, uint32_t target) {
    return fmt::format("\n    waits for counter '{}' to reach {}{}", s.chunk.counter_names[counter], target, now(chunk_base + counter));
  };
  for (size_t i = 0; i < blocked.size() && i < max_shown; ++i) {
    const auto& p = blocked[i];
    if (p.in_chunk) {
      const Instr& in = s.chunk.instrs[p.instr_index];
      text += fmt::format("\n  workgroup {} chunk step {}: {}{}", p.workgroup, p.step, s.describe(in),
                          i == 0 ? "   <- earliest blocked instruction" : "");
      for (int w = 0; w < in.num_waits; ++w) text += chunk_wait(in.waits[w].counter, in.waits[w].per_step * (p.step + 1 - in.waits[w].lag));
      continue;
    }
    if (p.at_prefill_gate) {
      text += fmt::format("\n  workgroup {} at the prefill gate (token step 0 waits for the last chunk step):", p.workgroup);
      text += chunk_wait(s.chunk.final_counter, s.chunk.final_per_step * p.step);
      continue;
    }
    if (p.at_step_gate) {
      text += fmt::format("\n  workgroup {} at the step {} gate: waits for counter '{}' to reach {}{}", p.workgroup, p.step,
                          s.counter_names[s.sample_counter], p.step, now(s.sample_counter));
      continue;
    }
    const Instr& in = s.instrs[p.instr_index];
    text += fmt::format("\n  workgroup {} step {}: {}{}", p.workgroup, p.step, s.describe(in),
                        i == 0 ? "   <- earliest blocked instruction" : "");
    for (int w = 0; w < in.num_waits; ++w) {
      const Wait& wt = in.waits[w];
      text += fmt::format("\n    waits for counter '{}' to reach {}{}", s.counter_names[wt.counter],
                          wt.per_step * (p.step + 1 - wt.lag), now(wt.counter));
    }
    if (in.flags & kWaitsHSlices) {
      const HSlices& hs = s.h_slices;
      uint32_t k = 0;  // the first slice not yet complete, where the counters are known
      if (counters)
        while (k + 1 < hs.count && (*counters)[hs.counter(in.layer, k)] >= hs.target(k, p.step)) ++k;
      const uint32_t c = hs.counter(in.layer, k);
      text += fmt::format("\n    waits for the {} slices of h in turn{} counter '{}' to reach {}{}", hs.count,
                          counters ? "; the first incomplete one:" : ", starting with", s.counter_names[c],
                          hs.target(k, p.step), now(c));
    }
  }
  if (blocked.size() > max_shown) text += fmt::format("\n  ... and {} more", blocked.size() - max_shown);
  return text;
}

}  // namespace mk
