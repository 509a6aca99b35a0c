// Host side of the monokernel: device checks, memory budget, weight upload, one cooperative launch per
// generate() call, token streaming from host-mapped memory, and a watchdog that names stuck instructions
// and stops a hung launch (device/launch_abort.h).
#include "device/gpu_backend.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <optional>
#include <thread>

#include "device/chunk_gemm.h"
#include "device/gpu.h"
#include "device/kernel_params.h"
#include "device/kernel_plan.h"
#include "device/monokernel.h"
#include "device/weights_fill.h"
#include "runtime/error.h"
#include "runtime/host_memory.h"
#include "runtime/limits.h"
#include "runtime/step_recipe.h"
#include "runtime/token_automaton.h"
#include "runtime/schedule.h"
#include "runtime/quantize.h"
#include "runtime/schedule_diagnostics.h"
#include "runtime/weight_layout.h"

namespace mk {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// How many times the watchdog's limit one instruction may run without an instruction ending anywhere.
constexpr double kInstructionLimitFactor = 10;
// A waiting mark that moved this recently is a wait going on (it moves every 2^kWaitBeatShift ns, ~67 ms).
constexpr auto kWaitBeatFresh = std::chrono::milliseconds(500);

// A device allocation freed on destruction.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr) (void)hipFree(ptr);
  }
  // A hung kernel may still use it: hipFree would wait for the kernel (forever), so it is left allocated.
  void abandon() { ptr = nullptr; }
  void release() {
    if (ptr) (void)hipFree(ptr);
    ptr = nullptr, bytes = 0;
  }
  void allocate(size_t n, const char* what) {
    bytes = std::max<size_t>(n, 16);
    const hipError_t err = hipMalloc(&ptr, bytes);
    if (err != hipSuccess) {
      size_t free_b = 0, total_b = 0;
      (void)hipGetLastError();
      (void)hipMemGetInfo(&free_b, &total_b);
      throw OutOfMemoryError(fmt::format("out of device memory allocating {} ({:.2f} GiB; {:.2f} GiB free of {:.2f}): {}",
                                         what, double(bytes) / kGiB, double(free_b) / kGiB, double(total_b) / kGiB,
                                         hipGetErrorString(err)));
    }
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};

// Pinned host memory mapped into the device's address space (the kernel writes tokens into it).
struct MappedHostBuffer {
  void* host = nullptr;
  void* device = nullptr;
  ~MappedHostBuffer() {
    if (host) (void)hipHostFree(host);
  }
  void abandon() { host = nullptr; }  // as DeviceBuffer::abandon
  size_t bytes = 0;
  void allocate(size_t n) {  // replaces what it held
    if (host) MK_GPU_CHECK(hipHostFree(host));
    host = nullptr;
    bytes = n;
    MK_GPU_CHECK(hipHostMalloc(&host, n, hipHostMallocMapped));
    std::memset(host, 0, n);
    MK_GPU_CHECK(hipHostGetDevicePointer(&device, host, 0));
  }
};

template <typename T>
void upload(DeviceBuffer& dst, const std::vector<T>& src, const char* what) {
  dst.allocate(src.size() * sizeof(T), what);
  MK_GPU_CHECK(hipMemcpy(dst.ptr, src.data(), src.size() * sizeof(T), hipMemcpyHostToDevice));
}

GpuInfo query_device(int device) {
  int count = 0;
  const hipError_t err = hipGetDeviceCount(&count);
  if (err != hipSuccess || count == 0)
    fail("no GPU found ({})", err == hipSuccess ? "the runtime reports 0 devices" : hipGetErrorString(err));
  if (device < 0 || device >= count) fail("GPU {} does not exist ({} present)", device, count);
  MK_GPU_CHECK(hipSetDevice(device));
  hipDeviceProp_t prop;
  MK_GPU_CHECK(hipGetDeviceProperties(&prop, device));
  GpuInfo info;
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.l2_bytes = prop.l2CacheSize;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  MK_GPU_CHECK(hipMemGetInfo(&info.free_memory, &info.total_memory));
#if defined(MK_PLATFORM_NVIDIA)
  if (prop.major != 9)
    fail("unsupported GPU: {} has compute capability {}.{}; this build targets Hopper (sm_90a: H100/H200)", info.name,
         prop.major, prop.minor);
#else
  const std::string arch = prop.gcnArchName;
  if (arch.rfind("gfx94", 0) != 0 && arch.rfind("gfx90a", 0) != 0)
    fail("unsupported GPU: {} is {}; this build targets gfx942/gfx940/gfx90a", info.name, arch);
#endif
  return info;
}

// The fold kernels fix per op which of x's buffers it reads and which post-norm it folds (device/machine.h's
// norm_prologue, the ops' prestage): a folded schedule must say the same, instruction by instruction.
void check_folded_step(const Schedule& s) {
  for (const Instr& in : s.instrs) {
    const bool alt = in.flags & kReadsResidualAlt;
    bool ok = true;
    switch (in.op) {
      case Op::Embed: ok = (in.flags & kStartsFoldedStep) != 0; break;
      case Op::QKV: ok = alt && in.folds == kFoldsMlpPostNorm; break;
      case Op::GateUp: ok = !alt && in.folds == kFoldsAttentionPostNorm; break;
      case Op::LMHead: ok = alt && in.folds == kFoldsMlpPostNorm && !(in.flags & kWritesResidual); break;
      case Op::PostNorm: ok = false; break;
      default: break;
    }
    if (!ok) fail("internal: the folded schedule's {} is not what the fold kernels run", s.describe(in));
  }
}

// What the kernel supports, checked before anything is allocated.
void validate_model(const ModelConfig& c) {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) fail("model not supported by the GPU kernel: {}", what);
  };
  need(c.hidden_size % 8 == 0, fmt::format("hidden_size {} is not a multiple of 8", c.hidden_size));
  need(c.intermediate_size % 8 == 0, fmt::format("intermediate_size {} is not a multiple of 8", c.intermediate_size));
  need(c.q_dim() % 8 == 0, fmt::format("num_heads * head_dim = {} is not a multiple of 8", c.q_dim()));
  need(c.head_dim <= 256 && c.head_dim % 8 == 0, fmt::format("head_dim {} (must be a multiple of 8, at most 256)", c.head_dim));
  need(c.group_size() <= 16, fmt::format("{} query heads per kv head (at most 16)", c.group_size()));
}

