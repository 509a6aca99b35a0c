// Can one launch be both cooperative (all CTAs co-resident, grid sync allowed) and in thread-block clusters
// of 8, with the decode kernel's footprint (512 threads, ~200 KiB of shared memory per CTA)?
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a coop_cluster.cu -o coop_cluster && ./coop_cluster
#include <cstdio>
#include <cooperative_groups.h>
#include <cuda_runtime.h>
namespace cg = cooperative_groups;

__global__ void __launch_bounds__(512, 1) probe(unsigned* out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  smem[threadIdx.x] = 1;
  cg::this_grid().sync();  // needs a cooperative launch
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  if (threadIdx.x == 0) atomicAdd(out + rank, 1u);
}

int main() {
  unsigned* out;
  cudaMalloc(&out, 64 * 4);
  const int smem = 200 * 1024;
  cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(probe, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  for (int csize : {1, 2, 4, 8, 16}) {
    cudaMemset(out, 0, 64 * 4);
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = csize, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeCooperative;
    attr[1].val.cooperative = 1;
    cfg.blockDim = dim3(512), cfg.dynamicSmemBytes = smem, cfg.attrs = attr, cfg.numAttrs = 1, cfg.gridDim = dim3(csize);
    int clusters = 0;
    cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, probe, &cfg);
    cfg.numAttrs = 2;
    cfg.gridDim = dim3(clusters * csize);
    if (e == cudaSuccess) e = cudaLaunchKernelEx(&cfg, probe, out);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    unsigned h[16] = {};
    cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
    printf("cluster %2d: %d clusters, %d CTAs, cooperative + cluster launch: %s; CTAs of rank 0: %u\n", csize, clusters, clusters * csize,
           cudaGetErrorString(e), h[0]);
    cudaGetLastError();
  }
  return 0;
}
