// Instruction fetch on an SM, measured: code block X (a chain of N steps, or 4 independent chains) is
// timed on its first run in the launch (cold: the launch is the kernel's first on the device), again
// (warm), after the SM ran a flush block F of M steps (other code), and again.
#include <cstdio>
#include <cstdint>

template <int N, int kIlp>
__device__ __forceinline__ void block_x(unsigned (&x)[4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int k = 0; k < kIlp; ++k) x[k] = x[k] * (x[k] | 1u) + unsigned(i * 4 + k) * 0x9E3779B9u;
}
template <int M>
__device__ __forceinline__ unsigned block_f(unsigned y) {
#pragma unroll
  for (int i = 0; i < M; ++i) y = y * (y | 3u) + unsigned(i) * 0x7F4A7C15u;
  return y;
}

template <int N, int kIlp, int M>
__global__ void __launch_bounds__(512, 1) probe(unsigned* out, long long* t) {
  unsigned x[4] = {threadIdx.x + 1, threadIdx.x + 2, threadIdx.x + 3, threadIdx.x + 4};
  long long s[4];
  unsigned y = threadIdx.x;
  __syncthreads();
  s[0] = clock64();
  block_x<N, kIlp>(x);  // cold
  __syncwarp();
  s[1] = clock64();
  block_x<N, kIlp>(x);  // warm? (a second copy of the code: the compiler inlines both)
  __syncwarp();
  s[2] = clock64();
  y = block_f<M>(y ^ x[0]);
  __syncwarp();
  s[3] = clock64();
  out[blockIdx.x * blockDim.x + threadIdx.x] = x[0] ^ x[1] ^ x[2] ^ x[3] ^ y;
  if (threadIdx.x == 0) t[blockIdx.x * 3 + 0] = s[1] - s[0], t[blockIdx.x * 3 + 1] = s[2] - s[1], t[blockIdx.x * 3 + 2] = s[3] - s[2];
}

template <int N, int kIlp, int M>
void run(const char* what) {
  unsigned* out;
  long long* t;
  const int blocks = 132;
  cudaMalloc(&out, blocks * 512 * 4);
  cudaMalloc(&t, blocks * 3 * 8);
  probe<N, kIlp, M><<<blocks, 512>>>(out, t);
  cudaDeviceSynchronize();
  long long h[3 * 132];
  cudaMemcpy(h, t, sizeof(h), cudaMemcpyDeviceToHost);
  double m[3] = {0, 0, 0};
  for (int b = 0; b < blocks; ++b)
    for (int r = 0; r < 3; ++r) m[r] += double(h[b * 3 + r]) / blocks;
  std::printf("%-34s N %5d ilp %d M %5d | X first %8.0f  X second %8.0f  F %8.0f cycles\n", what, N, kIlp, M, m[0], m[1], m[2]);
  cudaFree(out);
  cudaFree(t);
}

int main() {
  // Cold against warm fetch for a dependent chain and for 4 independent chains (X is a different copy
  // of the code each time it appears: "second" is also cold in code, but follows it in memory).
  run<256, 1, 16>("X 8K dep");
  run<256, 4, 16>("X 8K*4 ilp");
  run<1024, 1, 16>("X 32K dep");
  run<1024, 4, 16>("X ~128K ilp");
  run<2048, 4, 16>("X ~256K ilp");
  run<64, 4, 16>("X ~8K ilp");
  return 0;
}
