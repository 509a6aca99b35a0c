// Standalone check of device/chunk_attention.h (not part of CMake): the block-causal prefill attention
// against a CPU reference of its arithmetic, then timings of whole-prompt launches.
// Build: nvcc -std=c++17 -O3 -arch=sm_90a -I. -Xptxas -warn-spills,-v tests/gpu/chunk_attention_check.cu
#include "tests/gpu/standalone_check.h"

#include "device/chunk_attention.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

using namespace mk::dev;

static float bf(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
static uint16_t to_bf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
static float round_bf(float f) { return bf(to_bf(f)); }
static float half_bits_to_float(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0 ? std::ldexp(float(m), -24) : std::ldexp(float(m | 1024), e - 25);
  return s ? -v : v;
}

// One launch: blockIdx.x -> (kv head, token block), later (heavier) blocks first.
struct Args {
  const uint16_t *q, *k, *v;
  uint16_t* out;
  int kv_heads, G, D, tokens, first_pos, context, tile_tokens;
  float scale;
  int window;
};
template <bool kF16>
__global__ void __launch_bounds__(kThreads, 1) chunk_kernel(Args a) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int blocks = (a.tokens + a.tile_tokens - 1) / a.tile_tokens;
  const int b = blocks - 1 - int(blockIdx.x) / a.kv_heads, h = int(blockIdx.x) % a.kv_heads;
  const int t0 = b * a.tile_tokens, n = min(a.tile_tokens, a.tokens - t0);
  const int q_stride = a.kv_heads * a.G * a.D;
  chunk_attention_block<kF16>(a.q + size_t(t0) * q_stride + size_t(h) * a.G * a.D, q_stride,
                              a.k + size_t(h) * a.context * a.D, a.v + size_t(h) * a.context * a.D, a.first_pos + t0, n,
                              a.D, a.G, a.scale, a.window, a.out + size_t(t0) * q_stride + size_t(h) * a.G * a.D, q_stride, smem);
}

struct Case {
  int kv_heads, G, D, tokens, first_pos;
  bool f16;
  int window = 0;  // sliding window in positions (0: none)
};

// The arithmetic of the header for row (token t, query head hq): fp32 scores of bf16 products, 64-key
// tiles, online softmax, bf16 weights into P V; keys outside the window skipped.
static void reference_row(const Case& c, const std::vector<uint16_t>& q, const std::vector<uint16_t>& k,
                          const std::vector<uint16_t>& v, int context, float scale, int t, int hq, float* o_out) {
  const int D = c.D, H = c.kv_heads * c.G, kvh = hq / c.G;
  const int pos = c.first_pos + t;
  const int lo = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;  // the first key the row attends
  const uint16_t* qr = &q[(size_t(t) * H + hq) * D];
  std::vector<float> o(D, 0.f), s(64);
  float m = -INFINITY, l = 0.f;
  for (int tile = lo / 64; tile * 64 <= pos; ++tile) {
    float mx = m;
    for (int i = 0; i < 64; ++i) {
      const int p = tile * 64 + i;
      if (p > pos || p < lo) {
        s[i] = -INFINITY;
        continue;
      }
      const uint16_t* kr = &k[(size_t(kvh) * context + p) * D];
      float acc = 0.f;
      for (int d = 0; d < D; ++d) acc += bf(qr[d]) * bf(kr[d]);
      s[i] = acc * scale;
      mx = std::max(mx, s[i]);
    }
    const float corr = m == -INFINITY ? 0.f : std::exp(m - mx);
    l *= corr;
    for (int d = 0; d < D; ++d) o[d] *= corr;
    for (int i = 0; i < 64; ++i) {
      const int p = tile * 64 + i;
      if (p > pos || p < lo) continue;
      const float pp = std::exp(s[i] - mx);
      l += pp;
      const float pb = round_bf(pp);
      const uint16_t* vr = &v[(size_t(kvh) * context + p) * D];
      for (int d = 0; d < D; ++d) o[d] += pb * bf(vr[d]);
    }
    m = mx;
  }
  for (int d = 0; d < D; ++d) o_out[d] = o[d] / l;
}

struct Result {
  bool pass;
  double max_abs, max_rel;
  float ms;
  double tflops;
};

