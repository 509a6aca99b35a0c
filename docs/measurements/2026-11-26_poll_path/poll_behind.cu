// How long does one acquire load of an L2-resident line take on an SM that has just issued N KiB of
// bulk copies into its shared memory, against N KiB of L2 prefetches, against nothing, while every SM
// does the same (the decode kernel's situation at an instruction's start)? And on an SM that issued
// nothing while all others stream (a controller SM)?
//   nvcc -O3 -arch=sm_90a poll_behind.cu -o poll_behind && ./poll_behind
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

__device__ __forceinline__ uint32_t sa(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ unsigned ld_acq(const unsigned* p) { unsigned v; asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v; }

// mode 0: nothing issued; 1: `kib` of bulk copies into smem; 2: `kib` of L2 prefetches; 3: as 1 but CTA 0
// issues nothing (its poll is the one reported for CTA 0).
__global__ void __launch_bounds__(128, 1) bench(const uint8_t* buf, size_t buf_bytes, unsigned* line, int mode, int kib, int episodes,
                                                 long long* lat, unsigned* barrier) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ uint64_t bar;
  if (threadIdx.x != 0) return;
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sa(&bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  const size_t piece = 16384;
  const int pieces = kib * 1024 / int(piece);
  size_t off = (size_t(blockIdx.x) * 7919 * piece) % buf_bytes;
  uint32_t phase = 0;
  for (int e = 0; e < episodes; ++e) {
    // all CTAs start an episode together (a grid barrier on a separate line)
    atomicAdd(barrier, 1u);
    while (ld_acq(barrier) < unsigned(e + 1) * gridDim.x) {}
    const bool issue = mode == 1 || mode == 2 || (mode == 3 && blockIdx.x != 0);
    if (issue && mode != 2)
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(&bar)), "r"(uint32_t(pieces * piece)) : "memory");
    if (issue)
      for (int k = 0; k < pieces; ++k) {
        const uint8_t* src = buf + off;
        off = (off + piece) % buf_bytes;
        if (mode == 2) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(uint32_t(piece)) : "memory");
        else asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(sa(smem + k * piece)), "l"(src), "r"(uint32_t(piece)), "r"(sa(&bar)) : "memory");
      }
    const long long t0 = clock64();
    const unsigned v = ld_acq(line + 32 * (blockIdx.x % 8));
    const long long t1 = clock64();
    lat[size_t(blockIdx.x) * episodes + e] = (t1 - t0) + (v == 0xdeadbeef);
    if (issue && mode != 2) {  // the copies land before the next episode reuses the buffer
      uint32_t done = 0;
      while (!done) asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(sa(&bar)), "r"(phase & 1u) : "memory");
      ++phase;
    }
    if (mode == 2) {  // let the prefetches finish too (about what the copies take)
      const long long t = clock64();
      while (clock64() - t < 20000) {}
    }
  }
}

int main() {
  int dev = 0, sms = 0, clock_khz = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev);
  const size_t buf_bytes = size_t(2) << 30;
  uint8_t* buf; unsigned* line; unsigned* barrier; long long* lat;
  cudaMalloc(&buf, buf_bytes); cudaMemset(buf, 1, buf_bytes);
  cudaMalloc(&line, 4096); cudaMemset(line, 0, 4096);
  const int episodes = 200;
  cudaMalloc(&lat, sizeof(long long) * sms * episodes);
  cudaMalloc(&barrier, 4);
  cudaFuncSetAttribute(bench, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  printf("%d SMs, clock %.0f MHz (latency in cycles, and us at that clock); 1 CTA per SM, thread 0 issues then times one ld.acquire.gpu of an L2-resident line\n", sms, clock_khz / 1e3);
  const char* names[] = {"nothing issued", "bulk copies to smem", "L2 prefetch", "others copy, this CTA idle"};
  struct Case { int mode, kib; } cases[] = {{0, 0}, {1, 16}, {1, 48}, {1, 96}, {1, 144}, {2, 48}, {2, 96}, {2, 192}, {3, 96}, {3, 144}};
  for (auto c : cases) {
    cudaMemset(barrier, 0, 4);
    bench<<<sms, 128, 200 * 1024>>>(buf, buf_bytes, line, c.mode, c.kib, episodes, lat, barrier);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) { printf("error %s\n", cudaGetErrorString(err)); return 1; }
    std::vector<long long> h(size_t(sms) * episodes);
    cudaMemcpy(h.data(), lat, h.size() * sizeof(long long), cudaMemcpyDeviceToHost);
    std::vector<long long> all, cta0;
    for (int b = 0; b < sms; ++b) for (int e = 10; e < episodes; ++e) (b == 0 ? cta0 : all).push_back(h[size_t(b) * episodes + e]);
    auto q = [](std::vector<long long> v, double f) { std::sort(v.begin(), v.end()); return v[size_t(f * (v.size() - 1))]; };
    const double us = 1e3 / clock_khz;
    printf("%-28s %4d KiB: other CTAs median %6lld cyc (%.2f us) p90 %6lld (%.2f us); CTA 0 median %6lld (%.2f us)\n", names[c.mode], c.kib,
           q(all, 0.5), q(all, 0.5) * us, q(all, 0.9), q(all, 0.9) * us, q(cta0, 0.5), q(cta0, 0.5) * us);
  }
  return 0;
}