class MonokernelBackend final : public GpuBackend {
 public:
  MonokernelBackend(const Model& model, const GpuOptions& opt) : model_(model), cfg_(model.config), opt_(opt) {
    info_ = query_device(opt.device);
    validate_model(cfg_);
    if (opt.context < 1 || opt.context > limits::kMaxPositions)
      fail("context must be between 1 and {} tokens (got {})", limits::kMaxPositions, opt.context);
    if (opt.workgroups < 0 || opt.workgroups > info_.sm_count)
      fail("workgroups must be between 1 and the GPU's {} SMs/CUs, or 0 for all (got {})", info_.sm_count, opt.workgroups);
    layout_ = plan_weight_layout(model);
    const int workgroups = opt.workgroups > 0 ? opt.workgroups : info_.sm_count;
    if (opt.narrow_workgroups < -1 || opt.narrow_workgroups > workgroups)
      fail("narrow stages need between 1 and the {} workgroups, 0 for none or -1 for the engine's plan (got {})", workgroups,
           opt.narrow_workgroups);
    ScheduleParams sp{workgroups, opt.attention_splits, opt.stage_barriers, opt.sync_domains, 0,
                      plan_chunk_steps(cfg_, opt.chunk_tokens, opt.context)};
    sp.attention_combine = opt.attention_combine;
    sp.fold_post_norms = opt.fold_post_norms;
    sp.chunk_wide_tiles = opt.chunk_wide_tiles && dev::chunk_gemm_wide_tiles(layout_.format);
    if (opt.narrow_workgroups > 0) sp.narrow_workgroups = opt.narrow_workgroups, sp.narrow_ops = opt.narrow_ops;
    schedule_ = build_schedule(cfg_, sp);
    const bool grouped = schedule_.sync_domains > 1;
    if (grouped && schedule_.post_norms_folded) {  // no kernels fold with per-domain counters (monokernel_entry)
      sp.fold_post_norms = false;
      schedule_ = build_schedule(cfg_, sp);
    }
    const bool fold = schedule_.post_norms_folded;
    if (opt.attention_path == AttentionPath::WarpChunks && !dev::attention_warp_path_supported(dims()))
      fail("attention's warp path needs head_dim / 8 to be a power of two and query heads per kv head x head_dim "
           "<= 1,024 (head_dim {}, {} query heads per kv head)",
           cfg_.head_dim, cfg_.group_size());
    // The streamed kernel for planning the shared memory (its static part is the largest); the final
    // choice follows the plan.
    kernel_ = dev::monokernel_entry(layout_.format, true, opt.profile, grouped, false, fold);
    int max_smem = 0;
    MK_GPU_CHECK(hipDeviceGetAttribute(&max_smem, hipDeviceAttributeMaxSharedMemoryPerBlock, opt.device));
    if (opt.narrow_workgroups < 0) {  // the latency-bound row stages on half the workgroups, where they fit
      const dev::StreamPlan wide = stream_plan(dev::activation_smem_bytes(schedule_, dims()), size_t(max_smem));
      sp.narrow_ops = dev::plan_narrow_stages(schedule_, dims(), size_t(wide.slots) * wide.slot_bytes);
      if (sp.narrow_ops != 0) {
        sp.narrow_workgroups = workgroups / 2;
        schedule_ = build_schedule(cfg_, sp);
      }
    }
    for (size_t u = 0; u < opt.unit_domain.size(); ++u)
      if (opt.unit_domain[u] < -1 || opt.unit_domain[u] >= opt.sync_domains)
        fail("sync domains: hardware unit {} is mapped to domain {}, outside 0..{}", u, opt.unit_domain[u], opt.sync_domains - 1);
    if (opt.debug_edit_schedule) {
      if (opt.debug_edit_launches > 0) clean_schedule_ = schedule_;
      opt.debug_edit_schedule(schedule_);
      if (clean_schedule_ && (clean_schedule_->instrs.size() != schedule_.instrs.size() || clean_schedule_->wg_begin != schedule_.wg_begin))
        fail("debug_edit_schedule: with debug_edit_launches the edit must keep the instruction lists' lengths");
    }
    if (schedule_.post_norms_folded) check_folded_step(schedule_);
    smem_bytes_ = dev::activation_smem_bytes(schedule_, dims());
    if (smem_bytes_ > size_t(max_smem))
      fail("the kernel needs {} bytes of shared memory per workgroup for this model; the GPU allows {}", smem_bytes_, max_smem);
    plan_weight_stream(size_t(max_smem));
    // The chunk steps' kernel (prefill; device/chunk_kernel.cu) and its shared memory: its ops' tiles.
    chunk_smem_bytes_ = dev::chunk_smem_bytes(schedule_, dims());
    if (chunk_smem_bytes_ > size_t(max_smem)) {
      if (opt.chunk_tokens > 0)
        fail("chunk steps (prefill) need {} bytes of shared memory per workgroup for this model; the GPU allows {}", chunk_smem_bytes_,
             max_smem);
      schedule_.chunk = ChunkSchedule{};  // prompts go one token per step here
      chunk_smem_bytes_ = 0;
    }
    // Attention's tile-path kernel now; the long-context one on the first launch that needs it (launch
    // below), so that sessions that never reach long contexts set up nothing more.
    kernel_ = dev::monokernel_entry(layout_.format, stream_slots_ > 0, opt.profile, grouped, false, fold);
    kernel_long_ = dev::monokernel_entry(layout_.format, stream_slots_ > 0, opt.profile, grouped, true, fold);
    prepare_kernel(kernel_);
    if (schedule_.chunk.enabled()) {
      chunk_kernel_ = dev::chunk_kernel_entry(layout_.format, opt.profile);
      if (!chunk_kernel_) fail("internal: no chunk-step kernel for {} layers", matrix_format_name(layout_.format));
      prepare_kernel(chunk_kernel_, chunk_smem_bytes_);
    }
    check_memory_budget();
    allocate_and_upload();
  }

