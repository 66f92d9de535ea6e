#include "controller/provider/http_client.hpp"

#include <curl/curl.h>
#include <dlfcn.h>

#include <memory>
#include <mutex>
#include <string>
#include <type_traits>

namespace herd::controller {

HttpClient::~HttpClient() = default;

namespace {

// libcurl is loaded on the first request, not linked: the loader would map and relocate its shared
// objects and their dependencies (GnuTLS, Kerberos, LDAP, ... dozens on Debian) at the start of
// every `herd` command, and only the aws provider sends HTTP.
struct Curl {
  decltype(&curl_global_init) global_init = nullptr;
  decltype(&curl_easy_init) easy_init = nullptr;
  decltype(&curl_easy_cleanup) easy_cleanup = nullptr;
  decltype(&curl_easy_setopt) easy_setopt = nullptr;
  decltype(&curl_easy_perform) easy_perform = nullptr;
  decltype(&curl_easy_getinfo) easy_getinfo = nullptr;
  decltype(&curl_easy_strerror) easy_strerror = nullptr;
  decltype(&curl_slist_append) slist_append = nullptr;
  decltype(&curl_slist_free_all) slist_free_all = nullptr;
};

constexpr const char* kCurlLibrary = "libcurl.so.4";

// The loaded library, initialised once; an error names the library and dlerror's reason.
Result<const Curl*> LoadCurl() {
  static Curl curl;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = ::dlopen(kCurlLibrary, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = ::dlerror();
      error = std::string("cannot load ") + kCurlLibrary +
              " (install libcurl4): " + (why != nullptr ? why : "unknown error");
      return;
    }
    bool ok = true;
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
      if (fn == nullptr && ok) {
        ok = false;
        error = std::string(kCurlLibrary) + " has no " + name;
      }
    };
    get(curl.global_init, "curl_global_init");
    get(curl.easy_init, "curl_easy_init");
    get(curl.easy_cleanup, "curl_easy_cleanup");
    get(curl.easy_setopt, "curl_easy_setopt");
    get(curl.easy_perform, "curl_easy_perform");
    get(curl.easy_getinfo, "curl_easy_getinfo");
    get(curl.easy_strerror, "curl_easy_strerror");
    get(curl.slist_append, "curl_slist_append");
    get(curl.slist_free_all, "curl_slist_free_all");
    if (ok) curl.global_init(CURL_GLOBAL_DEFAULT);
  });
  if (!error.empty()) return FailedPrecondition("aws provider: " + error);
  return &curl;
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
  const Curl* api;
  void operator()(CURL* c) const { api->easy_cleanup(c); }
};
struct SlistDeleter {
  const Curl* api;
  void operator()(curl_slist* l) const { api->slist_free_all(l); }
};

}  // namespace

Result<HttpResponse> CurlHttpClient::Send(const HttpRequest& request) {
  HERD_ASSIGN_OR_RETURN(const Curl* api, LoadCurl());
  std::unique_ptr<CURL, CurlDeleter> curl(api->easy_init(), CurlDeleter{api});
  if (!curl) return Internal("curl_easy_init failed");
  CURL* c = curl.get();
  HttpResponse response;
  char error[CURL_ERROR_SIZE] = {0};

  std::unique_ptr<curl_slist, SlistDeleter> headers(nullptr, SlistDeleter{api});
  auto add_header = [&](const std::string& line) {
    curl_slist* next = api->slist_append(headers.get(), line.c_str());
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
  std::unique_ptr<curl_slist, SlistDeleter> connect_to_guard(nullptr, SlistDeleter{api});
  if (!request.connect_to.empty()) {
    connect_to = api->slist_append(nullptr, request.connect_to.c_str());
    connect_to_guard.reset(connect_to);
  }

  api->easy_setopt(c, CURLOPT_URL, request.url.c_str());
  api->easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  api->easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  api->easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  api->easy_setopt(c, CURLOPT_WRITEFUNCTION, &AppendBody);
  api->easy_setopt(c, CURLOPT_WRITEDATA, &response.body);
  api->easy_setopt(c, CURLOPT_USERAGENT, "herd");
  if (request.method == "POST" || request.method == "PUT") {
    api->easy_setopt(c, CURLOPT_POST, 1L);
    api->easy_setopt(c, CURLOPT_POSTFIELDS, request.body.c_str());
    api->easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
    if (request.method == "PUT") api->easy_setopt(c, CURLOPT_CUSTOMREQUEST, "PUT");
  } else if (request.method == "HEAD") {
    api->easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (request.method == "DELETE") {
    api->easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
  } else if (request.method != "GET") {
    return InvalidArgument("unsupported HTTP method " + request.method);
  }
  if (headers) api->easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  if (request.sign) {
    api->easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4.c_str());
    api->easy_setopt(c, CURLOPT_USERPWD, userpwd.c_str());
  }
  if (connect_to != nullptr) api->easy_setopt(c, CURLOPT_CONNECT_TO, connect_to);
  if (request.timeout.count() > 0) {
    api->easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout.count()));
  }
  if (request.connect_timeout.count() > 0) {
    api->easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(request.connect_timeout.count()));
  }
  if (request.capture_request_head) {
    api->easy_setopt(c, CURLOPT_VERBOSE, 1L);
    api->easy_setopt(c, CURLOPT_DEBUGFUNCTION, &CaptureHead);
    api->easy_setopt(c, CURLOPT_DEBUGDATA, &response.request_head);
  }

  CURLcode rc = api->easy_perform(c);
  if (rc != CURLE_OK) {
    std::string why = error[0] != 0 ? error : api->easy_strerror(rc);
    return Unavailable(request.method + " " + request.url + ": " + why);
  }
  api->easy_getinfo(c, CURLINFO_RESPONSE_CODE, &response.status);
  return response;
}

}  // namespace herd::controller
