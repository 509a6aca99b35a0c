// run_sync_bench (device/measure/sync_bench.h): cooperative launches at the real grid that run the barriers of
// device/measure/sync_primitives.h back to back, the cooperative-groups grid barrier as the baseline, and a
// counter ping-pong between pairs of blocks. Timing: %globaltimer inside the kernel (per barrier) and
// events around the launch (launch overhead included). Checked launches verify, inside the kernel, that
// what every block wrote before a barrier is what the others read after it.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "device/gpu.h"
#include "device/measure/sync_bench.h"
#include "device/measure/sync_primitives.h"
#include "runtime/error.h"

#if defined(MK_PLATFORM_NVIDIA)
#include <cooperative_groups.h>
#else
#include <hip/hip_cooperative_groups.h>
#endif

namespace mk {
namespace {

namespace sy = mk::dev::sync;

constexpr int kMaxThreads = 512;
constexpr int kCheckWords = 16;        // words each block writes per episode (one per warp, up to 16 warps)
constexpr int kMaxPairsPerClass = 16;  // hand-off pairs: same group / different groups
constexpr int kMaxPairs = 2 * kMaxPairsPerClass;
constexpr unsigned kWarmupRoundTrips = 64;
constexpr int kInfoWords = 8;  // per block: hw id, group, group size, from table, groups, active, rank, -

enum class Method : int {
  FlatCounter,
  FlatCounterP2,
  FlatCounterP4,
  FlatGen,
  HierTree,
  HierBroadcast,
  Striped,
  CgGridSync,
  DiagRelaxedPoll,
  DiagNoFence,
  Handoff,
  DiagHandoffNoFence
};

struct MethodInfo {
  Method method;
  const char* name;
  const char* description;
  bool diagnostic;  // measures a cost; not a candidate (diag_no_fence is not even a valid barrier)
};
constexpr MethodInfo kMethods[] = {
    {Method::FlatCounter, "flat_counter", "one monotone counter: release-add, acquire-poll until episode x blocks",
     false},
    {Method::FlatCounterP2, "flat_counter_p2", "flat_counter, 2 staggered polling warps per block", false},
    {Method::FlatCounterP4, "flat_counter_p4", "flat_counter, 4 staggered polling warps per block", false},
    {Method::FlatGen, "flat_gen", "ticket counter + generation flag: last arriver resets and releases", false},
    {Method::HierTree, "hier_tree", "per-group counters -> top counter; release top gen -> group gens", false},
    {Method::HierBroadcast, "hier_bcast", "per-group counters -> top counter; everyone polls the top gen", false},
    {Method::Striped, "striped", "per-group monotone counters, release-add; all counters polled in parallel", false},
    {Method::CgGridSync, "cg_grid_sync", "cooperative groups this_grid().sync() (baseline)", false},
    {Method::DiagRelaxedPoll, "diag_relaxed_poll", "flat_counter polled with relaxed loads + one acquire fence", true},
    {Method::DiagNoFence, "diag_no_fence", "flat_counter with a RELAXED add: no release fence (NOT a valid barrier)",
     true},
    {Method::Handoff, "handoff", "counter ping-pong between two blocks: one-way latency", false},
    {Method::DiagHandoffNoFence, "diag_handoff_no_fence", "handoff with RELAXED signals (no release fence; not valid)",
     true},
};

struct BenchArgs {
  sy::SyncState* state;
  sy::GroupMap map;
  sy::SpinPolicy spin;  // measured waits
  sy::SpinPolicy idle;  // blocks idling while a hand-off pair runs
  unsigned iterations;
  unsigned* check;            // [2][grid][kCheckWords]
  unsigned long long* stats;  // [0] violations, [1] values compared
  unsigned* first_violation;  // [0] taken, [1] episode, [2] reader, [3] writer, [4] word, [5] expected, [6] got
  unsigned long long* times;  // per block: start, end
  int* block_info;            // per block: kInfoWords
  unsigned* pair_lines;       // per pair: two counter lines (to b, to a)
  unsigned* payload;          // per pair: [2][kCheckWords]
  int* pairs;                 // [0] count, then per pair: a, b, same group
  int max_pairs_per_class;
  unsigned round_trips;
  unsigned stagger_cycles;      // FlatCounterBarrier<k>: delay between the pollers' first polls
  unsigned long long* pair_ns;  // per pair: time of round_trips round trips
};

__device__ __forceinline__ int check_words() {
  const int warps = static_cast<int>(blockDim.x) / MK_WARP_SIZE;
  return warps < kCheckWords ? warps : kCheckWords;
}

__device__ void record_block(const BenchArgs& a, const sy::BlockGroup& b) {
  if (threadIdx.x != 0) return;
  int* info = a.block_info + blockIdx.x * kInfoWords;
  info[0] = static_cast<int>(b.hw_id);
  info[1] = b.group;
  info[2] = b.group_size;
  info[3] = b.from_table;
  info[4] = b.num_groups;
  info[5] = b.active_groups;
  info[6] = b.rank;
}

__device__ void record_violation(const BenchArgs& a, unsigned episode, unsigned reader, unsigned writer, unsigned word,
                                 unsigned expected, unsigned got) {
  if (atomicCAS(a.first_violation, 0u, 1u) == 0u) {
    a.first_violation[1] = episode;
    a.first_violation[2] = reader;
    a.first_violation[3] = writer;
    a.first_violation[4] = word;
    a.first_violation[5] = expected;
    a.first_violation[6] = got;
  }
}

__device__ void add_stats(const BenchArgs& a, unsigned bad, unsigned compared) {
  if (bad != 0) atomicAdd(&a.stats[0], static_cast<unsigned long long>(bad));
  if (compared != 0) atomicAdd(&a.stats[1], static_cast<unsigned long long>(compared));
}

// Before barrier episode e: lane 0 of warp w writes check[e % 2][block][w] = e + 1 (several warps, so the
// check also covers writes by threads other than the one that arrives).
__device__ __forceinline__ void write_check(const BenchArgs& a, unsigned e, int words) {
  const unsigned warp = threadIdx.x / MK_WARP_SIZE;
  if (threadIdx.x % MK_WARP_SIZE == 0 && static_cast<int>(warp) < words)
    a.check[((e & 1u) * gridDim.x + blockIdx.x) * kCheckWords + warp] = e + 1;
}

// After episode e: thread t reads word t % words of block (self + 1 + (e + t / words) % (G - 1)); it must
// be exactly e + 1 (the writer cannot have written episode e + 2's value into this parity before this
// block arrives at the next barrier). Plain loads: what the memory model promises after the barrier.
__device__ __forceinline__ void verify_check(const BenchArgs& a, unsigned e, int words, unsigned& bad,
                                             unsigned& compared) {
  const unsigned G = gridDim.x;
  if (G < 2) return;
  const unsigned per_block = static_cast<unsigned>(words);
  const unsigned span = min(G - 1, blockDim.x / per_block);
  if (threadIdx.x >= span * per_block) return;
  const unsigned k = threadIdx.x / per_block, w = threadIdx.x % per_block;
  const unsigned writer = (blockIdx.x + 1 + (e + k) % (G - 1)) % G;
  const unsigned got = a.check[((e & 1u) * G + writer) * kCheckWords + w];
  ++compared;
  if (got != e + 1) {
    ++bad;
    record_violation(a, e, blockIdx.x, writer, w, e + 1, got);
  }
}

// The cooperative-groups grid barrier behind the same interface as the sync_primitives.h barriers.
struct CgGridBarrier {
  __device__ bool sync(const sy::SpinPolicy&) {
    cooperative_groups::this_grid().sync();
    return true;
  }
};

// Diagnostics: what the release fence and the per-poll acquire cost.
__device__ __forceinline__ void red_relaxed(unsigned* p, unsigned v) {
#if defined(MK_PLATFORM_NVIDIA)
  asm volatile("red.relaxed.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
  __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
#endif
}

__device__ __forceinline__ void fence_acq_rel_gpu() {
#if defined(MK_PLATFORM_NVIDIA)
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
#else
  __builtin_amdgcn_fence(__ATOMIC_ACQ_REL, "agent");
#endif
}

// kRelease = false: the arrival is a relaxed add (no fence): NOT a valid barrier, it shows the fence's cost.
// kRelaxedPoll: relaxed polls and one fence after the value is seen (valid), instead of ld.acquire polls.
template <bool kRelease, bool kRelaxedPoll>
class DiagCounterBarrier {
 public:
  __device__ DiagCounterBarrier(sy::SyncState* s, unsigned blocks) : counter_(&s->counter.value), blocks_(blocks) {}
  __device__ bool sync(const sy::SpinPolicy& sp) {
    __syncthreads();
    target_ += blocks_;
    const unsigned target = target_;
    bool ok = true;
    if (threadIdx.x == 0) {
      if (kRelease)
        dev::add_release(counter_, 1u);
      else
        red_relaxed(counter_, 1u);
      if (kRelaxedPoll) {
        unsigned polls = 0;
        unsigned long long start = 0;
        while (!sy::reached(dev::load_relaxed_gpu(counter_), target)) {
          sy::pause_ns(sp.sleep_ns);
          if (sp.timeout_ns != 0 && (++polls & 255u) == 0) {
            const unsigned long long now = dev::global_timer_ns();
            if (start == 0) start = now;
            if (dev::load_relaxed_gpu(sp.abort_flag) != 0 || now - start > sp.timeout_ns) {
              dev::store_relaxed_gpu(sp.abort_flag, 1u);
              ok = false;
              break;
            }
          }
        }
        fence_acq_rel_gpu();
      } else {
        ok = sy::spin_until(
            counter_, [target](unsigned v) { return sy::reached(v, target); }, sp);
      }
    }
    return sy::block_all(ok);
  }

 private:
  unsigned* counter_;
  unsigned blocks_;
  unsigned target_ = 0;
};

template <bool kCheck, typename Barrier>
__device__ void run_episodes(const BenchArgs& a, Barrier& barrier, sy::FlatGenBarrier& setup, bool ok) {
  ok = setup.sync(a.spin) && ok;  // start together
  unsigned long long t0 = 0;
  if (threadIdx.x == 0) t0 = dev::global_timer_ns();
  const int words = check_words();
  unsigned bad = 0, compared = 0;
  for (unsigned e = 0; e < a.iterations && ok; ++e) {
    if (kCheck) write_check(a, e, words);
    ok = barrier.sync(a.spin);
    if (kCheck && ok) verify_check(a, e, words, bad, compared);
  }
  if (threadIdx.x == 0) {
    a.times[2 * blockIdx.x] = t0;
    a.times[2 * blockIdx.x + 1] = dev::global_timer_ns();
  }
  if (kCheck) add_stats(a, bad, compared);
}

template <Method M, bool kCheck>
__global__ void __launch_bounds__(kMaxThreads, 1) barrier_kernel(BenchArgs a) {
  sy::FlatGenBarrier setup(&a.state->setup_count.value, &a.state->setup_gen.value, gridDim.x);
  const sy::BlockGroup bg = sy::discover_group(a.state, setup, a.map, a.spin);
  record_block(a, bg);
  if constexpr (M == Method::FlatCounter) {
    sy::FlatCounterBarrier<1> b(a.state, gridDim.x);
    run_episodes<kCheck>(a, b, setup, bg.ok);
  } else if constexpr (M == Method::FlatCounterP2) {
    sy::FlatCounterBarrier<2> b(a.state, gridDim.x, a.stagger_cycles);
    run_episodes<kCheck>(a, b, setup, bg.ok);
  } else if constexpr (M == Method::FlatCounterP4) {
    sy::FlatCounterBarrier<4> b(a.state, gridDim.x, a.stagger_cycles);
    run_episodes<kCheck>(a, b, setup, bg.ok);
  } else if constexpr (M == Method::DiagRelaxedPoll) {
    DiagCounterBarrier<true, true> b(a.state, gridDim.x);
    run_episodes<kCheck>(a, b, setup, bg.ok);
  } else if constexpr (M == Method::DiagNoFence) {
    DiagCounterBarrier<false, false> b(a.state, gridDim.x);
    run_episodes<kCheck>(a, b, setup, bg.ok);
  } else if constexpr (M == Method::FlatGen) {
    sy::FlatGenBarrier b(a.state, gridDim.x);
    run_episodes<kCheck>(a, b, setup, bg.ok);
  } else if constexpr (M == Method::HierTree) {
    sy::HierTreeBarrier b(a.state, bg);
    run_episodes<kCheck>(a, b, setup, bg.ok);
  } else if constexpr (M == Method::HierBroadcast) {
    sy::HierBroadcastBarrier b(a.state, bg);
    run_episodes<kCheck>(a, b, setup, bg.ok);
  } else if constexpr (M == Method::Striped) {
    sy::StripedBarrier b(a.state, bg);
    run_episodes<kCheck>(a, b, setup, bg.ok);
  } else {
    CgGridBarrier b;
    run_episodes<kCheck>(a, b, setup, bg.ok);
  }
}

// --- counter hand-off

// Block 0, thread 0, after every block recorded its group: same-group pairs (the two lowest blocks of
// each group) and different-group pairs (the lowest blocks of consecutive non-empty groups).
__device__ void choose_pairs(const BenchArgs& a, int num_groups) {
  const int G = static_cast<int>(gridDim.x);
  int n = 0, same = 0, diff = 0, previous_first = -1;
  for (int g = 0; g < num_groups; ++g) {
    int first = -1, second = -1;
    for (int b = 0; b < G && second < 0; ++b)
      if (a.block_info[b * kInfoWords + 1] == g) (first < 0 ? first : second) = b;
    if (second >= 0 && same < a.max_pairs_per_class) {
      a.pairs[1 + 3 * n] = first, a.pairs[2 + 3 * n] = second, a.pairs[3 + 3 * n] = 1;
      ++n, ++same;
    }
    if (first >= 0) {
      if (previous_first >= 0 && diff < a.max_pairs_per_class) {
        a.pairs[1 + 3 * n] = previous_first, a.pairs[2 + 3 * n] = first, a.pairs[3 + 3 * n] = 0;
        ++n, ++diff;
      }
      previous_first = first;
    }
  }
  a.pairs[0] = n;
}

__device__ __forceinline__ unsigned* pair_line(const BenchArgs& a, int pair, int which) {
  return a.pair_lines +
         (static_cast<size_t>(pair) * 2 + static_cast<size_t>(which)) * (sy::kLineBytes / sizeof(unsigned));
}

__device__ __forceinline__ void write_payload(unsigned* payload, unsigned value, int words) {
  const unsigned warp = threadIdx.x / MK_WARP_SIZE;
  if (threadIdx.x % MK_WARP_SIZE == 0 && static_cast<int>(warp) < words) payload[warp] = value;
}

__device__ __forceinline__ void verify_payload(const BenchArgs& a, const unsigned* payload, unsigned value, int words,
                                               unsigned writer, unsigned& bad, unsigned& compared) {
  if (static_cast<int>(threadIdx.x) >= words) return;
  const unsigned got = payload[threadIdx.x];
  ++compared;
  if (got != value) {
    ++bad;
    record_violation(a, value, blockIdx.x, writer, threadIdx.x, value, got);
  }
}

// Block a: [write payload a->b], signal, wait for b's signal, [check payload b->a]; round_trips times
// after a warm-up. Block b mirrors it. Both include the block barriers a real hand-off needs (all
// threads produce, one thread signals; one thread waits, all threads consume).
template <bool kCheck, bool kRelease>
__device__ __forceinline__ void signal(unsigned* counter) {
  if (kRelease) {
    sy::signal_counter(counter);
  } else {
    __syncthreads();
    if (threadIdx.x == 0) red_relaxed(counter, 1u);
  }
}

template <bool kCheck, bool kRelease>
__device__ bool ping(const BenchArgs& a, int p, int partner, unsigned& bad, unsigned& compared) {
  unsigned* to_b = pair_line(a, p, 0);
  const unsigned* to_a = pair_line(a, p, 1);
  unsigned* pay_ab = a.payload + static_cast<size_t>(p) * 2 * kCheckWords;
  const unsigned* pay_ba = pay_ab + kCheckWords;
  const int words = check_words();
  const unsigned total = kWarmupRoundTrips + a.round_trips;
  unsigned long long t0 = 0;
  bool ok = true;
  for (unsigned r = 1; r <= total && ok; ++r) {
    if (r == kWarmupRoundTrips + 1 && threadIdx.x == 0) t0 = dev::global_timer_ns();
    if (kCheck) write_payload(pay_ab, r, words);
    signal<kCheck, kRelease>(to_b);
    ok = sy::wait_counter(to_a, r, a.spin);
    if (kCheck && ok) verify_payload(a, pay_ba, r, words, static_cast<unsigned>(partner), bad, compared);
  }
  if (threadIdx.x == 0) a.pair_ns[p] = ok ? dev::global_timer_ns() - t0 : 0ull;
  return ok;
}

template <bool kCheck, bool kRelease>
__device__ bool pong(const BenchArgs& a, int p, int partner, unsigned& bad, unsigned& compared) {
  const unsigned* to_b = pair_line(a, p, 0);
  unsigned* to_a = pair_line(a, p, 1);
  const unsigned* pay_ab = a.payload + static_cast<size_t>(p) * 2 * kCheckWords;
  unsigned* pay_ba = a.payload + static_cast<size_t>(p) * 2 * kCheckWords + kCheckWords;
  const int words = check_words();
  const unsigned total = kWarmupRoundTrips + a.round_trips;
  bool ok = true;
  for (unsigned r = 1; r <= total && ok; ++r) {
    ok = sy::wait_counter(to_b, r, a.spin);
    if (kCheck && ok) verify_payload(a, pay_ab, r, words, static_cast<unsigned>(partner), bad, compared);
    if (kCheck) write_payload(pay_ba, r, words);
    signal<kCheck, kRelease>(to_a);
  }
  return ok;
}

template <bool kCheck, bool kRelease>
__global__ void __launch_bounds__(kMaxThreads, 1) handoff_kernel(BenchArgs a) {
  sy::FlatGenBarrier setup(&a.state->setup_count.value, &a.state->setup_gen.value, gridDim.x);
  const sy::BlockGroup bg = sy::discover_group(a.state, setup, a.map, a.idle);
  record_block(a, bg);
  bool ok = setup.sync(a.idle) && bg.ok;
  if (blockIdx.x == 0 && threadIdx.x == 0) choose_pairs(a, bg.num_groups);
  ok = setup.sync(a.idle) && ok;
  const int count = a.pairs[0];
  unsigned bad = 0, compared = 0;
  for (int p = 0; p < count && ok; ++p) {
    const int pa = a.pairs[1 + 3 * p], pb = a.pairs[2 + 3 * p];
    if (static_cast<int>(blockIdx.x) == pa)
      ok = ping<kCheck, kRelease>(a, p, pb, bad, compared);
    else if (static_cast<int>(blockIdx.x) == pb)
      ok = pong<kCheck, kRelease>(a, p, pa, bad, compared);
    ok = setup.sync(a.idle) && ok;  // one pair at a time; the others wait with long pauses
  }
  if (kCheck) add_stats(a, bad, compared);
}

// --- host side

using KernelFn = void (*)(BenchArgs);

KernelFn kernel_for(Method m, bool check) {
  switch (m) {
    case Method::FlatCounter:
      return check ? barrier_kernel<Method::FlatCounter, true> : barrier_kernel<Method::FlatCounter, false>;
    case Method::FlatCounterP2:
      return check ? barrier_kernel<Method::FlatCounterP2, true> : barrier_kernel<Method::FlatCounterP2, false>;
    case Method::FlatCounterP4:
      return check ? barrier_kernel<Method::FlatCounterP4, true> : barrier_kernel<Method::FlatCounterP4, false>;
    case Method::DiagRelaxedPoll:
      return check ? barrier_kernel<Method::DiagRelaxedPoll, true> : barrier_kernel<Method::DiagRelaxedPoll, false>;
    case Method::DiagNoFence:
      return check ? barrier_kernel<Method::DiagNoFence, true> : barrier_kernel<Method::DiagNoFence, false>;
    case Method::FlatGen:
      return check ? barrier_kernel<Method::FlatGen, true> : barrier_kernel<Method::FlatGen, false>;
    case Method::HierTree:
      return check ? barrier_kernel<Method::HierTree, true> : barrier_kernel<Method::HierTree, false>;
    case Method::HierBroadcast:
      return check ? barrier_kernel<Method::HierBroadcast, true> : barrier_kernel<Method::HierBroadcast, false>;
    case Method::Striped:
      return check ? barrier_kernel<Method::Striped, true> : barrier_kernel<Method::Striped, false>;
    case Method::CgGridSync:
      return check ? barrier_kernel<Method::CgGridSync, true> : barrier_kernel<Method::CgGridSync, false>;
    case Method::Handoff:
      return check ? handoff_kernel<true, true> : handoff_kernel<false, true>;
    case Method::DiagHandoffNoFence:
      return check ? handoff_kernel<true, false> : handoff_kernel<false, false>;
  }
  return nullptr;
}

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : count_(std::max<size_t>(count, 1)) {
    MK_GPU_CHECK(hipMalloc(reinterpret_cast<void**>(&ptr_), count_ * sizeof(T)));
    MK_GPU_CHECK(hipMemset(ptr_, 0, count_ * sizeof(T)));
  }
  ~DeviceBuffer() {
    if (ptr_) (void)hipFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return ptr_; }
  size_t bytes() const { return count_ * sizeof(T); }
  void zero(hipStream_t s) const { MK_GPU_CHECK(hipMemsetAsync(ptr_, 0, bytes(), s)); }
  std::vector<T> download(hipStream_t s) const {
    std::vector<T> host(count_);
    MK_GPU_CHECK(hipMemcpyAsync(host.data(), ptr_, bytes(), hipMemcpyDeviceToHost, s));
    MK_GPU_CHECK(hipStreamSynchronize(s));
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

using dev::CurrentDevice;

struct StreamEvents {
  hipStream_t stream{};
  hipEvent_t start{}, stop{};
  StreamEvents() {
    MK_GPU_CHECK(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking));
    MK_GPU_CHECK(hipEventCreate(&start));
    MK_GPU_CHECK(hipEventCreate(&stop));
  }
  ~StreamEvents() {
    (void)hipEventDestroy(start);
    (void)hipEventDestroy(stop);
    (void)hipStreamDestroy(stream);
  }
  StreamEvents(const StreamEvents&) = delete;
  StreamEvents& operator=(const StreamEvents&) = delete;
};

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Buffers {
  explicit Buffers(int grid)
      : state(1),
        abort_flag(1),
        check(size_t(2) * size_t(grid) * kCheckWords),
        stats(2),
        first_violation(8),
        times(size_t(2) * size_t(grid)),
        block_info(size_t(kInfoWords) * size_t(grid)),
        pair_lines(size_t(kMaxPairs) * 2 * (sy::kLineBytes / sizeof(unsigned))),
        payload(size_t(kMaxPairs) * 2 * kCheckWords),
        pairs(1 + 3 * size_t(kMaxPairs)),
        pair_ns(kMaxPairs) {}
  DeviceBuffer<sy::SyncState> state;
  DeviceBuffer<unsigned> abort_flag;
  DeviceBuffer<unsigned> check;
  DeviceBuffer<unsigned long long> stats;
  DeviceBuffer<unsigned> first_violation;
  DeviceBuffer<unsigned long long> times;
  DeviceBuffer<int> block_info;
  DeviceBuffer<unsigned> pair_lines;
  DeviceBuffer<unsigned> payload;
  DeviceBuffer<int> pairs;
  DeviceBuffer<unsigned long long> pair_ns;

  void reset(hipStream_t s) const {
    state.zero(s), abort_flag.zero(s), check.zero(s), stats.zero(s), first_violation.zero(s), times.zero(s);
    block_info.zero(s), pair_lines.zero(s), payload.zero(s), pairs.zero(s), pair_ns.zero(s);
  }
};

struct LaunchResult {
  float ms = 0;
  bool hung = false;
};

LaunchResult launch(KernelFn fn, const BenchArgs& args, int grid, int threads, size_t smem, const Buffers& buf,
                    const StreamEvents& se) {
  buf.reset(se.stream);
  BenchArgs copy = args;
  void* params[] = {&copy};
  MK_GPU_CHECK(hipEventRecord(se.start, se.stream));
  MK_GPU_CHECK(hipLaunchCooperativeKernel(reinterpret_cast<const void*>(fn), dim3(unsigned(grid)),
                                          dim3(unsigned(threads)), params, static_cast<unsigned>(smem), se.stream));
  MK_GPU_CHECK(hipGetLastError());
  MK_GPU_CHECK(hipEventRecord(se.stop, se.stream));
  MK_GPU_CHECK(hipEventSynchronize(se.stop));
  LaunchResult r;
  MK_GPU_CHECK(hipEventElapsedTime(&r.ms, se.start, se.stop));
  r.hung = buf.abort_flag.download(se.stream)[0] != 0;
  return r;
}

// µs per barrier from the blocks' %globaltimer stamps (mean over blocks).
double timer_us_per_op(const Buffers& buf, hipStream_t s, int grid, int iterations) {
  const auto t = buf.times.download(s);
  double sum = 0;
  for (int b = 0; b < grid; ++b) sum += double(t[size_t(2 * b + 1)] - t[size_t(2 * b)]);
  return sum / grid / iterations / 1e3;
}

std::string violation_text(const std::vector<unsigned>& fv, bool handoff) {
  if (fv[0] == 0) return {};
  if (handoff)
    return fmt::format("round {}: block {} read word {} of block {}'s payload as {}, expected {}", fv[1], fv[2], fv[4],
                       fv[3], fv[6], fv[5]);
  return fmt::format("episode {}: block {} read word {} of block {} as {}, expected {}", fv[1], fv[2], fv[4], fv[3],
                     fv[6], fv[5]);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> sync_bench_methods() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& m : kMethods) out.emplace_back(m.name, m.description);
  return out;
}

const char* sync_bench_platform() {
#if defined(MK_PLATFORM_NVIDIA)
  return "nvidia";
#else
  return "amd";
#endif
}

SyncBenchReport run_sync_bench(const SyncBenchOptions& o, const SyncGroupTable& groups) {
  if (o.iterations < 1) fail("sync bench: iterations must be >= 1 (got {})", o.iterations);
  if (o.repetitions < 1) fail("sync bench: repetitions must be >= 1 (got {})", o.repetitions);
  if (o.round_trips < 1) fail("sync bench: round trips must be >= 1 (got {})", o.round_trips);
  if (o.threads < sy::kMaxGroups || o.threads > kMaxThreads || o.threads % MK_WARP_SIZE != 0)
    fail("sync bench: threads per block must be a multiple of {} in [{}, {}] (got {})", MK_WARP_SIZE, sy::kMaxGroups,
         kMaxThreads, o.threads);
  if (o.max_pairs < 0 || o.max_pairs > kMaxPairsPerClass)
    fail("sync bench: pairs per class must be in [0, {}] (got {})", kMaxPairsPerClass, o.max_pairs);
  if (!(o.timeout_s > 0)) fail("sync bench: the timeout must be positive (got {})", o.timeout_s);
  if (groups.hw_to_group.empty() ? (groups.synthetic_groups < 1 || groups.synthetic_groups > sy::kMaxGroups)
                                 : (groups.num_groups < 1 || groups.num_groups > sy::kMaxGroups))
    fail("sync bench: {} groups; the barriers support 1..{}",
         groups.hw_to_group.empty() ? groups.synthetic_groups : groups.num_groups, sy::kMaxGroups);
  std::vector<Method> selected;
  for (const auto& m : kMethods) {
    const bool wanted = o.methods.empty() || std::find(o.methods.begin(), o.methods.end(), m.name) != o.methods.end();
    if (wanted) selected.push_back(m.method);
  }
  for (const auto& name : o.methods) {
    const bool known =
        std::any_of(std::begin(kMethods), std::end(kMethods), [&](const MethodInfo& m) { return name == m.name; });
    if (!known) {
      std::string names;
      for (const auto& m : kMethods) names += std::string(names.empty() ? "" : ", ") + m.name;
      fail("sync bench: unknown method '{}' (known: {})", name, names);
    }
  }

  int count = 0;
  const hipError_t count_err = hipGetDeviceCount(&count);
  if (count_err != hipSuccess)
    fail("sync bench: no usable GPU ({}: {})", hipGetErrorName(count_err), hipGetErrorString(count_err));
  if (count <= 0) fail("sync bench: no GPU is visible");
  if (o.device < 0 || o.device >= count)
    fail("sync bench: device {} does not exist ({} GPU{} visible: 0..{})", o.device, count, count == 1 ? "" : "s",
         count - 1);
  CurrentDevice current(o.device);

  hipDeviceProp_t prop{};
  MK_GPU_CHECK(hipGetDeviceProperties(&prop, o.device));
  SyncBenchReport rep;
  rep.platform = sync_bench_platform();
  rep.device_name = prop.name;
#if defined(MK_PLATFORM_NVIDIA)
  rep.arch = fmt::format("sm_{}{}", prop.major, prop.minor);
#else
  rep.arch = prop.gcnArchName;
  if (rep.device_name.empty()) rep.device_name = rep.arch;
#endif
  rep.units = prop.multiProcessorCount;
  int cooperative = 0;
  MK_GPU_CHECK(hipDeviceGetAttribute(&cooperative, hipDeviceAttributeCooperativeLaunch, o.device));
  if (!cooperative) fail("sync bench: {} does not support cooperative launches", rep.device_name);

    // Can this build's code run here at all? (A kernel for another architecture fails at launch otherwise.)
#if defined(MK_PLATFORM_NVIDIA)
  cudaFuncAttributes attr{};
  const cudaError_t attr_err =
      cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(kernel_for(Method::FlatGen, false)));
#else
  hipFuncAttributes attr{};
  const hipError_t attr_err =
      hipFuncGetAttributes(&attr, reinterpret_cast<const void*>(kernel_for(Method::FlatGen, false)));
#endif
  if (attr_err != hipSuccess) {
    (void)hipGetLastError();
    fail(
        "sync bench: the kernels cannot run on {} ({}): {} ({}); build for this architecture "
        "(CMAKE_CUDA_ARCHITECTURES / MK_AMD_ARCHS)",
        rep.device_name, rep.arch, hipGetErrorName(attr_err), hipGetErrorString(attr_err));
  }

