#include <cstdio>
#include <vector>
#include <random>
#include <algorithm>
#include "device/ops/sample.h"
#include "device/select_top.h"
using namespace mk; using namespace mk::dev;

__global__ void count_blocks(const float* logits, int vocab, uint32_t* counts) {
  __shared__ uint32_t hist[kSampleBins];
  const uint32_t rows = (vocab + gridDim.x - 1) / gridDim.x, begin = blockIdx.x * rows, end = min(begin + rows, (uint32_t)vocab);
  if (begin < end) count_first_digit(logits, begin, end, hist, counts); 
}
template <int kIF>
__global__ void __launch_bounds__(512, 1) run_sel(const float* logits, int vocab, int K, TokenComposite* out, unsigned long long* ns, uint32_t* counts) {
  extern __shared__ float smem[];
  uint32_t* hist = reinterpret_cast<uint32_t*>(smem);
  TokenComposite* cand = reinterpret_cast<TokenComposite*>(hist + kSampleBins);
  int* scratch = reinterpret_cast<int*>(cand + 2 * kMaxCandidates);
  unsigned long long t0 = global_timer_ns();
  for (int b = threadIdx.x; b < kSampleBins; b += kThreads) { hist[b] = load_fresh(counts + b); counts[b] = 0; }
  __syncthreads();
  select_top_composites<kIF>(logits, vocab, K, hist, cand, scratch);
  unsigned long long t1 = global_timer_ns();
  for (int i = threadIdx.x; i < K; i += kThreads) out[i] = cand[i];
  if (threadIdx.x == 0) ns[0] = t1 - t0;
}
__global__ void __launch_bounds__(512, 1) run_sample(const float* logits, int vocab, SamplingParams sp, float u, int* tok, unsigned long long* ns, uint32_t* counts) {
  extern __shared__ float smem[];
  unsigned long long t0 = global_timer_ns();
  int t = SampleOp::sample_candidates(logits, vocab, counts, sp.temperature, sp.top_k, sp.top_p, sp.min_p, u, smem);
  unsigned long long t1 = global_timer_ns();
  if (threadIdx.x == 0) { ns[0] = t1 - t0; *tok = t; }
}

__global__ void __launch_bounds__(512, 1) run_sort(int padded, unsigned long long* ns, TokenComposite* out) {
  extern __shared__ float smem[];
  TokenComposite* items = reinterpret_cast<TokenComposite*>(smem);
  for (int i = threadIdx.x; i < padded; i += kThreads) items[i] = mix64(i + 1);
  __syncthreads();
  unsigned long long t0 = global_timer_ns();
  bitonic_sort_descending(items, padded);
  unsigned long long t1 = global_timer_ns();
  uint32_t* hist = reinterpret_cast<uint32_t*>(items + padded);
  for (int b = threadIdx.x; b < kSampleBins; b += kThreads) hist[b] = b % 7;
  __syncthreads();
  __shared__ int bin, still; __shared__ uint32_t count; __shared__ int scratch[32];
  unsigned long long t2 = global_timer_ns();
  find_crossing_bin(hist, 2048, 1000, scratch, &bin, &still, &count);
  unsigned long long t3 = global_timer_ns();
  if (threadIdx.x == 0) { ns[0] = t1 - t0; ns[1] = t3 - t2; }
  for (int i = threadIdx.x; i < padded; i += kThreads) out[i] = items[i];
}

