// mk-server's HTTP side: the OpenAI-compatible routes over cpp-httplib (third_party/cpp-httplib), API-key
// checks, body limits, server-sent events, and the wiring of requests to the generation queue
// (scheduler.h). docs/server.md describes what a client sees.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "host/engine/engine.h"

namespace mk::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (bind() says which)
  std::string api_key;              // empty: no key needed
  size_t queue_capacity = 16;       // requests that may wait while one generates; one more gets 429
  size_t max_body_bytes = 4 << 20;  // larger request bodies get 413
  std::string model_id;             // what /v1/models lists and responses carry
  TurnParams defaults;              // max_tokens and sampling for the fields a request leaves out
  bool fixed_seed = false;          // true: requests without a seed use defaults.sampling.seed; else a random one
  bool log_requests = true;         // one line per generation and per error on stderr
};

class HttpServer {
 public:
  // Opens a session on `engine` (one KV cache, shared by all requests in turn). `engine` must outlive this.
  HttpServer(Engine& engine, const ServerConfig& config);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; returns the port. Throws mk::Error naming the address when it cannot.
  int bind();
  // Serves until stop(); returns when every connection is done.
  void run();
  // From any thread (not from a signal handler): ends the queue's jobs, then the listener.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mk::server