  // One block per SM/CU, as the monokernel (whose shared memory allows no second block): give each
  // block more than half of the unit's shared memory, so placement cannot put two blocks on one unit.
#if defined(MK_PLATFORM_NVIDIA)
  const size_t smem_per_unit = prop.sharedMemPerMultiprocessor, smem_per_block = prop.sharedMemPerBlockOptin;
#else
  const size_t smem_per_unit = prop.maxSharedMemoryPerMultiProcessor, smem_per_block = prop.sharedMemPerBlock;
#endif
  const size_t smem = std::min(smem_per_block, smem_per_unit / 2 + 1024);
  int per_unit = 1 << 30;
  for (const Method m : selected)
    for (const bool check : {false, true}) {
      const void* fn = reinterpret_cast<const void*>(kernel_for(m, check));
#if defined(MK_PLATFORM_NVIDIA)
      MK_GPU_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
#endif
      int n = 0;
      MK_GPU_CHECK(hipOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, o.threads, smem));
      per_unit = std::min(per_unit, n);
    }
  if (selected.empty()) per_unit = 1;
  if (per_unit < 1)
    fail("sync bench: a {}-thread block with {} KiB of shared memory does not fit on one SM/CU", o.threads,
         smem / 1024);
  rep.blocks_per_unit = per_unit;
  if (per_unit > 1)
    rep.notes.push_back(
        fmt::format("{} blocks fit on one SM/CU despite {} KiB of shared memory each: blocks may share units", per_unit,
                    smem / 1024));
  rep.grid = o.grid > 0 ? o.grid : rep.units;
  if (rep.grid > rep.units * per_unit)
    fail(
        "sync bench: a grid of {} blocks cannot be co-resident ({} SMs/CUs x {} block(s) each); a cooperative launch "
        "needs all blocks resident",
        rep.grid, rep.units, per_unit);
  rep.threads = o.threads;
  rep.iterations = o.iterations;
  rep.repetitions = o.repetitions;
  rep.round_trips = o.round_trips;
  rep.sleep_ns = o.sleep_ns;
  rep.stagger_cycles = o.stagger_cycles;
  rep.grouping_source = groups.source;

