// Standalone check and measurement of the tensor-core matrix engine (device/matrix_engine.h) on tile
// images (runtime/matrix_tiles.h), streamed through shared memory the way the token step's weight stream
// would (not part of CMake). Build from the repository root:
//   nvcc -std=c++17 -O3 -arch=sm_90a -I. -DFMT_HEADER_ONLY -Xptxas -warn-spills --expt-relaxed-constexpr \
//     tests/gpu/matrix_engine_check.cu runtime/matrix_tiles.cpp runtime/dtype.cpp -o matrix_engine_check
// Run: matrix_engine_check [--json FILE] [--no-timing] [--no-checks] [--format bf16|fp8|int4] [--m M]
//                           [--share steps|slices]
//
// Checks, for bf16, f16, fp8 and int4 and M = 1, 2, 5, 8, 16 activation columns, on shapes that give a
// workgroup no tile, a few tiles (the K cut across warps, partial sums combined) and many tiles (a warp
// owns whole tiles):
//   - y = W x against a double-precision reference computed on the row-major image with
//     matrix_row_element and the unsplit activations: |y - ref| <= tol * sum |w x| per element;
//   - the same launch twice gives the same bits;
//   - each column's result keeps its bits when the other columns change.
// Then times the weights of Llama-3.1-8B's 32 layers (qkv, o, gate, up, down; one launch, no
// dependencies between the products) for bf16, fp8 and int4 at M = 1, 2, 4, 8, 16, each also with the
// products left out (what streaming alone costs), next to a read ceiling measured in the same process.
// Exits non-zero on any failure; a wait that lasts 2 s stops the launch with an error.
#include "tests/gpu/standalone_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "device/matrix_engine.h"
#include "device/weight_stream.h"
#include "runtime/matrix_tiles.h"

using namespace mk;
using namespace mk::dev;

namespace {

constexpr int kConsumers = kThreads / MK_WARP_SIZE - 1;  // warp 0 produces
constexpr int kChunksInFlight = 32;                       // chunk records (mbarrier, count, place)
constexpr int kMaxTilesPerWarp = 2;
constexpr int kZeroColumnBytes = (act_column_bytes(MatrixFormat::INT4) + 127) / 128 * 128;  // the widest column
static_assert(act_column_bytes(MatrixFormat::INT4) >= act_column_bytes(MatrixFormat::FP8) &&
              act_column_bytes(MatrixFormat::FP8) >= act_column_bytes(MatrixFormat::BF16));
// A weight chunk holds at most this many bytes of tile slices (a workgroup's tiles of a slice are cut
// into groups of whole tiles below it), so that several chunks are in flight whatever the tile count.
constexpr uint32_t kWeightChunkBytes = 32 * 1024;

struct EngineJob {
  const uint8_t* tiles;
  const uint8_t* act;  // packed activations (runtime/matrix_tiles.h's pack_activations)
  float* y;            // M x rows
  int rows, cols;
};

struct EngineArgs {
  const EngineJob* jobs;
  int jobs_n, M;
  uint32_t act_ring_bytes, weight_ring_bytes;
  int math;  // 0: the consumers wait for and release every chunk but multiply nothing (what streaming alone costs)
  int share;  // how the warps sharing a tile divide it (Share)
};

// Two rings of bytes, one for activation slices and one for weight chunks: chunks of any size sit one
// after another (a chunk that would cross the end starts again at 0), and a chunk's bytes are reused once
// it and every older chunk of its ring are consumed. Apart, because an activation slice lives until every
// tile of its slice is done: in one ring with in-order reuse, a workgroup whose slice of weights exceeds
// the ring would wait on itself.
struct ChunkRing {
  uint64_t full[kChunksInFlight];    // mbarrier: the chunk's bytes have landed
  int pending[kChunksInFlight];      // units that have not yet released the chunk
  uint32_t place[kChunksInFlight];   // byte offset of the chunk in the ring
  volatile uint32_t issued;          // chunks issued so far
};
struct RingState {
  ChunkRing act, weights;
};
constexpr int kRingStateBytes = (int(sizeof(RingState)) + 127) / 128 * 128;

// A bulk copy that leaves the L2's policy alone: the activation slices are read by every workgroup, and
// the weight stream's evict-first hint (bulk_copy) would send each workgroup's copy back to HBM.
__device__ __forceinline__ void bulk_copy_shared_data(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if MK_HAS_BULK_COPY
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_address(dst)),
               "l"(src), "r"(bytes), "r"(smem_address(bar))
               : "memory");
#endif
}

// A wait that lasts 2 s means a count went wrong: stop the launch with an error rather than hang.
__device__ __forceinline__ void check_deadline(uint64_t start) {
  if (global_timer_ns() - start > 2000000000ull) __trap();
}

__device__ __forceinline__ void consumers_barrier() { asm volatile("bar.sync 1, %0;" ::"r"(kConsumers * MK_WARP_SIZE) : "memory"); }

