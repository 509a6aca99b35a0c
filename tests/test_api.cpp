// The C API (host/api/monokernel.h) and its C++ wrapper (monokernel.hpp), linked against the shared
// library exactly as a user would, on a tiny chat model (CPU emulator).
//   Capi.*            status codes and messages, tokenize/detokenize, generation, cancel, reset, stats
//   CapiCppWrapper.*  the RAII wrapper: exceptions, streaming, callback stop
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <monokernel.h>
#include <monokernel.hpp>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <nlohmann/json.hpp>
#include <thread>

#include "runtime/synthetic_model.h"
#include "tests/helpers/tiny_chat_model.h"

namespace {

using ::testing::HasSubstr;

const std::filesystem::path& model_dir() {
  static const mk::test::ScopedTinyChatModel model("api-chat");
  return model.dir;
}

mk_model_options emulator(int context = 1024) {
  mk_model_options o;
  mk_model_options_init(&o);
  o.backend = MK_BACKEND_EMULATOR;
  o.context = context;
  return o;
}

struct Opened {
  mk_model* model = nullptr;
  mk_session* session = nullptr;
  explicit Opened(int context = 1024) {
    const mk_model_options o = emulator(context);
    char err[512];
    EXPECT_EQ(mk_model_open(model_dir().c_str(), &o, &model, err, sizeof err), MK_OK) << err;
    EXPECT_EQ(mk_session_create(model, nullptr, &session), MK_OK) << mk_model_last_error(model);
  }
  ~Opened() {
    mk_session_destroy(session);
    mk_model_close(model);
  }
};

mk_generate_params params(int max_tokens) {
  mk_generate_params p;
  mk_generate_params_init(&p);
  p.max_tokens = max_tokens;
  return p;
}

int append_text(const char* text, size_t length, void* user) {
  EXPECT_EQ(text[length], '\0');
  static_cast<std::string*>(user)->append(text, length);
  return 0;
}

TEST(Capi, OpenErrorsAreCodesWithMessages) {
  mk_model* model = reinterpret_cast<mk_model*>(0x1);
  char err[256] = "unchanged";
  const mk_model_options o = emulator();
  EXPECT_EQ(mk_model_open("/nonexistent/model", &o, &model, err, sizeof err), MK_ERROR_NOT_FOUND);
  EXPECT_EQ(model, nullptr);
  EXPECT_THAT(err, HasSubstr("/nonexistent/model does not exist"));

  const mk::test::ScopedTinyChatModel bad_model("api-bad");
  const auto& dir = bad_model.dir;
  std::ofstream(dir / "model.safetensors") << "truncated";
  EXPECT_EQ(mk_model_open(dir.c_str(), &o, &model, err, sizeof err), MK_ERROR_BAD_MODEL);
  EXPECT_THAT(err, HasSubstr("model.safetensors"));
  // A short buffer gets a truncated, terminated message; no buffer at all is fine too.
  char tiny[8];
  EXPECT_EQ(mk_model_open(dir.c_str(), &o, &model, tiny, sizeof tiny), MK_ERROR_BAD_MODEL);
  EXPECT_EQ(std::strlen(tiny), 7u);
  EXPECT_EQ(mk_model_open(dir.c_str(), &o, &model, nullptr, 0), MK_ERROR_BAD_MODEL);

  EXPECT_EQ(mk_model_open(nullptr, &o, &model, err, sizeof err), MK_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(mk_model_open(model_dir().c_str(), &o, nullptr, err, sizeof err), MK_ERROR_INVALID_ARGUMENT);
  mk_model_options bad = o;
  bad.backend = static_cast<mk_backend_kind>(42);
  EXPECT_EQ(mk_model_open(model_dir().c_str(), &bad, &model, err, sizeof err), MK_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(mk_status_name(MK_ERROR_CONTEXT_FULL), "MK_ERROR_CONTEXT_FULL");
}

// Issue 18: each broken file gets MK_ERROR_BAD_MODEL with the file (and key) named, never
// MK_ERROR_INTERNAL with nlohmann's text.
TEST(Capi, BrokenModelFilesAreBadModelNamingTheFile) {
  const mk_model_options o = emulator();
  mk_model* model = nullptr;
  char err[1024];
  {
    const mk::test::ScopedTinyChatModel dir("api-cfg-overflow");
    std::ofstream(dir.dir / "tokenizer_config.json") << "574876e478s";  // finding 1
    EXPECT_EQ(mk_model_open(dir.dir.c_str(), &o, &model, err, sizeof err), MK_ERROR_BAD_MODEL);
    EXPECT_THAT(err, HasSubstr((dir.dir / "tokenizer_config.json").string() + ": not valid JSON"));
    EXPECT_THAT(err, HasSubstr("number overflow"));
  }
  {
    const mk::test::ScopedTinyChatModel dir("api-cfg-type");
    std::ofstream(dir.dir / "tokenizer_config.json") << R"({"chat_template":[{"name":1}]})";  // finding 2
    ASSERT_EQ(mk_model_open(dir.dir.c_str(), &o, &model, err, sizeof err), MK_OK) << err;  // a template is optional
    mk_session* session = nullptr;
    ASSERT_EQ(mk_session_create(model, nullptr, &session), MK_OK);
    EXPECT_EQ(mk_generate(session, "hi", nullptr, nullptr, nullptr), MK_ERROR_BAD_MODEL);
    EXPECT_THAT(mk_session_last_error(session),
                HasSubstr((dir.dir / "tokenizer_config.json").string() + ": \"chat_template[0].name\" must be a string"));
    mk_session_destroy(session);
    mk_model_close(model);
  }
  {
    const mk::test::ScopedTinyChatModel dir("api-vocab");
    std::ofstream(dir.dir / "tokenizer.json")
        << R"({"model":{"type":"BPE","vocab":{"a":2147483647},"merges":[]},"pre_tokenizer":{"type":"ByteLevel"}})";  // finding 3
    EXPECT_EQ(mk_model_open(dir.dir.c_str(), &o, &model, err, sizeof err), MK_ERROR_BAD_MODEL);
    EXPECT_THAT(err, HasSubstr("tokenizer.json: \"model.vocab\" entry \"a\" has id 2147483647"));
  }
  {
    const mk::test::ScopedTinyChatModel dir("api-limits");
    std::ifstream in(dir.dir / "config.json");
    std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = config.find("\"num_hidden_layers\"");
    ASSERT_NE(at, std::string::npos);
    config.insert(at, "\"head_dim\": 1073741840, ");  // finding 4
    std::ofstream(dir.dir / "config.json") << config;
    EXPECT_EQ(mk_model_open(dir.dir.c_str(), &o, &model, err, sizeof err), MK_ERROR_BAD_MODEL);
    EXPECT_THAT(err, HasSubstr("config.json: 'head_dim' = 1073741840 is larger than the limit of 1024"));
  }
}

TEST(Capi, OptionsBeyondTheirLimitsAreInvalidArguments) {
  mk_model* model = nullptr;
  char err[512];
  mk_model_options o = emulator(16777217);
  EXPECT_EQ(mk_model_open(model_dir().c_str(), &o, &model, err, sizeof err), MK_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(err, HasSubstr("context must be between 1 and 16777216"));
  for (const double seconds : {0.0, 0.5, -1.0, 86401.0, std::nan("")}) {
    o = emulator();
    o.watchdog_seconds = seconds;
    EXPECT_EQ(mk_model_open(model_dir().c_str(), &o, &model, err, sizeof err), MK_ERROR_INVALID_ARGUMENT) << seconds;
    EXPECT_THAT(err, HasSubstr("watchdog_seconds must be between 1 and 86400"));
  }
  {
    mk_model_options d;
    mk_model_options_init(&d);
    EXPECT_EQ(d.watchdog_seconds, 10.0);
  }
  for (const int workgroups : {1 << 30, 0, -1}) {
    o = emulator();
    o.emulator_workgroups = workgroups;
    EXPECT_EQ(mk_model_open(model_dir().c_str(), &o, &model, err, sizeof err), MK_ERROR_INVALID_ARGUMENT) << workgroups;
    EXPECT_THAT(err, HasSubstr("emulator_workgroups must be between 1 and 4096 (got " + std::to_string(workgroups) + ")"));
  }
}

// Load-time quantization through the C API: int4 with the head quantized (the default) or kept in 16
// bits generates; values outside the enums are invalid arguments naming the field.
TEST(Capi, QuantizeOptions) {
  mk_model_options o = emulator();
  EXPECT_EQ(o.quantize, MK_QUANTIZE_NONE);
  EXPECT_EQ(o.quantize_head, 1);
  char err[512];
  for (int head : {1, 0}) {
    SCOPED_TRACE(head);
    o.quantize = MK_QUANTIZE_INT4;
    o.quantize_head = head;
    mk_model* model = nullptr;
    ASSERT_EQ(mk_model_open(model_dir().c_str(), &o, &model, err, sizeof err), MK_OK) << err;
    mk_session* session = nullptr;
    ASSERT_EQ(mk_session_create(model, nullptr, &session), MK_OK) << mk_model_last_error(model);
    mk_generate_params p = params(6);
    std::string reply;
    EXPECT_EQ(mk_generate(session, "Hello", &p, append_text, &reply), MK_OK) << mk_session_last_error(session);
    mk_stats s;
    mk_session_stats(session, &s);
    EXPECT_EQ(s.last_generated_tokens, 6);
    mk_session_destroy(session);
    mk_model_close(model);
  }
  mk_model* model = nullptr;
  o.quantize_head = 2;
  EXPECT_EQ(mk_model_open(model_dir().c_str(), &o, &model, err, sizeof err), MK_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(err, HasSubstr("options->quantize_head must be 0 or 1"));
  o.quantize_head = 1;
  o.quantize = static_cast<mk_quantize>(7);
  EXPECT_EQ(mk_model_open(model_dir().c_str(), &o, &model, err, sizeof err), MK_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(err, HasSubstr("options->quantize is not an mk_quantize"));
}

// The tiny chat model's vocabulary is printable ASCII: "é" has byte tokens beyond it. That is the
// prompt's problem (MK_ERROR_INVALID_ARGUMENT), not a backend failure, and the session is unchanged.
TEST(Capi, APromptOutsideTheVocabularyIsAnInvalidArgument) {
  Opened o;
  mk_generate_params p = params(4);
  EXPECT_EQ(mk_generate(o.session, "caf\xC3\xA9", &p, nullptr, nullptr), MK_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(mk_session_last_error(o.session), HasSubstr("outside the vocabulary"));
  mk_stats s;
  mk_session_stats(o.session, &s);
  EXPECT_EQ(s.context_tokens, 0);
  EXPECT_EQ(s.turns, 0);
  EXPECT_EQ(mk_generate(o.session, "cafe", &p, nullptr, nullptr), MK_OK) << mk_session_last_error(o.session);
}

TEST(Capi, TokenizeAndDetokenizeWithSizeQueries) {
  Opened o;
  const std::string text = "hello world<|im_end|>";
  size_t count = 0;
  EXPECT_EQ(mk_tokenize(o.model, text.data(), text.size(), 1, nullptr, 0, &count), MK_ERROR_BUFFER_TOO_SMALL);
  std::vector<int32_t> ids(count);
  ASSERT_EQ(mk_tokenize(o.model, text.data(), text.size(), 1, ids.data(), ids.size(), &count), MK_OK);
  int32_t im_end = -1;
  size_t one = 0;
  ASSERT_EQ(mk_tokenize(o.model, "<|im_end|>", 10, 1, &im_end, 1, &one), MK_OK);
  EXPECT_EQ(one, 1u);
  EXPECT_EQ(ids.back(), im_end);
  size_t plain = 0;
  std::vector<int32_t> more(64);
  ASSERT_EQ(mk_tokenize(o.model, text.data(), text.size(), 0, more.data(), more.size(), &plain), MK_OK);
  EXPECT_GT(plain, count) << "with parse_special = 0 the special token is plain text";

  size_t length = 0;
  EXPECT_EQ(mk_detokenize(o.model, ids.data(), ids.size(), nullptr, 0, &length), MK_ERROR_BUFFER_TOO_SMALL);
  EXPECT_EQ(length, text.size());
  std::string back(length + 1, 'x');
  ASSERT_EQ(mk_detokenize(o.model, ids.data(), ids.size(), back.data(), back.size(), &length), MK_OK);
  EXPECT_EQ(back.c_str(), text);
  EXPECT_EQ(mk_tokenize(nullptr, "x", 1, 1, nullptr, 0, &count), MK_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(mk_model_last_error(o.model), HasSubstr("mk_tokenize"));
}

TEST(Capi, GenerateStreamsAndReusesTheCacheAcrossTurns) {
  Opened o;
  std::string reply;
  mk_generate_params p = params(8);
  ASSERT_EQ(mk_generate(o.session, "Hello there", &p, append_text, &reply), MK_OK) << mk_session_last_error(o.session);
  EXPECT_FALSE(reply.empty());
  mk_stats first;
  ASSERT_EQ(mk_session_stats(o.session, &first), MK_OK);
  EXPECT_EQ(first.turns, 1);
  EXPECT_EQ(first.last_generated_tokens, 8);
  EXPECT_EQ(first.last_stop, MK_STOP_MAX_TOKENS);
  EXPECT_EQ(first.context_size, 1024);
  EXPECT_EQ(first.context_tokens, first.last_ingested_tokens + 7);

  const mk_message messages[] = {{"user", "Again"}};
  ASSERT_EQ(mk_generate_messages(o.session, messages, 1, &p, nullptr, nullptr), MK_OK);
  mk_stats second;
  mk_session_stats(o.session, &second);
  EXPECT_LT(second.last_ingested_tokens, first.last_ingested_tokens) << "turn 2 re-ingested the history";
  EXPECT_EQ(second.context_tokens, first.context_tokens + second.last_ingested_tokens + 7);

  ASSERT_EQ(mk_session_reset(o.session), MK_OK);
  mk_session_stats(o.session, &second);
  EXPECT_EQ(second.context_tokens, 0);
  EXPECT_EQ(second.turns, 0);
}

// Speculative decoding on the emulator: the same replies, greedy and sampled, with the drafts counted;
// its fields checked.
TEST(Capi, SpeculationGivesTheSameRepliesAndCountsItsDrafts) {
  const mk_model_options o = emulator();
  mk_speculation spec;
  mk_speculation_init(&spec);
  EXPECT_EQ(spec.struct_size, sizeof(mk_speculation));
  EXPECT_EQ(spec.drafter, MK_DRAFTER_NONE);
  spec.drafter = MK_DRAFTER_LOOKUP;
  spec.draft_max = 3;
  char err[512];
  mk_model *plain = nullptr, *speculative = nullptr;
  ASSERT_EQ(mk_model_open(model_dir().c_str(), &o, &plain, err, sizeof err), MK_OK) << err;
  ASSERT_EQ(mk_model_open_speculative(model_dir().c_str(), &o, &spec, &speculative, err, sizeof err), MK_OK) << err;
  for (const float temperature : {0.0f, 0.9f}) {
    mk_generate_params p = params(20);
    p.temperature = temperature;
    p.seed = 11;
    std::string a, b;
    mk_session *sa = nullptr, *sb = nullptr;
    ASSERT_EQ(mk_session_create(plain, nullptr, &sa), MK_OK);
    ASSERT_EQ(mk_session_create(speculative, nullptr, &sb), MK_OK);
    ASSERT_EQ(mk_generate(sa, "again and again and again", &p, append_text, &a), MK_OK) << mk_session_last_error(sa);
    ASSERT_EQ(mk_generate(sb, "again and again and again", &p, append_text, &b), MK_OK) << mk_session_last_error(sb);
    EXPECT_EQ(a, b) << "temperature " << temperature;
    mk_speculation_stats none{}, some{};
    none.struct_size = some.struct_size = sizeof(mk_speculation_stats);
    ASSERT_EQ(mk_session_speculation_stats(sa, &none), MK_OK);
    ASSERT_EQ(mk_session_speculation_stats(sb, &some), MK_OK);
    EXPECT_EQ(none.last_drafted_tokens, 0);
    EXPECT_GT(some.last_drafted_tokens, 0);
    EXPECT_LE(some.last_accepted_tokens, some.last_drafted_tokens);
    mk_speculation_stats unsized{};
    EXPECT_EQ(mk_session_speculation_stats(sb, &unsized), MK_ERROR_INVALID_ARGUMENT);
    mk_session_destroy(sa);
    mk_session_destroy(sb);
  }
  mk_model_close(plain);
  mk_model_close(speculative);

  const struct {
    void (*change)(mk_speculation&);
    const char* message;
  } kBad[] = {
      {[](mk_speculation& s) { s.drafter = static_cast<mk_drafter>(9); }, "drafter"},
      {[](mk_speculation& s) { s.draft_max = 20; }, "20 drafts a step"},
      {[](mk_speculation& s) { s.lookup_min = 4, s.lookup_max = 2; }, "lookup n-grams of 4 to 2 tokens"},
      {[](mk_speculation& s) { s.struct_size = 0; }, "struct_size 0"},
  };
  for (const auto& b : kBad) {
    mk_speculation bad = spec;
    b.change(bad);
    mk_model* m = nullptr;
    EXPECT_EQ(mk_model_open_speculative(model_dir().c_str(), &o, &bad, &m, err, sizeof err), MK_ERROR_INVALID_ARGUMENT) << b.message;
    EXPECT_THAT(err, HasSubstr(b.message));
    EXPECT_EQ(m, nullptr);
  }
}

TEST(Capi, ResetGivesTheSameGreedyReplyAgain) {
  Opened o;
  mk_generate_params p = params(12);
  std::string a, b;
  ASSERT_EQ(mk_generate(o.session, "Hello", &p, append_text, &a), MK_OK);
  ASSERT_EQ(mk_session_reset(o.session), MK_OK);
  ASSERT_EQ(mk_generate(o.session, "Hello", &p, append_text, &b), MK_OK);
  EXPECT_EQ(a, b);
}

TEST(Capi, APromptLongerThanTheContextIsContextFull) {
  Opened o(/*context=*/64);
  mk_generate_params p = params(4);
  const std::string prompt(500, 'z');
  EXPECT_EQ(mk_generate(o.session, prompt.c_str(), &p, nullptr, nullptr), MK_ERROR_CONTEXT_FULL);
  EXPECT_THAT(mk_session_last_error(o.session), HasSubstr("context holds 64 tokens"));
  mk_stats s;
  mk_session_stats(o.session, &s);
  EXPECT_EQ(s.context_tokens, 0);
  EXPECT_EQ(mk_generate(o.session, "hi", &p, nullptr, nullptr), MK_OK) << "the session is still usable";
}

TEST(Capi, BadArgumentsAreInvalidArgument) {
  Opened o;
  mk_generate_params p = params(4);
  EXPECT_EQ(mk_generate(nullptr, "x", &p, nullptr, nullptr), MK_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(mk_generate(o.session, nullptr, &p, nullptr, nullptr), MK_ERROR_INVALID_ARGUMENT);
  p.max_tokens = 0;
  EXPECT_EQ(mk_generate(o.session, "x", &p, nullptr, nullptr), MK_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(mk_session_last_error(o.session), HasSubstr("max_tokens"));
  p = params(4);
  p.temperature = 0.8f;
  p.top_p = 2.f;
  EXPECT_EQ(mk_generate(o.session, "x", &p, nullptr, nullptr), MK_ERROR_INVALID_ARGUMENT);
  const mk_message no_role[] = {{nullptr, "x"}};
  EXPECT_EQ(mk_generate_messages(o.session, no_role, 1, nullptr, nullptr, nullptr), MK_ERROR_INVALID_ARGUMENT);
  const mk_message bad_role[] = {{"narrator", "x"}};
  EXPECT_EQ(mk_generate_messages(o.session, bad_role, 1, nullptr, nullptr, nullptr), MK_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(mk_session_stats(o.session, nullptr), MK_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(mk_session_cancel(nullptr), MK_ERROR_INVALID_ARGUMENT);
  mk_session* s = nullptr;
  EXPECT_EQ(mk_session_create(nullptr, nullptr, &s), MK_ERROR_INVALID_ARGUMENT);
  mk_session_destroy(nullptr);
  mk_model_close(nullptr);
}

TEST(Capi, InvalidSamplingValuesAreRejectedNamingTheField) {
  Opened o;
  const auto rejected = [&](void (*set)(mk_generate_params&), const char* message) {
    mk_generate_params p = params(4);
    set(p);
    EXPECT_EQ(mk_generate(o.session, "x", &p, nullptr, nullptr), MK_ERROR_INVALID_ARGUMENT) << message;
    EXPECT_THAT(mk_session_last_error(o.session), HasSubstr(message));
  };
  rejected([](mk_generate_params& p) { p.temperature = -1.f; }, "temperature -1: the temperature must be a finite number >= 0");
  rejected([](mk_generate_params& p) { p.temperature = std::nanf(""); }, "temperature nan:");
  rejected([](mk_generate_params& p) { p.top_k = -3; }, "top_k -3: top-k must be >= 0");
  rejected([](mk_generate_params& p) { p.min_p = 5.f; }, "min_p 5: min-p must be between 0 and 1");
  // Greedy decoding ignores top-p, but an impossible value is still a mistake.
  rejected([](mk_generate_params& p) { p.top_p = 2.f; }, "top_p 2: top-p must be greater than 0 and at most 1");
  mk_stats s;
  mk_session_stats(o.session, &s);
  EXPECT_EQ(s.context_tokens, 0) << "a rejected call ran the model";
}

// mk_generate_with_options: a +100 bias decides every greedy token; a record comes for each reply token,
// before its text, with the alternatives asked for; a caller built with the first, smaller struct gets
// the defaults for the rest; values out of range name their field.
TEST(Capi, GenerateWithOptionsBiasesRecordsAndChecksItsFields) {
  Opened o;
  int32_t forced = -1;
  size_t n = 0;
  ASSERT_EQ(mk_tokenize(o.model, "x", 1, 0, &forced, 1, &n), MK_OK);
  ASSERT_EQ(n, 1u);
  const mk_logit_bias bias[] = {{forced, 100.0f}};
  struct Log {
    std::string events;  // 'L' a record, 'T' some text
    std::vector<mk_token_logprobs> records;
    int stop_after = 0;  // records before the callback asks to stop (0: never)
  } log;
  mk_generate_options opt;
  mk_generate_options_init(&opt);
  EXPECT_EQ(opt.struct_size, sizeof(mk_generate_options));
  opt.params.max_tokens = 6;
  opt.logit_bias = bias;
  opt.logit_bias_count = 1;
  opt.top_logprobs = 5;
  opt.logprobs_user = &log;
  opt.on_logprobs = [](const mk_token_logprobs* r, void* user) {
    Log& l = *static_cast<Log*>(user);
    l.events += 'L';
    l.records.push_back(*r);
    return l.stop_after > 0 && int(l.records.size()) >= l.stop_after ? 1 : 0;
  };
  const auto on_text = [](const char*, size_t, void* user) {
    static_cast<Log*>(user)->events += 'T';
    return 0;
  };
  const mk_message hello[] = {{"user", "Hello"}};
  ASSERT_EQ(mk_generate_with_options(o.session, hello, 1, &opt, on_text, &log), MK_OK) << mk_session_last_error(o.session);
  ASSERT_EQ(log.records.size(), 6u);
  EXPECT_EQ(log.events.front(), 'L') << log.events;
  for (const mk_token_logprobs& r : log.records) {
    EXPECT_EQ(r.token, forced);
    EXPECT_NEAR(r.logprob, 0.0f, 1e-3f);  // +100 leaves every other token ~e^-90 of the mass
    ASSERT_EQ(r.top_count, 5);
    EXPECT_EQ(r.top_ids[0], forced);
    for (int k = 1; k < 5; ++k) EXPECT_LE(r.top_logprobs[k], r.top_logprobs[k - 1]);
  }

  // A non-zero return from the records' callback stops the reply.
  log = Log{};
  log.stop_after = 2;
  ASSERT_EQ(mk_generate_with_options(o.session, hello, 1, &opt, nullptr, nullptr), MK_OK);
  mk_stats st;
  mk_session_stats(o.session, &st);
  EXPECT_EQ(st.last_stop, MK_STOP_CANCELLED);
  EXPECT_LE(log.records.size(), 3u);

  // The first version of the struct ends after params: what lies past it is not read.
  mk_generate_options first = opt;
  first.struct_size = offsetof(mk_generate_options, logit_bias);
  first.logit_bias = nullptr;
  first.logit_bias_count = 7;  // would be an error if read
  first.top_logprobs = 99;
  EXPECT_EQ(mk_generate_with_options(o.session, hello, 1, &first, nullptr, nullptr), MK_OK) << mk_session_last_error(o.session);

  const auto rejected = [&](void (*set)(mk_generate_options&), const char* message) {
    mk_generate_options bad = opt;
    bad.on_logprobs = nullptr;
    set(bad);
    EXPECT_EQ(mk_generate_with_options(o.session, hello, 1, &bad, nullptr, nullptr), MK_ERROR_INVALID_ARGUMENT) << message;
    EXPECT_THAT(mk_session_last_error(o.session), HasSubstr(message));
  };
  rejected([](mk_generate_options& b) { b.struct_size = 0; }, "struct_size 0 is smaller than any version");
  rejected([](mk_generate_options& b) { b.logit_bias = nullptr; }, "logit_bias is NULL with logit_bias_count 1");
  rejected([](mk_generate_options& b) { b.logit_bias_count = 5000; }, "logit_bias: 5000 entries, at most 1024");
  rejected([](mk_generate_options& b) { b.frequency_penalty = 3.0f; }, "frequency_penalty 3 must be between -2 and 2");
  rejected([](mk_generate_options& b) { b.top_logprobs = 21; }, "top_logprobs 21 must be between 0 and 20");
  rejected([](mk_generate_options& b) { b.params.top_k = -1; }, "top_k -1");
  static const mk_logit_bias outside[] = {{1 << 30, 1.0f}}, too_much[] = {{0, 101.0f}};
  rejected([](mk_generate_options& b) { b.logit_bias = outside; }, "logit_bias: token 1073741824 is outside the vocabulary");
  rejected([](mk_generate_options& b) { b.logit_bias = too_much; }, "the bias 101 of token 0 must be between -100 and 100");
}

TEST(Capi, GenerateWithOptionsConstrainsTheReply) {
  Opened o;
  mk_generate_options opt;
  mk_generate_options_init(&opt);
  EXPECT_EQ(opt.constraint_kind, MK_CONSTRAINT_NONE);
  opt.params.max_tokens = 40;
  opt.params.temperature = 0.9f;
  opt.constraint_kind = MK_CONSTRAINT_REGEX;
  opt.constraint = "[0-9]{3}-[a-z]{2}";
  std::string reply;
  const auto on_text = [](const char* text, size_t n, void* user) {
    static_cast<std::string*>(user)->append(text, n);
    return 0;
  };
  const mk_message hello[] = {{"user", "Hello"}};
  ASSERT_EQ(mk_generate_with_options(o.session, hello, 1, &opt, on_text, &reply), MK_OK) << mk_session_last_error(o.session);
  EXPECT_TRUE(std::regex_match(reply, std::regex("[0-9]{3}-[a-z]{2}"))) << reply;
  mk_stats st;
  mk_session_stats(o.session, &st);
  EXPECT_EQ(st.last_stop, MK_STOP_EOS);  // complete: nothing else was allowed

  opt.constraint_kind = MK_CONSTRAINT_JSON_SCHEMA;
  opt.constraint = R"({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}})";
  EXPECT_EQ(mk_generate_with_options(o.session, hello, 1, &opt, nullptr, nullptr), MK_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(mk_session_last_error(o.session), HasSubstr("the keyword \"minimum\" is not supported"));
  opt.constraint = nullptr;
  EXPECT_EQ(mk_generate_with_options(o.session, hello, 1, &opt, nullptr, nullptr), MK_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(mk_session_last_error(o.session), HasSubstr("constraint is NULL"));
  opt.constraint_kind = mk_constraint_kind(9);
  EXPECT_EQ(mk_generate_with_options(o.session, hello, 1, &opt, nullptr, nullptr), MK_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(mk_session_last_error(o.session), HasSubstr("constraint_kind 9 is not an mk_constraint_kind"));

  // A caller built before the constraint fields: they are not read.
  mk_generate_options before = opt;
  before.struct_size = offsetof(mk_generate_options, constraint_kind);
  EXPECT_EQ(mk_generate_with_options(o.session, hello, 1, &before, nullptr, nullptr), MK_OK) << mk_session_last_error(o.session);
}

TEST(Capi, AContextOverTheLimitIsAnInvalidArgumentBeforeAllocating) {
  const mk_model_options o = emulator(2000000000);
  mk_model* model = reinterpret_cast<mk_model*>(0x1);
  char err[512];
  EXPECT_EQ(mk_model_open(model_dir().c_str(), &o, &model, err, sizeof err), MK_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(model, nullptr);
  EXPECT_THAT(err, HasSubstr("16777216"));
  EXPECT_THAT(err, HasSubstr("2000000000"));
}

// The context rule every front end shares (runtime/context_size.h): 0 is the model's trained length up
// to 4096; more than the trained length works, with a notice.
TEST(Capi, TheContextDefaultsToTheTrainedLengthAndWarnsBeyondIt) {
  const mk::test::ScopedTinyChatModel short_model("api-context");
  {
    const auto path = short_model.dir / "config.json";
    std::ifstream in(path);
    nlohmann::json config = nlohmann::json::parse(in);
    in.close();
    config["max_position_embeddings"] = 1000;
    std::ofstream(path) << config.dump(1);
  }
  const auto open = [&](int context, std::vector<std::string>& notices) {
    mk_model_options o = emulator(context);
    o.user = &notices;
    o.on_notice = [](const char* message, void* user) { static_cast<std::vector<std::string>*>(user)->push_back(message); };
    mk_model* model = nullptr;
    char err[512];
    EXPECT_EQ(mk_model_open(short_model.dir.c_str(), &o, &model, err, sizeof err), MK_OK) << err;
    mk_session* session = nullptr;
    EXPECT_EQ(mk_session_create(model, nullptr, &session), MK_OK);
    mk_stats s;
    mk_session_stats(session, &s);
    mk_session_destroy(session);
    mk_model_close(model);
    return s.context_size;
  };
  std::vector<std::string> notices;
  EXPECT_EQ(open(0, notices), 1000);
  EXPECT_TRUE(notices.empty()) << notices.front();
  EXPECT_EQ(open(1000, notices), 1000);
  EXPECT_TRUE(notices.empty()) << notices.front();
  EXPECT_EQ(open(1500, notices), 1500);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0], "context 1500 > the model's trained length 1000 (max_position_embeddings): output past it may degrade");
}

// Overwrites one BF16 element of tensor `name` in `dir`/model.safetensors with `bits`.
void plant_bf16(const std::filesystem::path& dir, const std::string& name, size_t index, uint16_t bits) {
  std::fstream f(dir / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_size = 0;
  f.read(reinterpret_cast<char*>(&header_size), 8);
  std::string header(header_size, '\0');
  f.read(header.data(), std::streamsize(header_size));
  const auto entry = nlohmann::json::parse(header).at(name);
  ASSERT_EQ(entry.at("dtype"), "BF16");
  f.seekp(std::streamoff(8 + header_size + entry.at("data_offsets")[0].get<uint64_t>() + 2 * index));
  f.write(reinterpret_cast<const char*>(&bits), 2);
}

TEST(Capi, NanWeightsAreABadModelNamingTheTensor) {
  const mk::test::ScopedTinyChatModel nan_model("api-nan");
  plant_bf16(nan_model.dir, "model.layers.0.mlp.up_proj.weight", 10, 0x7fc0);  // a quiet NaN
  const mk_model_options o = emulator();
  mk_model* model = nullptr;
  char err[512];
  EXPECT_EQ(mk_model_open(nan_model.dir.c_str(), &o, &model, err, sizeof err), MK_ERROR_BAD_MODEL);
  EXPECT_THAT(err, HasSubstr("tensor model.layers.0.mlp.up_proj.weight: element [0, 10] is nan"));
}

struct CancelState {
  mk_session* session;
  std::atomic<int> pieces{0};
};

TEST(Capi, CancelFromAnotherThread) {
  Opened o(/*context=*/4096);
  CancelState state{o.session};
  std::thread canceller([&] {
    while (state.pieces.load() < 3) std::this_thread::yield();
    EXPECT_EQ(mk_session_cancel(state.session), MK_OK);
  });
  mk_generate_params p = params(-1);
  const auto count = [](const char*, size_t, void* user) {
    ++static_cast<CancelState*>(user)->pieces;
    return 0;
  };
  EXPECT_EQ(mk_generate(o.session, "Talk to me", &p, count, &state), MK_OK);
  canceller.join();
  mk_stats s;
  mk_session_stats(o.session, &s);
  EXPECT_EQ(s.last_stop, MK_STOP_CANCELLED);
  EXPECT_LT(s.context_tokens, 4000);
  p = params(3);
  EXPECT_EQ(mk_generate(o.session, "and now?", &p, nullptr, nullptr), MK_OK);
  mk_session_stats(o.session, &s);
  EXPECT_EQ(s.turns, 2);
}

TEST(Capi, CallbackReturningNonZeroStops) {
  Opened o;
  mk_generate_params p = params(-1);
  int calls = 0;
  const auto stop_at_once = [](const char*, size_t, void* user) {
    ++*static_cast<int*>(user);
    return 1;
  };
  ASSERT_EQ(mk_generate(o.session, "Hi", &p, stop_at_once, &calls), MK_OK);
  EXPECT_EQ(calls, 1);
  mk_stats s;
  mk_session_stats(o.session, &s);
  EXPECT_EQ(s.last_stop, MK_STOP_CANCELLED);
}

TEST(Capi, ReenteringTheSessionFromItsCallbackIsBusy) {
  Opened o;
  struct State {
    mk_session* session;
    mk_status generate = MK_OK, reset = MK_OK, stats = MK_ERROR_INTERNAL;
  } state{o.session};
  const auto reenter = [](const char*, size_t, void* user) {
    auto* st = static_cast<State*>(user);
    mk_stats s;
    st->stats = mk_session_stats(st->session, &s);  // allowed from the callback
    st->generate = mk_generate(st->session, "nested", nullptr, nullptr, nullptr);
    st->reset = mk_session_reset(st->session);
    return 1;
  };
  mk_generate_params p = params(4);
  EXPECT_EQ(mk_generate(o.session, "Hi", &p, reenter, &state), MK_OK);
  EXPECT_EQ(state.stats, MK_OK);
  EXPECT_EQ(state.generate, MK_ERROR_BUSY);
  EXPECT_EQ(state.reset, MK_ERROR_BUSY);
  EXPECT_THAT(mk_session_last_error(o.session), HasSubstr("already in use"));
}

TEST(CapiCppWrapper, ModelSessionAndErrors) {
  try {
    monokernel::Model missing("/nonexistent/model");
    FAIL();
  } catch (const monokernel::Error& e) {
    EXPECT_EQ(e.status(), MK_ERROR_NOT_FOUND);
    EXPECT_THAT(e.what(), HasSubstr("does not exist"));
  }
  monokernel::ModelOptions options;
  options.backend = MK_BACKEND_EMULATOR;
  options.context = 256;
  monokernel::Model model(model_dir().string(), options);
  EXPECT_THAT(model.backend_name(), HasSubstr("cpu-emulator"));
  EXPECT_EQ(model.detokenize(model.tokenize("hello, world")), "hello, world");

  monokernel::Session session(model, "Be brief.");
  monokernel::GenerateParams p;
  p.max_tokens = 6;
  std::string streamed;
  const std::string reply = session.generate("Hi", p, [&](std::string_view t) {
    streamed += t;
    return true;
  });
  EXPECT_EQ(reply, streamed);
  EXPECT_EQ(session.stats().turns, 1);
  const std::string stopped = session.generate("More", p, [](std::string_view) { return false; });
  EXPECT_EQ(session.stats().last_stop, MK_STOP_CANCELLED);
  EXPECT_THROW(session.generate(std::string(2000, 'q'), p), monokernel::Error);
  EXPECT_THROW(session.generate("x", p, [](std::string_view) -> bool { throw std::logic_error("mine"); }), std::logic_error);
  session.reset();
  EXPECT_EQ(session.stats().context_tokens, 0);

  // Options: a +100 bias decides every token; records until the callback says stop; its exception
  // comes out of generate_with_options.
  monokernel::GenerateOptions opt;
  opt.params.max_tokens = 8;
  const int32_t forced = model.tokenize("x").at(0);
  opt.logit_bias = {{forced, 100.0f}};
  opt.top_logprobs = 3;
  std::vector<monokernel::TokenLogprobs> records;
  opt.on_logprobs = [&](const monokernel::TokenLogprobs& r) {
    records.push_back(r);
    return records.size() < 3;
  };
  session.generate_with_options({{"user", "Hi"}}, opt);
  ASSERT_GE(records.size(), 3u);
  EXPECT_LE(records.size(), 4u);  // the stop lands at the next token
  for (const auto& r : records) {
    EXPECT_EQ(r.token, forced);
    EXPECT_EQ(r.top_count, 3);
  }
  EXPECT_EQ(session.stats().last_stop, MK_STOP_CANCELLED);
  opt.on_logprobs = [](const monokernel::TokenLogprobs&) -> bool { throw std::logic_error("records"); };
  EXPECT_THROW(session.generate_with_options({{"user", "Hi"}}, opt), std::logic_error);
}

}  // namespace