  Buffers buf(rep.grid);
  StreamEvents se;
  std::unique_ptr<DeviceBuffer<int>> table;
  if (!groups.hw_to_group.empty()) {
    table = std::make_unique<DeviceBuffer<int>>(groups.hw_to_group.size());
    MK_GPU_CHECK(hipMemcpy(table->get(), groups.hw_to_group.data(), groups.hw_to_group.size() * sizeof(int),
                           hipMemcpyHostToDevice));
  }

  BenchArgs args{};
  args.state = buf.state.get();
  args.map.hw_to_group = table ? table->get() : nullptr;
  args.map.table_size = static_cast<unsigned>(groups.hw_to_group.size());
  args.map.table_groups = groups.num_groups;
  args.map.synthetic_groups = groups.synthetic_groups;
  const unsigned long long timeout_ns = static_cast<unsigned long long>(o.timeout_s * 1e9);
  args.spin = sy::SpinPolicy{o.sleep_ns, timeout_ns, buf.abort_flag.get()};
  args.idle = sy::SpinPolicy{256, timeout_ns, buf.abort_flag.get()};
  args.iterations = static_cast<unsigned>(o.iterations);
  args.check = buf.check.get();
  args.stats = buf.stats.get();
  args.first_violation = buf.first_violation.get();
  args.times = buf.times.get();
  args.block_info = buf.block_info.get();
  args.pair_lines = buf.pair_lines.get();
  args.payload = buf.payload.get();
  args.pairs = buf.pairs.get();
  args.max_pairs_per_class = o.max_pairs;
  args.round_trips = static_cast<unsigned>(o.round_trips);
  args.stagger_cycles = o.stagger_cycles;
  args.pair_ns = buf.pair_ns.get();

