// Dumps the GPU monokernel's logits at chosen positions of a token sequence, and a greedy continuation,
// for scripts/gpu_check_real_shapes.py to compare with transformers.
//   gpu_logits_dump MODEL_DIR REQUEST_JSON OUT_JSON
// REQUEST_JSON: {"tokens": [...], "positions": [p0 < p1 < ...], "greedy_steps": N}; logits at position p
// are those computed after feeding tokens[0..p]. The greedy continuation ignores the model's EOS ids: it
// always has greedy_steps tokens, as transformers' generate(eos_token_id=None) that it is compared with.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "device/gpu_backend.h"
#include "runtime/error.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    fmt::print(stderr, "usage: gpu_logits_dump MODEL_DIR REQUEST_JSON OUT_JSON\n");
    return 2;
  }
  try {
    const auto request = nlohmann::json::parse(std::ifstream(argv[2]));
    const auto tokens = request.at("tokens").get<std::vector<int32_t>>();
    const auto positions = request.at("positions").get<std::vector<int>>();
    const int greedy_steps = request.at("greedy_steps").get<int>();
    auto model = mk::load_model(argv[1]);
    model->config.eos_token_ids.clear();
    mk::GpuOptions opt;
    opt.context = int(tokens.size()) + greedy_steps + 8;
    auto gpu = mk::create_gpu_backend(*model, opt);
    nlohmann::json out;
    out["device"] = gpu->info().name;
    int fed = 0;
    for (int p : positions) {
      if (p < fed || p >= int(tokens.size())) mk::fail("positions must ascend and lie inside the tokens (got {})", p);
      mk::GenerateRequest req;
      req.input.assign(tokens.begin() + fed, tokens.begin() + p + 1);
      req.max_new_tokens = 0;  // ingest only: the logits of the last token stay in the buffer
      gpu->generate(req, {});
      fed = p + 1;
      out["positions"].push_back(p);
      out["logits"].push_back(gpu->last_logits());
      fmt::print(stderr, "position {} done\n", p);
    }
    gpu->reset();
    mk::GenerateRequest req;
    req.input = tokens;
    req.max_new_tokens = greedy_steps;
    const auto result = gpu->generate(req, {});
    out["greedy_tokens"] = result.tokens;
    std::ofstream(argv[3]) << out.dump();
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "gpu_logits_dump: error: {}\n", e.what());
    return 1;
  }
}
