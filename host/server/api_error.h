// Errors a client gets back, in OpenAI's form with its HTTP status:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "temperature", "code": null}}
// Client libraries map the status to an exception class (400 BadRequestError, 401 AuthenticationError,
// 429 RateLimitError, ...) and show the message, so the message names the field and the limit.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace mk::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, const std::string& message, std::string param = {}, std::string code = {})
      : std::runtime_error(message), status_(status), type_(std::move(type)), param_(std::move(param)),
        code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }  // the request field at fault; empty: none
  const std::string& code() const { return code_; }    // a machine-readable reason; empty: none

  nlohmann::json to_json() const {
    const auto or_null = [](const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
    return {{"error", {{"message", what()}, {"type", type_}, {"param", or_null(param_)}, {"code", or_null(code_)}}}};
  }

 private:
  int status_;
  std::string type_, param_, code_;
};

// 400: the request is malformed or asks for something this server cannot do.
inline ApiError invalid_request(const std::string& message, std::string param = {}, std::string code = {}) {
  return ApiError(400, "invalid_request_error", message, std::move(param), std::move(code));
}

}  // namespace mk::server
