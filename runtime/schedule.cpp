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

std::string op_names(uint32_t ops) {
  std::string out;
  for (int k = 0; k < kNumOps; ++k)
    if (ops & op_bit(Op(k))) {
      if (!out.empty()) out += ',';
      out += op_name(Op(k));
    }
  return out.empty() ? "none" : out;
}

std::vector<std::pair<uint32_t, uint32_t>> split_range(uint32_t total, uint32_t parts) {
  parts = std::max(1u, std::min(parts, total));
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (uint32_t i = 0; i < parts; ++i)
    out.emplace_back(uint32_t(uint64_t(total) * i / parts), uint32_t(uint64_t(total) * (i + 1) / parts));
  return out;
}

int plan_chunk_tokens(int requested, int context) {
  constexpr int kDefault = 1024;
  if (requested < -1) fail("chunk tokens must be -1 (default), 0 (no chunk steps) or positive (got {})", requested);
  if (requested == -1) return std::max(1, std::min(kDefault, context));
  return std::min(requested, std::max(1, context));  // no chunk holds more tokens than the context
}

int plan_chunk_steps(const ModelConfig& c, MatrixFormat layers, int requested, int context) {
  std::string why;
  if (layers != MatrixFormat::BF16 && layers != MatrixFormat::F16)
    why = fmt::format("the layers' weights are {} (chunk steps multiply 16-bit weights)", matrix_format_name(layers));
  else if (c.hidden_size % 32 != 0 || c.q_dim() % 32 != 0 || c.intermediate_size % 32 != 0)
    why = fmt::format("hidden_size {}, num_heads x head_dim {} and intermediate_size {} must be multiples of 32", c.hidden_size,
                      c.q_dim(), c.intermediate_size);
  else if (c.head_dim % 16 != 0 || c.head_dim > 128)
    why = fmt::format("head_dim {} (chunk attention takes multiples of 16 up to 128)", c.head_dim);
  if (why.empty()) return plan_chunk_tokens(requested, context);
  if (requested > 0) fail("chunk steps (prefill) are not available for this model: {}", why);
  return 0;
}

std::string Schedule::describe(const Instr& in) const {
  const std::string layer_op = fmt::format("layer {} {}", in.layer, op_name(in.op));
  switch (in.op) {
    case Op::ChunkNorm:
      return fmt::format("{} ({}) tokens [{}, {})", layer_op, in.slot == kAttentionNorm ? "attention norm" : "mlp norm", in.begin, in.end);
    case Op::ChunkRope: return fmt::format("{} tokens [{}, {})", layer_op, in.begin, in.end);
    case Op::ChunkAttention:
      return fmt::format("{} (kv group {}) tokens [{}, {})", layer_op, in.begin, uint32_t(in.slot) * uint32_t(chunk.attention_tokens),
                         uint32_t(in.slot + 1) * uint32_t(chunk.attention_tokens));
    case Op::ChunkQKV:
    case Op::ChunkOProj:
    case Op::ChunkGateUp:
    case Op::ChunkDown:
      return fmt::format("{} tokens [{}, {}) columns [{}, {})", layer_op, uint32_t(in.slot) * kChunkMatrixTokens,
                         uint32_t(in.slot + 1) * kChunkMatrixTokens, in.begin, in.end);
    default: break;
  }
  const std::string where = (in.op == Op::Embed || in.op == Op::LMHead || in.op == Op::Sample) ? std::string(op_name(in.op)) : layer_op;
  switch (in.op) {
    case Op::Attention: return fmt::format("{} (kv group {}, split {})", where, in.begin, in.end);
    case Op::Embed:
    case Op::Sample: return where;
    default:
      if (in.flags & kClaimsRows) return fmt::format("{} claimed rows (a rank's share of [{}, {}))", where, in.begin, in.end);
      return fmt::format("{} rows [{}, {})", where, in.begin, in.end);
  }
}

uint32_t ClaimedRows::row_start(uint32_t rows, uint32_t r, uint32_t workgroups) const {
  if (r >= workgroups) return rows;
  const uint32_t lead = workgroups - late;
  const uint32_t small = uint32_t(uint64_t(rows) * (100u - shrink) / (100ull * workgroups));
  const uint32_t lead_rows = rows - late * small;
  return r <= lead ? uint32_t(uint64_t(lead_rows) * r / lead) : lead_rows + (r - lead) * small;
}

