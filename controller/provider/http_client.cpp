#include "controller/provider/http_client.hpp"

#include <curl/curl.h>

#include <memory>
#include <mutex>

namespace herd::controller {

HttpClient::~HttpClient() = default;

namespace {

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

size_t AppendBody(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

int CaptureHead(CURL*, curl_infotype type, char* data, size_t size, void* user) {
  if (type == CURLINFO_HEADER_OUT) static_cast<std::string*>(user)->append(data, size);
  return 0;
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

}  // namespace

Result<HttpResponse> CurlHttpClient::Send(const HttpRequest& request) {
  GlobalInit();
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (!curl) return Internal("curl_easy_init failed");
  CURL* c = curl.get();
  HttpResponse response;
  char error[CURL_ERROR_SIZE] = {0};

  std::unique_ptr<curl_slist, SlistDeleter> headers;
  auto add_header = [&](const std::string& line) {
    curl_slist* next = curl_slist_append(headers.get(), line.c_str());
    if (next != nullptr) {
      (void)headers.release();
      headers.reset(next);
    }
    return next != nullptr;
  };
  for (const auto& [k, v] : request.headers) {
    if (!add_header(k + ": " + v)) return Internal("curl_slist_append failed");
  }
  std::string sigv4, userpwd;
  if (request.sign) {
    const AwsSigning& s = *request.sign;
    sigv4 = "aws:amz:" + s.region + ":" + s.service;
    userpwd = s.access_key_id + ":" + s.secret_access_key;
    if (!s.amz_date.empty() && !add_header("X-Amz-Date: " + s.amz_date)) {
      return Internal("curl_slist_append failed");
    }
    if (!s.session_token.empty() && !add_header("X-Amz-Security-Token: " + s.session_token)) {
      return Internal("curl_slist_append failed");
    }
  }
  curl_slist* connect_to = nullptr;
  std::unique_ptr<curl_slist, SlistDeleter> connect_to_guard;
  if (!request.connect_to.empty()) {
    connect_to = curl_slist_append(nullptr, request.connect_to.c_str());
    connect_to_guard.reset(connect_to);
  }

  curl_easy_setopt(c, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &AppendBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &response.body);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "herd");
  if (request.method == "POST") {
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, request.body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  } else if (request.method != "GET") {
    return InvalidArgument("unsupported HTTP method " + request.method);
  }
  if (headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  if (request.sign) {
    curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(c, CURLOPT_USERPWD, userpwd.c_str());
  }
  if (connect_to != nullptr) curl_easy_setopt(c, CURLOPT_CONNECT_TO, connect_to);
  if (request.timeout.count() > 0) {
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout.count()));
  }
  if (request.connect_timeout.count() > 0) {
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(request.connect_timeout.count()));
  }
  if (request.capture_request_head) {
    curl_easy_setopt(c, CURLOPT_VERBOSE, 1L);
    curl_easy_setopt(c, CURLOPT_DEBUGFUNCTION, &CaptureHead);
    curl_easy_setopt(c, CURLOPT_DEBUGDATA, &response.request_head);
  }

  CURLcode rc = curl_easy_perform(c);
  if (rc != CURLE_OK) {
    std::string why = error[0] != 0 ? error : curl_easy_strerror(rc);
    return Unavailable(request.method + " " + request.url + ": " + why);
  }
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &response.status);
  return response;
}

}  // namespace herd::controller
