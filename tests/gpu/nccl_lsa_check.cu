// The cross-GPU hand-off that tensor parallel's all-reduce stage would use (issue 47), measured alone:
// one persistent block per GPU pushes its partial vector into every peer's slot of an NCCL symmetric
// window (LSA pointers), crosses an NCCL LSA barrier, and sums the slots locally; repeated, with two slot
// sets so that a push never overwrites what a slower peer still reads. Reports the time per exchange
// for several vector sizes (0: the barrier alone) and checks every sum. NVLink multicast stays off (no
// multimem; run with NCCL_NVLS_ENABLE=0).
//
// Standalone, like the other tests/gpu/*_check.cu (not part of the build; exits 1 on a wrong sum):
//   nvcc -std=c++17 -O3 -arch=sm_90a -I. tests/gpu/nccl_lsa_check.cu -lnccl -o nccl_lsa_check
//   NCCL_NVLS_ENABLE=0 ./nccl_lsa_check            (every visible GPU, at least 2)
#include "tests/gpu/standalone_check.h"

#include <nccl.h>
#include <nccl_device.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#define CHECK_NCCL(x)                                                                                   \
  do {                                                                                                  \
    ncclResult_t r_ = (x);                                                                              \
    if (r_ != ncclSuccess) {                                                                            \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_));         \
      std::exit(1);                                                                                     \
    }                                                                                                   \
  } while (0)

constexpr int kThreads = 512;
constexpr int kMaxBlocks = 132;
constexpr int kMaxFloats = 8192;  // 32 KiB of fp32 per partial

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// Rank r's partial at iteration it: element i is r + 1 + it + i / 1024 (exact in fp32 for these sizes).
__device__ __host__ inline float partial(int rank, int it, int i) { return float(rank + 1 + it) + float(i) / 1024.0f; }

// kVector: 16-byte stores and loads (floats a multiple of 4), else 4-byte ones. With several blocks, block
// b exchanges its own slice of the vector through its own LSA barrier (index b), as the workgroups of a
// row stage would exchange the rows they computed.
template <bool kVector>
__global__ void __launch_bounds__(kThreads) exchange_kernel(ncclWindow_t win, ncclDevComm comm, int floats, int iters,
                                                            float* out, unsigned long long* ns) {
  const int rank = comm.rank, ranks = comm.nRanks;
  const int slice = (floats / 4 + int(gridDim.x) - 1) / int(gridDim.x) * 4;
  const int lo = min(floats, int(blockIdx.x) * slice), hi = min(floats, lo + slice);
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), comm, ncclTeamLsa(comm), comm.lsaBarrier, blockIdx.x};
  bar.sync(ncclCoopCta(), cuda::memory_order_relaxed);  // every GPU's block is running
  const unsigned long long t0 = global_ns();
  for (int it = 0; it < iters; ++it) {
    const size_t set = size_t(it & 1) * size_t(ranks) * size_t(kMaxFloats);
    const size_t mine = (set + size_t(rank) * kMaxFloats) * sizeof(float);
    for (int peer = 0; peer < ranks; ++peer) {
      float* dst = static_cast<float*>(ncclGetLsaPointer(win, mine, peer));
      if constexpr (kVector) {
        for (int i = lo + 4 * int(threadIdx.x); i < hi; i += 4 * kThreads)
          *reinterpret_cast<float4*>(dst + i) = make_float4(partial(rank, it, i), partial(rank, it, i + 1), partial(rank, it, i + 2),
                                                            partial(rank, it, i + 3));
      } else {
        for (int i = lo + int(threadIdx.x); i < hi; i += kThreads) dst[i] = partial(rank, it, i);
      }
    }
    bar.arrive(ncclCoopCta(), cuda::memory_order_release);
    bar.wait(ncclCoopCta(), cuda::memory_order_acquire);
    const float* slots = static_cast<const float*>(ncclGetLsaPointer(win, set * sizeof(float), rank));
    if constexpr (kVector) {
      for (int i = lo + 4 * int(threadIdx.x); i < hi; i += 4 * kThreads) {
        float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int r = 0; r < ranks; ++r) {
          const float4 v = *reinterpret_cast<const float4*>(slots + size_t(r) * kMaxFloats + i);
          s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
        }
        *reinterpret_cast<float4*>(out + i) = s;
      }
    } else {
      for (int i = lo + int(threadIdx.x); i < hi; i += kThreads) {
        float s = 0.f;
        for (int r = 0; r < ranks; ++r) s += slots[size_t(r) * kMaxFloats + i];
        out[i] = s;
      }
    }
  }
  const unsigned long long t1 = global_ns();
  if (threadIdx.x == 0) atomicMax(ns, t1 - t0);  // the slowest block
}