  bool have_grouping = false;
  const auto record_grouping = [&]() {
    if (have_grouping) return;
    const auto info = buf.block_info.download(se.stream);
    rep.block_hw_id.resize(size_t(rep.grid));
    rep.block_group.resize(size_t(rep.grid));
    rep.grouping_from_table = info[3] != 0;
    rep.num_groups = info[4];
    rep.group_blocks.assign(size_t(std::max(rep.num_groups, 1)), 0);
    for (int b = 0; b < rep.grid; ++b) {
      rep.block_hw_id[size_t(b)] = static_cast<unsigned>(info[size_t(b * kInfoWords)]);
      const int g = info[size_t(b * kInfoWords + 1)];
      rep.block_group[size_t(b)] = g;
      if (g >= 0 && g < rep.num_groups) ++rep.group_blocks[size_t(g)];
    }
    std::vector<unsigned> ids = rep.block_hw_id;
    std::sort(ids.begin(), ids.end());
    if (std::adjacent_find(ids.begin(), ids.end()) != ids.end())
      rep.notes.push_back("two blocks ran on the same SM/CU (hardware ids repeat): not the monokernel's placement");
    if (!groups.hw_to_group.empty() && !rep.grouping_from_table)
      rep.notes.push_back(
          "a block's hardware id was not in the topology table: the kernel used the synthetic grouping");
    have_grouping = true;
  };
  const auto launch_method = [&](Method m, bool check) {
    return launch(kernel_for(m, check), args, rep.grid, rep.threads, smem, buf, se);
  };

