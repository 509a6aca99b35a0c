#include "runtime/schedule.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/error.h"
#include "runtime/step_recipe.h"

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

int plan_chunk_steps(const ModelConfig& c, int requested, int context) {
  std::string why;
  const StepRecipe recipe = build_step_recipe(c);
  if (std::any_of(recipe.layers.begin(), recipe.layers.end(), [](const LayerRecipe& L) { return L.chunk.empty(); }))
    why = fmt::format("the {} recipe has no chunk-step stages for its layers", arch_name(c.arch));
  else if (c.hidden_size % 32 != 0 || c.q_dim() % 32 != 0 || c.intermediate_size % 32 != 0)
    why = fmt::format("hidden_size {}, num_heads x head_dim {} and intermediate_size {} must be multiples of 32", c.hidden_size,
                      c.q_dim(), c.intermediate_size);
  else if (c.head_dim % 16 != 0 || c.head_dim > 256)
    why = fmt::format("head_dim {} (chunk attention takes multiples of 16 up to 256)", c.head_dim);
  if (why.empty()) return plan_chunk_tokens(requested, context);
  if (requested > 0) fail("chunk steps (prefill) are not available for this model: {}", why);
  return 0;
}

std::string Schedule::describe(const Instr& in) const {
  const std::string layer_op = fmt::format("layer {} {}", in.layer, op_name(in.op));
  switch (in.op) {
    case Op::ChunkNorm:
    case Op::ChunkPostNorm:
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
      const std::string folds = in.folds == kFoldsNoNorm ? ""
                                : fmt::format(" after the {} post-norm{}", in.folds == kFoldsAttentionPostNorm ? "attention" : "mlp",
                                              in.flags & kWritesResidual ? ", writing x" : "");
      if (in.flags & kClaimsRows) return fmt::format("{} claimed rows (a rank's share of [{}, {})){}", where, in.begin, in.end, folds);
      return fmt::format("{} rows [{}, {}){}", where, in.begin, in.end, folds);
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

// Whether a row stage of `op` gets claimed rows: where asked for, every rank gets at least one row (the
// smallest share is a late rank's) and every workgroup has an instruction before the stage to claim in.
bool claims_rows(const ClaimedRows& cr, const Builder& b, Op op, uint32_t rows, int W) {
  return (cr.ops & op_bit(op)) != 0 && b.every_list_started() && cr.row_start(rows, uint32_t(W) - 1, uint32_t(W)) < rows &&
         cr.row_start(rows, 1, uint32_t(W)) > 0;
}

// The chunk steps (ChunkSchedule): each layer's chunk stages of the recipe, each waiting for the whole
// previous one (the first for the previous chunk's last stage): a chunk's stages are few and wide, so a
// barrier between them costs little against their work, and every buffer a stage overwrites was last
// read by a stage that the barriers order before it.
ChunkSchedule build_chunk_schedule(const StepRecipe& r, const ModelConfig& c, int W, int C, bool wide_tiles) {
  ChunkSchedule cs;
  cs.tokens = C;
  cs.attention_tokens = chunk_attention_tokens(c.group_size(), c.head_dim);
  Builder b(W);
  const uint32_t token_tiles = uint32_t((C + kChunkMatrixTokens - 1) / kChunkMatrixTokens);
  const uint32_t attention_tiles = uint32_t((C + cs.attention_tokens - 1) / cs.attention_tokens);
  uint32_t prev_counter = 0, prev_count = 0, first_stage_items = 0;
  bool first = true;
  // One stage's instructions, by its spread.
  auto items_of = [&](const Stage& st, int l) {
    std::vector<Instr> v;
    switch (st.spread) {
      case Spread::ChunkTokens:
        for (auto [t0, t1] : split_range(uint32_t(C), uint32_t(W))) {
          Instr in = make(st.op, l, t0, t1, 0);
          in.slot = st.slot;
          v.push_back(in);
        }
        break;
      case Spread::ChunkTiles: {
        const uint32_t narrow = (st.rows + st.tile_cols - 1) / st.tile_cols;
        const uint32_t wide_cols = st.tile_cols * kChunkWideFactor, wide = (st.rows + wide_cols - 1) / wide_cols;
        const uint32_t cols = wide_tiles && chunk_tiles_wide(token_tiles * narrow, token_tiles * wide, W) ? wide_cols : st.tile_cols;
        for (uint32_t m = 0; m < token_tiles; ++m)
          for (uint32_t n = 0; n < st.rows; n += cols) {
            Instr in = make(st.op, l, n, std::min(st.rows, n + cols), 0);
            in.slot = uint16_t(m);
            if (st.writes == Buffer::ChunkProjected) in.flags |= kWritesProjected;
            v.push_back(in);
          }
        break;
      }
      case Spread::ChunkGroupTiles:
        for (uint32_t m = 0; m < attention_tiles; ++m)
          for (uint32_t g = 0; g < st.rows; ++g) {
            Instr in = make(st.op, l, g, g + 1, 0);
            in.slot = uint16_t(m);
            v.push_back(in);
          }
        break;
      default: fail("schedule: layer {} chunk stage '{}' is not laid out as a chunk step's", l, st.name);
    }
    return v;
  };
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerRecipe& L = r.layers.at(size_t(l));
    if (L.chunk.empty()) fail("schedule: layer {} has no chunk-step stages in its recipe", l);
    for (const Stage& st : L.chunk) {
      std::vector<Instr> items = items_of(st, l);
      const uint32_t counter = b.counter(fmt::format("chunk layer {} {}", l, st.name));
      for (Instr& in : items) {
        in.signal = counter;
        if (!first) add_wait(in, prev_counter, prev_count);
      }
      if (first) first_stage_items = uint32_t(items.size());
      first = false;
      prev_count = uint32_t(items.size());
      prev_counter = counter;
      b.stage(std::move(items));
    }
  }
  b.finish_flat(cs.instrs, cs.wg_begin, cs.counter_names, cs.instrs_per_chunk);
  // The first stage (layer 0's first) waits for the previous chunk's last stage.
  for (Instr& in : cs.instrs)
    if (in.seq < first_stage_items) add_wait(in, prev_counter, prev_count, 1);
  cs.final_counter = prev_counter;
  cs.final_per_step = prev_count;
  return cs;
}

// Whether a token step's post-norms can be folded (ScheduleParams::fold_post_norms): it has some; nothing
// adds to x but them; and every stage that reads x normalises it in its prologue (qkv, gate_up, the LM
// head) and comes right after a post-norm it can fold (the attention's in the same layer; the MLP's at
// the next layer's start, or before the LM head: folded_norm_layer finds the weight so) or, for layer 0's
// qkv, right after embed (a post-norm of zeros: kStartsFoldedStep).
bool post_norms_foldable(const StepRecipe& r) {
  struct At {
    const Stage* stage;
    int layer;  // -1 before the layers, the layer count after them
  };
  std::vector<At> seq;
  for (const Stage& st : r.first) seq.push_back({&st, -1});
  for (size_t l = 0; l < r.layers.size(); ++l)
    for (const Stage& st : r.layers[l].step) seq.push_back({&st, int(l)});
  for (const Stage& st : r.last) seq.push_back({&st, int(r.layers.size())});
  bool any = false;
  for (size_t i = 0; i < seq.size(); ++i) {
    const Stage& st = *seq[i].stage;
    if (st.op == Op::PostNorm) any = true;
    if (st.adds && st.op != Op::PostNorm) return false;
    if (st.reads != Buffer::Residual) continue;
    if (st.op != Op::QKV && st.op != Op::GateUp && st.op != Op::LMHead) return false;
    if (i == 0) return false;
    const Stage& before = *seq[i - 1].stage;
    const int layer = seq[i].layer, before_layer = seq[i - 1].layer;
    bool fits = false;
    if (before.op == Op::Embed) fits = st.op == Op::QKV && layer == 0;
    else if (before.op == Op::PostNorm && before.slot == kAttentionNorm) fits = st.op != Op::LMHead && layer == before_layer;
    else if (before.op == Op::PostNorm) fits = (st.op == Op::QKV && layer == before_layer + 1) || (st.op == Op::LMHead && before_layer + 1 == int(r.layers.size()));
    if (!fits) return false;
  }
  return any;
}

}  // namespace