int main() {
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  if (n < 2) {
    std::fprintf(stderr, "nccl_lsa_check: %d GPU visible; the probe needs at least 2\n", n);
    return 1;
  }
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  if (nvls == nullptr || std::string_view(nvls) != "0") {
    std::fprintf(stderr, "nccl_lsa_check: run with NCCL_NVLS_ENABLE=0 (NVLink multicast must stay off)\n");
    return 1;
  }
  std::vector<int> devs(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) devs[size_t(d)] = d;
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  CHECK_NCCL(ncclCommInitAll(comms.data(), n, devs.data()));
  const size_t window_bytes = size_t(2) * size_t(n) * kMaxFloats * sizeof(float);
  std::vector<void*> buf(static_cast<size_t>(n));
  std::vector<ncclWindow_t> win(static_cast<size_t>(n));
  std::vector<ncclDevComm> dev(static_cast<size_t>(n));
  std::vector<float*> out(static_cast<size_t>(n));
  std::vector<unsigned long long*> ns(static_cast<size_t>(n));
  std::vector<cudaStream_t> stream(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK_NCCL(ncclMemAlloc(&buf[size_t(d)], window_bytes));
    CHECK(cudaMalloc(&out[size_t(d)], kMaxFloats * sizeof(float)));
    CHECK(cudaMalloc(&ns[size_t(d)], sizeof(unsigned long long)));
    CHECK(cudaStreamCreate(&stream[size_t(d)]));
  }
  CHECK_NCCL(ncclGroupStart());
  for (int d = 0; d < n; ++d)
    CHECK_NCCL(ncclCommWindowRegister(comms[size_t(d)], buf[size_t(d)], window_bytes, &win[size_t(d)], NCCL_WIN_COLL_SYMMETRIC));
  CHECK_NCCL(ncclGroupEnd());
  CHECK_NCCL(ncclGroupStart());
  for (int d = 0; d < n; ++d) {
    ncclDevCommRequirements reqs{};
    reqs.lsaMultimem = false;
    reqs.lsaBarrierCount = kMaxBlocks;
    CHECK_NCCL(ncclDevCommCreate(comms[size_t(d)], &reqs, &dev[size_t(d)]));
  }
  CHECK_NCCL(ncclGroupEnd());

  std::printf("%d GPUs, blocks of %d threads; time per exchange (push to every peer, LSA barrier, local sum)\n", n, kThreads);
  bool ok = true;
  const int iters = 2000;
  struct Case {
    int blocks;
    bool vector;
  };
  for (const Case c : {Case{1, false}, Case{1, true}, Case{8, true}, Case{32, true}, Case{kMaxBlocks, true}})
    for (const int floats : {0, 256, 1024, 2048, 4096, 8192}) {
      if (c.vector && floats == 0) continue;
      for (int d = 0; d < n; ++d) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaMemsetAsync(ns[size_t(d)], 0, sizeof(unsigned long long), stream[size_t(d)]));
        auto kernel = c.vector ? exchange_kernel<true> : exchange_kernel<false>;
        kernel<<<c.blocks, kThreads, 0, stream[size_t(d)]>>>(win[size_t(d)], dev[size_t(d)], floats, iters, out[size_t(d)],
                                                               ns[size_t(d)]);
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
        if (floats > 0) CHECK(cudaMemcpy(got.data(), out[size_t(d)], got.size() * sizeof(float), cudaMemcpyDeviceToHost));
        for (int i = 0; i < floats; ++i) {
          float want = 0.f;
          for (int r = 0; r < n; ++r) want += partial(r, iters - 1, i);
          if (got[size_t(i)] != want) {
            std::printf("GPU %d, %d floats: element %d is %g, not %g\n", d, floats, i, double(got[size_t(i)]), double(want));
            ok = false;
            break;
          }
        }
      }
      std::printf("  %3d block(s), %5d floats (%5.1f KiB a partial), %2d-byte accesses: %.2f us (slowest block), sums %s\n", c.blocks,
                  floats, floats * 4 / 1024.0, c.vector ? 16 : 4, worst_us, ok ? "exact" : "WRONG");
    }
  CHECK_NCCL(ncclGroupStart());
  for (int d = 0; d < n; ++d) CHECK_NCCL(ncclDevCommDestroy(comms[size_t(d)], &dev[size_t(d)]));
  CHECK_NCCL(ncclGroupEnd());
  CHECK_NCCL(ncclGroupStart());
  for (int d = 0; d < n; ++d) CHECK_NCCL(ncclCommWindowDeregister(comms[size_t(d)], win[size_t(d)]));
  CHECK_NCCL(ncclGroupEnd());
  for (int d = 0; d < n; ++d) {
    CHECK_NCCL(ncclMemFree(buf[size_t(d)]));
    CHECK_NCCL(ncclCommDestroy(comms[size_t(d)]));
  }
  return ok ? 0 : 1;
}
