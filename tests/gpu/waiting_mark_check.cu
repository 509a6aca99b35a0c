// Standalone check of the waits' waiting marks (device/launch_abort.h, device/counter_wait.h; not part of
// CMake), which the host watchdog reads to tell a wait from a long instruction. Build from the repository
// root:
//   nvcc -std=c++17 -O3 -arch=sm_90a -I. tests/gpu/waiting_mark_check.cu -o waiting_mark_check
// Two blocks: block 0 stays 1.5 s inside a loop that is no wait (a long instruction), then adds to a
// counter; block 1 waits for that counter through spin_until, the kernels' own wait. While it runs, block
// 1's mark must move (after 100 ms of waiting, every ~67 ms) and block 0's stay 0. Then the same with the
// abort word set: block 1's wait gives up and its mark stops moving while block 0 is still busy. Exits
// non-zero on any failure.
#include "tests/gpu/standalone_check.h"

#include <chrono>
#include <cstdio>
#include <thread>

#include "device/counter_wait.h"

using namespace mk::dev;

__global__ void scenario(KernelParams p, unsigned* counter, unsigned long long busy_ns, int* reached) {
  if (threadIdx.x != 0) return;
  if (blockIdx.x == 0) {
    const unsigned long long t0 = global_timer_ns();
    while (global_timer_ns() - t0 < busy_ns) {
    }
    atomicAdd(counter, 1u);
  } else {
    reached[blockIdx.x] = spin_until(p, counter, 1u) ? 1 : 0;
  }
}

int main() {
  constexpr int kBlocks = 2;
  uint32_t* host_words = nullptr;  // progress pairs, then the waiting marks; then the abort word
  CHECK(cudaHostAlloc(&host_words, (3 * kBlocks + 1) * sizeof(uint32_t), cudaHostAllocMapped));
  uint32_t* dev_words = nullptr;
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_words), host_words, 0));
  volatile uint32_t* marks = host_words + 2 * kBlocks;
  volatile uint32_t* abort_word = host_words + 3 * kBlocks;
  unsigned* counter = nullptr;
  int* reached = nullptr;
  CHECK(cudaMalloc(&counter, sizeof(unsigned)));
  CHECK(cudaMalloc(&reached, kBlocks * sizeof(int)));

  KernelParams p{};
  p.progress = dev_words;
  p.abort = dev_words + 3 * kBlocks;
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    std::printf("%s %s\n", ok ? "PASS" : "FAIL", what);
    failures += ok ? 0 : 1;
  };

  for (int aborted = 0; aborted < 2; ++aborted) {
    for (int i = 0; i < 3 * kBlocks + 1; ++i) host_words[i] = 0;
    CHECK(cudaMemset(counter, 0, sizeof(unsigned)));
    CHECK(cudaMemset(reached, 0xff, kBlocks * sizeof(int)));
    scenario<<<kBlocks, 32>>>(p, counter, 1500ull * 1000 * 1000, reached);
    CHECK(cudaGetLastError());
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    const uint32_t early = marks[1];
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const uint32_t later = marks[1], busy = marks[0];
    expect(busy == 0, "a block inside a loop that is no wait leaves its mark alone");
    expect(early != 0 && later != early, "a block in a wait past 100 ms moves its mark");
    if (aborted) {
      *abort_word = 1;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const uint32_t given_up = marks[1];
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      expect(cudaStreamQuery(nullptr) == cudaErrorNotReady, "the busy block is still inside its loop");
      expect(marks[1] == given_up, "a wait that gave up moves its mark no more");
    }
    CHECK(cudaDeviceSynchronize());
    int reached_host[kBlocks];
    CHECK(cudaMemcpy(reached_host, reached, sizeof reached_host, cudaMemcpyDeviceToHost));
    std::printf("%s: waiting block's mark 0x%x then 0x%x; busy block's %u\n", aborted ? "aborted" : "plain", early, later, busy);
    expect(marks[0] == 0, "the busy block never wrote its mark");
    expect(reached_host[1] == (aborted ? 0 : 1), aborted ? "the wait gave up" : "the wait saw its counter");
  }
  std::printf("%s\n", failures ? "FAILED" : "all passed");
  return failures ? 1 : 0;
}