// The tiles [t0, t1) workgroup b of `grid` owns in a matrix of `tiles` tiles.
__host__ __device__ inline void block_tiles(int tiles, int b, int grid, int& t0, int& t1) {
  t0 = int(int64_t(b) * tiles / grid);
  t1 = int(int64_t(b + 1) * tiles / grid);
}

// How the `split` warps sharing a tile divide its S slices. P lanes, warp f on lane f % P, lane l taking
// slices l, l + P, ... (consecutive warps on consecutive slices, the order the chunks arrive in); the warps
// of a lane (`parts` of them) divide each of its slices' steps.
// - Share::Steps: P = 1, every warp of a tile on every slice, a part of its steps each (measured: bf16
//   94.7%, fp8 77.2%, int4 49.8% of the read ceiling; docs/log.md, 2026-11-29).
// - Share::Slices: P = min(S, split), whole slices a warp when a tile has as many slices as warps (one
//   wait for 8 steps), else several warps a slice (not yet measured).
enum class Share { Steps = 0, Slices = 1 };
struct SliceShare {
  int lanes;
  __host__ __device__ SliceShare(Share mode, int slices, int split) : lanes(mode == Share::Slices ? min(slices, split) : 1) {}
  __host__ __device__ int parts(int lane, int split) const { return (split - lane + lanes - 1) / lanes; }
  // Warp f's steps [lo, hi) of slice s of `steps` steps; empty when s is not its lane's.
  __host__ __device__ void steps_of(int f, int split, int s, int steps, int& lo, int& hi) const {
    lo = hi = 0;
    if (s % lanes != f % lanes) return;
    const int n = parts(f % lanes, split), p = f / lanes;
    lo = steps * p / n;
    hi = steps * (p + 1) / n;
  }
  // How many warps have steps in slice s: the releases its chunks wait for, a tile.
  __host__ __device__ int visitors(int s, int split, int steps) const { return min(parts(s % lanes, split), steps); }
};

// A workgroup's weight chunks of one job: per slice, its tiles in groups of tiles_per_chunk.
struct JobChunks {
  int tiles_per_chunk, per_slice;
  __host__ __device__ JobChunks(MatrixFormat f, int tiles) {
    tiles_per_chunk = max(1, int(kWeightChunkBytes / uint32_t(tile_slice_bytes(f, tile_slice_cols(f)))));
    per_slice = (tiles + tiles_per_chunk - 1) / tiles_per_chunk;
  }
};

// The producer's view of one ring (thread 0, registers).
struct RingWriter {
  ChunkRing& r;
  uint8_t* base;
  uint32_t bytes_total;
  uint32_t seq = 0, oldest = 0, head = 0;  // oldest: the oldest chunk not known to be consumed

  // Waits for room, then issues a chunk of `bytes` from `src` that `units` releases will free.
  __device__ void issue(int units, const uint8_t* src, uint32_t bytes, bool shared_data) {
#if MK_HAS_BULK_COPY
    volatile int* pending = r.pending;
    const uint32_t c = seq % kChunksInFlight;
    const uint64_t start = global_timer_ns();
    for (;; __nanosleep(20), check_deadline(start)) {
      while (oldest < seq && pending[oldest % kChunksInFlight] == 0) ++oldest;
      if (oldest == seq) {  // nothing in flight: start at 0
        head = 0;
        break;
      }
      if (oldest + kChunksInFlight <= seq) continue;  // chunk seq's record still holds chunk seq - 32
      // In flight: from the oldest chunk's place `tail` to `head`, wrapping past the end when head <= tail
      // (head == tail: the ring is full).
      const uint32_t tail = r.place[oldest % kChunksInFlight];
      if (head > tail) {
        if (head + bytes <= bytes_total) break;
        if (bytes <= tail) {
          head = 0;
          break;
        }
      } else if (head < tail && head + bytes <= tail) {
        break;
      }
    }
    pending[c] = units;
    r.place[c] = head;
    mbarrier_expect_bytes(&r.full[c], bytes);
    if (shared_data) bulk_copy_shared_data(base + head, src, bytes, &r.full[c]);
    else bulk_copy(base + head, src, bytes, &r.full[c]);
    head += bytes;
    __threadfence_block();
    r.issued = ++seq;
#endif
  }
};

