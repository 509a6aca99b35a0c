// The hand-off tensor parallel's all_reduce stage is designed on (docs/design.md, tensor parallel), measured
// alone: through the product's peer windows (device/peer_windows.h), each GPU's blocks push their slice of
// a partial vector into every GPU's window (16-byte stores through the peer pointers), then add 1 to a
// counter in every GPU's window (system scope, release); each block waits until its own GPU's counter
// counts every block of every GPU (system scope, acquire) and sums its slice over the GPUs' slots. Two
// slot sets alternate (a push never lands on a set a slower GPU still reads). Counters only grow: no
// barrier, no reset. Reports the time per exchange and checks every sum. Compare with
// tests/gpu/nccl_lsa_check.cu, the same exchange through NCCL's LSA barrier.
//
// Standalone, like the other tests/gpu/*_check.cu (not part of the build; exits 1 on a wrong sum):
//   nvcc -std=c++17 -O3 -arch=sm_90a -I. -DFMT_HEADER_ONLY=1 -DMK_PLATFORM_NVIDIA --expt-relaxed-constexpr \
//        tests/gpu/peer_push_check.cu device/peer_windows.cu -ldl -o peer_push_check
//   NCCL_NVLS_ENABLE=0 ./peer_push_check          (every visible GPU, at least 2; NCCL 2.28+ on the library path)
#include "tests/gpu/standalone_check.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

#include "device/device_atomics.h"
#include "device/peer_windows.h"
#include "runtime/error.h"

