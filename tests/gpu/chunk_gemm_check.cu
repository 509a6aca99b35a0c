// Standalone check of device/chunk_gemm.h (not part of CMake). Build from the repository root:
//   nvcc -std=c++17 -O3 -arch=sm_90a -I. -Xptxas -warn-spills tests/gpu/chunk_gemm_check.cu -o chunk_gemm_check
// Checks the tile against a CPU reference of the same rounded inputs (relative L2 error per output row),
// that the epilogue sees every (m, even n) of the valid region exactly once and nothing else, and that two
// runs give the same bits, for weights in bf16, f16, fp8 and int4 (the reference decodes a quantized
// weight with runtime/matrix_format.h's definition and rounds it to bf16, as the chunk steps define it);
// then times C = A * B^T at M = 1024, K = 4096, N = 14336 (bf16, int4, fp8). Exits non-zero on any
// failure.
#include "tests/gpu/standalone_check.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "device/chunk_gemm.h"
#include "runtime/matrix_format.h"

using namespace mk::dev;
using mk::MatrixFormat;

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

template <MatrixFormat kW, class S, class... Args>
__device__ void run_wgmma(Wgmma<S>, Args... args) {
#if MK_WGMMA
  chunk_gemm_tile_wgmma<S, kW>(args...);
#endif
}
template <class S>
constexpr size_t wgmma_smem(Wgmma<S>) {
  return S::kSmemBytes;
}

template <class Variant, MatrixFormat kW, bool kCount>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_kernel(const uint16_t* A, const uint8_t* B, float* C, int M, int N, int K, unsigned* count) {
  extern __shared__ __align__(128) uint8_t smem[];
  constexpr int kTileN = tile_cols<Variant>();
  const int m0 = int(blockIdx.x) * 128, n0 = int(blockIdx.y) * kTileN;
  const int mv = min(128, M - m0), nv = min(kTileN, N - n0);
  auto a_row = [=](int m) { return A + size_t(m0 + m) * K; };
  auto b_row = [=](int n) { return B + size_t(n0 + n) * size_t(mk::matrix_row_bytes(kW, K)); };
  auto epi = [=](int m, int n, float v0, float v1) {
    if (kCount && (m < 0 || m >= mv || n < 0 || n >= nv || (n & 1))) {
      atomicAdd(count + size_t(M) * N, 1u);  // a call outside the valid region
      return;
    }
    *reinterpret_cast<float2*>(C + size_t(m0 + m) * N + n0 + n) = make_float2(v0, v1);
    if (kCount) atomicAdd(count + size_t(m0 + m) * N + n0 + n, 1u);
  };
  if constexpr (std::is_same_v<Variant, Public> || std::is_same_v<Variant, PublicWide>)
    chunk_gemm_tile<kW>(a_row, mv, b_row, nv, K, smem, epi);
  else if constexpr (is_wgmma<Variant>)
    run_wgmma<kW>(Variant{}, a_row, mv, b_row, nv, K, smem, epi);
  else if constexpr (std::is_same_v<Variant, NarrowWide>)
    chunk_gemm_tile_narrow<kW>(a_row, mv, b_row, nv, K, smem, epi);
  else if constexpr (std::is_same_v<Variant, Fma>)
    chunk_gemm_tile_fma<kW>(a_row, mv, b_row, nv, K, smem, epi);
  else
    chunk_gemm_tile_mma<Variant, kW>(a_row, mv, b_row, nv, K, smem, epi);
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
  MatrixFormat w;  // the weights' format; the activations are f16 for f16 weights, else bf16
  std::vector<uint16_t> a;
  std::vector<uint8_t> b;  // N rows of matrix_row_bytes(w, K)
  std::vector<float> ref;  // C = A B^T from the rounded inputs, double sums
  uint16_t* da = nullptr;
  uint8_t* db = nullptr;
};

