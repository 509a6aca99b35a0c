#include "host/server/scheduler.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "host/server/stop_filter.h"

namespace mk::server {
namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

const char* endpoint_label(Endpoint e) { return e == Endpoint::Chat ? "chat" : "completion"; }

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Job

Job::Update Job::wait(std::chrono::microseconds timeout) {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return tokens_ != tokens_seen_ || !text_.empty() || done_; });
  tokens_seen_ = tokens_;
  Update u;
  u.text = std::exchange(text_, {});
  u.logprobs = std::exchange(logprobs_, {});
  u.done = done_;
  return u;
}

JobOutcome Job::outcome() const {
  std::lock_guard lock(mutex_);
  return outcome_;
}

void Job::token(std::string_view text, LogprobEntry* entry) {
  {
    std::lock_guard lock(mutex_);
    ++tokens_;
    text_ += text;
    if (entry) logprobs_.push_back(std::move(*entry));
  }
  changed_.notify_all();
}

void Job::release(std::string_view text) {
  if (text.empty()) return;
  {
    std::lock_guard lock(mutex_);
    text_ += text;
  }
  changed_.notify_all();
}

void Job::finish(JobOutcome outcome) {
  {
    std::lock_guard lock(mutex_);
    if (done_) return;
    outcome.total_seconds = seconds(Clock::now() - arrived);
    outcome_ = std::move(outcome);
    done_ = true;
  }
  changed_.notify_all();
}

// ---------------------------------------------------------------------------------------------------
// Scheduler

Scheduler::Scheduler(Session& session, const Tokenizer& tokenizer, size_t capacity, Metrics& metrics)
    : session_(session), tokenizer_(tokenizer), capacity_(capacity), metrics_(metrics), worker_([this] { run(); }) {}

Scheduler::~Scheduler() { stop(); }

Scheduler::Admission Scheduler::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return Admission::Stopping;
    if (queue_.size() >= capacity_) return Admission::QueueFull;
    queue_.push_back(job);
  }
  wake_.notify_one();
  return Admission::Queued;
}

void Scheduler::cancel(const std::shared_ptr<Job>& job) {
  bool dequeued = false;
  {
    std::lock_guard lock(mutex_);
    job->cancelled_ = true;
    if (current_ == job) {
      session_.cancel();  // atomic stores: the backend stops at its next token
    } else if (const auto it = std::find(queue_.begin(), queue_.end(), job); it != queue_.end()) {
      queue_.erase(it);
      dequeued = true;
    }
  }
  if (dequeued) {
    JobOutcome o;
    o.finish_reason = "cancelled";
    o.prompt_tokens = int(job->prompt.size());
    o.queue_seconds = seconds(Clock::now() - job->arrived);
    job->finish(o);
    record(*job, o);
  }
}

void Scheduler::stop() {
  std::deque<std::shared_ptr<Job>> waiting;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    waiting.swap(queue_);
    if (current_) {
      current_->cancelled_ = true;
      session_.cancel();
    }
  }
  wake_.notify_all();
  for (const auto& job : waiting) {
    job->cancelled_ = true;
    JobOutcome o;
    o.finish_reason = "cancelled";
    job->finish(o);
  }
  std::call_once(joined_, [this] { worker_.join(); });
}

QueueState Scheduler::state() const {
  std::lock_guard lock(mutex_);
  return {queue_.size(), capacity_, current_ != nullptr, device_lost_, device_error_};
}

void Scheduler::run() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      current_ = job;
    }
    job->started_ = true;
    generate(*job);
    std::lock_guard lock(mutex_);
    current_.reset();
  }
}

void Scheduler::generate(Job& job) {
  JobOutcome o;
  o.prompt_tokens = int(job.prompt.size());
  const auto start = Clock::now();
  o.queue_seconds = seconds(start - job.arrived);

  StreamingDecoder decoder(tokenizer_);
  StopFilter filter(job.stop);
  bool have_first = false;
  TurnParams params = job.params;
  LogprobEntry entry;  // the next token's, with job.logprobs
  if (job.logprobs) {
    params.on_logprobs = [&](const TokenLogprobs& r) {
      entry.bytes = tokenizer_.token_bytes(r.token);
      entry.logprob = r.logprob;
      entry.top.clear();
      for (int i = 0; i < r.top_count; ++i) entry.top.emplace_back(tokenizer_.token_bytes(r.top_ids[i]), r.top_logprobs[i]);
    };
  }
  const auto on_token = [&](int32_t token) {
    if (!have_first) {
      have_first = true;
      o.first_token_seconds = seconds(Clock::now() - job.arrived);
    }
    ++o.completion_tokens;
    // Repeated on every token: a cancel that raced with the start of the generation is not lost.
    if (job.cancelled()) return session_.cancel();
    // The token that completes a stop string keeps its entry; tokens after it (before the cancel lands) do not.
    const bool counts = job.logprobs && !filter.stopped();
    job.token(filter.push(decoder.push(token)), counts ? &entry : nullptr);
    if (filter.stopped()) session_.cancel();
  };

  try {
    if (job.cancelled()) {
      o.finish_reason = "cancelled";
    } else {
      const CompletionResult r = session_.complete(job.prompt, params, on_token);
      o.cached_tokens = r.cached_tokens;
      o.engine_first_token_seconds = r.stats.first_token_seconds;
      o.decode_tokens_per_second = r.stats.decode_tokens_per_second();
      o.drafted_tokens = r.stats.drafted_tokens;
      o.accepted_tokens = r.stats.accepted_tokens;
      if (!filter.stopped()) {
        job.release(filter.push(decoder.flush()));
        if (!filter.stopped()) job.release(filter.finish());
      }
      if (job.cancelled()) o.finish_reason = "cancelled";
      else if (filter.stopped() || r.stop == StopReason::Eos) o.finish_reason = "stop";
      else if (r.stop == StopReason::MaxTokens || r.stop == StopReason::ContextFull) o.finish_reason = "length";
      else o.finish_reason = "cancelled";  // the server is stopping
    }
  } catch (const std::exception& e) {  // the request was checked before it was queued: a backend failure
    o.finish_reason = "error";
    o.error = e.what();
    if (const auto* engine_error = dynamic_cast<const EngineError*>(&e); engine_error && engine_error->device_lost()) {
      std::lock_guard lock(mutex_);
      device_lost_ = true;
      device_error_ = e.what();
    }
  }
  job.finish(o);
  record(job, o);
}

void Scheduler::record(const Job& job, const JobOutcome& o) {
  GenerationRecord g;
  g.endpoint = endpoint_label(job.endpoint);
  g.finish_reason = o.finish_reason;
  g.prompt_tokens = o.prompt_tokens;
  g.cached_tokens = o.cached_tokens;
  g.completion_tokens = o.completion_tokens;
  g.has_first_token = o.first_token_seconds > 0;
  g.first_token_seconds = o.first_token_seconds;
  g.queue_seconds = o.queue_seconds;
  if (o.completion_tokens > 1 && o.decode_tokens_per_second > 0) {
    g.decode_tokens = o.completion_tokens - 1;
    g.decode_seconds = double(g.decode_tokens) / o.decode_tokens_per_second;
  }
  metrics_.record(g);
}

}  // namespace mk::server