  GenerateResult generate(const GenerateRequest& req, const TokenCallback& on_token) override {
    if (lost_) throw HangError(lost_message_, /*stopped=*/false);
    const auto input = tokens_to_ingest(req.input, pending_, position_, opt_.context, cfg_.vocab_size);
    check_request(req, cfg_.vocab_size);
    if (clean_schedule_ && launches_ >= opt_.debug_edit_launches) {  // the edited launches are done
      schedule_ = std::move(*clean_schedule_);
      clean_schedule_.reset();
      MK_GPU_CHECK(hipMemcpy(instrs_.ptr, schedule_.instrs.data(), schedule_.instrs.size() * sizeof(Instr), hipMemcpyHostToDevice));
      const std::vector<dev::StreamRecord> records = stream_records();
      MK_GPU_CHECK(hipMemcpy(stream_records_.ptr, records.data(), records.size() * sizeof(dev::StreamRecord), hipMemcpyHostToDevice));
    }
    ++launches_;
    // All prompt tokens but the last go through chunk steps when there are enough of them (as on the
    // emulator); the last goes through token step 0, which samples the first reply token.
    const int C = schedule_.chunk.tokens;
    const int chunked = chunked_prompt_tokens(C, int(input.size()));
    if (chunked > 0)
      MK_GPU_CHECK(hipMemcpy(state_.chunk_tokens.ptr, input.data(), size_t(chunked) * sizeof(int32_t), hipMemcpyHostToDevice));
    MK_GPU_CHECK(hipMemcpy(state_.tokens.ptr, input.data() + chunked, (input.size() - size_t(chunked)) * sizeof(int32_t), hipMemcpyHostToDevice));
    MK_GPU_CHECK(hipMemset(counters_.ptr, 0, counters_.bytes));
    MK_GPU_CHECK(hipMemset(stop_flag_.ptr, 0, stop_flag_.bytes));
    if (opt_.profile) MK_GPU_CHECK(hipMemset(profile_.ptr, 0, profile_.bytes));
    if (opt_.profile && opt_.trace_step >= 0) MK_GPU_CHECK(hipMemset(trace_.ptr, 0, trace_.bytes));
    std::memset(channel_.host, 0, channel_bytes_);
    *cancel_flag() = 0;

    dev::KernelParams p = base_params_;
    p.chunk_start = position_;
    p.chunk_count = chunked;
    p.chunks = C > 0 ? (chunked + C - 1) / C : 0;
    p.start = position_ + chunked;
    p.ingest = int(input.size()) - chunked;
    p.max_new = req.max_new_tokens;
    p.max_steps = opt_.context - p.start;
    p.sampling = req.sampling;
    set_logit_requests(req, p);

    // The furthest sequence length this launch's attention can see: its last step's position + 1.
    const int reach = std::min(opt_.context, position_ + int(input.size()) + std::max(req.max_new_tokens - 1, 0));
    const bool long_context = opt_.attention_path == AttentionPath::WarpChunks ||
                              (opt_.attention_path == AttentionPath::Auto && dev::attention_long_context(dims(), reach, dev::kWarpMmaBuild));
    if (long_context && !long_prepared_) {
      prepare_kernel(kernel_long_);
      long_prepared_ = true;
    }
    GenerateResult result;
    const auto t0 = Clock::now();
    void* args[] = {&p};
    // The chunk steps' kernel first, then the token steps' on the same stream: no return to the host
    // between, and the kernel boundary orders token step 0 after every chunk step.
    if (p.chunks > 0)
      MK_GPU_CHECK(hipLaunchCooperativeKernel(chunk_kernel_, dim3(unsigned(schedule_.num_workgroups)), dim3(dev::kThreads), args,
                                              chunk_smem_bytes_, stream_));
    MK_GPU_CHECK(hipLaunchCooperativeKernel(long_context ? kernel_long_ : kernel_, dim3(unsigned(schedule_.num_workgroups)),
                                            dim3(dev::kThreads), args, smem_bytes_, stream_));
    stream_tokens(result, on_token, req.on_logprobs, t0);
    const auto* ch = channel();
    result.stop = StopReason(ch->stop_reason);
    const int steps = int(ch->steps_run);
    position_ = p.start + steps;
    pending_ = result.tokens.empty() ? -1 : result.tokens.back();
    if (ch->nonfinite_step != 0) fail_nonfinite_logits(p.start + int(ch->nonfinite_step) - 1, int(result.tokens.size()) + 1);
    result.stats.ingested_tokens = int(input.size());
    result.stats.chunked_tokens = chunked;
    result.stats.steps = steps;
    result.stats.generated_tokens = int(result.tokens.size());
    result.stats.total_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    collect_profile(result);
    return result;
  }

  // The request's sampling state, logit adjustments and log-probabilities (runtime/sampling.h) into the
  // launch: the first digit's counts cleared, the adjustments' starting values uploaded, the host-mapped
  // records sized for every token it can produce.
  void set_logit_requests(const GenerateRequest& req, dev::KernelParams& p) {
    // Each sampled step's LM head adds into the counts and its sample op clears them; a launch that
    // stopped between the two (max_new_tokens 0, a cancel, non-finite logits) leaves them counted.
    if (!req.sampling.greedy()) MK_GPU_CHECK(hipMemset(state_.lm_key_counts.ptr, 0, state_.lm_key_counts.bytes));
    if (req.adjust.active()) {
      const std::vector<float> adjust = initial_logit_adjustment(req.adjust, cfg_.vocab_size);
      MK_GPU_CHECK(hipMemcpy(state_.logit_adjust.ptr, adjust.data(), adjust.size() * sizeof(float), hipMemcpyHostToDevice));
      MK_GPU_CHECK(hipMemset(state_.token_counts.ptr, 0, state_.token_counts.bytes));
      p.adjust_logits = 1;
      p.frequency_penalty = req.adjust.frequency_penalty;
      p.presence_penalty = req.adjust.presence_penalty;
    }
    if (req.on_logprobs) {
      const size_t records = size_t(std::max(1, std::min(req.max_new_tokens, opt_.context)));
      if (logprobs_.bytes < records * sizeof(TokenLogprobs)) logprobs_.allocate(records * sizeof(TokenLogprobs));
      p.out_logprobs = static_cast<TokenLogprobs*>(logprobs_.device);
      p.top_logprobs = std::min(req.top_logprobs, cfg_.vocab_size);
    }
    if (req.constraint) {
      upload_constraint(req.constraint);
      p.constraint = constraint_tables_;
      // The start and the first reply token's budget (runtime/constraint_budget.h), as the sample op
      // writes them for the tokens after it.
      const int32_t state_and_budget[2] = {req.constraint->dfa.start,
                                           constraint::constraint_budget(p.max_new, 0, p.context, p.start + p.ingest - 1)};
      MK_GPU_CHECK(hipMemcpy(state_.constraint_state.ptr, state_and_budget, sizeof(state_and_budget), hipMemcpyHostToDevice));
    }
  }

