// A tiny model directory that a test writes tensor by tensor in some checkpoint form (fp8, AWQ, GPTQ...),
// edits and loads: the scaffolding the checkpoint-form tests share. Each test's own struct derives from
// it and adds what it drew and how it writes its files.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/model.h"
#include "tests/helpers/error_of.h"
#include "tests/helpers/tiny_model.h"

namespace mk::test {

struct CheckpointDir {
  std::filesystem::path dir;
  std::vector<TensorBytes> tensors;                        // as written
  std::shared_ptr<const std::filesystem::path> cleanup;  // removes the directory when the last copy goes

  // A fresh temporary directory named after `tag`, removed with the last copy of this object.
  void make_dir(const std::string& tag) {
    dir = make_temp_dir(tag);
    cleanup = std::shared_ptr<const std::filesystem::path>(new std::filesystem::path(dir), [](const std::filesystem::path* p) {
      std::error_code ec;
      std::filesystem::remove_all(*p, ec);
      delete p;
    });
  }
  TensorBytes& tensor(const std::string& name) {
    for (auto& t : tensors)
      if (t.name == name) return t;
    throw std::runtime_error("no tensor " + name);
  }
  void erase(const std::string& name) {
    tensors.erase(std::remove_if(tensors.begin(), tensors.end(), [&](const auto& t) { return t.name == name; }), tensors.end());
  }
  nlohmann::json config() const { return nlohmann::json::parse(std::ifstream(dir / "config.json")); }
  void set_config(const nlohmann::json& j) const { std::ofstream(dir / "config.json") << j.dump(2); }
  nlohmann::json quantization_config() const { return config()["quantization_config"]; }
  void set_quantization_config(const nlohmann::json& q) const {
    nlohmann::json j = config();
    j["quantization_config"] = q;
    set_config(j);
  }
  std::unique_ptr<Model> load(const LoadOptions& options = {}) const { return load_model(dir, options); }
  std::string load_error() const {
    return error_of([&] { load(); });
  }
  std::string file() const { return (dir / "model.safetensors").string(); }
};

// Whether `name` is the X.weight of one of a layer's linear modules (q/k/v/o, gate/up/down).
inline bool is_linear_weight(const std::string& name) {
  for (const char* m : {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
    if (name.find(std::string(m) + ".weight") != std::string::npos) return true;
  return false;
}

// "X" of "X.weight".
inline std::string module_of(const std::string& weight) { return weight.substr(0, weight.size() - std::string(".weight").size()); }

}  // namespace mk::test
