// The hang path end to end through the C API and the C++ wrapper on the GPU. MK_DEBUG_PLANT_HANG=1 makes
// the first launch of each GPU backend created while it is set hang (device/gpu_backend.h); the library
// stops the kernel and reports the stuck instruction, the process lives on, and the session's next turn
// gives the reply a session that never hung gives. Built with MK_GPU=nvidia|amd; run on a GPU machine
// (scripts/gpu_check.sh). Each hang takes the engine's 10 s watchdog, but the one given 2 s.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <monokernel.h>
#include <monokernel.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/helpers/tiny_chat_model.h"

namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

mk_model_options gpu_options() {
  mk_model_options o;
  mk_model_options_init(&o);
  o.backend = MK_BACKEND_GPU;
  o.context = 256;
  return o;
}

int append_text(const char* text, size_t length, void* user) {
  static_cast<std::string*>(user)->append(text, length);
  return 0;
}

constexpr const char* kStuck = "watchdog(.|\n)*layer 1 gate_up rows[^\n]*<- earliest blocked instruction";

// A model opened with MK_DEBUG_PLANT_HANG=1 (its backend's first launch hangs) and a session on it.
struct PlantedHang {
  mk_model* model = nullptr;
  mk_session* session = nullptr;
  PlantedHang(const std::filesystem::path& dir, const mk_model_options& o) {
    char err[1024] = "";
    setenv("MK_DEBUG_PLANT_HANG", "1", 1);
    EXPECT_EQ(mk_model_open(dir.c_str(), &o, &model, err, sizeof err), MK_OK) << err;
    unsetenv("MK_DEBUG_PLANT_HANG");
    if (model) {
      EXPECT_EQ(mk_session_create(model, nullptr, &session), MK_OK);
    }
  }
  ~PlantedHang() {
    mk_session_destroy(session);
    mk_model_close(model);
  }
  // The hanging turn: it must fail with MK_ERROR_BACKEND; returns how long that took.
  double hang(const mk_generate_params& p) {
    std::string lost;
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(mk_generate(session, "Hello there", &p, append_text, &lost), MK_ERROR_BACKEND);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

// mk_model_options.watchdog_seconds is the limit the launch is held to: 2 s stops a planted hang in about
// 2 s, not the default's 10.
TEST(GpuCapi, TheWatchdogLimitSetThroughTheCApiIsHonoured) {
  const mk::test::ScopedTinyChatModel dir("gpu-api-watchdog");
  mk_generate_params p;
  mk_generate_params_init(&p);
  p.max_tokens = 8;
  mk_model_options o = gpu_options();
  o.watchdog_seconds = 2;
  PlantedHang planted(dir.dir, o);
  ASSERT_NE(planted.session, nullptr);
  const double seconds = planted.hang(p);
  EXPECT_THAT(mk_session_last_error(planted.session), HasSubstr("no workgroup made progress for 2.0 s"));
  EXPECT_THAT(mk_session_last_error(planted.session), ContainsRegex(kStuck));
  EXPECT_GT(seconds, 2.0);
  EXPECT_LT(seconds, 2.0 + 3.0);
  std::printf("watchdog 2 s: MK_ERROR_BACKEND after %.1f s\n", seconds);
  std::string after;
  EXPECT_EQ(mk_generate(planted.session, "Hello there", &p, append_text, &after), MK_OK)
      << mk_session_last_error(planted.session);
}

TEST(GpuCapi, APlantedHangIsAnErrorAndTheSessionGoesOn) {
  const mk::test::ScopedTinyChatModel dir("gpu-api-hang");
  mk_generate_params p;
  mk_generate_params_init(&p);
  p.max_tokens = 8;
  const mk_model_options o = gpu_options();
  char err[1024];

  // The C API.
  PlantedHang planted(dir.dir, o);
  ASSERT_NE(planted.session, nullptr);
  mk_session* session = planted.session;
  const double seconds = planted.hang(p);
  EXPECT_THAT(mk_session_last_error(session), ContainsRegex(kStuck));
  EXPECT_THAT(mk_session_last_error(session), HasSubstr("the kernel left after"));
  EXPECT_LT(seconds, 10.0 + 3.0);
  std::printf("C API: MK_ERROR_BACKEND after %.1f s: %s\n", seconds, mk_session_last_error(session));
  mk_stats stats;
  mk_session_stats(session, &stats);
  EXPECT_EQ(stats.turns, 0);
  std::string after;
  ASSERT_EQ(mk_generate(session, "Hello there", &p, append_text, &after), MK_OK) << mk_session_last_error(session);

  // The C++ wrapper: the same status as an exception.
  setenv("MK_DEBUG_PLANT_HANG", "1", 1);
  monokernel::ModelOptions options;
  options.backend = MK_BACKEND_GPU;
  options.context = 256;
  monokernel::Model wrapped(dir.dir.string(), options);
  unsetenv("MK_DEBUG_PLANT_HANG");
  monokernel::Session chat(wrapped);
  monokernel::GenerateParams gp;
  gp.max_tokens = 8;
  try {
    chat.generate("Hello there", gp);
    ADD_FAILURE() << "no error";
  } catch (const monokernel::Error& e) {
    EXPECT_EQ(e.status(), MK_ERROR_BACKEND);
    EXPECT_THAT(e.what(), ContainsRegex(kStuck));
  }
  const std::string after_wrapped = chat.generate("Hello there", gp);

  // A model opened without the planted hang: the reference.
  mk_model* fresh = nullptr;
  ASSERT_EQ(mk_model_open(dir.dir.c_str(), &o, &fresh, err, sizeof err), MK_OK) << err;
  mk_session* reference = nullptr;
  ASSERT_EQ(mk_session_create(fresh, nullptr, &reference), MK_OK);
  std::string expected;
  ASSERT_EQ(mk_generate(reference, "Hello there", &p, append_text, &expected), MK_OK);
  EXPECT_EQ(after, expected);
  EXPECT_EQ(after_wrapped, expected);
  // The next turn too: the recovered session's cache holds exactly the conversation.
  std::string next, next_expected;
  ASSERT_EQ(mk_generate(session, "And again", &p, append_text, &next), MK_OK);
  ASSERT_EQ(mk_generate(reference, "And again", &p, append_text, &next_expected), MK_OK);
  EXPECT_EQ(next, next_expected);

  mk_session_destroy(reference);
  mk_model_close(fresh);
}

}  // namespace