  for (const Method m : selected) {
    if (m == Method::Handoff || m == Method::DiagHandoffNoFence) continue;
    SyncMethodResult r;
    for (const auto& mi : kMethods)
      if (mi.method == m) r.name = mi.name, r.description = mi.description, r.diagnostic = mi.diagnostic;
    for (int i = 0; i <= o.repetitions && !r.hung; ++i) {  // i = 0 warms up
      const LaunchResult lr = launch_method(m, false);
      r.hung = lr.hung;
      if (i == 0) {
        if (!r.hung) record_grouping();
        continue;
      }
      if (r.hung) break;
      r.us_timer.push_back(timer_us_per_op(buf, se.stream, rep.grid, o.iterations));
      r.us_events.push_back(double(lr.ms) * 1e3 / o.iterations);
    }
    if (o.check && !r.hung) {
      const LaunchResult lr = launch_method(m, true);
      r.hung = lr.hung;
      r.checked = !r.hung;
      const auto stats = buf.stats.download(se.stream);
      r.violations = stats[0];
      r.checks = stats[1];
      r.first_violation = violation_text(buf.first_violation.download(se.stream), false);
      if (!r.hung) r.checked_us = timer_us_per_op(buf, se.stream, rep.grid, o.iterations);
    }
    r.ran = !r.us_timer.empty();
    if (r.hung) r.skipped = fmt::format("a wait timed out after {} s: the barrier hung", o.timeout_s);
    if (r.ran) {
      r.median_us = median_of(r.us_timer);
      r.min_us = *std::min_element(r.us_timer.begin(), r.us_timer.end());
      r.max_us = *std::max_element(r.us_timer.begin(), r.us_timer.end());
    }
    rep.methods.push_back(std::move(r));
  }