template <MatrixFormat F, int kCols>
__global__ void __launch_bounds__(kThreads, 1) engine_kernel(EngineArgs a) {
  constexpr int NT = TileAccumulators<kCols>::NT;
#if MK_HAS_BULK_COPY  // the device pass for sm_90
  extern __shared__ __align__(128) uint8_t smem[];
  RingState& st = *reinterpret_cast<RingState*>(smem);
  float* red = reinterpret_cast<float*>(smem + kRingStateBytes);  // kConsumers x NT x 32 lanes x 4
  uint8_t* zeros = smem + kRingStateBytes + kConsumers * NT * 32 * 4 * 4;  // a packed activation column of zeros
  uint8_t* act_ring = zeros + kZeroColumnBytes;
  uint8_t* weight_ring = act_ring + a.act_ring_bytes;
  for (int q = int(threadIdx.x); q < kZeroColumnBytes / 16; q += kThreads) reinterpret_cast<uint4*>(zeros)[q] = make_uint4(0, 0, 0, 0);
  if (threadIdx.x == 0) {
    for (ChunkRing* r : {&st.act, &st.weights}) {
      r->issued = 0;
      for (int c = 0; c < kChunksInFlight; ++c) mbarrier_init(&r->full[c], 1), r->pending[c] = 0;
    }
    fence_mbarrier_init();
  }
  __syncthreads();

  if (threadIdx.x < MK_WARP_SIZE) {  // the producer
    if (threadIdx.x != 0) return;
    RingWriter acts{st.act, act_ring, a.act_ring_bytes}, weights{st.weights, weight_ring, a.weight_ring_bytes};
    for (int jn = 0; jn < a.jobs_n; ++jn) {
      const EngineJob job = a.jobs[jn];
      const MatrixTiles shape{job.rows, job.cols, F};
      int t0, t1;
      block_tiles(shape.tiles(), int(blockIdx.x), int(gridDim.x), t0, t1);
      if (t0 == t1) continue;
      const JobChunks jc(F, t1 - t0);
      const uint32_t act_bytes = uint32_t(shape.act_slice_bytes(a.M));
      const int tb = t1 - t0, split = tb <= kConsumers ? kConsumers / tb : 1;
      const SliceShare share(Share(a.share), shape.slices(), split);
      for (int s = 0; s < shape.slices(); ++s) {
        const int visitors = share.visitors(s, split, shape.slice_cols(s) / tile_k_step(F));
        acts.issue(tb * visitors, job.act + size_t(s) * act_bytes, act_bytes, true);
        const uint32_t tsb = uint32_t(tile_slice_bytes(F, shape.slice_cols(s)));
        for (int g = t0; g < t1; g += jc.tiles_per_chunk) {
          const int n = min(jc.tiles_per_chunk, t1 - g);
          weights.issue(n * visitors, job.tiles + shape.offset(s, g), uint32_t(n) * tsb, false);
        }
      }
    }
    return;
  }

  const int cw = int(threadIdx.x) / MK_WARP_SIZE - 1, lane = lane_id();
  auto wait_chunk = [&](ChunkRing& r, uint8_t* ring, uint32_t seq) -> const uint8_t* {
    if (lane == 0) {
      const uint64_t start = global_timer_ns();
      while (r.issued <= seq) __nanosleep(20), check_deadline(start);
    }
    __syncwarp();
    mbarrier_wait_parity(&r.full[seq % kChunksInFlight], (seq / kChunksInFlight) & 1u);
    return ring + r.place[seq % kChunksInFlight];
  };
  auto release = [&](ChunkRing& r, uint32_t seq) {
    __syncwarp();
    if (lane == 0) atomicSub(&r.pending[seq % kChunksInFlight], 1);
  };
  uint32_t act_base = 0, weight_base = 0;  // sequence numbers of the job's first chunks
  for (int jn = 0; jn < a.jobs_n; ++jn) {
    const EngineJob job = a.jobs[jn];
    const MatrixTiles shape{job.rows, job.cols, F};
    int t0, t1;
    block_tiles(shape.tiles(), int(blockIdx.x), int(gridDim.x), t0, t1);
    const int tb = t1 - t0, S = shape.slices();
    if (tb == 0) continue;
    const JobChunks jc(F, tb);
    // Few tiles: `split` warps share each tile (SliceShare); many: a warp owns tiles cw, cw + kConsumers,
    // ... whole.
    const int split = tb <= kConsumers ? kConsumers / tb : 1;
    const bool active = cw < tb * split;
    const int f = cw % split;
    TileAccumulators<kCols> acc[kMaxTilesPerWarp];
#pragma unroll
    for (int o = 0; o < kMaxTilesPerWarp; ++o) acc[o].clear();
    // Steps [i0, i1) of slice s of a tile.
    auto unit = [&](int tile, int s, int i0, int i1, TileAccumulators<kCols>& into) {
      const uint32_t act_seq = act_base + uint32_t(s), w_seq = weight_base + uint32_t(s * jc.per_slice + tile / jc.tiles_per_chunk);
      const uint8_t* act = wait_chunk(st.act, act_ring, act_seq);
      const uint8_t* w = wait_chunk(st.weights, weight_ring, w_seq);
      const int cols = shape.slice_cols(s);
      const uint8_t* ts = w + size_t(tile % jc.tiles_per_chunk) * tile_slice_bytes(F, cols);
      if (a.math)
#pragma unroll 2
        for (int i = i0; i < i1; ++i) engine_step<F, kCols>(ts, cols, i, act, zeros, a.M, into);
      release(st.weights, w_seq);
      release(st.act, act_seq);
    };
    if (active && split > 1) {
      const SliceShare share(Share(a.share), S, split);
      for (int s = f % share.lanes; s < S; s += share.lanes) {
        int lo, hi;
        share.steps_of(f, split, s, shape.slice_cols(s) / tile_k_step(F), lo, hi);
        if (lo < hi) unit(cw / split, s, lo, hi, acc[0]);
      }
    } else if (active) {
      for (int s = 0; s < S; ++s)
#pragma unroll
        for (int o = 0; o < kMaxTilesPerWarp; ++o)
          if (cw + o * kConsumers < tb) unit(cw + o * kConsumers, s, 0, shape.slice_cols(s) / tile_k_step(F), acc[o]);
    }
    // Out: lane l has rows l / 4 and l / 4 + 8 of its tile, the tokens TileAccumulators::token names.
#pragma unroll
    for (int o = 0; o < kMaxTilesPerWarp; ++o) acc[o].finish();
    auto emit = [&](int tile, const TileAccumulators<kCols>& v) {
      const int g = lane >> 2;
#pragma unroll
      for (int j = 0; j < NT; ++j)
        for (int e = 0; e < 4; ++e) {
          const int row = (t0 + tile) * kTileRows + g + (e >= 2 ? 8 : 0), col = TileAccumulators<kCols>::token(lane, j, e);
          if (row < job.rows && col >= 0 && col < a.M) job.y[size_t(col) * job.rows + row] = v.c[j][e];
        }
    };
    if (split > 1) {
      // The split warps' partial sums, added in a fixed order (f = 0, 1, ...): the same bits every run
      // and for every M.
      if (active)
        for (int j = 0; j < NT; ++j)
          for (int e = 0; e < 4; ++e) red[((cw * NT + j) * 32 + lane) * 4 + e] = acc[0].c[j][e];
      consumers_barrier();
      if (active && f == 0) {
        TileAccumulators<kCols> total;
        total.clear();
        for (int ff = 0; ff < split; ++ff)
          for (int j = 0; j < NT; ++j)
            for (int e = 0; e < 4; ++e) total.c[j][e] += red[(((cw + ff) * NT + j) * 32 + lane) * 4 + e];
        emit(cw / split, total);
      }
      consumers_barrier();
    } else if (active) {
#pragma unroll
      for (int o = 0; o < kMaxTilesPerWarp; ++o)
        if (cw + o * kConsumers < tb) emit(cw + o * kConsumers, acc[o]);
    }
    act_base += uint32_t(S);
    weight_base += uint32_t(S * jc.per_slice);
  }
#endif
}

