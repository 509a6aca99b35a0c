// mk-bench: decode speed of the monokernel against the memory roofline measured in the same run.
// For each context depth: ms/token (median of repetitions, with min/max), tok/s, bytes that must be read
// per token (weights + KV actually read), achieved GB/s and % of the measured streaming-read and copy
// bandwidth. --profile adds the per-instruction breakdown, --json the machine-readable form.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <nlohmann/json.hpp>

#include "device/measure/bandwidth.h"
#include "device/gpu_backend.h"
#include "device/measure/topology_probe.h"
#include "host/tools/cli_checks.h"
#include "host/tools/constraint_options.h"
#include "host/tools/tool_main.h"
#include "runtime/error.h"
#include "runtime/limits.h"
#include "runtime/prefill_flops.h"
#include "runtime/presets.h"
#include "runtime/schedule.h"
#include "runtime/token_vocabulary.h"
#include "runtime/tokenizer.h"
#include "runtime/weight_layout.h"
#include "topology/sync_grouping.h"

#include "mk_git_commit.h"  // generated at build time: MK_GIT_COMMIT

namespace {

struct DepthResult {
  int depth = 0;
  std::vector<double> ms_per_token;  // one per repetition
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double bytes_per_token = 0;
  // Per op, per token, averaged over workgroups (profile); prologue and signal are parts of exec.
  std::vector<double> exec_us, wait_us, prologue_us, signal_us;
  // Per workgroup ([workgroup][op]), per token: exec and wait; and the SM/CU it ran on (last repetition).
  std::vector<std::vector<double>> workgroup_exec_us, workgroup_wait_us;
  std::vector<uint32_t> workgroup_unit;
  std::vector<mk::GpuRunProfile::TracePoint> trace;  // --trace: the traced step of the last repetition
};

// Time to first token for one prompt length: a fresh session fed `length` tokens, then one sampled.
struct PromptResult {
  int length = 0;
  std::vector<double> ttft_ms;  // one per repetition
  double median_ms = 0;
  int chunked_tokens = 0;       // of the prompt, run through chunk steps (prefill)
  // With --profile: per op, the mean over workgroups of its exec and wait time in one launch (ms),
  // averaged over the repetitions.
  std::vector<double> exec_ms, wait_ms;
  // Per op, the FLOPs of the chunk steps (runtime/prefill_flops.h), and their sum over the time to first
  // token.
  std::vector<double> flops;
  double tflops() const {
    double sum = 0;
    for (double f : flops) sum += f;
    return sum / (median_ms * 1e-3) / 1e12;
  }
  // An op's FLOPs over its mean execution time (exec_ms): 0 without --profile or FLOPs.
  double op_tflops(size_t op) const { return op < exec_ms.size() && exec_ms[op] > 0 ? flops[op] / (exec_ms[op] * 1e-3) / 1e12 : 0.0; }
};

// The items of a comma-separated list (an empty text is one empty item).
std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= text.size();) {
    const size_t end = std::min(text.find(',', at), text.size());
    out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// Comma-separated whole numbers in [min, max] given to `option`; an error naming the option and the
// value otherwise.
std::vector<int> parse_int_list(const std::string& text, const std::string& option, long long min, long long max) {
  std::vector<int> out;
  for (const std::string& item : split_commas(text)) {
    long long v = 0;
    const auto [stop, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || stop != item.data() + item.size() || v < min || v > max)
      mk::fail("{} {}: '{}' is not a whole number from {} to {}", option, text, item, min, max);
    out.push_back(int(v));
  }
  return out;
}

// Op names given to `option` (mk::op_name's spelling) as a mask of mk::op_bit; an error naming the
// option and the unknown name otherwise.
uint32_t parse_op_list(const std::string& text, const std::string& option) {
  uint32_t ops = 0;
  for (const std::string& name : split_commas(text)) {
    bool found = false;
    for (int k = 0; k < mk::kNumOps; ++k)
      if (name == mk::op_name(mk::Op(k))) ops |= mk::op_bit(mk::Op(k)), found = true;
    if (!found) mk::fail("{} {}: no stage named '{}' (qkv, o_proj, gate_up, down)", option, text, name);
  }
  return ops;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

// Bytes the decode of one token must read: every weight except the embedding table (one row of it, in
// the image's head format: `embed_row_bytes`), plus the K and V rows of every cached position in every
// layer.
double bytes_per_token(const mk::ModelConfig& c, uint64_t weight_image_bytes, uint64_t embed_row_bytes, double cached_positions) {
  const double row = double(embed_row_bytes);
  const double embed = double(c.vocab_size) * row;
  const double weights = double(weight_image_bytes) - (c.tie_word_embeddings ? 0.0 : embed - row);
  const double kv = 2.0 * c.num_layers * c.num_kv_heads * cached_positions * c.head_dim * 2;
  return weights + kv;
}

// --trace: the traced step as a chain of stages (every instruction of one kind and layer), each measured
// from the moment the previous stage's last workgroup signalled: how long until the first workgroup of
// this stage had its inputs (hand-off), how far the median start lags the first (ready spread), the median
// workgroup's time from inputs to signal (of it, prologue), and how far the last workgroup ends after the
// median one (tail). The spans add up to the step.
void print_trace(const DepthResult& r, const mk::Schedule& s, int step) {
  struct Stage {
    mk::Op op;
    int layer;
    std::vector<size_t> items;
  };
  std::vector<Stage> stages;
  std::vector<size_t> order(s.instrs.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return s.instrs[a].seq < s.instrs[b].seq; });
  for (size_t i : order) {
    const mk::Instr& in = s.instrs[i];
    if (stages.empty() || stages.back().op != in.op || stages.back().layer != in.layer) stages.push_back({in.op, in.layer, {}});
    stages.back().items.push_back(i);
  }
  struct Sum {
    double span = 0, handoff = 0, spread = 0, work = 0, prologue = 0, tail = 0;
    int count = 0;
  };
  std::vector<Sum> per_op(mk::kNumOps);
  const auto& t = r.trace;
  double prev_end = t[order.front()].start;
  const double step_start = prev_end;
  for (const Stage& st : stages) {
    std::vector<double> ready, work, prologue, done;
    for (size_t i : st.items) {
      ready.push_back(t[i].ready);
      work.push_back(t[i].done - t[i].ready);
      if (t[i].prologue_end > 0) prologue.push_back(t[i].prologue_end - t[i].ready);
      done.push_back(t[i].done);
    }
    const double first_ready = *std::min_element(ready.begin(), ready.end());
    const double last_done = *std::max_element(done.begin(), done.end());
    Sum& sum = per_op[size_t(st.op)];
    sum.span += last_done - prev_end;
    sum.handoff += first_ready - prev_end;
    sum.spread += median(ready) - first_ready;
    sum.work += median(work);
    sum.prologue += prologue.empty() ? 0 : median(prologue);
    sum.tail += last_done - median(done);
    ++sum.count;
    prev_end = last_done;
  }
  fmt::print("\ntrace of step {} at depth {} (last repetition), us summed over the layers; span = from the previous "
             "stage's last signal to this stage's last signal:\n",
             step, r.depth);
  fmt::print("{:>10} {:>7} {:>9} {:>8} {:>8} {:>9} {:>8} {:>8}\n", "stage", "count", "span", "handoff", "spread", "work(med)",
             "prologue", "tail");
  for (int op = 0; op < mk::kNumOps; ++op) {
    const Sum& v = per_op[size_t(op)];
    if (v.count == 0) continue;
    fmt::print("{:>10} {:>7} {:>9.1f} {:>8.1f} {:>8.1f} {:>9.1f} {:>8.1f} {:>8.1f}\n", mk::op_name(mk::Op(op)), v.count, v.span * 1e6,
               v.handoff * 1e6, v.spread * 1e6, v.work * 1e6, v.prologue * 1e6, v.tail * 1e6);
  }
  fmt::print("{:>10} {:>7} {:>9.1f}\n", "step", "", (prev_end - step_start) * 1e6);
}

void write_trace_csv(const std::string& path, const std::vector<DepthResult>& results, const mk::Schedule& s,
                     const std::vector<uint32_t>& unit) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) mk::fail("cannot write {}", path);
  fmt::print(f, "depth,index,workgroup,unit,op,layer,begin,end,start_us,ready_us,prologue_end_us,done_us\n");
  for (const auto& r : results) {
    if (r.trace.empty()) continue;
    double t0 = r.trace.front().start;
    for (const auto& p : r.trace) t0 = std::min(t0, p.start);
    auto rel = [&](double v) { return v > 0 ? (v - t0) * 1e6 : 0.0; };
    for (size_t i = 0; i < r.trace.size(); ++i) {
      const mk::Instr& in = s.instrs[i];
      const int w = s.workgroup_of(i);
      fmt::print(f, "{},{},{},{},{},{},{},{},{:.3f},{:.3f},{:.3f},{:.3f}\n", r.depth, i, w, w < int(unit.size()) ? unit[size_t(w)] : 0,
                 mk::op_name(in.op), in.layer, in.begin, in.end, rel(r.trace[i].start), rel(r.trace[i].ready),
                 rel(r.trace[i].prologue_end), rel(r.trace[i].done));
    }
  }
  std::fclose(f);
  fmt::print("trace written to {}\n", path);
}