// Random weight rows in format p.w: 16-bit values in [-1, 1); fp8 codes of every finite value and
// int4 codes with scales in [1/64, 1/32) and (int4) zero points in [0, 15]; the weights as the tiles
// define them (a quantized element rounded to bf16).
static std::vector<float> make_weights(Problem& p, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), scale(1.0f / 64, 1.0f / 32);
  const size_t row_bytes = size_t(mk::matrix_row_bytes(p.w, p.K));
  p.b.assign(size_t(p.N) * row_bytes, 0);
  std::vector<float> fb(size_t(p.N) * p.K);
  for (int n = 0; n < p.N; ++n) {
    uint8_t* row = &p.b[size_t(n) * row_bytes];
    if (p.w == MatrixFormat::BF16 || p.w == MatrixFormat::F16) {
      for (int k = 0; k < p.K; ++k) {
        const uint16_t v = p.w == MatrixFormat::F16 ? to_f16(u(rng)) : to_bf16(u(rng));
        std::memcpy(row + 2 * k, &v, 2);
      }
    } else {
      for (int i = 0; i < mk::row_value_bytes(p.w, p.K); ++i) {
        uint8_t byte = uint8_t(rng());
        if (p.w == MatrixFormat::FP8 && (byte & 0x7f) == 0x7f) byte ^= 1;  // not a NaN code
        row[i] = byte;
      }
      const int groups = mk::scale_groups(p.w, p.K);
      for (int g = 0; g < groups; ++g) {
        const float sc = scale(rng);
        std::memcpy(row + mk::row_value_bytes(p.w, p.K) + 4 * g, &sc, 4);
        if (mk::matrix_format_zero_points(p.w)) row[mk::row_value_bytes(p.w, p.K) + 4 * groups + g] = uint8_t(rng() % 16);
      }
    }
    for (int k = 0; k < p.K; ++k) {
      const float v = mk::matrix_row_element(p.w, row, p.K, k);
      fb[size_t(n) * p.K + k] = mk::matrix_format_quantized(p.w) ? from_bf16(to_bf16(v)) : v;
    }
  }
  return fb;
}

static void make_problem(Problem& p, uint32_t seed, int ref_rows) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const bool f16 = p.w == MatrixFormat::F16;
  p.a.resize(size_t(p.M) * p.K);
  for (auto& x : p.a) x = f16 ? to_f16(u(rng)) : to_bf16(u(rng));
  const std::vector<float> fb = make_weights(p, rng);
  std::vector<float> fa(size_t(ref_rows) * p.K);
  for (size_t i = 0; i < fa.size(); ++i) fa[i] = f16 ? from_f16(p.a[i]) : from_bf16(p.a[i]);
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
  CHECK(cudaMalloc(&p.db, p.b.size()));
  CHECK(cudaMemcpy(p.da, p.a.data(), p.a.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(p.db, p.b.data(), p.b.size(), cudaMemcpyHostToDevice));
}

static void free_problem(Problem& p) {
  CHECK(cudaFree(p.da));
  CHECK(cudaFree(p.db));
}

static dim3 grid_of(int M, int N, int tile_n) { return dim3((M + 127) / 128, (N + tile_n - 1) / tile_n); }

template <class Variant, MatrixFormat kW, bool kCount>
static void launch(const Problem& p, float* dc, unsigned* count, cudaStream_t s = 0) {
  gemm_kernel<Variant, kW, kCount><<<grid_of(p.M, p.N, tile_cols<Variant>()), kThreads, variant_smem<Variant>(), s>>>(p.da, p.db, dc, p.M, p.N, p.K, count);
}

template <class Variant, MatrixFormat kW>
static void prepare() {
  CHECK(cudaFuncSetAttribute(gemm_kernel<Variant, kW, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(variant_smem<Variant>())));
  CHECK(cudaFuncSetAttribute(gemm_kernel<Variant, kW, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(variant_smem<Variant>())));
}

static int failures = 0;

// Runs the variant twice on p (with the exactly-once count), compares with p.ref over its rows.
template <class Variant, MatrixFormat kW>
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
  launch<Variant, kW, true>(p, dc1, dcount);
  launch<Variant, kW, false>(p, dc2, nullptr);
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
  std::printf("%-4s %-22s %-4s M=%-5d N=%-5d K=%-5d max row rel L2 %.3e  epilogue miscount %zu  deterministic %s\n",
              ok ? "PASS" : "FAIL", name, std::string(mk::matrix_format_name(kW)).c_str(), p.M, p.N, p.K, worst, bad_count, same ? "yes" : "NO");
  CHECK(cudaFree(dc1));
  CHECK(cudaFree(dc2));
  CHECK(cudaFree(dcount));
}

