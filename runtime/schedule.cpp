#include "runtime/schedule.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/error.h"

namespace mk {

const char* op_name(Op op) {
  switch (op) {
#define MK_OP_NAME(E, name) \
  case Op::E: return #name;
    MK_FOR_EACH_OP(MK_OP_NAME)
#undef MK_OP_NAME
  }
  return "?";
}

std::vector<std::pair<uint32_t, uint32_t>> split_range(uint32_t total, uint32_t parts) {
  parts = std::max(1u, std::min(parts, total));
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (uint32_t i = 0; i < parts; ++i)
    out.emplace_back(uint32_t(uint64_t(total) * i / parts), uint32_t(uint64_t(total) * (i + 1) / parts));
  return out;
}

std::string Schedule::describe(const Instr& in) const {
  std::string where = (in.op == Op::Embed || in.op == Op::LMHead || in.op == Op::Sample)
                          ? std::string(op_name(in.op))
                          : fmt::format("layer {} {}", in.layer, op_name(in.op));
  switch (in.op) {
    case Op::Attention: return fmt::format("{} (kv group {}, split {})", where, in.begin, in.end);
    case Op::Embed:
    case Op::Sample: return where;
    default: return fmt::format("{} rows [{}, {})", where, in.begin, in.end);
  }
}

uint32_t Schedule::counter_lines() const {
  return first_striped_counter + (num_counters() - first_striped_counter) * uint32_t(sync_domains);
}

uint32_t Schedule::line(uint32_t counter, uint32_t stripe) const {
  return counter_line(counter, stripe, first_striped_counter, uint32_t(sync_domains));
}

unsigned Schedule::counter_value(const std::vector<unsigned>& lines, uint32_t counter) const {
  unsigned v = 0;
  for (uint32_t d = 0; d < stripes(counter); ++d) v += lines.at(line(counter, d));
  return v;
}

std::vector<unsigned> Schedule::counter_values(const std::vector<unsigned>& lines) const {
  std::vector<unsigned> values(num_counters(), 0);
  for (uint32_t c = 0; c < num_counters(); ++c) values[c] = counter_value(lines, c);
  return values;
}

int Schedule::workgroup_of(size_t index) const {
  auto it = std::upper_bound(wg_begin.begin(), wg_begin.end(), uint32_t(index));
  return int(it - wg_begin.begin()) - 1;
}

namespace {

class Builder {
 public:
  Builder(int workgroups) : lists_(size_t(workgroups)) {}

  uint32_t counter(std::string name) {
    names_.push_back(std::move(name));
    return uint32_t(names_.size() - 1);
  }

  // Appends one stage's items, spread over the workgroups starting after where the last stage ended,
  // so that small stages do not all land on the first workgroups.
  void stage(std::vector<Instr> items) {
    for (auto& in : items) {
      in.seq = seq_++;
      lists_[rotation_ % lists_.size()].push_back(in);
      ++rotation_;
    }
  }

  // Puts an instruction on a given workgroup (Embed/Sample live on workgroup 0).
  void pinned(Instr in, int wg) {
    in.seq = seq_++;
    lists_[size_t(wg)].push_back(in);
  }

  // `domains` > 1: the counters with at least 2 * domains producers a step become per-domain counters,
  // renumbered after the flat ones (Schedule::first_striped_counter). The h slices' counters stay flat
  // and consecutive (HSlices::counter).
  Schedule finish(Schedule s, int domains) {
    s.wg_begin.push_back(0);
    for (auto& list : lists_) {
      s.instrs.insert(s.instrs.end(), list.begin(), list.end());
      s.wg_begin.push_back(uint32_t(s.instrs.size()));
    }
    s.instrs_per_step = int(seq_);
    std::vector<uint32_t> producers(names_.size(), 0);
    for (const Instr& in : s.instrs) ++producers[in.signal];
    const uint32_t slices_begin = s.h_slices.first_counter, slices_end = slices_begin + uint32_t(s.num_layers) * s.h_slices.count;
    std::vector<uint32_t> flat, striped;
    for (uint32_t c = 0; c < names_.size(); ++c) {
      const bool slice = c >= slices_begin && c < slices_end;
      (domains > 1 && !slice && producers[c] >= 2 * uint32_t(domains) ? striped : flat).push_back(c);
    }
    std::vector<uint32_t> renumber(names_.size());
    for (uint32_t c : flat) renumber[c] = uint32_t(s.counter_names.size()), s.counter_names.push_back(names_[c]);
    for (uint32_t c : striped) renumber[c] = uint32_t(s.counter_names.size()), s.counter_names.push_back(names_[c]);
    for (Instr& in : s.instrs) {
      in.signal = renumber[in.signal];
      for (int w = 0; w < in.num_waits; ++w) in.waits[w].counter = renumber[in.waits[w].counter];
    }
    s.sample_counter = renumber[s.sample_counter];
    if (s.h_slices.count > 0) s.h_slices.first_counter = renumber[s.h_slices.first_counter];
    s.sync_domains = striped.empty() ? 1 : domains;
    s.first_striped_counter = uint32_t(flat.size());
    return s;
  }

