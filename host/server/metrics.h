// Counters for GET /metrics, in the Prometheus text format (version 0.0.4). Thread-safe.
//
//   mk_http_requests_total{path,status}       every HTTP response, by route and status code
//   mk_generations_total{endpoint,finish_reason}   finish_reason: stop, length, cancelled (client gone), error
//   mk_prompt_tokens_total, mk_prompt_cached_tokens_total, mk_completion_tokens_total
//   mk_decode_tokens_total, mk_decode_seconds_total   tokens after the first and their time: their rate
//                                                     ratio is the decode speed over any window
//   mk_decode_tokens_per_second                      the last generation's decode speed
//   mk_time_to_first_token_seconds (histogram)       from the request's arrival (queue wait included)
//   mk_queue_wait_seconds (histogram)
//   mk_queue_length, mk_queue_capacity, mk_generating   read at scrape time
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace mk::server {

// A cumulative histogram with fixed bucket bounds (seconds).
class Histogram {
 public:
  static constexpr std::array<double, 15> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                     0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 60.0};
  void observe(double seconds);
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::array<uint64_t, kBounds.size()> counts_{};  // observations <= each bound
  uint64_t count_ = 0;
  double sum_ = 0;
};

struct GenerationRecord {
  std::string endpoint;       // "chat" or "completion"
  std::string finish_reason;  // "stop", "length", "cancelled", "error"
  int prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  bool has_first_token = false;
  double first_token_seconds = 0;  // from the request's arrival
  double queue_seconds = 0;
  int decode_tokens = 0;           // tokens after the first
  double decode_seconds = 0;
};

struct QueueState {
  size_t waiting = 0, capacity = 0;
  bool generating = false;
  // A generation failed with the device lost (a hung GPU launch that did not stop): nothing will run
  // until the server is restarted. `device_error` is that failure's message.
  bool device_lost = false;
  std::string device_error;
};

class Metrics {
 public:
  // `path` is one of the server's routes or "other" (kept to a fixed set: a client cannot grow the label
  // space by requesting random paths).
  void count_http(const std::string& path, int status);
  void record(const GenerationRecord& g);
  std::string render(const QueueState& queue, const std::string& model, const std::string& backend) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> http_;
  std::map<std::pair<std::string, std::string>, uint64_t> generations_;
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, completion_tokens_ = 0, decode_tokens_ = 0;
  double decode_seconds_ = 0, last_tokens_per_second_ = 0;
  Histogram first_token_, queue_wait_;
};

// A label value escaped for the text format (backslash, double quote, newline).
std::string prometheus_label(const std::string& value);

}  // namespace mk::server
