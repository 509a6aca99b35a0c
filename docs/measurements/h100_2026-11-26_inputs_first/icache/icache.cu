// How long does code take the first time an SM runs it, against the second time? One block per SM
// (or one block), one warp or 16 warps, a straight-line chain of N steps (2 instructions, 32 bytes of SASS
// each, data-dependent so nothing folds), run 4 times in a loop: pass 0 fetches the code cold.
#include <cstdio>
#include <cstdint>

template <int N>
__global__ void __launch_bounds__(512, 1) chain(unsigned* out, long long* t, int warps) {
  if (threadIdx.x / 32 >= warps) return;
  unsigned x = threadIdx.x + 1;
  long long stamp[5];
#pragma unroll 1
  for (int rep = 0; rep < 4; ++rep) {
    __syncwarp();
    stamp[rep] = clock64();
#pragma unroll
    for (int i = 0; i < N; ++i) x = x * (x | 1u) + unsigned(i) * 0x9E3779B9u;
  }
  stamp[4] = clock64();
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
  if (threadIdx.x == 0)
    for (int r = 0; r < 4; ++r) t[blockIdx.x * 4 + r] = stamp[r + 1] - stamp[r];
}

template <int N>
void run(int blocks, int warps) {
  unsigned* out;
  long long* t;
  cudaMalloc(&out, blocks * 512 * 4);
  cudaMalloc(&t, blocks * 4 * 8);
  chain<N><<<blocks, 512>>>(out, t, warps);  // warm-up launch: code into L2
  cudaDeviceSynchronize();
  chain<N><<<blocks, 512>>>(out, t, warps);
  cudaDeviceSynchronize();
  long long h[4 * 132];
  cudaMemcpy(h, t, blocks * 4 * 8, cudaMemcpyDeviceToHost);
  double m[4] = {0, 0, 0, 0};
  for (int b = 0; b < blocks; ++b)
    for (int r = 0; r < 4; ++r) m[r] += double(h[b * 4 + r]) / blocks;
  const double kib = N * 32.0 / 1024;
  std::printf("N %5d code ~%7.1f KiB (32 B a step)  blocks %3d warps %2d | cycles per pass: %9.0f %9.0f %9.0f %9.0f | cold-warm per KiB %7.1f cycles\n", N, kib,
              blocks, warps, m[0], m[1], m[2], m[3], (m[0] - m[3]) / kib);
  cudaFree(out);
  cudaFree(t);
}

template <int N>
void sizes() {
  run<N>(1, 1);
  run<N>(1, 16);
  run<N>(132, 16);
}

int main() {
  sizes<64>();
  sizes<256>();
  sizes<1024>();
  sizes<2048>();
  sizes<4096>();
  sizes<8192>();
  return 0;
}