// Runs a case; checks every `stride`-th row (1: all) and, with reps > 0, times the launch.
static Result run_case(const Case& c, int stride, int reps) {
  const int H = c.kv_heads * c.G, context = c.first_pos + c.tokens;
  const float scale = 1.f / std::sqrt(float(c.D));
  std::mt19937 rng(1234 + c.D * 7 + c.G * 131 + c.first_pos);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<uint16_t> q(size_t(c.tokens) * H * c.D), k(size_t(c.kv_heads) * context * c.D), v(k.size());
  for (auto& x : q) x = to_bf(nd(rng));
  for (auto& x : k) x = to_bf(nd(rng));
  for (auto& x : v) x = to_bf(nd(rng));
  uint16_t *dq, *dk, *dv, *dout;
  CHECK(cudaMalloc(&dq, q.size() * 2));
  CHECK(cudaMalloc(&dk, k.size() * 2));
  CHECK(cudaMalloc(&dv, v.size() * 2));
  CHECK(cudaMalloc(&dout, q.size() * 2));
  CHECK(cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dk, k.data(), k.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dv, v.data(), v.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dout, 0xff, q.size() * 2));  // NaN everywhere: unwritten outputs fail

  Args a{dq, dk, dv, dout, c.kv_heads, c.G, c.D, c.tokens, c.first_pos, context, chunk_attention_tile_tokens(c.G), scale, c.window};
  const size_t smem = chunk_attention_smem_bytes(c.D, c.G);
  const int blocks = (c.tokens + a.tile_tokens - 1) / a.tile_tokens;
  const dim3 grid(blocks * c.kv_heads);
  auto launch = [&] {
    if (c.f16) {
      chunk_kernel<true><<<grid, kThreads, smem>>>(a);
    } else {
      chunk_kernel<false><<<grid, kThreads, smem>>>(a);
    }
  };
  CHECK(cudaFuncSetAttribute(chunk_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  CHECK(cudaFuncSetAttribute(chunk_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  launch();
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> out(q.size());
  CHECK(cudaMemcpy(out.data(), dout, out.size() * 2, cudaMemcpyDeviceToHost));

  Result r{true, 0.0, 0.0, 0.f, 0.0};
  std::vector<float> ref(c.D);
  for (size_t row = 0; row < size_t(c.tokens) * H; row += stride) {
    const int t = int(row / H), hq = int(row % H);
    reference_row(c, q, k, v, context, scale, t, hq, ref.data());
    double err2 = 0, ref2 = 0;
    for (int d = 0; d < c.D; ++d) {
      const uint16_t bits = out[row * c.D + d];
      const float g = c.f16 ? half_bits_to_float(bits) : bf(bits);
      const double e = std::fabs(double(g) - ref[d]);
      if (!(e <= 2e-2)) r.pass = false;
      r.max_abs = std::max(r.max_abs, std::isnan(e) ? 1e30 : e);
      err2 += e * e;
      ref2 += double(ref[d]) * ref[d];
    }
    const double rel = std::sqrt(err2 / std::max(ref2, 1e-30));
    if (!(rel < 5e-3)) r.pass = false;
    r.max_rel = std::max(r.max_rel, std::isnan(rel) ? 1e30 : rel);
  }

  if (reps > 0) {
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; ++i) launch();
    CHECK(cudaEventRecord(e0));
    for (int i = 0; i < reps; ++i) launch();
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    r.ms = ms / reps;
    double flops = 0;
    for (int t = 0; t < c.tokens; ++t) {
      const int attended = c.first_pos + t + 1;
      flops += 4.0 * H * double(c.window > 0 ? std::min(attended, c.window) : attended) * c.D;
    }
    r.tflops = flops / (r.ms * 1e-3) / 1e12;
  }
  CHECK(cudaFree(dq));
  CHECK(cudaFree(dk));
  CHECK(cudaFree(dv));
  CHECK(cudaFree(dout));
  return r;
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (%d SMs)\n", prop.name, prop.multiProcessorCount);
  bool all = true;
  const int dims[][2] = {{64, 4}, {128, 4}, {64, 7}, {64, 1}, {32, 4}, {128, 8}, {64, 20}, {96, 2}, {256, 4}, {256, 2}};
  for (const auto& dg : dims) {
    const int D = dg[0], G = dg[1], T = chunk_attention_tile_tokens(G);
    for (int first_pos : {0, 700}) {
      // Windows: none; shorter than a key tile and not a multiple of it (rows' first keys inside tiles,
      // tiles wholly outside some rows' windows); longer than the block.
      for (int window : {0, 37, 200}) {
        for (bool f16 : {false, true}) {
          if (f16 && (G != 4 || window != 0)) continue;
          const Case c{2, G, D, 2 * T + 37, first_pos, f16, window};
          const Result r = run_case(c, 1, 0);
          all = all && r.pass;
          std::printf("%s D=%3d G=%2d Tq=%3d smem=%6zu tokens=%4d first_pos=%4d window=%3d %s: max_abs=%.3g max_rel_l2=%.3g\n",
                      r.pass ? "ok  " : "FAIL", D, G, T, chunk_attention_smem_bytes(D, G), c.tokens, first_pos, window,
                      f16 ? "f16 " : "bf16", r.max_abs, r.max_rel);
        }
      }
    }
  }
  const Case perf[] = {{8, 4, 64, 1024, 0, false}, {8, 4, 128, 4096, 0, false}, {1, 4, 256, 4096, 0, false, 512},
                       {1, 4, 256, 4096, 0, false}};
  const char* names[] = {"Llama-3.2-1B-like (8 kv heads, G 4, D 64, 1024 tokens)",
                         "Llama-3.1-8B-like (8 kv heads, G 4, D 128, 4096 tokens)",
                         "Gemma-3-1B-like sliding (1 kv head, G 4, D 256, window 512, 4096 tokens)",
                         "Gemma-3-1B-like global (1 kv head, G 4, D 256, 4096 tokens)"};
  for (int i = 0; i < 4; ++i) {
    const Result r = run_case(perf[i], 97, 20);
    all = all && r.pass;
    std::printf("%s %s: %.3f ms, %.1f TFLOPS (sampled rows: max_abs=%.3g max_rel_l2=%.3g)\n", r.pass ? "ok  " : "FAIL",
                names[i], r.ms, r.tflops, r.max_abs, r.max_rel);
  }
  std::printf("%s\n", all ? "PASS" : "FAIL");
  return all ? 0 : 1;
}