bool attention_combine_once_default(const ModelConfig& c, int splits) {
  return size_t(c.q_dim()) * size_t(splits) * sizeof(float) >= 192 * 1024;
}

Schedule build_schedule(const ModelConfig& c, const ScheduleParams& p) { return build_schedule(build_step_recipe(c), c, p); }

Schedule build_schedule(const StepRecipe& r, const ModelConfig& c, const ScheduleParams& p) {
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
  if (r.layers.size() != size_t(c.num_layers))
    fail("schedule: the recipe has {} layers, the model {}", r.layers.size(), c.num_layers);
  if (r.devices > 1 && p.chunk_tokens > 0) fail("schedule: chunk steps (prefill) are not built for tensor parallel; prompts go through token steps");
  Schedule s;
  s.num_workgroups = W;
  s.num_layers = c.num_layers;
  s.devices = r.devices;
  s.rank = r.rank;
  // What a stage's counter counts a step: its instructions, on every device where it pushes.
  auto counted = [&](const Stage& st, uint32_t instructions) { return instructions * (st.pushes ? uint32_t(r.devices) : 1u); };
  if (p.narrow_workgroups > 0 && p.narrow_ops != 0) s.narrow_ops = p.narrow_ops, s.narrow_workgroups = p.narrow_workgroups;
  const int groups = c.num_kv_heads;
  // Attention is latency-bound per workgroup, so it is spread over the whole grid (one split of the cache
  // per workgroup and kv head), capped so that combining the partials in o_proj stays cheap.
  s.attention_splits = p.attention_splits > 0 ? p.attention_splits : std::clamp(W / groups, 1, 32);
  Builder b(W);
  // Blocks of a row stage of `op`: one per workgroup, or Schedule::narrow_workgroups.
  auto blocks_of = [&](Op op) { return (s.narrow_ops & op_bit(op)) ? s.narrow_workgroups : W; };
  // Slice-level dataflow over h (ScheduleParams::h_slice_cols) between the row stage that writes h and
  // the one that reads it.
  auto writes_h_slices = [&](const Stage& st) { return p.h_slice_cols > 0 && st.spread == Spread::Rows && st.writes == Buffer::H; };
  auto reads_h_slices = [&](const Stage& st) { return p.h_slice_cols > 0 && st.spread == Spread::Rows && st.reads == Buffer::H; };

  // Counters, named per stage (and per layer) so that diagnostics can say what a workgroup waits for:
  // the stages before the layers, the layers' (a GroupRows stage one per kv group, or one shared with
  // stage barriers; none for a stage that signals h slices), the h slices, the arrival and claim
  // counters, then the stages after the layers.
  std::vector<uint32_t> first_counters, last_counters;
  for (const Stage& st : r.first) first_counters.push_back(b.counter(st.name));
  const bool fold = p.fold_post_norms && r.devices == 1 && post_norms_foldable(r);
  s.post_norms_folded = fold;
  std::vector<std::vector<std::vector<uint32_t>>> lc(size_t(c.num_layers));  // [layer][stage] -> counters
  for (int l = 0; l < c.num_layers; ++l)
    for (const Stage& st : r.layers[size_t(l)].step) {
      std::vector<uint32_t> ids;
      if (fold && st.op == Op::PostNorm) {
        // Folded: no instructions, no counter.
      } else if (st.spread == Spread::GroupRows) {
        if (p.stage_barriers) ids.assign(size_t(groups), b.counter(fmt::format("layer {} {}", l, st.name)));
        else
          for (int g = 0; g < groups; ++g) ids.push_back(b.counter(fmt::format("layer {} {} group {}", l, st.name, g)));
      } else if (!writes_h_slices(st)) {
        ids.push_back(b.counter(fmt::format("layer {} {}", l, st.name)));
      }
      lc[size_t(l)].push_back(std::move(ids));
    }
  // The h slices: one counter per layer and slice, all in one run (HSlices::counter). h's width and its
  // producer's blocks are the layers' (the same in every layer: the recipe's first layer says).
  HSlices& hs = s.h_slices;
  std::vector<std::pair<uint32_t, uint32_t>> h_blocks;
  if (p.h_slice_cols > 0) {
    const Stage* producer = nullptr;
    for (const Stage& st : r.layers.at(0).step)
      if (writes_h_slices(st)) producer = &st;
    if (producer == nullptr) fail("schedule: h slices asked for, but the recipe has no row stage that writes h");
    const uint32_t N = producer->rows;
    h_blocks = split_range(N, uint32_t(blocks_of(producer->op)));
    hs.cols = std::min(uint32_t(p.h_slice_cols), N);
    hs.count = (N + hs.cols - 1) / hs.cols;
    hs.producers.assign(hs.count, 0);
    for (auto [r0, r1] : h_blocks)
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
  for (const Stage& st : r.last) last_counters.push_back(b.counter(st.name));
  // The token the step reads is the last stage's: the step gate.
  s.sample_counter = last_counters.back();

  // The stage before waits on (its counter and its instructions a step), and for a GroupRows stage the
  // counters of its groups and the blocks of each.
  uint32_t prev_counter = 0, prev_count = 0;
  std::vector<uint32_t> prev_groups;
  uint32_t prev_group_count = 0;
  // Folded post-norms (ScheduleParams::fold_post_norms): the one waiting for the next stage to fold it,
  // and which of the residual's two buffers holds x now. A folded step starts with embed's x in x_alt and
  // a post-norm of zeros for layer 0's qkv to fold (kStartsFoldedStep).
  uint8_t pending_fold = kFoldsNoNorm;
  bool residual_alt = false;
  // A stage's instructions read the residual from the buffer that holds it; a stage after a folded
  // post-norm folds it, and unless it comes after the layers (nothing reads x after the LM head), its
  // first block writes x' to the other buffer.
  auto place_residual = [&](const Stage& st, std::vector<Instr>& items, bool writes_back) {
    if (residual_alt && st.adds) fail("schedule: stage '{}' adds to x while x is in its second buffer (folded post-norms)", st.name);
    for (Instr& in : items) {
      if (residual_alt && st.reads == Buffer::Residual) in.flags |= kReadsResidualAlt;
      in.folds = pending_fold;
    }
    if (pending_fold != kFoldsNoNorm && writes_back) {
      items.front().flags |= kWritesResidual;
      residual_alt = !residual_alt;
    }
    pending_fold = kFoldsNoNorm;
  };
  // A stage's instructions outside the layers: pinned, or a row block per workgroup with its slot.
  auto head_stage = [&](const Stage& st, uint32_t signal, bool starts_step) {
    if (st.spread == Spread::Pinned) {
      if (st.home_only && r.rank != 0) return;  // its counter is signalled from the home device
      Instr in = make(st.op, 0, 0, st.rows, signal);
      if (st.pushes) in.flags |= kPushes;
      // The step's first instruction waits for the previous step's token (lag 1: nothing to wait for at
      // step 0).
      if (starts_step) add_wait(in, s.sample_counter, 1, 1);
      else add_wait(in, prev_counter, prev_count);
      if (fold && st.writes == Buffer::Residual) {
        in.flags |= kStartsFoldedStep;
        residual_alt = true;
        pending_fold = kFoldsMlpPostNorm;
      }
      b.pinned(in, 0);
      prev_count = 1;
    } else if (st.spread == Spread::VocabRows) {
      // Tensor parallel: device d's blocks take the partial slots [d * W, d * W + W) of the home device's.
      if (r.devices > 1 && st.rows < uint32_t(W))
        fail("schedule: a device's share of the vocabulary ({} rows) is smaller than its {} workgroups", st.rows, W);
      if (uint64_t(W) * uint64_t(r.devices) > 65535) fail("schedule: {} LM-head slots on {} devices are more than an instruction can name", W, r.devices);
      std::vector<Instr> v;
      uint32_t slot = 0;
      for (auto [r0, r1] : split_range(st.rows, uint32_t(W))) {
        Instr in = make(st.op, 0, st.first_row + r0, st.first_row + r1, signal);
        in.slot = uint16_t(uint32_t(r.rank) * uint32_t(W) + slot++);
        if (st.pushes) in.flags |= kPushes;
        add_wait(in, prev_counter, prev_count);
        v.push_back(in);
      }
      s.lm_head_slots = int(slot) * r.devices;
      place_residual(st, v, false);
      b.stage(std::move(v));
      prev_count = counted(st, slot);
    } else {
      fail("schedule: stage '{}' before or after the layers must be pinned or a vocabulary row stage", st.name);
    }
    prev_counter = signal;
  };
  for (size_t k = 0; k < r.first.size(); ++k) head_stage(r.first[k], first_counters[k], k == 0);

  for (int l = 0; l < c.num_layers; ++l) {
    const auto& steps = r.layers[size_t(l)].step;
    for (size_t k = 0; k < steps.size(); ++k) {
      const Stage& st = steps[k];
      const std::vector<uint32_t>& ids = lc[size_t(l)][k];
      std::vector<Instr> items;
      if (fold && st.op == Op::PostNorm) {
        pending_fold = st.slot == kAttentionNorm ? kFoldsAttentionPostNorm : kFoldsMlpPostNorm;
        continue;  // the next stage waits for this one's producer
      }
      switch (st.spread) {
        case Spread::GroupRows: {
          // At most one block per workgroup (W / groups, rounded down): rounding up gave a few workgroups
          // two blocks, and every attention item of their groups waited for them (docs/log.md,
          // 2026-11-21, v12-v14).
          const uint32_t group_rows = st.rows;
          const uint32_t blocks_per_group = std::max(1u, std::min(group_rows, uint32_t(blocks_of(st.op) / groups)));
          for (int g = 0; g < groups; ++g)
            for (auto [r0, r1] : split_range(group_rows, blocks_per_group)) {
              Instr in = make(st.op, l, uint32_t(g) * group_rows + r0, uint32_t(g) * group_rows + r1, ids[size_t(g)]);
              add_wait(in, prev_counter, prev_count);
              items.push_back(in);
            }
          place_residual(st, items, true);
          b.stage(std::move(items));
          prev_groups = ids;
          prev_group_count = blocks_per_group * (p.stage_barriers ? uint32_t(groups) : 1u);
          prev_counter = ids[0];
          prev_count = blocks_per_group * uint32_t(groups);
          break;
        }
        case Spread::GroupSplits: {
          if (prev_groups.empty()) fail("schedule: layer {} stage '{}' needs a stage of kv-group rows before it", l, st.name);
          for (int g = 0; g < groups; ++g)
            for (int sp = 0; sp < s.attention_splits; ++sp) {
              Instr in = make(st.op, l, uint32_t(g), uint32_t(sp), ids[0]);
              // Dataflow: only this group's rows (stage barriers: all groups' rows, one shared counter).
              add_wait(in, prev_groups[size_t(g)], prev_group_count);
              items.push_back(in);
            }
          b.stage(std::move(items));
          prev_groups.clear();
          prev_counter = ids[0];
          prev_count = uint32_t(groups * s.attention_splits);
          break;
        }
        case Spread::Rows: {
          if (writes_h_slices(st)) {
            // Slice-level dataflow: each block of the stage that writes h signals the slices of h its rows
            // touch, and each block of the stage that reads h waits for every slice in turn, just before it
            // reads it (the kernel's and the emulator's down ops), so a late block delays the slices it
            // writes, not the whole stage.
            for (auto [r0, r1] : h_blocks) {
              Instr in = make(st.op, l, r0, r1, hs.counter(l, hs.first_touched(r0)));
              in.flags = kSignalsHSlices;
              add_wait(in, prev_counter, prev_count);
              items.push_back(in);
            }
            place_residual(st, items, true);
            b.stage(std::move(items));
            break;  // the next stage waits on the slices, not on a counter of this one
          }
          if (reads_h_slices(st)) {
            for (auto [r0, r1] : split_range(st.rows, uint32_t(blocks_of(st.op)))) {
              Instr in = make(st.op, l, r0, r1, ids[0]);
              in.flags = kWaitsHSlices;
              items.push_back(in);
            }
          } else if (claims_rows(s.claimed_rows, b, st.op, st.rows, W)) {
            // Claimed rows: a block per workgroup spanning the stage (ClaimedRows).
            for (int w = 0; w < W; ++w) {
              Instr in = make(st.op, l, 0, st.rows, ids[0]);
              in.flags = kClaimsRows;
              add_wait(in, prev_counter, prev_count);
              items.push_back(in);
            }
          } else {
            for (auto [r0, r1] : split_range(st.rows, uint32_t(blocks_of(st.op)))) {
              Instr in = make(st.op, l, r0, r1, ids[0]);
              add_wait(in, prev_counter, prev_count);
              items.push_back(in);
            }
          }
          for (Instr& in : items) {
            in.slot = st.slot;
            if (st.writes == Buffer::Projected) in.flags |= kWritesProjected;
            if (st.pushes) in.flags |= kPushes;
          }
          place_residual(st, items, true);
          prev_counter = ids[0];
          prev_count = counted(st, uint32_t(items.size()));
          b.stage(std::move(items));
          break;
        }
        default: fail("schedule: layer {} stage '{}' is not laid out as a token step's", l, st.name);
      }
    }
  }
  for (size_t k = 0; k < r.last.size(); ++k) head_stage(r.last[k], last_counters[k], false);
  s = b.finish(std::move(s), p.sync_domains);
  if (p.step_tokens < 1 || p.step_tokens > kMaxStepTokens)
    fail("schedule: token steps of {} tokens (must be between 1 and {})", p.step_tokens, kMaxStepTokens);
  s.step_tokens = p.step_tokens;
  if (p.chunk_tokens < 0 || p.chunk_tokens > 65535 * kChunkMatrixTokens)
    fail("schedule: chunk steps of {} tokens (must be between 0 and {})", p.chunk_tokens, 65535 * kChunkMatrixTokens);
  if (p.chunk_tokens > 0) {
    s.chunk = build_chunk_schedule(r, c, W, p.chunk_tokens, p.chunk_wide_tiles);
    s.chunk.first_line = s.step_counter_lines();
  }
  return s;
}

}  // namespace mk
