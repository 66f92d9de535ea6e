// The HTTP request and response of the API server as plain structs (no Beast): what the listener
// (http_server.hpp) hands to its handler and takes back, what the client (http_client.hpp)
// returns, and what the request codec (request_codec.hpp) reads and writes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace herd::api_http {

// Header fields in the order received. Names compare case-insensitively (RFC 9110 5.1).
class Headers {
 public:
  Headers() = default;
  Headers(std::initializer_list<std::pair<std::string, std::string>> fields) : fields_(fields) {}

  // Appends a field (a name may repeat).
  void Add(std::string name, std::string value) {
    fields_.emplace_back(std::move(name), std::move(value));
  }
  // Replaces every field of this name with one.
  void Set(std::string name, std::string value);
  // The value of the first field of this name.
  std::optional<std::string_view> Get(std::string_view name) const;
  bool Has(std::string_view name) const { return Get(name).has_value(); }

  const std::vector<std::pair<std::string, std::string>>& fields() const { return fields_; }
  bool empty() const { return fields_.empty(); }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

bool EqualsIgnoreCase(std::string_view a, std::string_view b);

struct HttpRequest {
  std::string method;  // "GET", "POST", ... as sent
  std::string target;  // origin form: path and query ("/api/v1/clusters?all=1"), not decoded
  Headers headers;
  std::string body;
  std::string remote_address;  // IP of the peer's socket
  uint16_t remote_port = 0;
};

// The token of an "Authorization: Bearer TOKEN" header (scheme case-insensitive); nullopt when
// the header is missing, of another scheme, or has an empty token.
std::optional<std::string> BearerToken(const Headers& headers);

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  // Sent besides Content-Type, Content-Length and Server (which the listener sets itself).
  Headers headers;
};

}  // namespace herd::api_http
