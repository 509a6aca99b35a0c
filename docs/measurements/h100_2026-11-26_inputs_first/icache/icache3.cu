// Instruction cache capacity of an SM: a block of S KiB of code with instruction-level parallelism (4
// independent chains) run 4 times in a loop by 16 warps of one CTA per SM. Passes after the first run
// from the cache if the block fits (the first launch's pass 0 fetches from memory).
#include <cstdio>
#include <cstdint>

template <int N>
__global__ void __launch_bounds__(512, 1) loop(unsigned* out, long long* t) {
  unsigned x0 = threadIdx.x + 1, x1 = threadIdx.x + 2, x2 = threadIdx.x + 3, x3 = threadIdx.x + 4;
  long long s[5];
#pragma unroll 1
  for (int rep = 0; rep < 4; ++rep) {
    __syncwarp();
    s[rep] = clock64();
#pragma unroll
    for (int i = 0; i < N; ++i) {
      x0 = x0 * (x0 | 1u) + unsigned(4 * i) * 0x9E3779B9u;
      x1 = x1 * (x1 | 1u) + unsigned(4 * i + 1) * 0x9E3779B9u;
      x2 = x2 * (x2 | 1u) + unsigned(4 * i + 2) * 0x9E3779B9u;
      x3 = x3 * (x3 | 1u) + unsigned(4 * i + 3) * 0x9E3779B9u;
    }
  }
  __syncwarp();
  s[4] = clock64();
  out[blockIdx.x * blockDim.x + threadIdx.x] = x0 ^ x1 ^ x2 ^ x3;
  if (threadIdx.x == 0)
    for (int r = 0; r < 4; ++r) t[blockIdx.x * 4 + r] = s[r + 1] - s[r];
}

template <int N>
void run() {
  unsigned* out;
  long long* t;
  cudaMalloc(&out, 132 * 512 * 4);
  cudaMalloc(&t, 132 * 4 * 8);
  loop<N><<<132, 512>>>(out, t);
  cudaDeviceSynchronize();
  long long h[4 * 132];
  cudaMemcpy(h, t, sizeof(h), cudaMemcpyDeviceToHost);
  double m[4] = {0, 0, 0, 0};
  for (int b = 0; b < 132; ++b)
    for (int r = 0; r < 4; ++r) m[r] += double(h[b * 4 + r]) / 132;
  std::printf("N %5d (4 chains; see the cubin for the code size) | cycles per pass %8.0f %8.0f %8.0f %8.0f | pass 3 / pass 0 %.2f\n", N, m[0],
              m[1], m[2], m[3], m[3] / m[0]);
  cudaFree(out);
  cudaFree(t);
}

int main() {
  run<64>();
  run<128>();
  run<256>();
  run<384>();
  run<512>();
  run<640>();
  run<768>();
  run<896>();
  run<1024>();
  run<1280>();
  return 0;
}