int run(int argc, char** argv) {
  CLI::App app{"mk-bench: monokernel decode speed next to the measured memory roofline"};
  std::string preset = "llama-3.2-1b", model_dir, depths_text = "128,1024,4096,16384";
  int tokens = 128, reps = 5;
  bool profile = false, json = false;
  app.add_option("--preset", preset, fmt::format("real model shape, random weights ({})", fmt::join(mk::preset_names(), ", ")))
      ->capture_default_str();
  app.add_option("-m,--model", model_dir, "a Hugging Face model directory instead of a preset");
  mk::LoadOptions load;
  mk::cli::add_quantize_options(app, load);
  app.add_option("--depths", depths_text, "context depths, comma-separated")->capture_default_str();
  std::string prompts_text;
  app.add_option("--prompts", prompts_text,
                 "also time the first token after prompts of these lengths (comma-separated; each from an empty "
                 "context): ttft_ms, prompt tokens/s and the chunk steps' TFLOPS; with --profile, each chunk op's time and "
                 "TFLOPS");
  int chunk_tokens = -1;
  app.add_option("--chunk-tokens", chunk_tokens,
                 "prompt tokens per chunk step (prefill; -1: the default, 0: prompts one token per step)")
      ->capture_default_str()
      ->check(mk::cli::int_range(-1, mk::limits::kMaxPositions));
  std::string chunk_tiles = "auto";
  app.add_option("--chunk-tiles", chunk_tiles,
                 "chunk steps' matrix tiles: auto (256 columns where a stage takes less time so) or narrow (128 "
                 "throughout, and less shared memory for the chunk kernel)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "narrow"}));
  app.add_option("-n,--tokens", tokens, "tokens generated per repetition")->capture_default_str()->check(mk::cli::int_range(2, 100000));
  app.add_option("-r,--reps", reps, "repetitions per depth")->capture_default_str()->check(mk::cli::int_range(1, 1000));
  app.add_flag("--profile", profile, "per-instruction time breakdown (globaltimer per instruction)");
  int stream_slots = mk::GpuOptions{}.stream_slots, lookahead = mk::GpuOptions{}.stream_lookahead;
  app.add_option("--stream-slots", stream_slots,
                 "shared-memory slots of the weight stream (-1: as many as fit; 0: weights through registers)")
      ->capture_default_str();
  app.add_option("--lookahead", lookahead, "instructions ahead the weight stream may issue chunks")->capture_default_str();
  bool stage_barriers = false;
  app.add_flag("--stage-barriers", stage_barriers,
               "flat-barrier schedule: every instruction waits for the whole previous stage (baseline for issue 4)");
  int early = mk::GpuOptions{}.stream_early, slot_kib = 0;
  app.add_option("--slot-kib", slot_kib, "KiB per weight-stream slot (0: the default)")->capture_default_str();
  app.add_option("--early", early, "weight chunks issued before an instruction's inputs are ready (-1: all slots)")
      ->capture_default_str();
  int workgroups = 0;
  app.add_option("--workgroups", workgroups, "workgroups of the persistent launch, one per SM (0: every SM)")
      ->capture_default_str()
      ->check(mk::cli::int_range(0, 100000));
  bool no_waits = false;
  app.add_flag("--no-waits", no_waits,
               "timing only, the results are wrong on purpose: the token steps' instructions run without waiting for "
               "their inputs, except the sampling (which still waits for every LM-head block) and the embedding; what "
               "a step costs without the hand-offs between stages. The model's stop tokens are ignored");
  int narrow = mk::GpuOptions{}.narrow_workgroups;
  std::string narrow_ops = "qkv,o_proj";
  app.add_option("--narrow", narrow,
                 "cut the row stages of --narrow-ops into this many blocks instead of one per workgroup (-1: the latency-bound "
                 "stages on half the workgroups, as the engine plans them; 0: none)")
      ->capture_default_str()
      ->check(mk::cli::int_range(-1, 100000));
  app.add_option("--narrow-ops", narrow_ops, "the stages --narrow applies to (comma-separated: qkv, o_proj, gate_up, down)")
      ->capture_default_str();
  std::string workgroups_csv;
  app.add_option("--profile-csv", workgroups_csv,
                 "with --profile: write each workgroup's SM/CU and exec / wait per instruction kind to this CSV file");
  int trace_step = -1;
  std::string trace_csv;
  app.add_option("--trace", trace_step,
                 "timestamp every instruction of this step of each launch (0 = the prompt token; implies --profile) and "
                 "print the step as a chain of stages")
      ->check(mk::cli::int_range(0, 100000));
  app.add_option("--trace-csv", trace_csv, "with --trace: write every instruction's timestamps to this CSV file");
  app.add_flag("--json", json, "print JSON instead of the table");
  mk::SamplingParams sampling;  // greedy unless asked
  sampling.seed = 1;
  app.add_option("--temp", sampling.temperature, "the timed tokens' temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-k", sampling.top_k, "the timed tokens' top-k (0: off)")->capture_default_str();
  app.add_option("--top-p", sampling.top_p, "the timed tokens' top-p")->capture_default_str();
  app.add_option("--min-p", sampling.min_p, "the timed tokens' min-p")->capture_default_str();
  int logprobs = -1;
  app.add_option("--logprobs", logprobs, "the timed tokens' log-probabilities with N alternatives each (0..20; -1: none)")
      ->capture_default_str()
      ->check(mk::cli::int_range(-1, mk::kMaxTopLogprobs));
  float frequency_penalty = 0, presence_penalty = 0;
  app.add_option("--frequency-penalty", frequency_penalty, "the timed tokens' frequency penalty (-2..2)")
      ->capture_default_str()
      ->check(CLI::Range(-mk::kMaxPenalty, mk::kMaxPenalty));
  app.add_option("--presence-penalty", presence_penalty, "the timed tokens' presence penalty (-2..2)")
      ->capture_default_str()
      ->check(CLI::Range(-mk::kMaxPenalty, mk::kMaxPenalty));
  mk::cli::ConstraintFlags constraint_flags;
  mk::cli::add_constraint_options(app, constraint_flags);
  std::string tokenizer_dir;
  app.add_option("--tokenizer", tokenizer_dir,
                 "with a constraint: the directory of the tokenizer.json it is compiled against (default: -m's; a preset "
                 "needs one of its vocabulary size)");
  int splits = 0;
  app.add_option("--splits", splits, "attention splits per kv head (0: the schedule's default)")->capture_default_str();
  std::string attention_path = "auto";
  app.add_option("--attention-path", attention_path,
                 "attention's path: tiles, warps (the long-context kernels' warp chunks) or auto (by how far a launch's "
                 "sequence reaches)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "tiles", "warps"}));
  std::string attention_combine = "auto";
  app.add_option("--attention-combine", attention_combine,
                 "where attention's split partials are combined: o_proj (in every o_proj workgroup), group (once per kv "
                 "group, by its last split) or auto (the model's default)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "o_proj", "group"}));
  bool post_norm_stages = false;
  app.add_flag("--post-norm-stages", post_norm_stages,
               "post-norm layers (Gemma 3): each post-norm as a stage of its own instead of folded into the stage after it");
  std::string sync_domains = "1";
  app.add_option("--sync-domains", sync_domains,
                 "per-domain counters for whole-stage dependencies (issue 4): 1 = flat counters; N = N domains, workgroup w in "
                 "w % N; 'probe' = the probed GPC/XCD map, fragments under 8 units merged")
      ->capture_default_str();
  double watchdog = mk::GpuOptions{}.watchdog_seconds;
  mk::cli::add_watchdog_option(app, watchdog);
  if (const auto status = mk::cli::parse_command_line(app, argc, argv)) return *status;
  mk::cli::check_sampling_flags(sampling);
  if (trace_step >= 0) {
    profile = true;
    if (trace_step >= tokens) mk::fail("--trace {}: each launch runs {} steps (-n), so at most step {}", trace_step, tokens, tokens - 1);
  }

  const std::vector<int> depths = parse_int_list(depths_text, "--depths", 0, mk::limits::kMaxPositions);
  const uint32_t narrow_mask = narrow > 0 ? parse_op_list(narrow_ops, "--narrow-ops") : 0u;
  const std::vector<int> prompts = prompts_text.empty() ? std::vector<int>{} : parse_int_list(prompts_text, "--prompts", 1, mk::limits::kMaxPositions);
  const int max_depth = *std::max_element(depths.begin(), depths.end());
  const int max_prompt = prompts.empty() ? 0 : *std::max_element(prompts.begin(), prompts.end());

  std::string why;
  if (!mk::gpu_available(&why)) mk::fail("mk-bench needs a GPU; none is usable here: {}", why);
  const auto ceilings = mk::measure_bandwidth();
  std::unique_ptr<mk::Model> model =
      model_dir.empty() ? mk::preset_model(preset, load) : mk::load_model(model_dir, load);
  mk::GpuOptions opt;
  opt.context = std::max(max_depth + tokens + 1, max_prompt + 2);
  if (no_waits) {
    // Each step still ends when every workgroup has run its LM-head block (the sampling waits for them all
    // and the next step's gate for the sampling), so a step takes as long as the slowest workgroup's list.
    opt.debug_edit_schedule = [](mk::Schedule& s) {
      for (mk::Instr& in : s.instrs)
        if (in.op != mk::Op::Sample && in.op != mk::Op::Embed) in.num_waits = 0;
    };
  }
  // Random weights (a preset) or timing only: the tokens are meaningless, and an EOS among them must not
  // stop a timed run early (Gemma 3's EOS is id 1, which random weights pick).
  if (no_waits || model_dir.empty()) model->config.eos_token_ids.clear();
  opt.random_weights_seed = model_dir.empty() ? 1234 : 0;
  // The timed tokens' constraint (docs/structured_output.md), against the model's EOS ids (none for a preset:
  // the constraint must then run for all -n tokens, or the run fails saying so).
  std::shared_ptr<const mk::constraint::TokenAutomaton> constraint;
  double constraint_compile_ms = 0;
  if (const mk::constraint::ConstraintSpec spec = mk::cli::constraint_spec(constraint_flags); spec.active()) {
    const std::string dir = tokenizer_dir.empty() ? model_dir : tokenizer_dir;
    if (dir.empty()) mk::cli::usage_error("{} on a preset needs --tokenizer DIR", mk::cli::constraint_flag_name(constraint_flags));
    const mk::Tokenizer tok = mk::Tokenizer::load(dir);
    const auto t0 = std::chrono::steady_clock::now();
    constraint = mk::cli::compile_constraint_flags(constraint_flags, spec, tok, model->config.vocab_size, model->config.eos_token_ids);
    constraint_compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  opt.profile = profile;
  opt.trace_step = trace_step;
  opt.attention_splits = splits;
  opt.attention_combine = attention_combine == "auto" ? -1 : attention_combine == "group" ? 1 : 0;
  opt.fold_post_norms = !post_norm_stages;
  opt.stream_slots = stream_slots;
  opt.stream_lookahead = lookahead;
  opt.stream_early = early;
  opt.workgroups = workgroups;
  opt.watchdog_seconds = watchdog;
  opt.narrow_workgroups = narrow;
  opt.narrow_ops = narrow_mask;
  opt.stream_slot_kib = slot_kib;
  opt.attention_path = attention_path == "tiles"   ? mk::AttentionPath::Tiles
                       : attention_path == "warps" ? mk::AttentionPath::WarpChunks
                                                   : mk::AttentionPath::Auto;
  if (sync_domains == "probe") {
    const mk::Topology t = mk::probe_topology(opt.device);
    const std::vector<int> unit_group = mk::merge_small_domains(t, 8);
    opt.unit_domain = mk::hw_id_group_table(t, unit_group);
    opt.sync_domains = mk::count_groups(unit_group);
  } else {
    try {
      opt.sync_domains = std::stoi(sync_domains);
    } catch (const std::exception&) {
      mk::fail("--sync-domains {}: expected a number or 'probe'", sync_domains);
    }
  }
  opt.stage_barriers = stage_barriers;
  opt.chunk_tokens = chunk_tokens;
  opt.chunk_wide_tiles = chunk_tiles == "auto";
  auto gpu = mk::create_gpu_backend(*model, opt);
  const auto& info = gpu->info();
  const auto& cfg = model->config;

  std::vector<DepthResult> results;
  for (int depth : depths) {
    DepthResult r;
    r.depth = depth;
    r.exec_us.assign(mk::kNumOps, 0.0);
    r.wait_us.assign(mk::kNumOps, 0.0);
    r.prologue_us.assign(mk::kNumOps, 0.0);
    r.signal_us.assign(mk::kNumOps, 0.0);
    for (int rep = 0; rep < reps + 1; ++rep) {  // repetition 0 warms up
      gpu->reset();
      if (depth > 0) gpu->fill_context_for_benchmark(depth, 99 + uint64_t(rep));
      mk::GenerateRequest req;
      req.input = {1};
      req.max_new_tokens = tokens;
      req.sampling = sampling;
      req.adjust.frequency_penalty = frequency_penalty;
      req.adjust.presence_penalty = presence_penalty;
      if (logprobs >= 0) req.top_logprobs = logprobs, req.on_logprobs = [](const mk::TokenLogprobs&) {};
      req.constraint = constraint;
      const auto result = gpu->generate(req, {});
      const auto& t = gpu->profile().token_seconds;
      if (int(t.size()) != tokens)
        mk::fail("expected {} tokens, got {} ({}){}", tokens, t.size(), mk::stop_reason_name(result.stop),
                 constraint ? ": the constraint was complete before -n tokens; time one that runs longer" : "");
      if (rep == 0) continue;
      r.ms_per_token.push_back((t.back() - t.front()) / double(tokens - 1) * 1e3);
      if (profile) {
        const auto& p = gpu->profile();
        const double per = 1e6 / (double(p.num_workgroups) * tokens * reps);
        for (int op = 0; op < mk::kNumOps; ++op) {
          r.exec_us[size_t(op)] += p.exec_seconds[size_t(op)] * per;
          r.wait_us[size_t(op)] += p.wait_seconds[size_t(op)] * per;
          r.prologue_us[size_t(op)] += p.prologue_seconds[size_t(op)] * per;
          r.signal_us[size_t(op)] += p.signal_seconds[size_t(op)] * per;
        }
        const double per_wg = 1e6 / (double(tokens) * reps);
        r.workgroup_exec_us.resize(size_t(p.num_workgroups), std::vector<double>(mk::kNumOps, 0.0));
        r.workgroup_wait_us.resize(size_t(p.num_workgroups), std::vector<double>(mk::kNumOps, 0.0));
        for (size_t w = 0; w < size_t(p.num_workgroups); ++w)
          for (size_t op = 0; op < size_t(mk::kNumOps); ++op) {
            r.workgroup_exec_us[w][op] += p.workgroup_exec_seconds[w][op] * per_wg;
            r.workgroup_wait_us[w][op] += p.workgroup_wait_seconds[w][op] * per_wg;
          }
        r.workgroup_unit = p.workgroup_unit;
        r.trace = p.trace;
      }
    }
    r.median_ms = median(r.ms_per_token);
    r.min_ms = *std::min_element(r.ms_per_token.begin(), r.ms_per_token.end());
    r.max_ms = *std::max_element(r.ms_per_token.begin(), r.ms_per_token.end());
    r.bytes_per_token = bytes_per_token(cfg, gpu->weight_bytes(), mk::plan_weight_layout(*model).head_row_bytes(cfg.hidden_size),
                                        depth + 0.5 * tokens);
    results.push_back(r);
  }

  // Time to first token: the wall time from the request to the first token's callback, as a caller sees
  // it (launch included).
  std::vector<PromptResult> prompt_results;
  for (int length : prompts) {
    PromptResult r;
    r.length = length;
    std::mt19937 rng(7u + unsigned(length));
    std::uniform_int_distribution<int32_t> id(3, model->config.vocab_size - 1);
    mk::GenerateRequest req;
    for (int i = 0; i < length; ++i) req.input.push_back(id(rng));
    req.max_new_tokens = 1;
    req.sampling.temperature = 0;
    for (int rep = 0; rep < reps + 1; ++rep) {  // repetition 0 warms up
      gpu->reset();
      const auto t0 = std::chrono::steady_clock::now();
      double first_ms = -1;
      const auto result = gpu->generate(req, [&](int32_t) {
        if (first_ms < 0) first_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      });
      if (first_ms < 0) mk::fail("--prompts {}: no token came back", length);
      if (rep == 0) continue;
      r.ttft_ms.push_back(first_ms);
      r.chunked_tokens = result.stats.chunked_tokens;
      if (profile) {
        const auto& p = gpu->profile();
        r.exec_ms.resize(mk::kNumOps, 0.0), r.wait_ms.resize(mk::kNumOps, 0.0);
        for (int op = 0; op < mk::kNumOps; ++op) {
          r.exec_ms[size_t(op)] += p.exec_seconds[size_t(op)] * 1e3 / (double(p.num_workgroups) * reps);
          r.wait_ms[size_t(op)] += p.wait_seconds[size_t(op)] * 1e3 / (double(p.num_workgroups) * reps);
        }
      }
    }
    r.median_ms = median(r.ttft_ms);
    for (int op = 0; op < mk::kNumOps; ++op) r.flops.push_back(mk::chunk_op_flops(cfg, mk::Op(op), 0, r.chunked_tokens));
    prompt_results.push_back(r);
  }

  const std::string model_name = model_dir.empty() ? "preset " + preset + " (random weights)" : model_dir;
  if (json) {
    nlohmann::json j;
    j["commit"] = MK_GIT_COMMIT;
    j["device"] = {{"name", info.name}, {"sms", info.sm_count}, {"read_gbps", ceilings.read_gbps}, {"copy_gbps", ceilings.copy_gbps}};
    j["model"] = model_name;
    const mk::WeightLayout layout = mk::plan_weight_layout(*model);
    j["matrix_format"] = std::string(mk::matrix_format_name(layout.format));
    j["head_format"] = std::string(mk::matrix_format_name(layout.head_format));
    j["tokens_per_repetition"] = tokens;
    j["sampling"] = {{"temperature", sampling.temperature}, {"top_k", sampling.top_k}, {"top_p", sampling.top_p}, {"min_p", sampling.min_p}};
    j["logprobs"] = logprobs;
    j["penalties"] = {{"frequency", frequency_penalty}, {"presence", presence_penalty}};
    if (constraint)
      j["constraint"] = {{"flag", mk::cli::constraint_flag_name(constraint_flags)},
                         {"token_states", constraint->token_states()},
                         {"table_bytes", constraint->device_bytes()},
                         {"compile_ms", constraint_compile_ms}};
    j["engine"] = gpu->name();
    j["workgroups"] = gpu->schedule().num_workgroups;
    j["attention_splits"] = gpu->schedule().attention_splits;
    j["attention_combine"] = gpu->schedule().combine_once.enabled ? "group" : "o_proj";
    j["post_norms_folded"] = gpu->schedule().post_norms_folded;
    j["no_waits"] = no_waits;
    j["narrow"] = {{"workgroups", gpu->schedule().narrow_workgroups}, {"ops", mk::op_names(gpu->schedule().narrow_ops)}};
    for (const auto& r : results) {
      nlohmann::json d = {{"depth", r.depth},          {"ms_per_token", r.ms_per_token}, {"median_ms", r.median_ms},
                          {"tok_per_s", 1e3 / r.median_ms}, {"bytes_per_token", r.bytes_per_token},
                          {"gbps", r.bytes_per_token / (r.median_ms * 1e-3) / 1e9},
                          {"pct_read_ceiling", 100 * r.bytes_per_token / (r.median_ms * 1e-3) / 1e9 / ceilings.read_gbps}};
      if (profile)
        for (int op = 0; op < mk::kNumOps; ++op)
          d["profile_us"][mk::op_name(mk::Op(op))] = {{"exec", r.exec_us[size_t(op)]},
                                                      {"wait", r.wait_us[size_t(op)]},
                                                      {"prologue", r.prologue_us[size_t(op)]},
                                                      {"signal", r.signal_us[size_t(op)]}};
      j["depths"].push_back(d);
    }
    j["chunk_tokens"] = gpu->schedule().chunk.tokens;
    j["chunk_tiles"] = chunk_tiles;
    for (const auto& r : prompt_results) {
      nlohmann::json pr = {{"length", r.length},
                           {"ttft_ms", r.median_ms},
                           {"ttft_all_ms", r.ttft_ms},
                           {"prompt_tok_per_s", r.length / (r.median_ms * 1e-3)},
                           {"chunked_tokens", r.chunked_tokens},
                           {"tflops", r.tflops()}};
      for (size_t op = 0; op < r.exec_ms.size(); ++op)
        if (r.exec_ms[op] > 0) {
          nlohmann::json& o = pr["profile_ms"][mk::op_name(mk::Op(op))];
          o = {{"exec", r.exec_ms[op]}, {"wait", r.wait_ms[op]}};
          if (r.op_tflops(op) > 0) o["tflops"] = r.op_tflops(op);
        }
      j["prompts"].push_back(pr);
    }
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("mk-bench  commit {}\n", MK_GIT_COMMIT);
  fmt::print("device: {} ({} SMs, {:.1f} GiB); measured now: streaming read {:.0f} GB/s, copy {:.0f} GB/s (read+write)\n",
             info.name, info.sm_count, double(info.total_memory) / (1 << 30), ceilings.read_gbps, ceilings.copy_gbps);
  const mk::WeightLayout layout = mk::plan_weight_layout(*model);
  fmt::print("model: {}, {} layers, hidden {}, weights {:.3f} GB ({}, embedding and LM head {}); {} attention splits per kv "
             "head, combined {}, one launch per repetition\nengine: {}\n",
             model_name, cfg.num_layers, cfg.hidden_size, double(gpu->weight_bytes()) / 1e9, mk::matrix_format_name(layout.format),
             mk::matrix_format_name(layout.head_format), gpu->schedule().attention_splits,
             gpu->schedule().combine_once.enabled ? "once per kv group" : "in o_proj", gpu->name());
  fmt::print("batch 1, greedy, {} tokens per repetition, {} repetitions (median [min, max]); context depth = cached "
             "positions before the first generated token (filled with random K/V)\n\n",
             tokens, reps);
  if (no_waits) fmt::print("--no-waits: timing only, the instructions did not wait for their inputs (the results are wrong)\n\n");
  fmt::print("{:>7} {:>24} {:>9} {:>12} {:>9} {:>8} {:>8}\n", "depth", "ms/token", "tok/s", "MB/token", "GB/s", "%read",
             "%copy");
  for (const auto& r : results) {
    const double gbps = r.bytes_per_token / (r.median_ms * 1e-3) / 1e9;
    fmt::print("{:>7} {:>9.4f} [{:.4f}, {:.4f}] {:>9.1f} {:>12.1f} {:>9.0f} {:>7.1f}% {:>7.1f}%\n", r.depth, r.median_ms, r.min_ms,
               r.max_ms, 1e3 / r.median_ms, r.bytes_per_token / 1e6, gbps, 100 * gbps / ceilings.read_gbps,
               100 * gbps / ceilings.copy_gbps);
  }
  if (!prompt_results.empty()) {
    fmt::print("\ntime to first token (a prompt of random ids from an empty context, then one token; median of {}):\n", reps);
    fmt::print("{:>7} {:>12} {:>16}\n", "prompt", "ttft ms", "prompt tok/s");
    for (const auto& r : prompt_results) {
      fmt::print("{:>7} {:>12.2f} {:>16.0f}   ({} tokens in chunk steps, {:.0f} TFLOPS over the time to first token)\n", r.length,
                 r.median_ms, r.length / (r.median_ms * 1e-3), r.chunked_tokens, r.tflops());
      for (size_t op = 0; op < r.exec_ms.size(); ++op) {
        if (r.exec_ms[op] <= 0) continue;
        const std::string rate = r.op_tflops(op) > 0 ? fmt::format("  {:5.0f} TFLOPS", r.op_tflops(op)) : "";
        fmt::print("        {:<16} exec {:8.3f} ms  wait {:8.3f} ms (mean over workgroups){}\n", mk::op_name(mk::Op(op)), r.exec_ms[op],
                   r.wait_ms[op], rate);
      }
    }
  }
  if (profile) {
    fmt::print("\nper-instruction time per token, averaged over workgroups (us): exec / waiting on counters;\n"
               "of exec: prologue (inputs into shared memory) and signal (counter release)\n");
    for (const auto& r : results) {
      fmt::print("depth {:>6}:", r.depth);
      for (int op = 0; op < mk::kNumOps; ++op)
        fmt::print("  {} {:.1f}/{:.1f}", mk::op_name(mk::Op(op)), r.exec_us[size_t(op)], r.wait_us[size_t(op)]);
      fmt::print("\n{:>13}", "");
      for (int op = 0; op < mk::kNumOps; ++op)
        fmt::print("  {} pro {:.1f} sig {:.1f}", mk::op_name(mk::Op(op)), r.prologue_us[size_t(op)], r.signal_us[size_t(op)]);
      fmt::print("\n{:>13}", "");
      // How evenly the work spread: exec over workgroups (those that ran the kind at all).
      for (int op = 0; op < mk::kNumOps; ++op) {
        std::vector<double> v;
        for (const auto& w : r.workgroup_exec_us)
          if (w[size_t(op)] > 0) v.push_back(w[size_t(op)]);
        if (v.size() > 1)
          fmt::print("  {} [{:.1f} {:.1f} {:.1f}]", mk::op_name(mk::Op(op)), *std::min_element(v.begin(), v.end()), median(v),
                     *std::max_element(v.begin(), v.end()));
      }
      fmt::print("  (exec over workgroups: min median max)\n");
    }
    if (!workgroups_csv.empty()) {
      std::FILE* f = std::fopen(workgroups_csv.c_str(), "w");
      if (!f) mk::fail("cannot write {}", workgroups_csv);
      fmt::print(f, "depth,workgroup,unit");
      for (int op = 0; op < mk::kNumOps; ++op) fmt::print(f, ",{0}_exec_us,{0}_wait_us", mk::op_name(mk::Op(op)));
      fmt::print(f, "\n");
      for (const auto& r : results)
        for (size_t w = 0; w < r.workgroup_exec_us.size(); ++w) {
          fmt::print(f, "{},{},{}", r.depth, w, r.workgroup_unit[w]);
          for (size_t op = 0; op < size_t(mk::kNumOps); ++op)
            fmt::print(f, ",{:.2f},{:.2f}", r.workgroup_exec_us[w][op], r.workgroup_wait_us[w][op]);
          fmt::print(f, "\n");
        }
      std::fclose(f);
      fmt::print("per-workgroup profile written to {}\n", workgroups_csv);
    }
  }
  if (trace_step >= 0) {
    for (const auto& r : results)
      if (!r.trace.empty()) print_trace(r, gpu->schedule(), trace_step);
    if (!trace_csv.empty()) write_trace_csv(trace_csv, results, gpu->schedule(), results.empty() ? std::vector<uint32_t>{} : results.back().workgroup_unit);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return mk::cli::run_tool("mk-bench", run, argc, argv); }
