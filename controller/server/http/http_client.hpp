// The blocking client of the API server, for the CLI: one HTTP/1.1 request per connection, over
// TLS (the server's certificate checked against a CA and against the host dialed: DNS name or IP
// address in its subjectAltName) or plain HTTP to a loopback address, with the user's bearer
// token. Only http_client.cpp sees Beast.
//
// Threading: each call runs its own io_context on the calling thread and returns when done; one
// ApiClient may be used by several threads at once (it holds only the endpoint and the TLS
// context, both read-only after Create).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "controller/server/http/http_message.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/status.hpp"

namespace herd::api_http {

struct ApiEndpoint {
  // "https://HOST[:PORT]" (HOST a name or an IP, "[v6]" in brackets; port 443 by default) or
  // "http://LOOPBACK-IP[:PORT]" (port 80 by default); a trailing '/' is ignored.
  std::string url;
  // PEM file of the CA the server's certificate must chain to; empty: the system's trust store.
  std::string ca_cert_file;
  // Sent as "Authorization: Bearer TOKEN" when not empty.
  std::string token;
};

struct ClientResponse {
  int status = 0;
  Headers headers;
  std::string body;  // Stream: empty for a 2xx (its body went to on_chunk)

  bool ok() const { return status >= 200 && status < 300; }
  // OK for a 2xx; otherwise the error the server sent (StatusFromResponse).
  Status ToStatus() const;
};

class ApiClient {
 public:
  // Checks the URL (InvalidArgument: not http(s), plain HTTP to a host that is not a loopback
  // address, a path after the port) and loads the CA file once.
  static Result<std::unique_ptr<ApiClient>> Create(ApiEndpoint endpoint);
  ~ApiClient();
  ApiClient(const ApiClient&) = delete;
  ApiClient& operator=(const ApiClient&) = delete;

  // Sends `method` `path` (origin form, e.g. "/api/v1/clusters?all=1") with `json_body` (when not
  // empty, as application/json) and reads the whole response (at most kApiMaxResponseBytes).
  // `timeout` bounds everything. An HTTP error status is a ClientResponse, not an error; errors
  // are for what kept the exchange from happening: Unavailable (cannot resolve or connect: names
  // the URL), PermissionDenied (the server's certificate was refused: OpenSSL's reason, e.g.
  // "certificate has expired"), DeadlineExceeded, InvalidArgument (a malformed response).
  Result<ClientResponse> Request(std::string_view method, std::string_view path,
                                 std::string_view json_body = {},
                                 limits::Duration timeout = limits::kApiClientTimeout);

  // The same for a streamed response: once a 2xx status arrived, each piece of the body goes to
  // `on_chunk` as it comes (not aligned with the server's Write calls), until the body ends or
  // on_chunk returns false (the connection is then closed, which the server sees). `timeout`
  // bounds the call until the status and headers arrive; the body has no bound. A non-2xx
  // response is read whole into the returned body instead.
  using ChunkFn = std::function<bool(std::string_view chunk)>;
  Result<ClientResponse> Stream(std::string_view method, std::string_view path,
                                std::string_view json_body, const ChunkFn& on_chunk,
                                limits::Duration timeout = limits::kApiClientTimeout);

  const ApiEndpoint& endpoint() const;

 private:
  struct Impl;
  explicit ApiClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace herd::api_http
