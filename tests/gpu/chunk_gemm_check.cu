// Standalone check of device/chunk_gemm.h (not part of CMake). Build from the repository root:
//   nvcc -std=c++17 -O3 -arch=sm_90a -I. -Xptxas -warn-spills tests/gpu/chunk_gemm_check.cu -o chunk_gemm_check
// Checks the tile against a CPU reference of the same rounded inputs (relative L2 error per output row),
// that the epilogue sees every (m, even n) of the valid region exactly once and nothing else, and that two
// runs give the same bits; then times C = A * B^T at M = 1024, K = 4096, N = 14336 (bf16). Exits non-zero
// on any failure.
#include "tests/gpu/standalone_check.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>

#include "device/chunk_gemm.h"

using namespace mk::dev;

// Which tile code a launch runs: the public entry point (the warpgroup path on sm_90a), the FMA path, or
// a shape of the warp-level tensor-core path.
struct Public {};
struct Fma {};
// The public entry point and the narrow path on tiles of 128 x kChunkGemmMaxCols.
struct PublicWide {};
struct NarrowWide {};
// Warpgroup-path shapes of other stage counts.
template <class S>
struct Wgmma {};
template <class T>
constexpr bool is_wgmma = false;
template <class S>
constexpr bool is_wgmma<Wgmma<S>> = true;

template <class S>
__host__ __device__ constexpr int wgmma_cols(Wgmma<S>) {
  return S::kN;
}
// Columns of C one workgroup takes.
template <class Variant>
__host__ __device__ constexpr int tile_cols() {
  if constexpr (is_wgmma<Variant>) return wgmma_cols(Variant{});
  return std::is_same_v<Variant, PublicWide> || std::is_same_v<Variant, NarrowWide> ? kChunkGemmMaxCols : 128;
}

template <bool kF16, class S, class... Args>
__device__ void run_wgmma(Wgmma<S>, Args... args) {
#if MK_WGMMA
  chunk_gemm_tile_wgmma<S, kF16>(args...);
#endif
}
template <class S>
constexpr size_t wgmma_smem(Wgmma<S>) {
  return S::kSmemBytes;
}

template <class Variant, bool kF16, bool kCount>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_kernel(const uint16_t* A, const uint16_t* B, float* C, int M, int N, int K, unsigned* count) {
  extern __shared__ __align__(128) uint8_t smem[];
  constexpr int kTileN = tile_cols<Variant>();
  const int m0 = int(blockIdx.x) * 128, n0 = int(blockIdx.y) * kTileN;
  const int mv = min(128, M - m0), nv = min(kTileN, N - n0);
  auto a_row = [=](int m) { return A + size_t(m0 + m) * K; };
  auto b_row = [=](int n) { return B + size_t(n0 + n) * K; };
  auto epi = [=](int m, int n, float v0, float v1) {
    if (kCount && (m < 0 || m >= mv || n < 0 || n >= nv || (n & 1))) {
      atomicAdd(count + size_t(M) * N, 1u);  // a call outside the valid region
      return;
    }
    *reinterpret_cast<float2*>(C + size_t(m0 + m) * N + n0 + n) = make_float2(v0, v1);
    if (kCount) atomicAdd(count + size_t(m0 + m) * N + n0 + n, 1u);
  };
  if constexpr (std::is_same_v<Variant, Public> || std::is_same_v<Variant, PublicWide>)
    chunk_gemm_tile<kF16>(a_row, mv, b_row, nv, K, smem, epi);
  else if constexpr (is_wgmma<Variant>)
    run_wgmma<kF16>(Variant{}, a_row, mv, b_row, nv, K, smem, epi);
  else if constexpr (std::is_same_v<Variant, NarrowWide>)
    chunk_gemm_tile_narrow<kF16>(a_row, mv, b_row, nv, K, smem, epi);
  else if constexpr (std::is_same_v<Variant, Fma>)
    chunk_gemm_tile_fma<kF16>(a_row, mv, b_row, nv, K, smem, epi);
  else
    chunk_gemm_tile_mma<Variant, kF16>(a_row, mv, b_row, nv, K, smem, epi);
}