size_t smem_header(int NT) { return kRingStateBytes + size_t(kConsumers) * NT * 32 * 4 * 4 + kZeroColumnBytes; }

Share g_share = Share::Steps;  // --share

template <MatrixFormat F, int kCols>
void run_engine(const std::vector<EngineJob>& jobs, int M, int grid, bool math) {
  constexpr int NT = TileAccumulators<kCols>::NT;
  static EngineJob* djobs = nullptr;
  static size_t djobs_n = 0;
  if (djobs_n < jobs.size()) {
    if (djobs) CHECK(cudaFree(djobs));
    CHECK(cudaMalloc(&djobs, jobs.size() * sizeof(EngineJob)));
    djobs_n = jobs.size();
  }
  CHECK(cudaMemcpy(djobs, jobs.data(), jobs.size() * sizeof(EngineJob), cudaMemcpyHostToDevice));
  size_t act_slice = 0, weight_chunk = 0;  // the largest of each
  for (const EngineJob& j : jobs) {
    const MatrixTiles shape{j.rows, j.cols, F};
    int most = 0;
    for (int b = 0; b < grid; ++b) {
      int t0, t1;
      block_tiles(shape.tiles(), b, grid, t0, t1);
      most = std::max(most, t1 - t0);
    }
    if (most > kMaxTilesPerWarp * kConsumers) {
      std::fprintf(stderr, "a workgroup would own %d tiles (at most %d)\n", most, kMaxTilesPerWarp * kConsumers);
      std::exit(2);
    }
    const JobChunks jc(F, most);
    act_slice = std::max(act_slice, shape.act_slice_bytes(M));
    weight_chunk = std::max(weight_chunk, size_t(std::min(jc.tiles_per_chunk, most)) * tile_slice_bytes(F, tile_slice_cols(F)));
  }
  int dev = 0, smem_max = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const size_t header = smem_header(NT), room = (size_t(smem_max) - header) / 128 * 128;
  // Activations: up to 8 slices ahead within a third of the room, at least 2; weights: the rest.
  const size_t act_slices = std::max<size_t>(2, std::min<size_t>(8, room / 3 / act_slice));
  const uint32_t act_ring = uint32_t((act_slices * act_slice + 127) / 128 * 128);
  if (act_ring + 2 * weight_chunk > room) {
    std::fprintf(stderr, "two activation slices of %zu bytes and two weight chunks of %zu do not fit in %zu bytes\n", act_slice, weight_chunk, room);
    std::exit(2);
  }
  const uint32_t weight_ring = uint32_t(room - act_ring);
  CHECK(cudaFuncSetAttribute(engine_kernel<F, kCols>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(header + room)));
  EngineArgs args{djobs, int(jobs.size()), M, act_ring, weight_ring, math ? 1 : 0, int(g_share)};
  engine_kernel<F, kCols><<<grid, kThreads, header + room>>>(args);
  CHECK(cudaGetLastError());
}