Instr ClaimedRows::resolve(const Instr& in, uint32_t r, uint32_t workgroups) const {
  Instr out = in;
  const uint32_t rows = in.end - in.begin;
  out.begin = in.begin + row_start(rows, r, workgroups);
  out.end = in.begin + row_start(rows, r + 1, workgroups);
  out.flags = uint8_t(in.flags & ~kClaimsRows);
  return out;
}

uint32_t Schedule::step_counter_lines() const {
  return first_striped_counter + (num_counters() - first_striped_counter) * uint32_t(sync_domains);
}

uint32_t Schedule::counter_lines() const { return step_counter_lines() + uint32_t(chunk.counter_names.size()); }

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
  for (uint32_t c = 0; c < chunk.counter_names.size(); ++c) values.push_back(lines.at(chunk.first_line + c));
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

  // Whether every workgroup already has an instruction this step (one to claim a rank in before a stage
  // with claimed rows).
  bool every_list_started() const {
    return std::all_of(lists_.begin(), lists_.end(), [](const std::vector<Instr>& l) { return !l.empty(); });
  }

  // Puts an instruction on a given workgroup (Embed/Sample live on workgroup 0).
  void pinned(Instr in, int wg) {
    in.seq = seq_++;
    lists_[size_t(wg)].push_back(in);
  }

  // The instruction lists concatenated, with wg_begin, counter names and the instructions per step: for
  // a program whose counters are all flat (the chunk steps).
  void finish_flat(std::vector<Instr>& instrs, std::vector<uint32_t>& wg_begin, std::vector<std::string>& names, int& per_step) {
    wg_begin.assign(1, 0);
    for (auto& list : lists_) {
      instrs.insert(instrs.end(), list.begin(), list.end());
      wg_begin.push_back(uint32_t(instrs.size()));
    }
    names = names_;
    per_step = int(seq_);
  }

  // `domains` > 1: the counters with at least 2 * domains producers a step become per-domain counters,
  // renumbered after the flat ones (Schedule::first_striped_counter). The h slices', arrival and claim
  // counters, which no instruction signals, stay flat and consecutive (HSlices::counter,
  // CombineOnce::counter, ClaimedRows::counter).
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
    if (s.combine_once.enabled) s.combine_once.first_counter = renumber[s.combine_once.first_counter];
    if (s.claimed_rows.ops != 0) s.claimed_rows.first_counter = renumber[s.claimed_rows.first_counter];
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

// The chunk steps (ChunkSchedule): per layer eight stages, each waiting for the whole previous one (the
// first for the previous chunk's last stage): a chunk's stages are few and wide, so a barrier between
// them costs little against their work, and every buffer a stage overwrites was last read by a stage
// that the barriers order before it.
ChunkSchedule build_chunk_schedule(const ModelConfig& c, int W, int C) {
  ChunkSchedule cs;
  cs.tokens = C;
  cs.attention_tokens = chunk_attention_tokens(c.group_size());
  Builder b(W);
  const uint32_t token_tiles = uint32_t((C + kChunkMatrixTokens - 1) / kChunkMatrixTokens);
  const uint32_t attention_tiles = uint32_t((C + cs.attention_tokens - 1) / cs.attention_tokens);
  uint32_t prev_counter = 0, prev_count = 0;
  bool first = true;
  // One stage: its items wait for the previous stage (the first one: the previous chunk's last stage).
  auto stage = [&](std::vector<Instr> items, const std::string& name) {
    const uint32_t counter = b.counter(name);
    for (Instr& in : items) {
      in.signal = counter;
      if (!first) add_wait(in, prev_counter, prev_count);
    }
    prev_count = uint32_t(items.size());
    prev_counter = counter;
    b.stage(std::move(items));
    return counter;
  };
  auto token_blocks = [&](Op op, int l, uint16_t slot) {
    std::vector<Instr> v;
    for (auto [t0, t1] : split_range(uint32_t(C), uint32_t(W))) {
      Instr in = make(op, l, t0, t1, 0);
      in.slot = slot;
      v.push_back(in);
    }
    return v;
  };
  auto matrix_tiles = [&](Op op, int l, uint32_t cols, uint32_t tile_cols) {
    std::vector<Instr> v;
    for (uint32_t m = 0; m < token_tiles; ++m)
      for (uint32_t n = 0; n < cols; n += tile_cols) {
        Instr in = make(op, l, n, std::min(cols, n + tile_cols), 0);
        in.slot = uint16_t(m);
        v.push_back(in);
      }
    return v;
  };
  uint32_t final_counter = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    stage(token_blocks(Op::ChunkNorm, l, kAttentionNorm), fmt::format("chunk layer {} attention norm", l));
    first = false;
    stage(matrix_tiles(Op::ChunkQKV, l, uint32_t((c.group_size() + 2) * c.head_dim * c.num_kv_heads), kChunkMatrixCols),
          fmt::format("chunk layer {} qkv", l));
    stage(token_blocks(Op::ChunkRope, l, 0), fmt::format("chunk layer {} rope", l));
    std::vector<Instr> att;
    for (uint32_t m = 0; m < attention_tiles; ++m)
      for (int g = 0; g < c.num_kv_heads; ++g) {
        Instr in = make(Op::ChunkAttention, l, uint32_t(g), uint32_t(g) + 1, 0);
        in.slot = uint16_t(m);
        att.push_back(in);
      }
    stage(std::move(att), fmt::format("chunk layer {} attention", l));
    stage(matrix_tiles(Op::ChunkOProj, l, uint32_t(c.hidden_size), kChunkMatrixCols), fmt::format("chunk layer {} o_proj", l));
    stage(token_blocks(Op::ChunkNorm, l, kMlpNorm), fmt::format("chunk layer {} mlp norm", l));
    stage(matrix_tiles(Op::ChunkGateUp, l, uint32_t(c.intermediate_size), kChunkMatrixCols / 2), fmt::format("chunk layer {} gate_up", l));
    final_counter = stage(matrix_tiles(Op::ChunkDown, l, uint32_t(c.hidden_size), kChunkMatrixCols), fmt::format("chunk layer {} down", l));
  }
  b.finish_flat(cs.instrs, cs.wg_begin, cs.counter_names, cs.instrs_per_chunk);
  // The first stage (layer 0's attention norm) waits for the previous chunk's last stage.
  for (Instr& in : cs.instrs)
    if (in.op == Op::ChunkNorm && in.layer == 0 && in.slot == kAttentionNorm) add_wait(in, final_counter, prev_count, 1);
  cs.final_counter = final_counter;
  cs.final_per_step = prev_count;
  return cs;
}

}  // namespace