namespace {

constexpr int kThreads = 512;
constexpr int kMaxFloats = 8192;  // 32 KiB of fp32 per partial
constexpr int kMaxBlocks = 132;
constexpr size_t kCounterStride = 128;  // bytes: each counter on a line of its own
constexpr int kMaxRanks = 8;
constexpr size_t kCounterBytes = kMaxBlocks * kMaxRanks * kCounterStride;

// How the blocks signal and wait:
//   kReleaseAdds: a release add at system scope per GPU to the one counter of the GPU, an acquire load at
//     system scope to wait (every block counts every block of every GPU);
//   kFencedRelaxed: one system-scope fence, then relaxed adds per GPU; relaxed loads to wait, a fence after;
//   kPerBlock: as kFencedRelaxed, each block with counters of its own (block b waits for block b of every
//     GPU, which pushed the slice it sums), as a row stage's blocks would wait for the rows they read.
//   kPerBlockFlags: no adds: block b stores the iteration (release, system scope) into its own flag slot of
//     every other GPU's window, and waits until block b's slot of every other GPU holds it (acquire), as
//     NCCL's LSA barrier does without multimem: one-way stores, one writer per slot.
enum Mode { kReleaseAdds, kFencedRelaxed, kPerBlock, kPerBlockFlags };
const char* mode_name(Mode m) {
  return m == kReleaseAdds     ? "one counter, release adds"
         : m == kFencedRelaxed ? "one counter, a fence and relaxed adds"
         : m == kPerBlock      ? "a counter per block, a fence and relaxed adds"
                               : "a flag per block and GPU, release stores";
}

__device__ __forceinline__ void fence_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
__device__ __forceinline__ void add_relaxed_sys(unsigned* p, unsigned v) {
  asm volatile("red.relaxed.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void store_release_sys(unsigned* p, unsigned v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned load_relaxed_sys(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __host__ inline float partial(int rank, int it, int i) { return float(rank + 1 + it) + float(i) / 1024.0f; }

// windows: this GPU's pointers to every GPU's window. Window layout: the counter, then from kCounterBytes
// two sets of `ranks` slots of kMaxFloats.
template <Mode kMode>
__global__ void __launch_bounds__(kThreads) push_kernel(void* const* windows, int rank, int ranks, int floats, int iters, float* out,
                                                        unsigned long long* ns) {
  const int slice = (floats / 4 + int(gridDim.x) - 1) / int(gridDim.x) * 4;
  const int lo = min(floats, int(blockIdx.x) * slice), hi = min(floats, lo + slice);
  const size_t counter = kMode == kPerBlock ? size_t(blockIdx.x) * kCounterStride : 0;
  unsigned* own_counter = reinterpret_cast<unsigned*>(static_cast<char*>(windows[rank]) + counter);
  const unsigned per_iter = unsigned(ranks) * (kMode == kPerBlock ? 1u : gridDim.x);
  const unsigned long long t0 = mk::dev::global_timer_ns();
  for (int it = 0; it < iters; ++it) {
    const size_t set = size_t(it & 1) * size_t(ranks) * kMaxFloats;
    for (int p = 0; p < ranks; ++p) {
      float* dst = reinterpret_cast<float*>(static_cast<char*>(windows[p]) + kCounterBytes) + set + size_t(rank) * kMaxFloats;
      for (int i = lo + 4 * int(threadIdx.x); i < hi; i += 4 * kThreads)
        *reinterpret_cast<float4*>(dst + i) = make_float4(partial(rank, it, i), partial(rank, it, i + 1), partial(rank, it, i + 2),
                                                          partial(rank, it, i + 3));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      const unsigned target = per_iter * unsigned(it + 1);
      if constexpr (kMode == kPerBlockFlags) {
        // Slot (block, sender) of a window: its flag.
        auto slot = [&](void* w, int sender) {
          return reinterpret_cast<unsigned*>(static_cast<char*>(w) + (size_t(blockIdx.x) * kMaxRanks + size_t(sender)) * kCounterStride);
        };
        for (int p = 0; p < ranks; ++p)
          if (p != rank) store_release_sys(slot(windows[p], rank), unsigned(it + 1));
        for (int p = 0; p < ranks; ++p)
          if (p != rank)
            while (mk::dev::load_acquire_system(slot(windows[rank], p)) < unsigned(it + 1)) {
            }
      } else if constexpr (kMode == kReleaseAdds) {
        for (int p = 0; p < ranks; ++p) mk::dev::add_release_system(static_cast<unsigned*>(windows[p]), 1u);
        while (mk::dev::load_acquire_system(own_counter) < target) {
        }
      } else {
        fence_sys();
        for (int p = 0; p < ranks; ++p) add_relaxed_sys(reinterpret_cast<unsigned*>(static_cast<char*>(windows[p]) + counter), 1u);
        while (load_relaxed_sys(own_counter) < target) {
        }
        fence_sys();
      }
    }
    __syncthreads();
    const float* slots = reinterpret_cast<const float*>(static_cast<const char*>(windows[rank]) + kCounterBytes) + set;
    for (int i = lo + int(threadIdx.x); i < hi; i += kThreads) {
      float sum = 0.f;
      for (int r = 0; r < ranks; ++r) sum += slots[size_t(r) * kMaxFloats + size_t(i)];
      if (it == iters - 1) out[i] = sum;
    }
  }
  if (threadIdx.x == 0) atomicMax(ns, mk::dev::global_timer_ns() - t0);
}

}  // namespace

int main() {
  try {
    const int n = mk::PeerWindows::visible_gpus();
    if (n < 2) {
      std::fprintf(stderr, "peer_push_check: needs 2 or more GPUs (this machine has %d)\n", n);
      return 1;
    }
    std::vector<int> gpus(static_cast<size_t>(n));
    std::iota(gpus.begin(), gpus.end(), 0);
    const size_t bytes = kCounterBytes + size_t(2) * size_t(n) * kMaxFloats * sizeof(float);
    const auto windows = mk::PeerWindows::open(gpus, bytes);
    std::printf("%s\n", windows->describe());
    std::vector<void**> tables(static_cast<size_t>(n));
    std::vector<float*> out(static_cast<size_t>(n));
    std::vector<unsigned long long*> ns(static_cast<size_t>(n));
    std::vector<cudaStream_t> stream(static_cast<size_t>(n));
    for (int d = 0; d < n; ++d) {
      CHECK(cudaSetDevice(d));
      std::vector<void*> peers(static_cast<size_t>(n));
      for (int p = 0; p < n; ++p) peers[size_t(p)] = windows->peer(d, p);
      CHECK(cudaMalloc(&tables[size_t(d)], size_t(n) * sizeof(void*)));
      CHECK(cudaMemcpy(tables[size_t(d)], peers.data(), size_t(n) * sizeof(void*), cudaMemcpyHostToDevice));
      CHECK(cudaMalloc(&out[size_t(d)], kMaxFloats * sizeof(float)));
      CHECK(cudaMalloc(&ns[size_t(d)], sizeof(unsigned long long)));
      CHECK(cudaStreamCreateWithFlags(&stream[size_t(d)], cudaStreamNonBlocking));
    }
    std::printf("%d GPUs, blocks of %d threads; time per exchange (push to every GPU, counter add at system scope, wait, local sum)\n",
                n, kThreads);
    bool ok = true;
    const int iters = 2000;
    for (const Mode mode : {kReleaseAdds, kFencedRelaxed, kPerBlock, kPerBlockFlags})
    for (const int blocks : {1, 8, 32, kMaxBlocks})
      for (const int floats : {256, 1024, 2048, 4096, 8192}) {
        if (mode != kReleaseAdds && floats == 2048) continue;
        for (int d = 0; d < n; ++d) {  // counters from zero: the window's first bytes
          CHECK(cudaSetDevice(d));
          CHECK(cudaMemset(windows->local(d), 0, kCounterBytes));  // (device memory of GPU d)
          CHECK(cudaMemset(ns[size_t(d)], 0, sizeof(unsigned long long)));
        }
        for (int d = 0; d < n; ++d) {
          CHECK(cudaSetDevice(d));
          auto kernel = mode == kReleaseAdds     ? push_kernel<kReleaseAdds>
                        : mode == kFencedRelaxed ? push_kernel<kFencedRelaxed>
                        : mode == kPerBlock      ? push_kernel<kPerBlock>
                                                 : push_kernel<kPerBlockFlags>;
          kernel<<<blocks, kThreads, 0, stream[size_t(d)]>>>(tables[size_t(d)], d, n, floats, iters, out[size_t(d)], ns[size_t(d)]);
          CHECK(cudaGetLastError());
        }
        double worst_us = 0.0;
        for (int d = 0; d < n; ++d) {
          CHECK(cudaSetDevice(d));
          CHECK(cudaStreamSynchronize(stream[size_t(d)]));
          unsigned long long t = 0;
          CHECK(cudaMemcpy(&t, ns[size_t(d)], sizeof(t), cudaMemcpyDeviceToHost));
          worst_us = std::max(worst_us, double(t) / iters / 1e3);
          std::vector<float> got(static_cast<size_t>(floats));
          CHECK(cudaMemcpy(got.data(), out[size_t(d)], got.size() * sizeof(float), cudaMemcpyDeviceToHost));
          for (int i = 0; i < floats && ok; ++i) {
            float want = 0.f;
            for (int r = 0; r < n; ++r) want += partial(r, iters - 1, i);
            if (got[size_t(i)] != want) {
              std::printf("GPU %d, %d floats: element %d is %g, not %g\n", d, floats, i, double(got[size_t(i)]), double(want));
              ok = false;
            }
          }
        }
        std::printf("  %-44s %3d block(s), %5d floats (%5.1f KiB a partial): %.2f us (slowest block), sums %s\n", mode_name(mode), blocks,
                    floats, floats * 4 / 1024.0, worst_us, ok ? "exact" : "WRONG");
      }
    for (int d = 0; d < n; ++d) {
      CHECK(cudaSetDevice(d));
      CHECK(cudaFree(tables[size_t(d)]));
      CHECK(cudaFree(out[size_t(d)]));
      CHECK(cudaFree(ns[size_t(d)]));
      CHECK(cudaStreamDestroy(stream[size_t(d)]));
    }
    return ok ? 0 : 1;
  } catch (const mk::Error& e) {
    std::fprintf(stderr, "peer_push_check: %s\n", e.what());
    return 1;
  }
}