template <MatrixFormat F>
void run_any(const std::vector<EngineJob>& jobs, int M, int grid, bool math) {
  if (M <= 4) run_engine<F, 4>(jobs, M, grid, math);
  else if (M <= 8) run_engine<F, 8>(jobs, M, grid, math);
  else run_engine<F, 16>(jobs, M, grid, math);
}

void run_format(MatrixFormat f, const std::vector<EngineJob>& jobs, int M, int grid, bool math = true) {
  switch (f) {
    case MatrixFormat::BF16: return run_any<MatrixFormat::BF16>(jobs, M, grid, math);
    case MatrixFormat::F16: return run_any<MatrixFormat::F16>(jobs, M, grid, math);
    case MatrixFormat::FP8: return run_any<MatrixFormat::FP8>(jobs, M, grid, math);
    case MatrixFormat::INT4: return run_any<MatrixFormat::INT4>(jobs, M, grid, math);
  }
}

// A random row-major image of `rows` x `cols` in format f (matrix_format.h's row layout).
std::vector<uint8_t> random_rows(MatrixFormat f, int rows, int cols, std::mt19937& rng) {
  const int rb = matrix_row_bytes(f, cols);
  std::vector<uint8_t> img(size_t(rows) * rb, 0);
  std::normal_distribution<float> normal(0.f, 0.05f);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.5e-3f, 2e-3f);
  for (int r = 0; r < rows; ++r) {
    uint8_t* row = img.data() + size_t(r) * rb;
    if (f == MatrixFormat::BF16 || f == MatrixFormat::F16) {
      for (int c = 0; c < cols; ++c) {
        const uint16_t v = f == MatrixFormat::BF16 ? float_to_bf16(normal(rng)) : float_to_fp16(normal(rng));
        std::memcpy(row + 2 * c, &v, 2);
      }
      continue;
    }
    const int values = row_value_bytes(f, cols), groups = scale_groups(f, cols);
    for (int b = 0; b < values; ++b) {
      int v = byte(rng);
      if (f == MatrixFormat::FP8 && (v & 0x7f) == 0x7f) v &= 0xfe;  // no NaN codes
      row[b] = uint8_t(v);
    }
    for (int g = 0; g < groups; ++g) {
      const float s = f == MatrixFormat::FP8 ? scale(rng) * 0.1f : scale(rng) * 20.f;
      std::memcpy(row + values + 4 * g, &s, 4);
      if (f == MatrixFormat::INT4) row[values + 4 * groups + g] = uint8_t(byte(rng) & 15);
    }
  }
  return img;
}

struct Stats {
  double worst = 0;  // max |y - ref| / sum |w x|
  long failures = 0;
};