bool attention_combine_once_default(const ModelConfig& c, int splits) {
  return size_t(c.q_dim()) * size_t(splits) * sizeof(float) >= 192 * 1024;
}

Schedule build_schedule(const ModelConfig& c, const ScheduleParams& p) {
  const int W = p.num_workgroups;
  if (W < 1) fail("schedule: need at least one workgroup (got {})", W);
  if (p.sync_domains < 1 || p.sync_domains > 32)
    fail("schedule: sync domains must be between 1 and 32, one warp's lanes (got {})", p.sync_domains);
  if (c.num_layers > 65535) fail("schedule: {} layers is more than the 65535 an instruction can name", c.num_layers);
  if (p.h_slice_cols < 0 || p.h_slice_cols % 8 != 0)
    fail("schedule: h slices must be a multiple of 8 columns (got {})", p.h_slice_cols);
  if (W > 65535) fail("schedule: {} workgroups is more than the 65535 LM-head slots an instruction can name", W);
  if (p.narrow_workgroups < 0 || p.narrow_workgroups > W)
    fail("schedule: narrow stages need between 1 and the {} workgroups, or 0 for none (got {})", W, p.narrow_workgroups);
  if (p.attention_combine < -1 || p.attention_combine > 1)
    fail("schedule: attention's combine is -1 (the model's default), 0 (in o_proj) or 1 (once per kv group), not {}", p.attention_combine);
  if (p.narrow_ops & ~(op_bit(Op::QKV) | op_bit(Op::OProj) | op_bit(Op::GateUp) | op_bit(Op::Down)))
    fail("schedule: only the qkv, o_proj, gate_up and down stages can be narrowed");
  if (p.claimed_ops != 0) {
    if (p.claimed_ops & ~(op_bit(Op::OProj) | op_bit(Op::GateUp) | op_bit(Op::Down)))
      fail("schedule: claimed rows are built for the o_proj, gate_up and down stages only (asked for {})", op_names(p.claimed_ops));
    if (p.claim_shrink_percent < 0 || p.claim_shrink_percent > 99)
      fail("schedule: the late ranks' shrink must be a percentage from 0 to 99 (got {})", p.claim_shrink_percent);
    if (p.claim_late_ranks < 0 || p.claim_late_ranks >= W)
      fail("schedule: the late ranks of claimed rows must number from 0 to {} (got {})", W - 1, p.claim_late_ranks);
    if (p.narrow_workgroups > 0 && (p.claimed_ops & p.narrow_ops))
      fail("schedule: the {} stage cannot be both narrow and claimed (a claimed stage has a block per workgroup)",
           op_names(p.claimed_ops & p.narrow_ops));
    if (p.h_slice_cols > 0 && (p.claimed_ops & (op_bit(Op::GateUp) | op_bit(Op::Down))))
      fail("schedule: h slices count their producers from static gate_up rows: claimed gate_up or down rows cannot be combined with them");
  }
  Schedule s;
  s.num_workgroups = W;
  s.num_layers = c.num_layers;
  if (p.narrow_workgroups > 0 && p.narrow_ops != 0) s.narrow_ops = p.narrow_ops, s.narrow_workgroups = p.narrow_workgroups;
  const int groups = c.num_kv_heads;
  // Attention is latency-bound per workgroup, so it is spread over the whole grid (one split of the cache
  // per workgroup and kv head), capped so that combining the partials in o_proj stays cheap.
  s.attention_splits = p.attention_splits > 0 ? p.attention_splits : std::clamp(W / groups, 1, 32);
  Builder b(W);
  // Blocks of a row stage of `op`: one per workgroup, or Schedule::narrow_workgroups.
  auto blocks_of = [&](Op op) { return (s.narrow_ops & op_bit(op)) ? s.narrow_workgroups : W; };

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
  const auto gateup_blocks = split_range(N, uint32_t(blocks_of(Op::GateUp)));
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
  const bool combine_once = p.attention_combine < 0 ? attention_combine_once_default(c, s.attention_splits) : p.attention_combine > 0;
  if (combine_once) {
    s.combine_once.enabled = true;
    s.combine_once.groups = uint32_t(groups);
    for (int l = 0; l < c.num_layers; ++l)
      for (int g = 0; g < groups; ++g) {
        const uint32_t id = b.counter(fmt::format("layer {} attention arrivals group {}", l, g));
        if (l == 0 && g == 0) s.combine_once.first_counter = id;
      }
  }
  if (p.claimed_ops != 0) {
    s.claimed_rows.ops = p.claimed_ops;
    s.claimed_rows.late = uint32_t(p.claim_late_ranks);
    s.claimed_rows.shrink = uint32_t(p.claim_shrink_percent);
    for (int l = 0; l < c.num_layers; ++l)
      for (Op op : ClaimedRows::kClaimableOps) {
        const uint32_t id = b.counter(fmt::format("layer {} {} claims", l, op_name(op)));
        if (l == 0 && op == ClaimedRows::kClaimableOps[0]) s.claimed_rows.first_counter = id;
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
  // blocks, and every attention item of their groups waited for them (docs/log.md, 2026-11-21, v12-v14).
  const uint32_t blocks_per_group = std::max(1u, std::min(group_rows, uint32_t(blocks_of(Op::QKV) / groups)));
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

    // Claimed rows where asked for, every rank gets at least one row (the smallest share is a late
    // rank's) and every workgroup has an instruction before the stage to claim in.
    auto claims = [&](Op op, uint32_t rows) {
      const ClaimedRows& cr = s.claimed_rows;
      return (cr.ops & op_bit(op)) != 0 && b.every_list_started() &&
             cr.row_start(rows, uint32_t(W) - 1, uint32_t(W)) < rows && cr.row_start(rows, 1, uint32_t(W)) > 0;
    };
    auto row_stage = [&](Op op, uint32_t rows, uint32_t signal, uint32_t wait_counter, uint32_t wait_count) {
      std::vector<Instr> v;
      if (claims(op, rows)) {
        for (int w = 0; w < W; ++w) {
          Instr in = make(op, l, 0, rows, signal);
          in.flags = kClaimsRows;
          add_wait(in, wait_counter, wait_count);
          v.push_back(in);
        }
      } else {
        for (auto [r0, r1] : split_range(rows, uint32_t(blocks_of(op)))) {
          Instr in = make(op, l, r0, r1, signal);
          add_wait(in, wait_counter, wait_count);
          v.push_back(in);
        }
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
      for (auto [r0, r1] : split_range(uint32_t(c.hidden_size), uint32_t(blocks_of(Op::Down)))) {
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
  s = b.finish(std::move(s), p.sync_domains);
  if (p.chunk_tokens < 0 || p.chunk_tokens > 65535 * kChunkMatrixTokens)
    fail("schedule: chunk steps of {} tokens (must be between 0 and {})", p.chunk_tokens, 65535 * kChunkMatrixTokens);
  if (p.chunk_tokens > 0) {
    s.chunk = build_chunk_schedule(c, W, p.chunk_tokens);
    s.chunk.first_line = s.step_counter_lines();
  }
  return s;
}

}  // namespace mk
