// mk-constraint-bench: how long compiling constraints takes on this machine's CPU, and their device
// tables' bytes (docs/structured_output.md; the target: p50 <= 50 ms, p99 <= 500 ms on Llama 3's 128k
// vocabulary). Each line of the schemas file is {"name", "schema"[, "refused"]}; refused ones must fail.
//   mk-constraint-bench --tokenizer DIR --schemas tests/constraint/schemas.jsonl [--json]
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mk_git_commit.h"
#include "runtime/token_automaton.h"
#include "runtime/token_vocabulary.h"
#include "runtime/tokenizer.h"

using namespace mk;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string tokenizer_dir, schemas_path;
  bool as_json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tokenizer" && i + 1 < argc) tokenizer_dir = argv[++i];
    else if (a == "--schemas" && i + 1 < argc) schemas_path = argv[++i];
    else if (a == "--json") as_json = true;
    else {
      std::cerr << "usage: mk-constraint-bench --tokenizer DIR --schemas FILE [--json]\n";
      return 2;
    }
  }
  if (tokenizer_dir.empty() || schemas_path.empty()) {
    std::cerr << "usage: mk-constraint-bench --tokenizer DIR --schemas FILE [--json]\n";
    return 2;
  }
  try {
    const Tokenizer tok = Tokenizer::load(tokenizer_dir);
    auto t0 = Clock::now();
    const auto vocab = constraint::token_vocabulary(tok, int(tok.vocab_size()), tok.eos_ids());
    const double vocab_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::ifstream in(schemas_path);
    if (!in) fail("{}: cannot open file", schemas_path);
    std::vector<double> ms;
    std::vector<size_t> bytes;
    std::vector<int> states;
    std::vector<double> bounds;  // the tokens a reply is sure to end complete within (docs/structured_output.md)
    int no_bound = 0;
    std::string line, slowest;
    double slowest_ms = 0;
    int refused = 0, failures = 0;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      const auto entry = nlohmann::json::parse(line);
      const constraint::ConstraintSpec spec{constraint::ConstraintSpec::Kind::JsonSchema, entry["schema"].dump()};
      const bool must_refuse = entry.contains("refused");
      t0 = Clock::now();
      try {
        const auto a = constraint::compile_token_constraint(spec, vocab, "json_schema");
        const double t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        ms.push_back(t);
        bytes.push_back(a->device_bytes());
        states.push_back(a->token_states());
        if (a->closes_within_budget) bounds.push_back(a->completion_bound[size_t(a->dfa.start)]);
        else ++no_bound;
        if (t > slowest_ms) slowest_ms = t, slowest = entry["name"].get<std::string>();
        if (must_refuse) ++failures, std::cerr << entry["name"].get<std::string>() << ": compiled, but should be refused\n";
      } catch (const constraint::ConstraintError& e) {
        if (must_refuse) ++refused;
        else ++failures, std::cerr << entry["name"].get<std::string>() << ": " << e.what() << "\n";
      }
    }
    if (ms.empty()) fail("{}: no schema compiled", schemas_path);
    const auto pct = [](std::vector<double> v, double p) {
      std::sort(v.begin(), v.end());
      return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
    };
    std::vector<double> mib(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) mib[i] = double(bytes[i]) / double(1 << 20);
    std::vector<double> st(states.begin(), states.end());
    if (bounds.empty()) bounds.push_back(0);
    nlohmann::json r = {{"commit", MK_GIT_COMMIT},
                        {"tokenizer", tokenizer_dir},
                        {"vocab", vocab->size()},
                        {"vocabulary_ms", vocab_ms},
                        {"schemas", ms.size()},
                        {"refused_as_expected", refused},
                        {"failures", failures},
                        {"compile_ms", {{"p50", pct(ms, 0.5)}, {"p90", pct(ms, 0.9)}, {"p99", pct(ms, 0.99)}, {"max", slowest_ms}, {"slowest", slowest}}},
                        {"table_mib", {{"p50", pct(mib, 0.5)}, {"p99", pct(mib, 0.99)}, {"max", pct(mib, 1.0)}}},
                        {"token_states", {{"p50", pct(st, 0.5)}, {"p99", pct(st, 0.99)}, {"max", pct(st, 1.0)}}},
                        {"completion_bound_tokens", {{"p50", pct(bounds, 0.5)}, {"p99", pct(bounds, 0.99)}, {"max", pct(bounds, 1.0)}}},
                        {"without_closing_sets", no_bound}};
    if (as_json) std::cout << r.dump(2) << "\n";
    else
      std::cout << fmt::format("{} schemas on a {}-token vocabulary: compile p50 {:.1f} ms, p90 {:.1f} ms, p99 {:.1f} ms, max {:.1f} ms ({}); "
                               "tables p50 {:.2f} MiB, max {:.2f} MiB; complete within p50 {:.0f}, max {:.0f} tokens ({} "
                               "without closing sets); {} refused as expected, {} failures\n",
                               ms.size(), vocab->size(), pct(ms, 0.5), pct(ms, 0.9), pct(ms, 0.99), slowest_ms, slowest, pct(mib, 0.5),
                               pct(mib, 1.0), pct(bounds, 0.5), pct(bounds, 1.0), no_bound, refused, failures);
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "mk-constraint-bench: " << e.what() << "\n";
    return 1;
  }
}
