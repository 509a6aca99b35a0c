#include "host/server/metrics.h"

#include <fmt/format.h>

namespace mk::server {

void Histogram::observe(double seconds) {
  for (size_t i = 0; i < kBounds.size(); ++i)
    if (seconds <= kBounds[i]) ++counts_[i];
  ++count_;
  sum_ += seconds;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  for (size_t i = 0; i < kBounds.size(); ++i) out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, kBounds[i], counts_[i]);
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
}

std::string prometheus_label(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void Metrics::count_http(const std::string& path, int status) {
  std::lock_guard lock(mutex_);
  ++http_[{path, status}];
}

void Metrics::record(const GenerationRecord& g) {
  std::lock_guard lock(mutex_);
  ++generations_[{g.endpoint, g.finish_reason}];
  prompt_tokens_ += uint64_t(g.prompt_tokens);
  cached_tokens_ += uint64_t(g.cached_tokens);
  completion_tokens_ += uint64_t(g.completion_tokens);
  queue_wait_.observe(g.queue_seconds);
  if (g.has_first_token) first_token_.observe(g.first_token_seconds);
  if (g.decode_tokens > 0 && g.decode_seconds > 0) {
    decode_tokens_ += uint64_t(g.decode_tokens);
    decode_seconds_ += g.decode_seconds;
    last_tokens_per_second_ = double(g.decode_tokens) / g.decode_seconds;
  }
}

std::string Metrics::render(const QueueState& queue, const std::string& model, const std::string& backend) const {
  std::lock_guard lock(mutex_);
  std::string out;
  const auto scalar = [&](const char* name, const char* type, const char* help, auto value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
  };
  out += "# HELP mk_info The model and backend this server runs.\n# TYPE mk_info gauge\n";
  out += fmt::format("mk_info{{model=\"{}\",backend=\"{}\"}} 1\n", prometheus_label(model), prometheus_label(backend));

  out += "# HELP mk_http_requests_total HTTP responses by route and status code.\n# TYPE mk_http_requests_total counter\n";
  for (const auto& [key, n] : http_)
    out += fmt::format("mk_http_requests_total{{path=\"{}\",status=\"{}\"}} {}\n", prometheus_label(key.first), key.second, n);
  out += "# HELP mk_generations_total Generations by endpoint and how they ended (cancelled: the client went away).\n"
         "# TYPE mk_generations_total counter\n";
  for (const auto& [key, n] : generations_)
    out += fmt::format("mk_generations_total{{endpoint=\"{}\",finish_reason=\"{}\"}} {}\n", key.first, key.second, n);

  scalar("mk_prompt_tokens_total", "counter", "Prompt tokens of all generations.", prompt_tokens_);
  scalar("mk_prompt_cached_tokens_total", "counter", "Prompt tokens reused from the KV cache (not ingested again).", cached_tokens_);
  scalar("mk_completion_tokens_total", "counter", "Tokens generated.", completion_tokens_);
  scalar("mk_decode_tokens_total", "counter", "Tokens generated after each generation's first.", decode_tokens_);
  scalar("mk_decode_seconds_total", "counter", "Time spent generating the tokens after each generation's first.", decode_seconds_);
  scalar("mk_decode_tokens_per_second", "gauge", "Decode speed of the last generation (tokens after the first).",
         last_tokens_per_second_);
  first_token_.render(out, "mk_time_to_first_token_seconds", "From a request's arrival to its first generated token.");
  queue_wait_.render(out, "mk_queue_wait_seconds", "From a request's arrival to the start of its generation.");
  scalar("mk_queue_length", "gauge", "Requests waiting for the generator.", queue.waiting);
  scalar("mk_queue_capacity", "gauge", "Requests that may wait; one more gets 429.", queue.capacity);
  scalar("mk_generating", "gauge", "1 while a generation runs.", queue.generating ? 1 : 0);
  return out;
}

}  // namespace mk::server