  // The constraint's tables into one allocation (runtime/token_automaton.h), unless they are there already.
  void upload_constraint(const std::shared_ptr<const constraint::TokenAutomaton>& a) {
    if (a == constraint_) return;
    constraint_.reset();
    constraint_memory_.release();
    const constraint::TokenVocabulary& v = *a->vocabulary;
    struct Piece {
      const void* data;
      size_t bytes;
    };
    const Piece pieces[] = {{a->masks.data(), a->masks.size() * sizeof(uint32_t)},
                            {a->state_sets.data(), a->state_sets.size() * sizeof(int32_t)},
                            {a->state_end.data(), a->state_end.size()},
                            {a->dfa.next.data(), a->dfa.next.size() * sizeof(int32_t)},
                            {a->dfa.byte_class, sizeof(a->dfa.byte_class)},
                            {v.all_bytes().data(), v.all_bytes().size()},
                            {v.offsets().data(), v.offsets().size() * sizeof(uint32_t)}};
    size_t offsets[std::size(pieces)], total = 0;
    for (size_t i = 0; i < std::size(pieces); ++i) offsets[i] = total, total += (pieces[i].bytes + 15) & ~size_t(15);
    constraint_memory_.allocate(total, "the constraint's token tables");
    auto* base = static_cast<uint8_t*>(constraint_memory_.ptr);
    for (size_t i = 0; i < std::size(pieces); ++i)
      if (pieces[i].bytes) MK_GPU_CHECK(hipMemcpy(base + offsets[i], pieces[i].data, pieces[i].bytes, hipMemcpyHostToDevice));
    dev::ConstraintTables& t = constraint_tables_;
    t.masks = reinterpret_cast<const uint32_t*>(base + offsets[0]);
    t.state_sets = reinterpret_cast<const int32_t*>(base + offsets[1]);
    t.state_end = base + offsets[2];
    t.next = reinterpret_cast<const int32_t*>(base + offsets[3]);
    t.byte_class = base + offsets[4];
    t.token_bytes = base + offsets[5];
    t.token_offsets = reinterpret_cast<const uint32_t*>(base + offsets[6]);
    t.classes = a->dfa.classes;
    t.mask_words = a->mask_words;
    constraint_ = a;
  }

  // The kernel stopped at a step whose logits held a NaN or an infinity, without a token (device/ops/
  // sample.h); the logits buffer still holds them. The same error as the emulator's.
  [[noreturn]] void fail_nonfinite_logits(int position, int reply_token) const {
    const std::vector<float> l = last_logits();
    size_t bad = 0, first = l.size();
    for (size_t i = 0; i < l.size(); ++i)
      if (!std::isfinite(l[i]) && bad++ == 0) first = i;
    fail("gpu: the logits are not finite at position {} (reply token {}): {} of {} are NaN or infinite, the first for "
         "token {} ({}); the model's weights or activations overflow",
         position, reply_token, bad, l.size(), first, first < l.size() ? l[first] : 0.0f);
  }

  void cancel() override { *cancel_flag() = 1; }
  void reset() override {
    position_ = 0;
    pending_ = -1;
  }
  // As in the emulator: the kernel's attention reads positions [0, start + step] and each step writes its
  // own, so the K/V beyond the kept positions is never read before it is written again.
  bool truncate(int tokens) override {
    if (tokens < 0 || tokens > position_) return false;
    position_ = tokens;
    pending_ = -1;
    return true;
  }
  int position() const override { return position_; }
  int context() const override { return opt_.context; }
  std::string name() const override {
    return fmt::format("gpu monokernel on {} ({} workgroups x {} threads, {}, {}{})", info_.name, schedule_.num_workgroups,
                       dev::kThreads, stream_description(), sync_description(),
                       schedule_.narrow_ops ? fmt::format(", {} on {} workgroups", op_names(schedule_.narrow_ops), schedule_.narrow_workgroups)
                                            : std::string());
  }
  std::string sync_description() const {
    if (schedule_.sync_domains <= 1) return "flat counters";
    return fmt::format("{} of {} counters per-domain over {} domains{}", schedule_.num_counters() - schedule_.first_striped_counter,
                       schedule_.num_counters(), schedule_.sync_domains, opt_.unit_domain.empty() ? " (workgroup % D)" : " (unit map)");
  }
  const GpuRunProfile& profile() const override { return profile_result_; }
  const GpuInfo& info() const override { return info_; }
  uint64_t weight_bytes() const override { return layout_.total_bytes; }
  const Schedule& schedule() const override { return schedule_; }
  void fill_context_for_benchmark(int tokens, uint64_t seed) override {
    if (tokens < 0 || tokens >= opt_.context) fail("benchmark context {} must be below the context size {}", tokens, opt_.context);
    dev::fill_random_bf16(state_.k_cache.as<uint16_t>(), state_.k_cache.bytes / sizeof(uint16_t), 1.0f, seed);
    dev::fill_random_bf16(state_.v_cache.as<uint16_t>(), state_.v_cache.bytes / sizeof(uint16_t), 1.0f, seed + 1);
    position_ = tokens;
    pending_ = -1;
  }
  std::vector<float> last_logits() const override {
    std::vector<float> out(size_t(cfg_.vocab_size));
    MK_GPU_CHECK(hipMemcpy(out.data(), state_.logits.ptr, out.size() * sizeof(float), hipMemcpyDeviceToHost));
    return out;
  }

  ~MonokernelBackend() override {
    if (lost_) {  // the hung kernel still runs: freeing what it uses would wait for it forever
      for (DeviceBuffer* b : {&weights_, &layers_, &instrs_, &stream_records_, &wg_begin_, &rope_, &counters_, &unit_domain_, &stop_flag_,
                              &profile_, &workgroup_unit_, &trace_, &chunk_instrs_, &chunk_wg_begin_, &layer_attention_,
                              &constraint_memory_})
        b->abandon();
#define MK_ABANDON(NAME, TYPE, ELEMENTS, CELL, WHAT) state_.NAME.abandon();
      MK_DECODE_BUFFERS(MK_ABANDON)
#undef MK_ABANDON
      channel_.abandon();
      logprobs_.abandon();
      return;
    }
    if (stream_) (void)hipStreamDestroy(stream_);
  }

 private:
  // The weight stream's ring in the shared memory an activation area of `activation_bytes` leaves
  // (device/kernel_plan.h), for kernel_.
  dev::StreamPlan stream_plan(size_t activation_bytes, size_t max_smem) const {
#if defined(MK_PLATFORM_NVIDIA)
    hipFuncAttributes attr{};
    MK_GPU_CHECK(hipFuncGetAttributes(&attr, kernel_));
    return dev::plan_weight_stream(dims(), activation_bytes, max_smem, attr.sharedSizeBytes, opt_.stream_slots, opt_.stream_slot_kib);
#else
    (void)max_smem;  // AMD: no bulk copies into LDS in this build; weights go through registers
    dev::StreamPlan none;
    none.smem_bytes = activation_bytes;
    return none;
#endif
  }
  void plan_weight_stream(size_t max_smem) {
    const dev::StreamPlan plan = stream_plan(smem_bytes_, max_smem);
    stream_slots_ = plan.slots;
    stream_slot_bytes_ = plan.slot_bytes;
    stream_ring_offset_ = plan.ring_offset;
    smem_bytes_ = plan.smem_bytes;
  }

  std::string stream_description() const {
    if (stream_slots_ == 0) return "weights through registers";
    return fmt::format("weight stream {} x {} KiB, lookahead {}, early {}", stream_slots_, stream_slot_bytes_ / 1024,
                       opt_.stream_lookahead, opt_.stream_early < 0 ? int(stream_slots_) : opt_.stream_early);
  }