 private:
  std::vector<std::vector<Instr>> lists_;
  std::vector<std::string> names_;
  uint32_t seq_ = 0;
  size_t rotation_ = 0;
};

Instr make(Op op, int layer, uint32_t begin, uint32_t end, uint32_t signal) {
  Instr in;
  in.op = op;
  in.layer = uint16_t(layer);
  in.begin = begin;
  in.end = end;
  in.signal = signal;
  return in;
}

void add_wait(Instr& in, uint32_t counter, uint32_t per_step, uint32_t lag = 0) {
  if (in.num_waits >= 2) fail("schedule: an instruction waits on at most two counters");
  in.waits[in.num_waits++] = Wait{counter, per_step, lag};
}

}  // namespace

Schedule build_schedule(const ModelConfig& c, const ScheduleParams& p) {
  const int W = p.num_workgroups;
  if (W < 1) fail("schedule: need at least one workgroup (got {})", W);
  if (p.sync_domains < 1 || p.sync_domains > 32)
    fail("schedule: sync domains must be between 1 and 32, one warp's lanes (got {})", p.sync_domains);
  if (c.num_layers > 65535) fail("schedule: {} layers is more than the 65535 an instruction can name", c.num_layers);
  if (p.h_slice_cols < 0 || p.h_slice_cols % 8 != 0)
    fail("schedule: h slices must be a multiple of 8 columns (got {})", p.h_slice_cols);
  if (W > 65535) fail("schedule: {} workgroups is more than the 65535 LM-head slots an instruction can name", W);
  Schedule s;
  s.num_workgroups = W;
  s.num_layers = c.num_layers;
  const int groups = c.num_kv_heads;
  // Attention is latency-bound per workgroup, so it is spread over the whole grid (one split of the cache
  // per workgroup and kv head), capped so that combining the partials in o_proj stays cheap.
  s.attention_splits = p.attention_splits > 0 ? p.attention_splits : std::clamp(W / groups, 1, 32);
  Builder b(W);

  const uint32_t embed_done = b.counter("embed");
  // Counters named per layer so that diagnostics can say what a workgroup waits for.
  struct LayerCounters {
    std::vector<uint32_t> qkv;  // per kv group
    uint32_t attention, oproj, gateup, down;
  };
  std::vector<LayerCounters> lc(size_t(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) {
    if (p.stage_barriers) lc[size_t(l)].qkv.assign(size_t(groups), b.counter(fmt::format("layer {} qkv", l)));
    else
      for (int g = 0; g < groups; ++g) lc[size_t(l)].qkv.push_back(b.counter(fmt::format("layer {} qkv group {}", l, g)));
    lc[size_t(l)].attention = b.counter(fmt::format("layer {} attention", l));
    lc[size_t(l)].oproj = b.counter(fmt::format("layer {} o_proj", l));
    if (p.h_slice_cols == 0) lc[size_t(l)].gateup = b.counter(fmt::format("layer {} gate_up", l));
    lc[size_t(l)].down = b.counter(fmt::format("layer {} down", l));
  }
  // The h slices: one counter per layer and slice, all in one run (HSlices::counter).
  const uint32_t N = uint32_t(c.intermediate_size);
  const auto gateup_blocks = split_range(N, uint32_t(W));
  HSlices& hs = s.h_slices;
  if (p.h_slice_cols > 0) {
    hs.cols = std::min(uint32_t(p.h_slice_cols), N);
    hs.count = (N + hs.cols - 1) / hs.cols;
    hs.producers.assign(hs.count, 0);
    for (auto [r0, r1] : gateup_blocks)
      for (uint32_t k = hs.first_touched(r0); k <= hs.last_touched(r1); ++k) ++hs.producers[k];
    for (int l = 0; l < c.num_layers; ++l)
      for (uint32_t k = 0; k < hs.count; ++k) {
        const uint32_t id = b.counter(fmt::format("layer {} h slice {}", l, k));
        if (l == 0 && k == 0) hs.first_counter = id;
      }
  }
  const uint32_t lm_done = b.counter("lm_head");
  s.sample_counter = b.counter("sample");

  // Embed for this step waits for the previous step's Sample (lag 1: nothing to wait for at step 0).
  Instr embed = make(Op::Embed, 0, 0, uint32_t(c.hidden_size), embed_done);
  add_wait(embed, s.sample_counter, 1, 1);
  b.pinned(embed, 0);

  const uint32_t group_rows = uint32_t((c.group_size() + 2) * c.head_dim);
  // At most one QKV block per workgroup (W / groups, rounded down): rounding up gave a few workgroups two
  // blocks, and every attention item of their groups waited for them (docs/log.md, third session).
  const uint32_t blocks_per_group = std::max(1u, std::min(group_rows, uint32_t(W / groups)));
  uint32_t prev_counter = embed_done, prev_count = 1;
  for (int l = 0; l < c.num_layers; ++l) {
    const auto& L = lc[size_t(l)];
    std::vector<Instr> items;
    for (int g = 0; g < groups; ++g)
      for (auto [r0, r1] : split_range(group_rows, blocks_per_group)) {
        Instr in = make(Op::QKV, l, uint32_t(g) * group_rows + r0, uint32_t(g) * group_rows + r1, L.qkv[size_t(g)]);
        add_wait(in, prev_counter, prev_count);
        items.push_back(in);
      }
    b.stage(std::move(items));

    items = {};
    for (int g = 0; g < groups; ++g)
      for (int sp = 0; sp < s.attention_splits; ++sp) {
        Instr in = make(Op::Attention, l, uint32_t(g), uint32_t(sp), L.attention);
        // Dataflow: only this group's rows (stage barriers: all groups' rows, one shared counter).
        add_wait(in, L.qkv[size_t(g)], blocks_per_group * (p.stage_barriers ? uint32_t(groups) : 1u));
        items.push_back(in);
      }
    b.stage(std::move(items));
    const uint32_t attention_items = uint32_t(groups * s.attention_splits);

    auto row_stage = [&](Op op, uint32_t rows, uint32_t signal, uint32_t wait_counter, uint32_t wait_count) {
      std::vector<Instr> v;
      for (auto [r0, r1] : split_range(rows, uint32_t(W))) {
        Instr in = make(op, l, r0, r1, signal);
        add_wait(in, wait_counter, wait_count);
        v.push_back(in);
      }
      const uint32_t n = uint32_t(v.size());
      b.stage(std::move(v));
      return n;
    };
    const uint32_t oproj_items = row_stage(Op::OProj, uint32_t(c.hidden_size), L.oproj, L.attention, attention_items);
    uint32_t down_items = 0;
    if (hs.count == 0) {
      const uint32_t gateup_items = row_stage(Op::GateUp, N, L.gateup, L.oproj, oproj_items);
      down_items = row_stage(Op::Down, uint32_t(c.hidden_size), L.down, L.gateup, gateup_items);
    } else {
      // Slice-level dataflow: each gate_up block signals the slices of h its rows touch, and each down
      // block waits for every slice in turn, just before it reads it (the kernel's and the emulator's
      // down ops), so a late gate_up block delays the slices it writes, not the whole stage.
      items = {};
      for (auto [r0, r1] : gateup_blocks) {
        Instr in = make(Op::GateUp, l, r0, r1, hs.counter(l, hs.first_touched(r0)));
        in.flags = kSignalsHSlices;
        add_wait(in, L.oproj, oproj_items);
        items.push_back(in);
      }
      b.stage(std::move(items));
      items = {};
      for (auto [r0, r1] : split_range(uint32_t(c.hidden_size), uint32_t(W))) {
        Instr in = make(Op::Down, l, r0, r1, L.down);
        in.flags = kWaitsHSlices;
        items.push_back(in);
      }
      down_items = uint32_t(items.size());
      b.stage(std::move(items));
    }
    prev_counter = L.down;
    prev_count = down_items;
  }

  std::vector<Instr> lm;
  uint32_t slot = 0;
  for (auto [r0, r1] : split_range(uint32_t(c.vocab_size), uint32_t(W))) {
    Instr in = make(Op::LMHead, 0, r0, r1, lm_done);
    in.slot = uint16_t(slot++);
    add_wait(in, prev_counter, prev_count);
    lm.push_back(in);
  }
  s.lm_head_slots = int(slot);
  b.stage(std::move(lm));

  Instr sample = make(Op::Sample, 0, 0, uint32_t(c.vocab_size), s.sample_counter);
  add_wait(sample, lm_done, slot);
  b.pinned(sample, 0);
  return b.finish(std::move(s), p.sync_domains);
}

}  // namespace mk
