// Dumps the GPU monokernel's logits at chosen positions of a token sequence, and a greedy continuation,
// for scripts/gpu_check_real_shapes.py to compare with transformers.
//   gpu_logits_dump MODEL_DIR REQUEST_JSON OUT_JSON
// REQUEST_JSON: {"tokens": [...], "positions": [p0 < p1 < ...], "greedy_steps": N, optionally
// "quantize": "fp8" | "int4", "quantize_head": false and "chunk_tokens": N (GpuOptions::chunk_tokens;
// 0: prompts one token per step)}; logits at position p are those computed after
// feeding tokens[0..p]. The greedy continuation ignores the model's EOS ids: it
// always has greedy_steps tokens, as transformers' generate(eos_token_id=None) that it is compared with.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "device/gpu_backend.h"
#include "runtime/error.h"
#include "runtime/quantize.h"

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
    // Optional: load-time quantization ("fp8" / "int4") and whether it covers the embedding and LM head.
    mk::LoadOptions load;
    const std::string quantize = request.value("quantize", std::string("none"));
    if (quantize == "fp8") load.quantize = mk::MatrixFormat::FP8;
    else if (quantize == "int4") load.quantize = mk::MatrixFormat::INT4;
    else if (quantize != "none") mk::fail("request: quantize must be none, fp8 or int4 (got {})", quantize);
    load.quantize_head = request.value("quantize_head", true);
    auto model = mk::load_model(argv[1], load);
    nlohmann::json out;
    // Optional: "dump": {"matrix": name, "rows": n}: the first n rows of that matrix as the runtime holds
    // it (dequantized by TensorView::at), for comparing a quantizer with another implementation.
    if (request.contains("dump")) {
      const std::string name = request["dump"].at("matrix");
      const int64_t rows = request["dump"].at("rows");
      for (const mk::TensorView* t : mk::weight_matrices(*model)) {
        if (t->name != name && t->name != name.substr(0, name.size() - 6) + "qweight") continue;
        std::vector<float> values;
        for (int64_t i = 0; i < rows * t->shape[1]; ++i) values.push_back(t->at(i));
        out["dump"] = values;
      }
    }
    model->config.eos_token_ids.clear();
    mk::GpuOptions opt;
    opt.context = int(tokens.size()) + greedy_steps + 8;
    opt.chunk_tokens = request.value("chunk_tokens", -1);
    auto gpu = mk::create_gpu_backend(*model, opt);
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
