// Does a push into a CTA's shared memory from another SM of its cluster (a distributed-shared-memory store,
// or a TMA multicast issued by that SM) reach it quickly while the receiving SM has N KiB of its own bulk
// copies arriving? Rank 0 of each cluster is a controller that copies nothing; ranks 1..C-1 are workers.
// Per episode: the workers arm their mbarriers, issue N KiB of bulk copies, and tell the controller; the
// controller then times (a) a store into each worker's shared memory answered by a store back, or (b) an
// 8 KiB multicast copy from L2 into every worker answered likewise. And, for reference, (c) a worker's own
// ld.acquire.gpu of an L2-resident line right after its copies; (d) all 512 threads of a worker reading P
// KiB of the controller's shared memory (distributed shared memory loads, every load in flight at once)
// right after its copies, against (e) the same P KiB read from L2.
//   nvcc -O3 -arch=sm_90a cluster_push.cu -o cluster_push && ./cluster_push
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

__device__ __forceinline__ uint32_t sa(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ unsigned ld_acq(const unsigned* p) { unsigned v; asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v; }
__device__ __forceinline__ uint32_t cluster_rank() { uint32_t r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ uint32_t cluster_size() { uint32_t r; asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ uint32_t remote(const void* p, uint32_t rank) { uint32_t r; asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(sa(p)), "r"(rank)); return r; }
__device__ __forceinline__ void st_remote(uint32_t addr, uint32_t v) { asm volatile("st.relaxed.cluster.shared::cluster.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory"); }
__device__ __forceinline__ uint32_t ld_local(const uint32_t* p) { uint32_t v; asm volatile("ld.relaxed.cluster.shared::cta.u32 %0, [%1];" : "=r"(v) : "r"(sa(p)) : "memory"); return v; }
__device__ __forceinline__ bool try_parity(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(sa(bar)), "r"(parity) : "memory");
  return done;
}

constexpr int kEpisodes = 200;
__global__ void __launch_bounds__(512, 1) bench(const uint8_t* buf, size_t buf_bytes, const uint8_t* act, unsigned* line, int kib, int how,
                                                 long long* rtt, long long* own, unsigned* barrier, int pull) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ uint64_t copies_bar, push_bar;
  __shared__ uint32_t issued[16], ping, ack[16];
  const uint32_t rank = cluster_rank(), csize = cluster_size();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sa(&copies_bar)) : "memory");
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sa(&push_bar)) : "memory");
    for (int i = 0; i < 16; ++i) issued[i] = 0, ack[i] = 0;
    ping = 0;
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.release; barrier.cluster.wait.acquire;" ::: "memory");
  const size_t piece = 16384;
  const int pieces = kib * 1024 / int(piece);
  size_t off = (size_t(blockIdx.x) * 7919 * piece) % buf_bytes;
  uint8_t* act_dst = smem + 160 * 1024;  // the multicast's 8 KiB, past the copies
  for (int e = 0; e < kEpisodes; ++e) {
    if (how >= 3) {  // the whole block: thread 0 issues the copies, then all threads read `pull` bytes
      if (threadIdx.x == 0) {
        atomicAdd(barrier, 1u);
        while (ld_acq(barrier) < unsigned(e + 1) * gridDim.x) {}
        if (rank != 0 && pieces) {
          asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(&copies_bar)), "r"(uint32_t(pieces * piece)) : "memory");
          for (int k = 0; k < pieces; ++k) {
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(sa(smem + k * piece)),
                         "l"(buf + off), "r"(uint32_t(piece)), "r"(sa(&copies_bar)) : "memory");
            off = (off + piece) % buf_bytes;
          }
        }
      }
      __syncthreads();
      if (rank != 0) {
        const long long t0 = clock64();
        uint32_t acc = 0;
        uint4 v[8];  // every load of this thread in flight before the first use
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const int i = (k * int(blockDim.x) + int(threadIdx.x)) * 16;
          v[k] = make_uint4(0, 0, 0, 0);
          if (i < pull) {
            if (how == 3)
              asm volatile("ld.shared::cluster.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v[k].x), "=r"(v[k].y), "=r"(v[k].z), "=r"(v[k].w) : "r"(remote(smem + i, 0)));
            else
              asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v[k].x), "=r"(v[k].y), "=r"(v[k].z), "=r"(v[k].w) : "l"(act + i));
          }
        }
