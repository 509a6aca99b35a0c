// mk-structured-samples: one constrained generation per schema of a schemas file (tests/constraint/
// schemas.jsonl), through the engine on the CPU emulator (or the GPU: --backend gpu), written one JSON
// object a line:
//   {"name", "text", "stop", "tokens"} or {"name", "refused": the error}
// tests/server/structured_output_validity.mjs then checks each text against its schema with ajv (an outside
// validator). The prompt: a few short Python dicts, then "c = " (the shipped model writes Python).
//   mk-structured-samples --model DIR --schemas FILE --out FILE [--temperature 0.8] [--max-tokens 400]
//                         [--prompt TEXT] [--workgroups N] [--shard I/N] [--backend emulator|gpu]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "host/engine/engine.h"

using namespace mk;

int main(int argc, char** argv) {
  std::string model, schemas, out_path;
  float temperature = 0.8f;
  int max_tokens = 400;
  std::string prompt_text = "a = {\"x\": \"ok\", \"y\": \"no\"}\nb = {\"name\": \"ab\", \"n\": 2, \"tags\": [\"x\", \"y\"]}\nc = ";
  int workgroups = EngineOptions{}.emulator_workgroups;
  int shard = 0, shards = 1;  // --shard I/N: the schemas whose line index is I mod N
  BackendChoice backend = BackendChoice::Emulator;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model") model = v;
    else if (a == "--schemas") schemas = v;
    else if (a == "--out") out_path = v;
    else if (a == "--temperature") temperature = std::stof(v);
    else if (a == "--max-tokens") max_tokens = std::stoi(v);
    else if (a == "--prompt") prompt_text = v;
    else if (a == "--workgroups") workgroups = std::stoi(v);
    else if (a == "--backend" && (v == "emulator" || v == "gpu")) backend = v == "gpu" ? BackendChoice::Gpu : BackendChoice::Emulator;
    else if (a == "--shard") {
      shard = std::stoi(v.substr(0, v.find('/')));
      shards = std::stoi(v.substr(v.find('/') + 1));
    }
    else {
      std::cerr << "mk-structured-samples: unknown argument " << a << " " << v << "\n";
      return 2;
    }
  }
  if (model.empty() || schemas.empty() || out_path.empty()) {
    std::cerr << "usage: mk-structured-samples --model DIR --schemas FILE --out FILE [--temperature T] [--max-tokens N]\n";
    return 2;
  }
  try {
    EngineOptions options;
    options.backend = backend;
    options.emulator_workgroups = workgroups;
    auto engine = Engine::open(model, options);
    auto session = engine->create_session();
    const std::vector<int32_t> prompt = engine->tokenizer().encode(prompt_text, true, true);
    std::ifstream in(schemas);
    std::ofstream out(out_path);
    if (!in || !out) fail("cannot open {} or {}", schemas, out_path);
    std::string line;
    int n = 0, index = -1;
    const auto t0 = std::chrono::steady_clock::now();
    while (std::getline(in, line)) {
      if (line.empty() || ++index % shards != shard) continue;
      const auto entry = nlohmann::json::parse(line);
      nlohmann::json record = {{"name", entry["name"]}};
      TurnParams params;
      params.max_tokens = max_tokens;
      params.sampling.temperature = temperature;
      params.sampling.seed = uint64_t(index);
      params.constraint = {constraint::ConstraintSpec::Kind::JsonSchema, entry["schema"].dump()};
      try {
        std::vector<int32_t> tokens;
        const CompletionResult r = session->complete(prompt, params, [&](int32_t t) { tokens.push_back(t); });
        record["text"] = engine->tokenizer().decode(tokens);
        record["stop"] = stop_reason_name(r.stop);
        record["tokens"] = tokens.size();
      } catch (const EngineError& e) {
        record["refused"] = e.what();
      }
      out << record.dump() << "\n";
      if (++n % 100 == 0)
        std::cerr << fmt::format("mk-structured-samples: {} schemas, {:.0f} s\n", n,
                                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "mk-structured-samples: " << e.what() << "\n";
    return 1;
  }
}