bool check_case(MatrixFormat f, const std::vector<std::pair<int, int>>& shapes, int M, int grid, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<uint8_t>> images, tiles, acts;
  std::vector<std::vector<float>> xs;
  std::vector<EngineJob> jobs;
  std::vector<uint8_t*> dbufs;
  std::vector<float*> ys;
  std::normal_distribution<float> normal(0.f, 1.f);
  for (auto [rows, cols] : shapes) {
    images.push_back(random_rows(f, rows, cols, rng));
    tiles.push_back(pack_matrix_tiles(images.back().data(), rows, cols, f, "check matrix"));
    std::vector<float> x(size_t(M) * cols);
    for (int n = 0; n < M; ++n)
      for (int k = 0; k < cols; ++k) {
        // Column 1 large (f16's high part near its range), column 2 small (its low part subnormal).
        const float m = n == 1 ? 300.f : n == 2 ? 1e-3f : 1.f;
        x[size_t(n) * cols + k] = normal(rng) * m;
      }
    xs.push_back(x);
    acts.push_back(pack_activations(x.data(), M, cols, f));
    uint8_t *dt, *da;
    float* dy;
    CHECK(cudaMalloc(&dt, tiles.back().size()));
    CHECK(cudaMalloc(&da, acts.back().size()));
    CHECK(cudaMalloc(&dy, size_t(M) * rows * 4));
    CHECK(cudaMemcpy(dt, tiles.back().data(), tiles.back().size(), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(da, acts.back().data(), acts.back().size(), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(dy, 0xff, size_t(M) * rows * 4));
    dbufs.push_back(dt), dbufs.push_back(da), ys.push_back(dy);
    jobs.push_back({dt, da, dy, rows, cols});
  }
  run_format(f, jobs, M, grid);
  CHECK(cudaDeviceSynchronize());
  bool ok = true;
  Stats st;
  const double tol = f == MatrixFormat::BF16 ? 1e-4 : 2e-5;
  std::vector<std::vector<float>> first;
  for (size_t m = 0; m < shapes.size(); ++m) {
    const auto [rows, cols] = shapes[m];
    std::vector<float> y(size_t(M) * rows);
    CHECK(cudaMemcpy(y.data(), ys[m], y.size() * 4, cudaMemcpyDeviceToHost));
    first.push_back(y);
    const int rb = matrix_row_bytes(f, cols);
    for (int r = 0; r < rows; ++r) {
      const uint8_t* row = images[m].data() + size_t(r) * rb;
      std::vector<double> w(cols);
      for (int c = 0; c < cols; ++c) w[c] = matrix_row_element(f, row, cols, c);
      for (int n = 0; n < M; ++n) {
        double s = 0, a = 0;
        const float* x = xs[m].data() + size_t(n) * cols;
        for (int c = 0; c < cols; ++c) s += w[c] * x[c], a += std::fabs(w[c] * x[c]);
        const double err = std::fabs(double(y[size_t(n) * rows + r]) - s) / std::max(a, 1e-30);
        if (!(err <= tol)) {
          if (st.failures++ < 5)
            std::printf("  FAIL %s M=%d shape %dx%d row %d col %d: got %.9g want %.9g (err %.3g of sum|wx| %.3g)\n",
                        std::string(matrix_format_name(f)).c_str(), M, rows, cols, r, n, y[size_t(n) * rows + r], s, err, a);
          ok = false;
        } else {
          st.worst = std::max(st.worst, err);
        }
      }
    }
  }
  // The same bits on a second run.
  run_format(f, jobs, M, grid);
  CHECK(cudaDeviceSynchronize());
  for (size_t m = 0; m < shapes.size(); ++m) {
    std::vector<float> y(first[m].size());
    CHECK(cudaMemcpy(y.data(), ys[m], y.size() * 4, cudaMemcpyDeviceToHost));
    if (std::memcmp(y.data(), first[m].data(), y.size() * 4) != 0) {
      std::printf("  FAIL %s M=%d: a second run gave other bits\n", std::string(matrix_format_name(f)).c_str(), M);
      ok = false;
    }
  }
  // Each column's result does not depend on the other columns: new values in all the others leave its
  // bits as they were.
  if (M > 1) {
    for (int n = 0; n < M; n += std::max(1, M / 3)) {
      std::vector<EngineJob> other = jobs;
      std::vector<uint8_t*> extra;
      for (size_t m = 0; m < shapes.size(); ++m) {
        const auto [rows, cols] = shapes[m];
        std::vector<float> x = xs[m];
        for (int c = 0; c < M; ++c)
          if (c != n)
            for (int k = 0; k < cols; ++k) x[size_t(c) * cols + k] = normal(rng);
        const std::vector<uint8_t> act = pack_activations(x.data(), M, cols, f);
        uint8_t* da;
        float* dy;
        CHECK(cudaMalloc(&da, act.size()));
        CHECK(cudaMalloc(&dy, size_t(M) * rows * 4));
        CHECK(cudaMemcpy(da, act.data(), act.size(), cudaMemcpyHostToDevice));
        other[m].act = da, other[m].y = dy;
        extra.push_back(da), extra.push_back(reinterpret_cast<uint8_t*>(dy));
      }
      run_format(f, other, M, grid);
      CHECK(cudaDeviceSynchronize());
      for (size_t m = 0; m < shapes.size(); ++m) {
        const int rows = shapes[m].first;
        std::vector<float> y(rows);
        CHECK(cudaMemcpy(y.data(), other[m].y + size_t(n) * rows, size_t(rows) * 4, cudaMemcpyDeviceToHost));
        if (std::memcmp(y.data(), first[m].data() + size_t(n) * rows, size_t(rows) * 4) != 0) {
          std::printf("  FAIL %s M=%d: column %d changed with the other columns\n", std::string(matrix_format_name(f)).c_str(), M, n);
          ok = false;
        }
      }
      for (uint8_t* p : extra) CHECK(cudaFree(p));
    }
  }
  for (uint8_t* p : dbufs) CHECK(cudaFree(p));
  for (float* p : ys) CHECK(cudaFree(p));
  std::printf("%s %-4s M=%-2d grid %3d: worst error %.3g of sum|wx| (tol %.1g)\n", ok ? "ok  " : "FAIL", std::string(matrix_format_name(f)).c_str(), M,
              grid, st.worst, tol);
  return ok;
}

// --- timing

__global__ void fill_kernel(uint32_t* p, size_t words, uint32_t seed, uint32_t mask, uint32_t set) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    p[i] = (h & mask) | set;
  }
}