#pragma unroll
        for (int k = 0; k < 8; ++k) acc += v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
        *reinterpret_cast<volatile uint32_t*>(smem + 196 * 1024 + threadIdx.x * 4) = acc;  // keeps the loads
        __syncthreads();
        if (threadIdx.x == 0) {
          own[size_t(blockIdx.x) * kEpisodes + e] = clock64() - t0;
          if (pieces) while (!try_parity(&copies_bar, uint32_t(e & 1))) {}
        }
      }
      __syncthreads();
      continue;
    }
    if (threadIdx.x != 0) continue;
    atomicAdd(barrier, 1u);
    while (ld_acq(barrier) < unsigned(e + 1) * gridDim.x) {}
    if (rank != 0) {
      if (how == 1) asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(&push_bar)), "r"(8192u) : "memory");
      if (pieces) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(&copies_bar)), "r"(uint32_t(pieces * piece)) : "memory");
        for (int k = 0; k < pieces; ++k) {
          asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(sa(smem + k * piece)),
                       "l"(buf + off), "r"(uint32_t(piece)), "r"(sa(&copies_bar)) : "memory");
          off = (off + piece) % buf_bytes;
        }
      }
      if (how == 2) {  // (c): own poll
        const long long t0 = clock64();
        const unsigned v = ld_acq(line + 32 * (blockIdx.x % 8));
        own[size_t(blockIdx.x) * kEpisodes + e] = clock64() - t0 + (v == 0xdeadbeef);
      } else {
        st_remote(remote(&issued[rank], 0), uint32_t(e + 1));
        if (how == 0) {
          while (ld_local(&ping) != uint32_t(e + 1)) {}
        } else {
          while (!try_parity(&push_bar, uint32_t(e & 1))) {}
        }
        st_remote(remote(&ack[rank], 0), uint32_t(e + 1));
      }
      if (pieces) while (!try_parity(&copies_bar, uint32_t(e & 1))) {}
    } else if (how != 2) {
      for (uint32_t r = 1; r < csize; ++r) while (ld_local(&issued[r]) != uint32_t(e + 1)) {}
      const long long t0 = clock64();
      if (how == 0) {
        for (uint32_t r = 1; r < csize; ++r) st_remote(remote(&ping, r), uint32_t(e + 1));
      } else {
        const uint16_t mask = uint16_t(((1u << csize) - 1u) & ~1u);
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;" ::"r"(sa(act_dst)),
                     "l"(act), "r"(8192u), "r"(sa(&push_bar)), "h"(mask) : "memory");
      }
      for (uint32_t r = 1; r < csize; ++r) while (ld_local(&ack[r]) != uint32_t(e + 1)) {}
      rtt[size_t(blockIdx.x) * kEpisodes + e] = clock64() - t0;
    }
  }
  asm volatile("barrier.cluster.arrive.release; barrier.cluster.wait.acquire;" ::: "memory");
}

int main() {
  int dev = 0, sms = 0, clock_khz = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev);
  const size_t buf_bytes = size_t(2) << 30;
  uint8_t *buf, *act; unsigned *line, *barrier; long long *rtt, *own;
  cudaMalloc(&buf, buf_bytes); cudaMemset(buf, 1, buf_bytes);
  cudaMalloc(&act, 65536); cudaMemset(act, 2, 65536);
  cudaMalloc(&line, 4096); cudaMemset(line, 0, 4096);
  cudaMalloc(&rtt, sizeof(long long) * sms * kEpisodes);
  cudaMalloc(&own, sizeof(long long) * sms * kEpisodes);
  cudaMalloc(&barrier, 4);
  const int smem = 200 * 1024;
  cudaFuncSetAttribute(bench, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(bench, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  const double us = 1e3 / clock_khz;
  printf("%d SMs, clock %.0f MHz; rank 0 of a cluster copies nothing, the other ranks copy N KiB per episode\n", sms, clock_khz / 1e3);
  for (int csize : {2, 4, 8, 16}) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = csize, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    cfg.blockDim = dim3(512), cfg.dynamicSmemBytes = smem, cfg.attrs = attr, cfg.numAttrs = 1;
    cfg.gridDim = dim3(csize);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, bench, &cfg) != cudaSuccess || clusters == 0) {
      printf("cluster size %d: not launchable (%s)\n", csize, cudaGetErrorString(cudaGetLastError()));
      continue;
    }
    const int grid = clusters * csize;
    cfg.gridDim = dim3(grid);
    for (int how : {0, 1, 2, 3, 4})
      for (int pull : {8192, 32768, 57344})
      for (int kib : {0, 48, 96, 144}) {
        if (how < 3 && pull != 8192) continue;
        cudaMemset(barrier, 0, 4);
        cudaMemset(rtt, 0, sizeof(long long) * sms * kEpisodes);
        cudaError_t err = cudaLaunchKernelEx(&cfg, bench, (const uint8_t*)buf, buf_bytes, (const uint8_t*)act, line, kib, how, rtt, own, barrier, pull);
        if (err == cudaSuccess) err = cudaDeviceSynchronize();
        if (err != cudaSuccess) { printf("cluster %d how %d: error %s\n", csize, how, cudaGetErrorString(err)); return 1; }
        std::vector<long long> h(size_t(sms) * kEpisodes), v;
        cudaMemcpy(h.data(), how >= 2 ? own : rtt, h.size() * sizeof(long long), cudaMemcpyDeviceToHost);
        for (int b = 0; b < grid; ++b) {
          const bool controller = b % csize == 0;
          if (controller != (how == 0 || how == 1)) continue;
          for (int e = 10; e < kEpisodes; ++e) v.push_back(h[size_t(b) * kEpisodes + e]);
        }
        std::sort(v.begin(), v.end());
        const char* names[] = {"DSMEM store, answered (round trip)", "8 KiB multicast, answered (round trip)", "worker's own ld.acquire.gpu",
                               "worker reads P KiB of rank 0's smem", "worker reads P KiB from L2 (ld.cg)"};
        printf("cluster %2d (%3d CTAs) %-38s P=%2d N=%3d KiB: median %5lld cyc (%.2f us), p90 %5lld (%.2f us)\n", csize, grid, names[how], pull / 1024, kib,
               v[v.size() / 2], v[v.size() / 2] * us, v[v.size() * 9 / 10], v[v.size() * 9 / 10] * us);
      }
  }
  return 0;
}
