// The generation queue: one generation at a time (batch 1, the point of the runtime), in arrival order,
// on one engine session. Requests wait in a bounded FIFO; a full queue turns the next one away (429).
// Every request goes through Session::complete, so a prompt that extends what the KV cache holds (a
// conversation that goes on, a shared system prompt) ingests only its new suffix; the sampled tokens do
// not depend on what was reused (sampling draws by position), so nothing of one request shows in another.
//
// Threads: an HTTP thread makes a Job, submits it and then waits on it for text (Job::wait); the worker
// thread runs the generations and releases text into the job as it is generated. Either side may end
// a job early: the HTTP side with Scheduler::cancel (the client went away), the worker when the reply
// is complete.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "host/engine/engine.h"
#include "host/server/metrics.h"
#include "host/server/request.h"

namespace mk::server {

using Clock = std::chrono::steady_clock;

// How a job ended. Valid once Job::wait reports done.
struct JobOutcome {
  std::string finish_reason;  // "stop" (end of turn or a stop string), "length"; "cancelled"; "error"
  std::string error;          // finish_reason "error": what failed
  int prompt_tokens = 0;
  int cached_tokens = 0;      // prompt tokens reused from the KV cache
  int completion_tokens = 0;  // tokens generated (a stop string's included, the end-of-turn token not)
  double queue_seconds = 0;        // arrival -> start of generation
  double first_token_seconds = 0;  // arrival -> first token (0: none)
  double engine_first_token_seconds = 0;  // start of generation -> first token (the backend's own TTFT)
  double decode_tokens_per_second = 0;    // tokens after the first over their time
  int drafted_tokens = 0;                 // speculative decoding: tokens drafted, and of them
  int accepted_tokens = 0;                // those the model's own tokens confirmed
  double total_seconds = 0;               // arrival -> done
};

// A generated token's log-probability and its most likely alternatives, each with its raw bytes.
struct LogprobEntry {
  std::string bytes;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

class Job {
 public:
  // Set before submit, read-only after.
  Endpoint endpoint = Endpoint::Chat;
  std::vector<int32_t> prompt;
  TurnParams params;           // params.top_logprobs counts only with `logprobs`
  bool logprobs = false;       // each token's LogprobEntry goes out with the text
  std::vector<std::string> stop;
  Clock::time_point arrived = Clock::now();

  struct Update {
    std::string text;   // released since the last call (stop strings already cut; may be empty)
    std::vector<LogprobEntry> logprobs;  // with Job::logprobs: the tokens generated since the last call
    bool done = false;  // no more text will come; outcome() is final
  };
  // Waits up to `timeout` for a new token (even one whose text is held back), text, or the end. One
  // waiter per job: the HTTP thread, which checks its client each time it wakes, so on every token.
  Update wait(std::chrono::microseconds timeout);
  JobOutcome outcome() const;
  bool cancelled() const { return cancelled_.load(); }
  bool started() const { return started_.load(); }  // the worker has taken it from the queue

 private:
  friend class Scheduler;
  // One generated token, the text it releases (may be empty) and its log-probabilities (with `logprobs`).
  void token(std::string_view text, LogprobEntry* entry = nullptr);
  void release(std::string_view text);  // text without a token (the held-back tail at the end)
  void finish(JobOutcome outcome);

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::string text_;
  std::vector<LogprobEntry> logprobs_;
  uint64_t tokens_ = 0, tokens_seen_ = 0;  // tokens generated; those the waiter has woken for
  bool done_ = false;
  JobOutcome outcome_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> started_{false};
};

class Scheduler {
 public:
  // `session` and `tokenizer` must outlive the scheduler; `capacity`: how many jobs may wait.
  Scheduler(Session& session, const Tokenizer& tokenizer, size_t capacity, Metrics& metrics);
  ~Scheduler();  // stop()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  enum class Admission { Queued, QueueFull, Stopping };
  Admission submit(const std::shared_ptr<Job>& job);
  // The client went away: a waiting job leaves the queue, a running one stops at the next token. Safe to
  // repeat, and a no-op for a finished job.
  void cancel(const std::shared_ptr<Job>& job);
  // Ends every job (cancelled) and the worker; submit() then answers Stopping.
  void stop();
  QueueState state() const;

 private:
  void run();
  void generate(Job& job);
  void record(const Job& job, const JobOutcome& outcome);

  Session& session_;
  const Tokenizer& tokenizer_;
  const size_t capacity_;
  Metrics& metrics_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::shared_ptr<Job> current_;
  bool stopping_ = false;
  bool device_lost_ = false;  // QueueState::device_lost
  std::string device_error_;
  std::once_flag joined_;
  std::thread worker_;  // last: starts after everything it uses
};

}  // namespace mk::server