template <class Variant>
constexpr size_t variant_smem() {
  if constexpr (std::is_same_v<Variant, Public> || std::is_same_v<Variant, Fma> || std::is_same_v<Variant, PublicWide> ||
                std::is_same_v<Variant, NarrowWide>)
    return chunk_gemm_smem_bytes();
  else if constexpr (is_wgmma<Variant>)
    return wgmma_smem(Variant{});
  else
    return Variant::kSmemBytes;
}

static uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
static float from_bf16(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
static uint16_t to_f16(float f) {
  const __half h = __float2half_rn(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
static float from_f16(uint16_t b) {
  __half h;
  std::memcpy(&h, &b, 2);
  return __half2float(h);
}

struct Problem {
  int M, N, K;
  bool f16;
  std::vector<uint16_t> a, b;
  std::vector<float> ref;  // C = A B^T from the rounded inputs, double sums
  uint16_t *da = nullptr, *db = nullptr;
};

static void make_problem(Problem& p, uint32_t seed, int ref_rows) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto enc = [&](float x) { return p.f16 ? to_f16(x) : to_bf16(x); };
  auto dec = [&](uint16_t x) { return p.f16 ? from_f16(x) : from_bf16(x); };
  p.a.resize(size_t(p.M) * p.K), p.b.resize(size_t(p.N) * p.K);
  for (auto& x : p.a) x = enc(u(rng));
  for (auto& x : p.b) x = enc(u(rng));
  std::vector<float> fa(size_t(ref_rows) * p.K), fb(p.b.size());
  for (size_t i = 0; i < fa.size(); ++i) fa[i] = dec(p.a[i]);
  for (size_t i = 0; i < fb.size(); ++i) fb[i] = dec(p.b[i]);
  p.ref.assign(size_t(ref_rows) * p.N, 0.0f);
  const int workers = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w)
    pool.emplace_back([&, w] {
      for (int m = w; m < ref_rows; m += workers)
        for (int n = 0; n < p.N; ++n) {
          const float* x = &fa[size_t(m) * p.K];
          const float* y = &fb[size_t(n) * p.K];
          double s = 0;
          for (int k = 0; k < p.K; ++k) s += double(x[k]) * double(y[k]);
          p.ref[size_t(m) * p.N + n] = float(s);
        }
    });
  for (auto& th : pool) th.join();
  CHECK(cudaMalloc(&p.da, p.a.size() * 2));
  CHECK(cudaMalloc(&p.db, p.b.size() * 2));
  CHECK(cudaMemcpy(p.da, p.a.data(), p.a.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(p.db, p.b.data(), p.b.size() * 2, cudaMemcpyHostToDevice));
}

static void free_problem(Problem& p) {
  CHECK(cudaFree(p.da));
  CHECK(cudaFree(p.db));
}

static dim3 grid_of(int M, int N, int tile_n) { return dim3((M + 127) / 128, (N + tile_n - 1) / tile_n); }

template <class Variant, bool kF16, bool kCount>
static void launch(const Problem& p, float* dc, unsigned* count, cudaStream_t s = 0) {
  gemm_kernel<Variant, kF16, kCount><<<grid_of(p.M, p.N, tile_cols<Variant>()), kThreads, variant_smem<Variant>(), s>>>(p.da, p.db, dc, p.M, p.N, p.K, count);
}

template <class Variant, bool kF16>
static void prepare() {
  CHECK(cudaFuncSetAttribute(gemm_kernel<Variant, kF16, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(variant_smem<Variant>())));
  CHECK(cudaFuncSetAttribute(gemm_kernel<Variant, kF16, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(variant_smem<Variant>())));
}

static int failures = 0;

// Runs the variant twice on p (with the exactly-once count), compares with p.ref over its rows.
template <class Variant, bool kF16>
static void check(const Problem& p, const char* name) {
  const size_t mn = size_t(p.M) * p.N;
  float *dc1, *dc2;
  unsigned* dcount;
  CHECK(cudaMalloc(&dc1, mn * 4));
  CHECK(cudaMalloc(&dc2, mn * 4));
  CHECK(cudaMalloc(&dcount, (mn + 1) * 4));
  CHECK(cudaMemset(dc1, 0xff, mn * 4));  // NaN where nothing is written
  CHECK(cudaMemset(dc2, 0xff, mn * 4));
  CHECK(cudaMemset(dcount, 0, (mn + 1) * 4));
  launch<Variant, kF16, true>(p, dc1, dcount);
  launch<Variant, kF16, false>(p, dc2, nullptr);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<float> c1(mn), c2(mn);
  std::vector<unsigned> count(mn + 1);
  CHECK(cudaMemcpy(c1.data(), dc1, mn * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(c2.data(), dc2, mn * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(count.data(), dcount, (mn + 1) * 4, cudaMemcpyDeviceToHost));
  size_t bad_count = count[mn];
  for (size_t i = 0; i < mn; ++i) bad_count += (i % 2 == 0) ? (count[i] != 1) : (count[i] != 0);
  const bool same = std::memcmp(c1.data(), c2.data(), mn * 4) == 0;
  const int rows = int(p.ref.size() / p.N);
  double worst = 0;
  for (int m = 0; m < rows; ++m) {
    double num = 0, den = 0;
    for (int n = 0; n < p.N; ++n) {
      const double r = p.ref[size_t(m) * p.N + n], d = double(c1[size_t(m) * p.N + n]) - r;
      num += d * d, den += r * r;
    }
    const double rel = std::sqrt(num / std::max(den, 1e-30));
    worst = std::isfinite(rel) ? std::max(worst, rel) : 1e30;
  }
  const bool ok = worst < 1e-3 && bad_count == 0 && same;
  if (!ok) ++failures;
  std::printf("%-4s %-22s %s M=%-5d N=%-5d K=%-5d max row rel L2 %.3e  epilogue miscount %zu  deterministic %s\n",
              ok ? "PASS" : "FAIL", name, kF16 ? "f16 " : "bf16", p.M, p.N, p.K, worst, bad_count, same ? "yes" : "NO");
  CHECK(cudaFree(dc1));
  CHECK(cudaFree(dc2));
  CHECK(cudaFree(dcount));
}

template <class Variant>
static double time_variant(const Problem& p, float* dc, const char* name) {
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) launch<Variant, false, false>(p, dc, nullptr);
  CHECK(cudaGetLastError());
  const int reps = 20;
  CHECK(cudaEventRecord(e0));
  for (int i = 0; i < reps; ++i) launch<Variant, false, false>(p, dc, nullptr);
  CHECK(cudaEventRecord(e1));
  CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, e0, e1));
  const double s = ms / 1e3 / reps, tflops = 2.0 * p.M * double(p.N) * p.K / s / 1e12;
  cudaFuncAttributes fa;
  CHECK(cudaFuncGetAttributes(&fa, gemm_kernel<Variant, false, false>));
  std::printf("TIME %-22s M=%d N=%d K=%d  %.1f us  %.1f TFLOPS  (%d registers, %zu bytes local, %zu bytes smem)\n", name, p.M, p.N,
              p.K, s * 1e6, tflops, fa.numRegs, size_t(fa.localSizeBytes), variant_smem<Variant>());
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  return tflops;
}

// Warp-level tensor-core shapes (K64S3W1 was the entry point's before the warpgroup path), for comparison.
using ShapeK64S3W1 = ChunkGemmShape<64, 3, 1>;
using ShapeK64S2W2 = ChunkGemmShape<64, 2, 2>;
using ShapeK32S4W1 = ChunkGemmShape<32, 4, 1>;
using ShapeK32S3W1 = ChunkGemmShape<32, 3, 1>;
using Wgmma128S3 = Wgmma<ChunkGemmWgmmaShape<128, 3>>;
using Wgmma128S5 = Wgmma<ChunkGemmWgmmaShape<128, 5>>;
using Wgmma256S3 = Wgmma<ChunkGemmWgmmaShape<256, 3>>;

template <bool kF16>
static void prepare_all() {
  prepare<Public, kF16>();
  prepare<PublicWide, kF16>();
  prepare<NarrowWide, kF16>();
  prepare<Fma, kF16>();
  prepare<ShapeK64S3W1, kF16>();
  prepare<ShapeK64S2W2, kF16>();
  prepare<ShapeK32S4W1, kF16>();
  prepare<ShapeK32S3W1, kF16>();
  prepare<Wgmma128S3, kF16>();
  prepare<Wgmma128S5, kF16>();
  prepare<Wgmma256S3, kF16>();
}

template <bool kF16>
static void check_all(const Problem& p, bool variants) {
  check<Public, kF16>(p, "chunk_gemm_tile");
  check<PublicWide, kF16>(p, "chunk_gemm_tile wide");
  check<NarrowWide, kF16>(p, "narrow path wide");
  check<Fma, kF16>(p, "fma path");
  if (!variants) return;
  check<ShapeK64S3W1, kF16>(p, "mma k64 x3 warpsK1");
  check<ShapeK64S2W2, kF16>(p, "mma k64 x2 warpsK2");
  check<ShapeK32S4W1, kF16>(p, "mma k32 x4 warpsK1");
  check<ShapeK32S3W1, kF16>(p, "mma k32 x3 warpsK1");
  check<Wgmma128S3, kF16>(p, "wgmma 128 x3");
  check<Wgmma128S5, kF16>(p, "wgmma 128 x5");
  check<Wgmma256S3, kF16>(p, "wgmma 256 x3");
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (%d SMs), chunk_gemm_smem_bytes() = %zu\n", prop.name, prop.multiProcessorCount, chunk_gemm_smem_bytes());
  prepare_all<false>();
  prepare_all<true>();

  struct Case { int M, N, K; bool f16; bool variants; };
  const Case cases[] = {
      {300, 520, 2048, false, true}, {300, 520, 4864, false, true}, {300, 520, 2048, true, true}, {300, 520, 4864, true, false},
      {128, 128, 32, false, true},   {7, 2, 96, false, true},       {257, 130, 160, true, true},  {130, 256, 40, false, true},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    Problem p{c.M, c.N, c.K, c.f16};
    make_problem(p, seed++, c.M);
    if (c.f16) check_all<true>(p, c.variants);
    else check_all<false>(p, c.variants);
    free_problem(p);
  }

  // The big case: timed, and its first 8 rows checked.
  Problem big{1024, 14336, 4096, false};
  make_problem(big, 99, 8);
  check<Public, false>(big, "chunk_gemm_tile (big)");
  check<PublicWide, false>(big, "chunk_gemm_tile wide (big)");
  float* dc;
  CHECK(cudaMalloc(&dc, size_t(big.M) * big.N * 4));
  time_variant<Public>(big, dc, "chunk_gemm_tile (wgmma)");
  time_variant<PublicWide>(big, dc, "chunk_gemm_tile wide");
  time_variant<NarrowWide>(big, dc, "narrow path wide");
  time_variant<Wgmma128S3>(big, dc, "wgmma 128 x3");
  time_variant<Wgmma128S5>(big, dc, "wgmma 128 x5");
  time_variant<Wgmma256S3>(big, dc, "wgmma 256 x3");
  time_variant<ShapeK64S3W1>(big, dc, "mma k64 x3 warpsK1");
  time_variant<ShapeK64S2W2>(big, dc, "mma k64 x2 warpsK2");
  time_variant<ShapeK32S4W1>(big, dc, "mma k32 x4 warpsK1");
  time_variant<ShapeK32S3W1>(big, dc, "mma k32 x3 warpsK1");
  time_variant<Public>(big, dc, "chunk_gemm_tile (again)");
  time_variant<PublicWide>(big, dc, "chunk_gemm_tile wide (again)");
  time_variant<Fma>(big, dc, "fma path");
  CHECK(cudaFree(dc));
  free_problem(big);

  std::printf(failures ? "FAIL: %d check(s) failed\n" : "PASS: all checks passed\n", failures);
  return failures ? 1 : 0;
}