int main() {
  {
    TokenComposite* d_o; unsigned long long* d_n; cudaMalloc(&d_o, 8 * 2048); cudaMalloc(&d_n, 16);
    cudaFuncSetAttribute(run_sort, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
    for (int padded : {64, 256, 1024, 2048}) {
      std::vector<unsigned long long> a, b;
      for (int rep = 0; rep < 7; ++rep) {
        run_sort<<<1, kThreads, 64 * 1024>>>(padded, d_n, d_o);
        unsigned long long ns[2]; cudaMemcpy(ns, d_n, 16, cudaMemcpyDeviceToHost); a.push_back(ns[0]); b.push_back(ns[1]);
      }
      std::vector<TokenComposite> o(padded); cudaMemcpy(o.data(), d_o, 8 * padded, cudaMemcpyDeviceToHost);
      bool sorted = std::is_sorted(o.begin(), o.end(), std::greater<>());
      std::sort(a.begin(), a.end()); std::sort(b.begin(), b.end());
      printf("sort %4d: %6.1f us (sorted %d); find_crossing_bin %5.1f us\n", padded, a[3] / 1000.0, sorted, b[3] / 1000.0);
    }
  }
  struct Case { const char* name; int vocab; int K; int kind; };
  Case cases[] = {{"normal 128256 K1024", 128256, 1024, 0}, {"normal 128256 K40", 128256, 40, 0}, {"normal 151936 K1024", 151936, 1024, 0},
                  {"normal 262144 K1024", 262144, 1024, 0}, {"coarse ties 128256 K1024", 128256, 1024, 1}, {"all equal 128256 K1024", 128256, 1024, 2},
                  {"small 1000 K1000", 1000, 1000, 0}, {"odd 128257 K1024", 128257, 1024, 3}, {"ninf most 128256 K1024", 128256, 1024, 4}, {"normal 128256 K1", 128256, 1, 0}, {"narrow 128256 K1024", 128256, 1024, 5}, {"sigma 0.9 128256 K1024", 128256, 1024, 6}, {"narrow 262144 K1024", 262144, 1024, 5}};
  float* d_logits; TokenComposite *d_b; unsigned long long* d_ns; int* d_tok;
  cudaMalloc(&d_logits, 262144 * 4 + 64); cudaMalloc(&d_b, 8 * 1024); cudaMalloc(&d_ns, 64); cudaMalloc(&d_tok, 4);
  uint32_t* d_counts; cudaMalloc(&d_counts, 4 * kSampleBins); cudaMemset(d_counts, 0, 4 * kSampleBins);
  size_t smem = SampleOp::smem_floats(ModelDims{}, Instr{}) * 4;
  cudaFuncSetAttribute(run_sel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  cudaFuncSetAttribute(run_sel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  cudaFuncSetAttribute(run_sel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  cudaFuncSetAttribute(run_sample, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  std::mt19937 rng(7);
  int failures = 0;
  for (auto& c : cases) {
    std::vector<float> l(c.vocab);
    std::normal_distribution<float> nd(0.f, 3.f);
    for (int i = 0; i < c.vocab; ++i) {
      float v = nd(rng);
      if (c.kind == 1) v = std::round(v * 2) / 2;
      if (c.kind == 2) v = 1.5f;
      if (c.kind == 4) v = (i % 200 == 0) ? v : -INFINITY;
      if (c.kind == 5) v = 5.f + v * 0.05f;
      if (c.kind == 6) v = v * 0.3f;
      l[i] = v;
    }
    cudaMemcpy(d_logits, l.data(), c.vocab * 4, cudaMemcpyHostToDevice);
    std::vector<TokenComposite> ref(c.vocab);
    for (int i = 0; i < c.vocab; ++i) ref[i] = token_composite(l[i], i);
    std::sort(ref.begin(), ref.end(), std::greater<>());
    std::vector<unsigned long long> t[4];
    for (int rep = 0; rep < 9; ++rep) {
      unsigned long long ns;
      std::vector<TokenComposite> b(c.K);
      auto check = [&](int which, auto kern) {
        count_blocks<<<132, kThreads>>>(d_logits, c.vocab, d_counts);
        kern<<<1, kThreads, smem>>>(d_logits, c.vocab, c.K, d_b, d_ns, d_counts);
        cudaMemcpy(&ns, d_ns, 8, cudaMemcpyDeviceToHost); t[which].push_back(ns);
        cudaMemcpy(b.data(), d_b, 8 * c.K, cudaMemcpyDeviceToHost);
        if (!std::equal(b.begin(), b.end(), ref.begin())) { if (rep == 0) printf("MISMATCH %s variant %d\n", c.name, which); failures++; }
      };
      check(0, run_sel<1>); check(1, run_sel<2>); check(2, run_sel<4>);
      // the whole sample path against the CPU rule
      SamplingParams sp; sp.temperature = 0.9f; sp.top_k = c.K == 1024 ? 0 : c.K; sp.top_p = rep % 2 ? 0.9f : 1.0f; sp.min_p = rep % 3 == 2 ? 0.05f : 0.f; sp.seed = rep;
      if (c.K > 1 && c.vocab >= 1024) {
        float u = uniform01(sp.seed, 17);
        count_blocks<<<132, kThreads>>>(d_logits, c.vocab, d_counts);
        run_sample<<<1, kThreads, smem>>>(d_logits, c.vocab, sp, u, d_tok, d_ns, d_counts);
        int tok; cudaMemcpy(&tok, d_tok, 4, cudaMemcpyDeviceToHost); cudaMemcpy(&ns, d_ns, 8, cudaMemcpyDeviceToHost); t[3].push_back(ns);
        int expect = sample_token(l, sp, 17);
        if (tok != expect) { printf("TOKEN MISMATCH %s rep %d: gpu %d cpu %d\n", c.name, rep, tok, expect); failures++; }
      }
    }
    auto med = [](std::vector<unsigned long long> v) { if (v.empty()) return 0.0; std::sort(v.begin(), v.end()); return v[v.size() / 2] / 1000.0; };
    printf("%-28s select<1> %7.1f us  <2> %7.1f us  <4> %7.1f us   whole sample (select<2>+rule) %7.1f us\n", c.name, med(t[0]), med(t[1]), med(t[2]), med(t[3]));
  }
  cudaError_t e = cudaGetLastError();
  printf("cuda: %s; failures %d\n", cudaGetErrorString(e), failures);
  return failures != 0;
}
