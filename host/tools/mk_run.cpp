// mk-run: the main job. Loads a model (a Hugging Face directory, a --preset shape with random weights on
// the GPU, or by default a small built-in synthetic model), generates, streams the tokens and prints the
// speed. Runs on the GPU monokernel when there is one, on the CPU emulator otherwise.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "device/gpu_backend.h"
#include "host/emulator/emulator.h"
#include "runtime/error.h"
#include "runtime/presets.h"
#include "runtime/synthetic_model.h"

namespace {

mk::DecodeBackend* g_backend = nullptr;
void on_sigint(int) {
  if (g_backend) g_backend->cancel();
}

std::vector<int32_t> parse_tokens(const std::string& text) {
  std::vector<int32_t> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    try {
      out.push_back(std::stoi(text.substr(at, end - at)));
    } catch (const std::exception&) {
      mk::fail("--tokens: '{}' is not a comma-separated list of token ids", text);
    }
    at = end + 1;
  }
  return out;
}

int run(int argc, char** argv) {
  CLI::App app{"monokernel: generate with one persistent GPU kernel (CPU emulator when there is no GPU)"};
  std::string model_dir, preset, tokens_text = "1,2,3,4";
  int n = 64, context = 2048, workgroups = 132;
  bool force_emulator = false, quiet = false;
  mk::SamplingParams sampling;
  app.add_option("-m,--model", model_dir, "Hugging Face model directory (config.json + *.safetensors)");
  app.add_option("--preset", preset, "a real model's shape with random weights, on the GPU: " +
                                         fmt::format("{}", fmt::join(mk::preset_names(), ", ")));
  app.add_option("-t,--tokens", tokens_text, "prompt token ids, comma-separated")->capture_default_str();
  app.add_option("-n,--n-predict", n, "tokens to generate")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("-c,--ctx-size", context, "context (KV cache) size in tokens")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--temp", sampling.temperature, "temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-k", sampling.top_k, "top-k (0: off)")->capture_default_str();
  app.add_option("--top-p", sampling.top_p, "top-p")->capture_default_str();
  app.add_option("--min-p", sampling.min_p, "min-p")->capture_default_str();
  app.add_option("--seed", sampling.seed, "sampling seed")->capture_default_str();
  app.add_flag("--emulator", force_emulator, "run on the CPU emulator even when a GPU is present");
  app.add_option("--workgroups", workgroups, "emulator: virtual workgroups")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_flag("-q,--quiet", quiet, "print only the summary line");
  CLI11_PARSE(app, argc, argv);
  if (!model_dir.empty() && !preset.empty()) mk::fail("give either -m or --preset, not both");

  std::string why_no_gpu;
  const bool use_gpu = !force_emulator && mk::gpu_available(&why_no_gpu);
  std::unique_ptr<mk::Model> model;
  std::filesystem::path synthetic_dir;
  if (!preset.empty()) {
    if (!use_gpu) mk::fail("--preset needs a GPU ({}); use -m with a model directory to run on the emulator",
                           force_emulator ? "--emulator was given" : why_no_gpu);
    model = mk::preset_model(preset);
  } else if (!model_dir.empty()) {
    fmt::print(stderr, "loading {}\n", model_dir);
    model = mk::load_model(model_dir);
  } else {
    // The built-in default: a small synthetic Llama-style model, written once to a temp directory.
    synthetic_dir = mk::synthetic::make_temp_dir("builtin-model");
    mk::synthetic::TinyModelSpec spec;
    spec.hidden = 256, spec.intermediate = 512, spec.layers = 4, spec.heads = 8, spec.kv_heads = 2;
    spec.head_dim = 32, spec.vocab = 1024, spec.eos = {};
    mk::synthetic::write_tiny_model(synthetic_dir, spec);
    model = mk::load_model(synthetic_dir);
    fmt::print(stderr, "model: built-in synthetic Llama-style model ({} layers, hidden {}, vocab {}; random weights)\n",
               spec.layers, spec.hidden, spec.vocab);
  }

  std::unique_ptr<mk::DecodeBackend> backend;
  if (use_gpu) {
    mk::GpuOptions opt;
    opt.context = context;
    opt.random_weights_seed = preset.empty() ? 0 : 1234;
    opt.on_upload_progress = [&](uint64_t done, uint64_t total, double s) {
      if (!quiet)
        fmt::print(stderr, "\ruploading weights: {:.2f} / {:.2f} GB ({:.1f} GB/s)", double(done) / 1e9, double(total) / 1e9,
                   s > 0 ? double(done) / 1e9 / s : 0.0);
    };
    backend = mk::create_gpu_backend(*model, opt);
    if (!quiet && preset.empty()) fmt::print(stderr, "\n");
  } else {
    if (!force_emulator) fmt::print(stderr, "warning: no GPU ({}); running the CPU emulator\n", why_no_gpu);
    mk::EmulatorOptions opt;
    opt.num_workgroups = workgroups;
    opt.context = context;
    opt.check_dependencies = false;
    backend = std::make_unique<mk::Emulator>(*model, opt);
  }
  fmt::print(stderr, "backend: {}\n", backend->name());
  g_backend = backend.get();
  std::signal(SIGINT, on_sigint);

  mk::GenerateRequest req;
  req.input = parse_tokens(tokens_text);
  req.max_new_tokens = n;
  req.sampling = sampling;
  if (!quiet) fmt::print("tokens:");
  const auto result = backend->generate(req, [&](int32_t token) {
    if (!quiet) {
      fmt::print(" {}", token);
      std::fflush(stdout);
    }
  });
  if (!quiet) fmt::print("\n");
  const auto& s = result.stats;
  fmt::print("{} prompt tokens, {} generated ({}), first token {:.2f} ms, {:.2f} ms/token, {:.1f} tok/s [{}]\n",
             s.ingested_tokens, s.generated_tokens, mk::stop_reason_name(result.stop), s.first_token_seconds * 1e3,
             s.decode_tokens_per_second() > 0 ? 1e3 / s.decode_tokens_per_second() : 0.0, s.decode_tokens_per_second(),
             backend->name());
  if (!synthetic_dir.empty()) std::filesystem::remove_all(synthetic_dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const mk::HangError& e) {
    fmt::print(stderr, "mk-run: error: {}\n", e.what());
    if (e.stopped()) return 3;
    // The kernel would not stop: destructors and the GPU runtime's teardown would wait for it forever.
    std::fflush(stderr);
    std::_Exit(3);
  } catch (const mk::Error& e) {
    fmt::print(stderr, "mk-run: error: {}\n", e.what());
    return 1;
  }
}