__global__ void read_kernel(const uint4* p, size_t n, uint32_t* out) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) out[0] = acc;
}

double read_ceiling_gbps(int sms) {
  const size_t bytes = size_t(4) << 30;
  uint4* buf;
  uint32_t* out;
  CHECK(cudaMalloc(&buf, bytes));
  CHECK(cudaMalloc(&out, 4));
  fill_kernel<<<sms * 4, 512>>>(reinterpret_cast<uint32_t*>(buf), bytes / 4, 1, ~0u, 0);
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  float best = 1e30f;
  for (int r = 0; r < 7; ++r) {
    CHECK(cudaEventRecord(a));
    read_kernel<<<sms * 4, 512>>>(buf, bytes / 16, out);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    best = std::min(best, ms);
  }
  CHECK(cudaFree(buf));
  CHECK(cudaFree(out));
  return double(bytes) / (best * 1e-3) / 1e9;
}

struct Timing {
  std::string format;
  int M;
  double ms, bytes, gbps;
  double stream_ms;  // the same launch with the products left out
};

std::vector<Timing> time_llama8b(MatrixFormat f, int sms, const std::vector<int>& Ms) {
  const int layers = 32;
  const std::vector<std::pair<int, int>> shapes = {{6144, 4096}, {4096, 4096}, {14336, 4096}, {14336, 4096}, {4096, 14336}};
  size_t total = 0;
  for (auto [r, c] : shapes) total += MatrixTiles{r, c, f}.bytes();
  total *= layers;
  uint8_t* w;
  CHECK(cudaMalloc(&w, total));
  // Codes that decode to finite values (fp8: no NaN; bf16 / f16: small exponents); scales of 2^-10.
  const uint32_t mask = f == MatrixFormat::FP8 ? 0x77777777u : f == MatrixFormat::INT4 ? ~0u : 0x83ff83ffu;
  const uint32_t set = f == MatrixFormat::FP8 || f == MatrixFormat::INT4 ? 0u : 0x30003000u;
  fill_kernel<<<sms * 4, 512>>>(reinterpret_cast<uint32_t*>(w), total / 4, 7, mask, set);
  if (matrix_format_quantized(f)) {
    // Parameters: every scale 2^-10, every zero point 8 (int4). Both shapes' columns are whole slices.
    const int sc = tile_slice_cols(f), groups = sc / kTileGroup;
    std::vector<uint8_t> params(tile_param_bytes(f, sc), 8);
    const float s = 1.0f / 1024;
    for (int i = 0; i < groups * kTileRows; ++i) std::memcpy(params.data() + 4 * i, &s, 4);
    // One strided 2D copy per matrix: the parameters sit at a fixed place in every tile slice.
    size_t at = 0;
    for (int l = 0; l < layers; ++l)
      for (auto [r, c] : shapes) {
        const MatrixTiles shape{r, c, f};
        const size_t count = size_t(shape.tiles()) * shape.slices();
        std::vector<uint8_t> block(count * params.size());
        for (size_t i = 0; i < count; ++i) std::memcpy(block.data() + i * params.size(), params.data(), params.size());
        CHECK(cudaMemcpy2D(w + at + tile_code_bytes(f, sc), tile_slice_bytes(f, sc), block.data(), params.size(), params.size(), count,
                           cudaMemcpyHostToDevice));
        at += shape.bytes();
      }
  }
  std::vector<Timing> out;
  for (int M : Ms) {
    std::vector<uint8_t*> acts;
    std::vector<float*> ys;
    std::vector<EngineJob> jobs;
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.f, 1.f);
    auto act_for = [&](int cols) {
      std::vector<float> x(size_t(M) * cols);
      for (float& v : x) v = normal(rng);
      const std::vector<uint8_t> p = pack_activations(x.data(), M, cols, f);
      uint8_t* d;
      CHECK(cudaMalloc(&d, p.size()));
      CHECK(cudaMemcpy(d, p.data(), p.size(), cudaMemcpyHostToDevice));
      acts.push_back(d);
      return d;
    };
    uint8_t* a4096 = act_for(4096);
    uint8_t* a14336 = act_for(14336);
    size_t at = 0;
    for (int l = 0; l < layers; ++l)
      for (auto [r, c] : shapes) {
        float* y;
        CHECK(cudaMalloc(&y, size_t(M) * r * 4));
        ys.push_back(y);
        jobs.push_back({w + at, c == 4096 ? a4096 : a14336, y, r, c});
        at += MatrixTiles{r, c, f}.bytes();
      }
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    auto time = [&](bool math) {
      run_format(f, jobs, M, sms, math);  // warm-up
      CHECK(cudaDeviceSynchronize());
      float best = 1e30f;
      for (int r = 0; r < 5; ++r) {
        CHECK(cudaEventRecord(a));
        run_format(f, jobs, M, sms, math);
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        best = std::min(best, ms);
      }
      return double(best);
    };
    const double best = time(true), stream_ms = time(false);
    out.push_back({std::string(matrix_format_name(f)), M, best, double(total), double(total) / (best * 1e-3) / 1e9, stream_ms});
    for (uint8_t* p : acts) CHECK(cudaFree(p));
    for (float* p : ys) CHECK(cudaFree(p));
  }
  CHECK(cudaFree(w));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const char* json = nullptr;
  bool timing = true, checks = true;
  std::vector<MatrixFormat> timed = {MatrixFormat::BF16, MatrixFormat::FP8, MatrixFormat::INT4};
  std::vector<int> timed_m = {1, 2, 4, 8, 16};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!std::strcmp(argv[i], "--no-timing")) timing = false;
    else if (!std::strcmp(argv[i], "--no-checks")) checks = false;
    else if (!std::strcmp(argv[i], "--format") && i + 1 < argc) {
      const std::string name = argv[++i];
      timed = {name == "int4" ? MatrixFormat::INT4 : name == "fp8" ? MatrixFormat::FP8 : MatrixFormat::BF16};
    } else if (!std::strcmp(argv[i], "--m") && i + 1 < argc) {
      timed_m = {std::atoi(argv[++i])};
    } else if (!std::strcmp(argv[i], "--share") && i + 1 < argc && (!std::strcmp(argv[i + 1], "steps") || !std::strcmp(argv[i + 1], "slices"))) {
      g_share = !std::strcmp(argv[++i], "slices") ? Share::Slices : Share::Steps;
    } else {
      std::fprintf(stderr, "usage: %s [--json FILE] [--no-timing] [--no-checks] [--format bf16|fp8|int4] [--m M] [--share steps|slices]\n", argv[0]);
      return 2;
    }
  }
  int dev = 0, sms = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("%s, %d SMs; a tile's warps share it by %s\n", prop.name, sms, g_share == Share::Slices ? "slices" : "steps");

  bool ok = true;
  const MatrixFormat formats[] = {MatrixFormat::BF16, MatrixFormat::F16, MatrixFormat::FP8, MatrixFormat::INT4};
  for (MatrixFormat f : formats)
    for (int M : {1, 2, 5, 8, 16}) {
      if (!checks) break;
      // Full grid: workgroups with no tile, one, two, several jobs in one launch, last slices narrower;
      // 8 workgroups: 8 and 20 tiles each (the warps' whole-tile path, tiles in several chunks a slice).
      ok &= check_case(f, {{40, 256}, {1000, 896}, {4096, 1024}}, M, sms, 11 + M);
      ok &= check_case(f, {{1000, 640}, {2560, 384}}, M, 8, 23 + M);
      ok &= check_case(f, {{77, 14336}}, M, 3, 31 + M);
    }
  std::printf(!checks ? "checks skipped\n" : ok ? "all checks passed\n" : "CHECKS FAILED\n");
  if (!ok) return 1;
  if (!timing) return 0;

  const double ceiling = read_ceiling_gbps(sms);
  std::printf("read ceiling: %.0f GB/s\n", ceiling);
  std::vector<Timing> all;
  for (MatrixFormat f : timed) {
    const auto t = time_llama8b(f, sms, timed_m);
    for (const Timing& x : t) {
      std::printf("llama-3.1-8b layers %-4s M=%-2d %8.3f ms  %7.0f GB/s  %5.1f%% of the read ceiling  %.3fx M=1  (streaming alone %.3f ms)\n",
                  x.format.c_str(), x.M, x.ms, x.gbps, 100 * x.gbps / ceiling, x.ms / t[0].ms, x.stream_ms);
      all.push_back(x);
    }
  }
  if (json) {
    FILE* fp = std::fopen(json, "w");
    if (!fp) return 2;
    std::fprintf(fp, "{\n  \"device\": \"%s\", \"sms\": %d, \"read_gbps\": %.1f,\n  \"what\": \"Llama-3.1-8B's 32 layers' qkv, o, gate, up, down as tile images, one launch, no dependencies\", \"share\": \"%s\",\n  \"runs\": [\n", prop.name,
                 sms, ceiling, g_share == Share::Slices ? "slices" : "steps");
    for (size_t i = 0; i < all.size(); ++i)
      std::fprintf(fp, "    {\"format\": \"%s\", \"M\": %d, \"ms\": %.4f, \"bytes\": %.0f, \"gbps\": %.1f, \"pct_read_ceiling\": %.2f, \"stream_only_ms\": %.4f}%s\n",
                   all[i].format.c_str(), all[i].M, all[i].ms, all[i].bytes, all[i].gbps, 100 * all[i].gbps / ceiling, all[i].stream_ms,
                   i + 1 < all.size() ? "," : "");
    std::fprintf(fp, "  ]\n}\n");
    std::fclose(fp);
  }
  return 0;
}
