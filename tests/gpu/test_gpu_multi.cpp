// Checks that need several GPUs of one host (tensor parallel: runtime/tensor_parallel.h), run by
// scripts/gpu_check.sh where the machine has 2 or more. On fewer they fail, saying so: nothing here is
// skipped quietly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <numeric>

#include "device/peer_windows.h"
#include "runtime/error.h"
#include "tests/helpers/error_of.h"

namespace mk {
namespace {

using ::testing::HasSubstr;

std::vector<int> every_gpu() {
  std::vector<int> gpus(size_t(PeerWindows::visible_gpus()));
  std::iota(gpus.begin(), gpus.end(), 0);
  return gpus;
}

class MultiGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GE(PeerWindows::visible_gpus(), 2) << "this binary checks several GPUs of one host; this machine has fewer than 2";
  }
};

// Opening writes through every pair's peer pointers and checks what arrived (PeerWindows::open): that it
// returns is the check. Opened twice, the first set released in between.
TEST_F(MultiGpu, PeerWindowsReachEveryGpuAndOpenAgainAfterClosing) {
  for (int round = 0; round < 2; ++round) {
    const auto windows = PeerWindows::open(every_gpu(), size_t(1) << 20);
    ASSERT_EQ(windows->size(), int(every_gpu().size()));
    EXPECT_THAT(windows->describe(), HasSubstr("every peer path checked"));
    for (int r = 0; r < windows->size(); ++r) {
      EXPECT_NE(windows->local(r), nullptr);
      for (int p = 0; p < windows->size(); ++p) EXPECT_NE(windows->peer(r, p), nullptr) << r << " -> " << p;
    }
    std::printf("%s\n", windows->describe());
  }
}

TEST_F(MultiGpu, PeerWindowsRefuseGpusTheMachineLacksOrListsTwice) {
  const int n = PeerWindows::visible_gpus();
  EXPECT_THAT(test::error_of([&] { PeerWindows::open({0, n}, size_t(1) << 20); }),
              HasSubstr(fmt::format("GPU {} was asked for, but this machine has {}", n, n)));
  EXPECT_THAT(test::error_of([&] { PeerWindows::open({1, 1}, size_t(1) << 20); }), HasSubstr("GPU 1 is listed twice"));
  EXPECT_THAT(test::error_of([&] { PeerWindows::open({0}, size_t(1) << 20); }), HasSubstr("at least 2 GPUs"));
  EXPECT_THAT(test::error_of([&] { PeerWindows::open({0, 1}, 64); }), HasSubstr("peer windows of 64 bytes"));
}

}  // namespace
}  // namespace mk