  for (const Method m : {Method::Handoff, Method::DiagHandoffNoFence}) {
    if (std::find(selected.begin(), selected.end(), m) == selected.end() || o.max_pairs < 1 || rep.grid < 2) continue;
    SyncHandoff h;
    for (const auto& mi : kMethods)
      if (mi.method == m) h.name = mi.name, h.diagnostic = mi.diagnostic;
    for (int i = 0; i <= o.repetitions && !h.hung; ++i) {
      const LaunchResult lr = launch_method(m, false);
      h.hung = lr.hung;
      if (lr.hung) break;
      record_grouping();
      const auto p = buf.pairs.download(se.stream);
      const auto ns = buf.pair_ns.download(se.stream);
      const int n = p[0];
      if (h.pairs.empty()) {
        for (int k = 0; k < n; ++k) {
          SyncHandoffPair hp;
          hp.block_a = p[size_t(1 + 3 * k)];
          hp.block_b = p[size_t(2 + 3 * k)];
          hp.same_group = p[size_t(3 + 3 * k)] != 0;
          hp.hw_a = rep.block_hw_id[size_t(hp.block_a)];
          hp.hw_b = rep.block_hw_id[size_t(hp.block_b)];
          hp.group_a = rep.block_group[size_t(hp.block_a)];
          hp.group_b = rep.block_group[size_t(hp.block_b)];
          h.pairs.push_back(hp);
        }
      }
      if (i == 0) continue;
      for (int k = 0; k < n && k < static_cast<int>(h.pairs.size()); ++k)
        h.pairs[size_t(k)].one_way_us.push_back(double(ns[size_t(k)]) / 1e3 / (2.0 * o.round_trips));
    }
    if (o.check && !h.hung) {
      const LaunchResult lr = launch_method(m, true);
      h.hung = lr.hung;
      h.checked = !lr.hung;
      const auto stats = buf.stats.download(se.stream);
      h.violations = stats[0];
      h.checks = stats[1];
      h.first_violation = violation_text(buf.first_violation.download(se.stream), true);
    }
    for (auto& hp : h.pairs) hp.median_us = median_of(hp.one_way_us);
    if (h.hung) h.skipped = fmt::format("a wait timed out after {} s", o.timeout_s);
    rep.handoffs.push_back(std::move(h));
  }
  if (!have_grouping) rep.notes.push_back("no launch completed: the grouping the kernel used is unknown");
  return rep;
}

}  // namespace mk