  dev::ModelDims dims() const { return dev::model_dims(cfg_, layout_, schedule_); }

  // Lets kernel `k` take the planned shared memory and checks that the persistent grid fits.
  void prepare_kernel(const void* k) const { prepare_kernel(k, smem_bytes_); }
  void prepare_kernel(const void* k, size_t smem) const {
    MK_GPU_CHECK(hipFuncSetAttribute(k, hipFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    int per_sm = 0;
    MK_GPU_CHECK(hipOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, dev::kThreads, smem));
    if (per_sm < 1)
      fail("the persistent grid cannot be co-resident: 0 workgroups of {} threads with {} bytes of shared memory fit on "
           "an SM",
           dev::kThreads, smem);
  }

  void check_memory_budget() const {
    const dev::MemoryNeed need = dev::device_memory_need(cfg_, layout_, schedule_, opt_.context);
    if (need.total() > info_.free_memory)
      throw OutOfMemoryError(fmt::format(
          "not enough device memory on {}: need {:.2f} GiB (weights {:.2f} GiB, KV cache for {} tokens {:.2f} GiB, {}"
          "other {:.2f} GiB) but {:.2f} GiB is free; lower the context (-c){}",
          info_.name, double(need.total()) / kGiB, double(need.weights) / kGiB, opt_.context, double(need.kv_cache) / kGiB,
          schedule_.chunk.enabled()
              ? fmt::format("chunk-step buffers for {} prompt tokens {:.2f} GiB, ", schedule_.chunk.tokens, double(need.chunk) / kGiB)
              : std::string(),
          double(need.other) / kGiB, double(info_.free_memory) / kGiB,
          schedule_.chunk.enabled() ? " or the chunk size (--chunk-tokens)" : ""));
    // The host holds the RoPE tables while uploading them, and the pinned token channel (tokens, times).
    const size_t rope = rope_kinds(build_step_recipe(cfg_)).kinds.size() * size_t(opt_.context) * size_t(cfg_.head_dim) * sizeof(float);
    check_host_memory("the GPU backend", {{"RoPE tables (uploaded from the host)", rope},
                                          {"pinned token channel", (size_t(opt_.context) + 1) * 12}},
                      available_host_memory(), "lower the context (-c)");
  }

  void allocate_and_upload() {
    MK_GPU_CHECK(hipStreamCreateWithFlags(&stream_, hipStreamNonBlocking));
    weights_.allocate(layout_.total_bytes, "the weights");
    const auto t0 = Clock::now();
    if (opt_.random_weights_seed != 0) {
      dev::fill_random_weights(weights_.as<uint8_t>(), cfg_, layout_, opt_.random_weights_seed);
    } else {
      if (model_.weights.layers.size() != size_t(cfg_.num_layers)) fail("{}: the model has no weights to upload", model_.dir.string());
      // Stream the packed image tensor by tensor, reporting progress.
      uint64_t done = 0;
      pack_weights(model_, layout_, [&](uint64_t offset, const void* bytes, size_t size) {
        MK_GPU_CHECK(hipMemcpy(weights_.as<uint8_t>() + offset, bytes, size, hipMemcpyHostToDevice));
        done += size;
        if (opt_.on_upload_progress)
          opt_.on_upload_progress(done, layout_.total_bytes, std::chrono::duration<double>(Clock::now() - t0).count());
      });
    }
    std::vector<LayerOffsets> layers = layout_.layers;
    upload(layers_, layers, "layer offsets");
    upload(instrs_, schedule_.instrs, "the schedule");
    upload(stream_records_, stream_records(), "the schedule's weight-stream records");
    upload(wg_begin_, schedule_.wg_begin, "the schedule");
    // Attention's per-layer data and a RoPE table per distinct RoPE of the layers, from the step recipe.
    const StepRecipe recipe = build_step_recipe(cfg_);
    const RopeKinds ropes = rope_kinds(recipe);
    upload(rope_, rope_tables(ropes, cfg_.head_dim, opt_.context), "the RoPE tables");
    std::vector<dev::LayerAttentionParams> layer_attention;
    for (size_t l = 0; l < recipe.layers.size(); ++l) {
      const LayerRecipe& L = recipe.layers[l];
      if (L.activation != recipe.layers[0].activation)
        fail("model not supported by the GPU kernel: layer {}'s activation differs from layer 0's", l);
      layer_attention.push_back({L.attention.window, L.attention.scale, ropes.of_layer[l], 0});
    }
    upload(layer_attention_, layer_attention, "attention's per-layer data");
    counters_.allocate(dev::counter_word(schedule_.counter_lines()) * sizeof(unsigned), "counters");
    if (!opt_.unit_domain.empty())
      upload(unit_domain_, std::vector<int16_t>(opt_.unit_domain.begin(), opt_.unit_domain.end()), "the sync-domain map");
    stop_flag_.allocate(sizeof(uint32_t), "the stop flag");
    // The decode state, one allocation per buffer of runtime/decode_buffers.h that the model uses.
    const DecodeShapes s = DecodeShapes::of(cfg_, layout_, schedule_, opt_.context);
#define MK_ALLOCATE(NAME, TYPE, ELEMENTS, CELL, WHAT) \
    if (size_t(ELEMENTS) > 0) state_.NAME.allocate(size_t(ELEMENTS) * sizeof(TYPE), WHAT);
    MK_DECODE_BUFFERS(MK_ALLOCATE)
#undef MK_ALLOCATE
    if (schedule_.chunk.enabled()) {
      upload(chunk_instrs_, schedule_.chunk.instrs, "the chunk-step schedule");
      upload(chunk_wg_begin_, schedule_.chunk.wg_begin, "the chunk-step schedule");
    }
    profile_.allocate(size_t(schedule_.num_workgroups) * kNumOps * dev::kProfileFields * sizeof(unsigned long long), "profile counters");
    workgroup_unit_.allocate(size_t(schedule_.num_workgroups) * sizeof(uint32_t), "profile counters");
    if (opt_.profile && opt_.trace_step >= 0) trace_.allocate(schedule_.instrs.size() * 4 * sizeof(unsigned long long), "the trace");
    // Host-mapped channel: header, tokens, token times, per-workgroup progress and waiting marks, cancel
    // flag, abort flag.
    const size_t max_tokens = size_t(opt_.context) + 1;
    tokens_offset_ = sizeof(dev::HostChannel);
    times_offset_ = tokens_offset_ + max_tokens * sizeof(int32_t);
    times_offset_ = (times_offset_ + 7) / 8 * 8;
    progress_offset_ = times_offset_ + max_tokens * sizeof(unsigned long long);
    // Per workgroup: two progress words, then the waiting mark (KernelParams::progress).
    cancel_offset_ = progress_offset_ + 3 * size_t(schedule_.num_workgroups) * sizeof(uint32_t);
    abort_offset_ = cancel_offset_ + 64;
    channel_bytes_ = abort_offset_ + 64;
    channel_.allocate(channel_bytes_);

    auto& p = base_params_;
    p = dev::KernelParams{};
    p.instrs = instrs_.as<Instr>();
    p.wg_begin = wg_begin_.as<uint32_t>();
    p.counters = counters_.as<unsigned>();
    p.sample_counter = schedule_.sample_counter;
    p.first_striped_counter = schedule_.first_striped_counter;
    p.sync_domains = uint32_t(schedule_.sync_domains);
    p.unit_domain = unit_domain_.as<int16_t>();
    p.unit_domain_len = uint32_t(opt_.unit_domain.size());
    p.weights = weights_.as<uint8_t>();
    p.layers = layers_.as<LayerOffsets>();
    p.embed = layout_.embed;
    p.final_norm = layout_.final_norm;
    p.lm_head = layout_.lm_head;
#define MK_BIND(NAME, TYPE, ELEMENTS, CELL, WHAT) p.NAME = state_.NAME.as<TYPE>();
    MK_DECODE_BUFFERS(MK_BIND)
#undef MK_BIND
    p.arrivals_first = schedule_.combine_once.first_counter;
    p.devices = schedule_.devices;
    p.rope = rope_.as<float>();
    p.layer_attention = layer_attention_.as<dev::LayerAttentionParams>();
    p.stop_flag = stop_flag_.as<uint32_t>();
    p.chunk_instrs = chunk_instrs_.as<Instr>();
    p.chunk_wg_begin = chunk_wg_begin_.as<uint32_t>();
    p.chunk_first_line = schedule_.chunk.first_line;
    p.chunk_final_counter = schedule_.chunk.final_counter;
    p.chunk_final_per_step = schedule_.chunk.final_per_step;
    p.chunk_size = schedule_.chunk.tokens;
    p.chunk_act_cols = int(s.chunk_act_cols);
    auto* dev_base = static_cast<uint8_t*>(channel_.device);
    p.channel = reinterpret_cast<dev::HostChannel*>(dev_base);
    p.out_tokens = reinterpret_cast<int32_t*>(dev_base + tokens_offset_);
    p.out_token_time_ns = reinterpret_cast<unsigned long long*>(dev_base + times_offset_);
    p.progress = reinterpret_cast<uint32_t*>(dev_base + progress_offset_);
    p.cancel = reinterpret_cast<const volatile uint32_t*>(dev_base + cancel_offset_);
    p.abort = reinterpret_cast<const volatile uint32_t*>(dev_base + abort_offset_);
    p.profile = profile_.as<unsigned long long>();
    p.workgroup_unit = workgroup_unit_.as<uint32_t>();
    p.trace = trace_.as<unsigned long long>();
    p.trace_step = opt_.profile ? opt_.trace_step : -1;
    p.stream_slots = stream_slots_;
    p.stream_slot_bytes = stream_slot_bytes_;
    p.stream_ring_offset = stream_ring_offset_;
    p.stream_lookahead = uint32_t(std::max(0, opt_.stream_lookahead));
    p.stream_early = opt_.stream_early < 0 ? stream_slots_ : uint32_t(opt_.stream_early);
    p.dims = dims();
    p.stream_records = stream_records_.as<dev::StreamRecord>();
    p.context = opt_.context;
    const size_t n_eos = std::min<size_t>(cfg_.eos_token_ids.size(), dev::kMaxEosIds);
    for (size_t i = 0; i < n_eos; ++i) p.eos[i] = cfg_.eos_token_ids[i];
    p.num_eos = int(n_eos);
  }

  // What each instruction streams through the weight stream (KernelParams::stream_records).
  std::vector<dev::StreamRecord> stream_records() const {
    return dev::plan_stream_records(schedule_, dims(), layout_.layers, layout_.lm_head, stream_slots_ ? stream_slot_bytes_ : 0u);
  }

  dev::HostChannel* channel() const { return static_cast<dev::HostChannel*>(channel_.host); }
  volatile uint32_t* cancel_flag() const {
    return reinterpret_cast<volatile uint32_t*>(static_cast<uint8_t*>(channel_.host) + cancel_offset_);
  }
  volatile uint32_t* abort_flag() const {
    return reinterpret_cast<volatile uint32_t*>(static_cast<uint8_t*>(channel_.host) + abort_offset_);
  }
  const volatile int32_t* out_tokens() const {
    return reinterpret_cast<const volatile int32_t*>(static_cast<uint8_t*>(channel_.host) + tokens_offset_);
  }
  const volatile uint32_t* progress() const {
    return reinterpret_cast<const volatile uint32_t*>(static_cast<uint8_t*>(channel_.host) + progress_offset_);
  }

  // The workgroups' waiting marks (device/launch_abort.h): when each last moved.
  struct WaitBeats {
    std::vector<uint32_t> seen;
    std::vector<Clock::time_point> moved;
  };

  void read_wait_beats(WaitBeats& b, Clock::time_point now) const {
    const volatile uint32_t* marks = progress() + 2 * size_t(schedule_.num_workgroups);
    for (size_t w = 0; w < b.seen.size(); ++w)
      if (marks[w] != b.seen[w]) b.seen[w] = marks[w], b.moved[w] = now;
  }

  // Every workgroup still running is in a wait (its mark moved lately); false while one is inside an
  // instruction.
  bool all_running_workgroups_wait(const WaitBeats& b, Clock::time_point now) const {
    for (size_t w = 0; w < b.seen.size(); ++w)
      if (progress()[2 * w + 1] != 0xffffffffu && now - b.moved[w] > kWaitBeatFresh) return false;
    return true;
  }

  // Streams tokens while the kernel runs; returns when it has finished (throws on a fault or a hang).
  void stream_tokens(GenerateResult& result, const TokenCallback& on_token, const LogprobCallback& on_logprobs, Clock::time_point t0) {
    uint32_t published = 0;
    std::vector<uint32_t> last_progress(2 * size_t(schedule_.num_workgroups), 0);
    auto last_change = Clock::now();
    WaitBeats beats{std::vector<uint32_t>(size_t(schedule_.num_workgroups), 0),
                    std::vector<Clock::time_point>(size_t(schedule_.num_workgroups), last_change - kWaitBeatFresh)};
    for (;;) {
      const hipError_t status = hipStreamQuery(stream_);
      const uint32_t available = channel()->token_count;
      const auto callbacks_start = Clock::now();
      const uint32_t published_before = published;
      while (published < available) {
        if (on_logprobs) {  // written before the token's count was published
          TokenLogprobs record;
          std::memcpy(&record, static_cast<const TokenLogprobs*>(logprobs_.host) + published, sizeof(record));
          record.drop_impossible();
          on_logprobs(record);
        }
        const int32_t token = out_tokens()[published++];
        if (result.tokens.empty()) result.stats.first_token_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        result.tokens.push_back(token);
        if (on_token) on_token(token);
      }
      // The caller's callbacks are not the kernel's time: a slow one must not look like a hang.
      if (published != published_before) last_change += Clock::now() - callbacks_start;
      if (status == hipSuccess) {
        if (published < channel()->token_count) continue;  // drain what arrived with the end
        break;
      }
      if (status != hipErrorNotReady) fail("the monokernel failed: {} ({})", hipGetErrorName(status), hipGetErrorString(status));
      bool changed = false;
      for (size_t i = 0; i < last_progress.size(); ++i)
        if (progress()[i] != last_progress[i]) last_progress[i] = progress()[i], changed = true;
      const auto now = Clock::now();
      read_wait_beats(beats, now);
      if (changed) {
        last_change = now;
      } else {
        // A workgroup inside one instruction is taken for working, up to kInstructionLimitFactor times
        // the limit; past that it is a loop that no wait bounds (which the abort cannot stop either).
        const double still = std::chrono::duration<double>(now - last_change).count();
        if (still > opt_.watchdog_seconds && (all_running_workgroups_wait(beats, now) || still > kInstructionLimitFactor * opt_.watchdog_seconds))
          abort_hung_launch(still);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    MK_GPU_CHECK(hipStreamSynchronize(stream_));
    MK_GPU_CHECK(hipGetLastError());
  }

  // Which instructions the workgroups are stuck at and what they wait for; read before the abort, which
  // makes every workgroup leave (and mark itself done).
  std::string describe_hang(double still_seconds) {
    std::string text = fmt::format("monokernel watchdog: no workgroup made progress for {:.1f} s; stuck workgroups:", still_seconds);
    // Counters live in device memory: read them on a separate stream (the kernel still occupies the GPU).
    // Into a member: a copy that has not landed within the deadline must not land in freed memory later.
    std::vector<unsigned>& lines = hang_counter_lines_;
    lines.assign(dev::counter_word(schedule_.counter_lines()), 0);
    std::vector<unsigned> counters(schedule_.num_counters(), 0);
    bool have_counters = false;
    hipStream_t side = nullptr;
    if (hipStreamCreateWithFlags(&side, hipStreamNonBlocking) == hipSuccess &&
        hipMemcpyAsync(lines.data(), counters_.ptr, lines.size() * sizeof(unsigned), hipMemcpyDeviceToHost, side) == hipSuccess) {
      const auto deadline = Clock::now() + std::chrono::seconds(2);
      while (hipStreamQuery(side) == hipErrorNotReady && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      have_counters = hipStreamQuery(side) == hipSuccess;
      std::vector<unsigned> values(schedule_.counter_lines());
      for (uint32_t l = 0; l < values.size(); ++l) values[l] = lines[dev::counter_word(l)];
      counters = schedule_.counter_values(values);
    }
    if (side) (void)hipStreamDestroy(side);  // released once its copy is done
    std::vector<WorkgroupPosition> blocked;
    for (int w = 0; w < schedule_.num_workgroups; ++w) {
      const uint32_t step = progress()[2 * w], done = progress()[2 * w + 1];
      if (done == 0xffffffffu) continue;
      if (step & dev::kProgressChunk) {
        const uint32_t chunk = step & ~dev::kProgressChunk;
        if (done == dev::kProgressPrefillGate) blocked.push_back({w, chunk, false, 0, false, true});
        else blocked.push_back({w, chunk, false, schedule_.chunk.wg_begin[size_t(w)] + done, true, false});
        continue;
      }
      const uint32_t begin = schedule_.wg_begin[size_t(w)], end = schedule_.wg_begin[size_t(w) + 1];
      // Past its last instruction of `step`: waiting at the next step's gate.
      if (begin + done >= end) blocked.push_back({w, step + 1, true, 0});
      else blocked.push_back({w, step, false, begin + done});
    }
    text += describe_blocked(schedule_, blocked, have_counters ? &counters : nullptr);
    return text;
  }

  // Sets the abort word and waits for the kernel to leave. Stopped: the backend is as before the call
  // (position_ and pending_ change only after a launch completes; the KV rows past position_ that the
  // launch wrote are rewritten by the next one), so the error says it may go on. Not stopped: the
  // backend refuses further work; nothing here exits the process.
  [[noreturn]] void abort_hung_launch(double still_seconds) {
    const std::string text = describe_hang(still_seconds);
    *abort_flag() = 1;
    const auto t0 = Clock::now();
    hipError_t status = hipErrorNotReady;
    while ((status = hipStreamQuery(stream_)) == hipErrorNotReady &&
           std::chrono::duration<double>(Clock::now() - t0).count() < opt_.abort_grace_seconds)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
    if (status == hipSuccess) {
      MK_GPU_CHECK(hipStreamSynchronize(stream_));
      MK_GPU_CHECK(hipGetLastError());
      throw HangError(fmt::format("{}\nthe launch was aborted and the kernel left after {:.3f} s; the backend can go on "
                                  "(the sequence is as before this call)",
                                  text, waited),
                      /*stopped=*/true);
    }
    lost_ = true;
    lost_message_ = status == hipErrorNotReady
                        ? fmt::format("{}\nthe kernel did not stop within {:.1f} s of the abort: the GPU stays occupied by it "
                                      "until the process exits, and this backend refuses further work",
                                      text, opt_.abort_grace_seconds)
                        : fmt::format("{}\nthe kernel failed while being aborted: {} ({}); this backend refuses further work",
                                      text, hipGetErrorName(status), hipGetErrorString(status));
    throw HangError(lost_message_, /*stopped=*/false);
  }

  void collect_profile(const GenerateResult& result) {
    profile_result_ = GpuRunProfile{};
    profile_result_.num_workgroups = schedule_.num_workgroups;
    const auto* times = reinterpret_cast<const volatile unsigned long long*>(static_cast<uint8_t*>(channel_.host) + times_offset_);
    for (size_t i = 0; i < result.tokens.size(); ++i)
      profile_result_.token_seconds.push_back(double(times[i] - times[0]) * 1e-9);
    if (!opt_.profile) return;
    std::vector<unsigned long long> raw(size_t(schedule_.num_workgroups) * kNumOps * dev::kProfileFields);
    MK_GPU_CHECK(hipMemcpy(raw.data(), profile_.ptr, raw.size() * sizeof(unsigned long long), hipMemcpyDeviceToHost));
    std::vector<double>* fields[dev::kProfileFields] = {};
    fields[dev::kProfExec] = &profile_result_.exec_seconds;
    fields[dev::kProfWait] = &profile_result_.wait_seconds;
    fields[dev::kProfPrologue] = &profile_result_.prologue_seconds;
    fields[dev::kProfSignal] = &profile_result_.signal_seconds;
    for (auto* f : fields) f->assign(kNumOps, 0.0);
    const size_t W = size_t(schedule_.num_workgroups);
    profile_result_.workgroup_unit.resize(W);
    MK_GPU_CHECK(hipMemcpy(profile_result_.workgroup_unit.data(), workgroup_unit_.ptr, W * sizeof(uint32_t), hipMemcpyDeviceToHost));
    profile_result_.workgroup_exec_seconds.assign(W, std::vector<double>(kNumOps, 0.0));
    profile_result_.workgroup_wait_seconds.assign(W, std::vector<double>(kNumOps, 0.0));
    for (size_t w = 0; w < W; ++w)
      for (int op = 0; op < kNumOps; ++op) {
        const unsigned long long* f = raw.data() + (w * kNumOps + size_t(op)) * dev::kProfileFields;
        for (int k = 0; k < dev::kProfileFields; ++k) (*fields[k])[size_t(op)] += double(f[k]) * 1e-9;
        profile_result_.workgroup_exec_seconds[w][size_t(op)] = double(f[dev::kProfExec]) * 1e-9;
        profile_result_.workgroup_wait_seconds[w][size_t(op)] = double(f[dev::kProfWait]) * 1e-9;
      }
    if (opt_.trace_step < 0) return;
    std::vector<unsigned long long> tr(schedule_.instrs.size() * 4);
    MK_GPU_CHECK(hipMemcpy(tr.data(), trace_.ptr, tr.size() * sizeof(unsigned long long), hipMemcpyDeviceToHost));
    if (tr[3] == 0) return;  // the launch ended before the traced step (instruction 0 runs every step)
    profile_result_.trace.resize(schedule_.instrs.size());
    for (size_t i = 0; i < schedule_.instrs.size(); ++i)
      profile_result_.trace[i] = {double(tr[4 * i]) * 1e-9, double(tr[4 * i + 1]) * 1e-9, double(tr[4 * i + 2]) * 1e-9,
                                  double(tr[4 * i + 3]) * 1e-9};
  }

  const Model& model_;
  const ModelConfig& cfg_;
  GpuOptions opt_;
  GpuInfo info_;
  WeightLayout layout_;
  Schedule schedule_;
  const void* kernel_ = nullptr;       // attention's tile path
  const void* kernel_long_ = nullptr;  // attention's warp path (long contexts), prepared on first use
  const void* chunk_kernel_ = nullptr;  // the chunk steps (prefill), when the schedule has them
  size_t chunk_smem_bytes_ = 0;
  bool long_prepared_ = false;
  size_t smem_bytes_ = 0;
  uint32_t stream_slots_ = 0, stream_slot_bytes_ = 0, stream_ring_offset_ = 0;
  hipStream_t stream_ = nullptr;
  DeviceBuffer weights_, layers_, instrs_, stream_records_, wg_begin_, rope_, counters_, unit_domain_, stop_flag_, profile_,
      workgroup_unit_, trace_, chunk_instrs_, chunk_wg_begin_, layer_attention_;
  struct DecodeState {  // runtime/decode_buffers.h
#define MK_DEVICE_BUFFER(NAME, TYPE, ELEMENTS, CELL, WHAT) DeviceBuffer NAME;
    MK_DECODE_BUFFERS(MK_DEVICE_BUFFER)
#undef MK_DEVICE_BUFFER
  } state_;
  MappedHostBuffer channel_;
  MappedHostBuffer logprobs_;  // TokenLogprobs records of a launch that asked for them (grown as needed)
  // The tables of the last constraint a launch used (kept for the next request that uses it again).
  std::shared_ptr<const constraint::TokenAutomaton> constraint_;
  DeviceBuffer constraint_memory_;
  dev::ConstraintTables constraint_tables_{};
  size_t channel_bytes_ = 0, tokens_offset_ = 0, times_offset_ = 0, progress_offset_ = 0, cancel_offset_ = 0;
  dev::KernelParams base_params_{};
  GpuRunProfile profile_result_;
  int position_ = 0;
  int32_t pending_ = -1;
  size_t abort_offset_ = 0;
  std::optional<Schedule> clean_schedule_;  // debug_edit_launches: the schedule to restore
  int launches_ = 0;
  bool lost_ = false;  // a hung kernel that did not stop: every call fails with lost_message_
  std::string lost_message_;
  std::vector<unsigned> hang_counter_lines_;  // describe_hang's copy of the counters
};

}  // namespace

bool gpu_available(std::string* why) {
  int count = 0;
  const hipError_t err = hipGetDeviceCount(&count);
  if (err == hipSuccess && count > 0) return true;
  (void)hipGetLastError();
  if (!why) return false;
  *why = err != hipSuccess ? std::string("GPU runtime: ") + hipGetErrorString(err) : "no GPU present";
#if defined(MK_PLATFORM_NVIDIA)
  // The CUDA runtime answers "CUDA driver version is insufficient" both when the driver is too old and when
  // there is none at all (no GPU): whether the driver library loads tells the two apart.
  if (err == cudaErrorInsufficientDriver) {
    if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
      dlclose(driver);
      *why = fmt::format("the NVIDIA driver is too old for this build's CUDA runtime {}.{} ({}); update the driver",
                         CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, hipGetErrorString(err));
    } else {
      *why = "there is no NVIDIA driver on this machine (libcuda.so.1 cannot be loaded)";
    }
  } else if (err == cudaErrorNoDevice) {
    *why = "the NVIDIA driver reports no device";
  }
#endif
  return false;
}

std::unique_ptr<GpuBackend> create_gpu_backend(const Model& model, const GpuOptions& options) {
  const char* plant = std::getenv("MK_DEBUG_PLANT_HANG");
  if (plant == nullptr || options.debug_edit_schedule) return std::make_unique<MonokernelBackend>(model, options);
  GpuOptions planted = options;
  planted.debug_edit_launches = std::max(1, std::atoi(plant));
  const int layer = std::min(1, model.config.num_layers - 1);
  planted.debug_edit_schedule = [layer](Schedule& s) {
    for (Instr& in : s.instrs)
      if (in.op == Op::GateUp && in.layer == layer) in.waits[0].per_step += 1;  // one o_proj block too many
  };
  return std::make_unique<MonokernelBackend>(model, planted);
}

}  // namespace mk
