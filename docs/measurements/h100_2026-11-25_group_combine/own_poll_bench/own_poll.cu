// How long does a CTA take to see a counter complete when its own release-add completed it, against the
// CTAs that were already polling, with and without the memory system loaded by streaming reads?
// Standalone measurement for docs/log.md (eleventh session); not part of the build.
//   nvcc -O3 -arch=sm_90 own_poll.cu -o own_poll && ./own_poll
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>

__device__ __forceinline__ unsigned long long now() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
__device__ __forceinline__ unsigned ld_acq(const unsigned* p) { unsigned v; asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v; }
__device__ __forceinline__ void red_rel(unsigned* p) { asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p) : "memory"); }

// Per episode k: every CTA but the last adds, then polls for the full count; CTA `late` waits ~delay ns,
// adds last, then polls the same counter. Warps 1..15 of every CTA stream `buf` meanwhile if load != 0.
__global__ void __launch_bounds__(512, 1) bench(unsigned* counter, unsigned* stop, const uint4* buf, size_t n16, int episodes, int load,
                                                 unsigned long long* own, unsigned long long* others) {
  const int late = gridDim.x - 1;
  if (threadIdx.x >= 32) {  // load generators
    if (!load) return;
    uint4 acc = make_uint4(0, 0, 0, 0);
    size_t i = (size_t(blockIdx.x) * 480 + threadIdx.x - 32);
    while (ld_acq(stop) == 0) {
      for (int k = 0; k < 64; ++k) {
        const uint4 v = __ldcg(buf + (i % n16));
        acc.x ^= v.x; i += size_t(gridDim.x) * 480;
      }
    }
    if (acc.x == 0x12345) counter[64] = acc.x;
    return;
  }
  if (threadIdx.x != 0) return;
  for (int k = 1; k <= episodes; ++k) {
    const unsigned target = unsigned(k) * gridDim.x;
    if (blockIdx.x == late) {
      const unsigned long long t0 = now();
      while (now() - t0 < 5000) {}  // let every other CTA add and start polling
      red_rel(counter);
      const unsigned long long ta = now();
      while (ld_acq(counter) < target) {}
      own[k - 1] = now() - ta;
      *(volatile unsigned long long*)(counter + 96) = ta;
    } else {
      red_rel(counter);
      while (ld_acq(counter) < target) {}
      const unsigned long long seen = now();
      // the late CTA's add time for this episode: wait until it is published
      unsigned long long ta;
      do { ta = *(volatile unsigned long long*)(counter + 96); } while (ta == 0 || (seen < ta));
      if (blockIdx.x == 0) others[k - 1] = seen - ta;
    }
    // Two barriers among the CTAs' thread 0 (the load warps take no part), the published time cleared between.
    red_rel(counter + 128);
    while (ld_acq(counter + 128) < 2u * k * gridDim.x - gridDim.x) {}
    if (blockIdx.x == 0) *(volatile unsigned long long*)(counter + 96) = 0, __threadfence();
    red_rel(counter + 128);
    while (ld_acq(counter + 128) < 2u * k * gridDim.x) {}
  }
  if (blockIdx.x == 0) atomicExch(stop, 1u);
}

int main() {
  int sms = 0; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t bytes = size_t(4) << 30;
  uint4* buf; unsigned* counter; unsigned* stop; unsigned long long *own, *others;
  cudaMalloc(&buf, bytes); cudaMemset(buf, 1, bytes);
  cudaMalloc(&counter, 4096); cudaMalloc(&stop, 4);
  const int episodes = 200;
  cudaMalloc(&own, episodes * 8); cudaMalloc(&others, episodes * 8);
  for (int load = 0; load <= 1; ++load) {
    cudaMemset(counter, 0, 4096); cudaMemset(stop, 0, 4);
    size_t n16 = bytes / 16; int ep = episodes;
    void* args[] = {&counter, &stop, &buf, &n16, &ep, &load, &own, &others};
    cudaError_t e = cudaLaunchCooperativeKernel((void*)bench, sms, 512, args, 0, 0);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { printf("error %s\n", cudaGetErrorString(e)); return 1; }
    std::vector<unsigned long long> a(episodes), b(episodes);
    cudaMemcpy(a.data(), own, episodes * 8, cudaMemcpyDeviceToHost);
    cudaMemcpy(b.data(), others, episodes * 8, cudaMemcpyDeviceToHost);
    std::sort(a.begin(), a.end()); std::sort(b.begin(), b.end());
    printf("%s: %d CTAs; the completing CTA sees its own add after median %.2f us (p10 %.2f, p90 %.2f); "
           "a polling CTA sees it median %.2f us (p10 %.2f, p90 %.2f) after it was issued\n",
           load ? "memory loaded by streaming reads" : "idle memory", sms, a[episodes / 2] / 1e3, a[episodes / 10] / 1e3,
           a[episodes * 9 / 10] / 1e3, b[episodes / 2] / 1e3, b[episodes / 10] / 1e3, b[episodes * 9 / 10] / 1e3);
  }
  return 0;
}