template <class Variant, MatrixFormat kW = MatrixFormat::BF16>
static double time_variant(const Problem& p, float* dc, const char* name) {
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) launch<Variant, kW, false>(p, dc, nullptr);
  CHECK(cudaGetLastError());
  const int reps = 20;
  CHECK(cudaEventRecord(e0));
  for (int i = 0; i < reps; ++i) launch<Variant, kW, false>(p, dc, nullptr);
  CHECK(cudaEventRecord(e1));
  CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, e0, e1));
  const double s = ms / 1e3 / reps, tflops = 2.0 * p.M * double(p.N) * p.K / s / 1e12;
  cudaFuncAttributes fa;
  CHECK(cudaFuncGetAttributes(&fa, gemm_kernel<Variant, kW, false>));
  std::printf("TIME %-22s %-4s M=%d N=%d K=%d  %.1f us  %.1f TFLOPS  (%d registers, %zu bytes local, %zu bytes smem)\n", name,
              std::string(mk::matrix_format_name(kW)).c_str(), p.M, p.N,
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

// Every variant for the 16-bit formats; for the quantized ones the entry points, the FMA path, a warp
// shape of 32-deep k-tiles (four to a scale group) and a warpgroup shape.
template <MatrixFormat kW>
constexpr bool kAllVariants = !mk::matrix_format_quantized(kW);

template <MatrixFormat kW>
static void prepare_all() {
  prepare<Public, kW>();
  prepare<PublicWide, kW>();
  prepare<NarrowWide, kW>();
  prepare<Fma, kW>();
  prepare<ShapeK32S4W1, kW>();
  prepare<Wgmma256S3, kW>();
  if constexpr (kAllVariants<kW>) {
    prepare<ShapeK64S3W1, kW>();
    prepare<ShapeK64S2W2, kW>();
    prepare<ShapeK32S3W1, kW>();
    prepare<Wgmma128S3, kW>();
    prepare<Wgmma128S5, kW>();
  }
}

template <MatrixFormat kW>
static void check_all(const Problem& p, bool variants) {
  check<Public, kW>(p, "chunk_gemm_tile");
  check<PublicWide, kW>(p, "chunk_gemm_tile wide");
  check<NarrowWide, kW>(p, "narrow path wide");
  check<Fma, kW>(p, "fma path");
  if (!variants) return;
  check<ShapeK32S4W1, kW>(p, "mma k32 x4 warpsK1");
  check<Wgmma256S3, kW>(p, "wgmma 256 x3");
  if constexpr (kAllVariants<kW>) {
    check<ShapeK64S3W1, kW>(p, "mma k64 x3 warpsK1");
    check<ShapeK64S2W2, kW>(p, "mma k64 x2 warpsK2");
    check<ShapeK32S3W1, kW>(p, "mma k32 x3 warpsK1");
    check<Wgmma128S3, kW>(p, "wgmma 128 x3");
    check<Wgmma128S5, kW>(p, "wgmma 128 x5");
  }
}

// The big product with weights of format kW: its first 8 rows checked, then timed.
template <MatrixFormat kW>
static void check_and_time_big() {
  Problem q{1024, 14336, 4096, kW};
  make_problem(q, 100, 8);
  float* dc;
  CHECK(cudaMalloc(&dc, size_t(q.M) * q.N * 4));
  check<PublicWide, kW>(q, "chunk_gemm_tile wide (big)");
  time_variant<Public, kW>(q, dc, "chunk_gemm_tile");
  time_variant<PublicWide, kW>(q, dc, "chunk_gemm_tile wide");
  time_variant<Wgmma256S3, kW>(q, dc, "wgmma 256 x3");
  CHECK(cudaFree(dc));
  free_problem(q);
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (%d SMs), chunk_gemm_smem_bytes() = %zu\n", prop.name, prop.multiProcessorCount, chunk_gemm_smem_bytes());
  prepare_all<MatrixFormat::BF16>();
  prepare_all<MatrixFormat::F16>();
  prepare_all<MatrixFormat::FP8>();
  prepare_all<MatrixFormat::INT4>();

  // Quantized K: multiples of 32 (int4) or 16 (fp8), with a short last scale group where K % 128 != 0.
  constexpr MatrixFormat B = MatrixFormat::BF16, H = MatrixFormat::F16, F8 = MatrixFormat::FP8, I4 = MatrixFormat::INT4;
  struct Case { int M, N, K; MatrixFormat w; bool variants; };
  const Case cases[] = {
      {300, 520, 2048, B, true}, {300, 520, 4864, B, true},  {300, 520, 2048, H, true},  {300, 520, 4864, H, false},
      {128, 128, 32, B, true},   {7, 2, 96, B, true},        {257, 130, 160, H, true},   {130, 256, 40, B, true},
      {300, 520, 2048, I4, true}, {300, 520, 4864, F8, true}, {257, 130, 160, F8, true}, {7, 2, 96, I4, true},
      {130, 256, 352, I4, true},  {128, 300, 48, F8, true},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    Problem p{c.M, c.N, c.K, c.w};
    make_problem(p, seed++, c.M);
    switch (c.w) {
      case B: check_all<B>(p, c.variants); break;
      case H: check_all<H>(p, c.variants); break;
      case F8: check_all<F8>(p, c.variants); break;
      case I4: check_all<I4>(p, c.variants); break;
    }
    free_problem(p);
  }

  // The big case: timed, and its first 8 rows checked.
  Problem big{1024, 14336, 4096, B};
  make_problem(big, 99, 8);
  check<Public, B>(big, "chunk_gemm_tile (big)");
  check<PublicWide, B>(big, "chunk_gemm_tile wide (big)");
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

  // The same product with quantized weights (expanded to bf16 in the tiles).
  check_and_time_big<I4>();
  check_and_time_big<F8>();

  std::printf(failures ? "FAIL: %d check(s) failed\n" : "PASS: all checks passed\n", failures);
  return failures ? 1 : 0;
}
