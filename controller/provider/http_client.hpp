// HTTP for the cloud providers, behind a small interface so that tests can answer requests
// without a network. The real client is libcurl, which also signs requests with AWS Signature
// Version 4 (CURLOPT_AWS_SIGV4): herd has no signing code of its own.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shared/common/status.hpp"

namespace herd::controller {

// What a request is signed with (SigV4: "AWS4-HMAC-SHA256 Credential=KEY/DATE/REGION/SERVICE").
struct AwsSigning {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // sent as X-Amz-Security-Token (and signed) when not ""
  std::string region;         // "us-east-1"
  std::string service;        // "ec2"
  // "20150830T123600Z" signs with that time (test vectors); "" lets libcurl use the current
  // time. libcurl 7.88 signs with a given X-Amz-Date but then sends that header twice (its own
  // copy and ours), so real requests leave this empty.
  std::string amz_date;
};

struct HttpRequest {
  std::string method = "POST";  // "GET", "POST", "PUT" (body as for POST), "HEAD" or "DELETE"
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;  // sent (and signed) as given
  std::string body;
  std::optional<AwsSigning> sign;
  std::chrono::milliseconds timeout{0};          // whole request; 0 = none
  std::chrono::milliseconds connect_timeout{0};  // 0 = libcurl's default
  // Tests only: "HOST:PORT:ADDR:PORT" connects to ADDR:PORT while the URL (and so the Host header
  // that is signed) keeps HOST:PORT (libcurl's CURLOPT_CONNECT_TO).
  std::string connect_to;
  bool capture_request_head = false;  // fill HttpResponse::request_head
};

struct HttpResponse {
  long status = 0;  // HTTP status code
  std::string body;
  std::string request_head;  // the request line and headers as sent, when asked for
};

class HttpClient {
 public:
  virtual ~HttpClient();
  // A reply of any HTTP status is a response; an error is a request that got no reply (refused,
  // timed out, TLS failure), Unavailable with libcurl's reason and the URL.
  virtual Result<HttpResponse> Send(const HttpRequest& request) = 0;
};

class CurlHttpClient : public HttpClient {
 public:
  Result<HttpResponse> Send(const HttpRequest& request) override;
};

}  // namespace herd::controller
