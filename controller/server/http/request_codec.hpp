// Decoding of API requests without Beast (it compiles fast and is fuzzed: tests/fuzz/
// api_request_fuzz.cpp): JSON bodies checked against a declared set of fields, resource names,
// request targets split into decoded path segments and query parameters, and the mapping of a
// herd Status onto an HTTP error response. Every refusal is an InvalidArgument Status that names
// the field or the part of the target at fault, for a 400 through HttpError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "controller/server/http/http_message.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/status.hpp"

namespace herd::api_http {

// ---- JSON bodies ----

enum class FieldType {
  kString,      // a JSON string
  kInt,         // a JSON integer that fits int64 (no fraction, no exponent form of a float)
  kBool,        // true or false
  kStringList,  // an array of strings
  kStringMap,   // an object whose values are all strings
  kObject,      // any object (decoded further by the caller); its strings are checked for NUL
};
std::string_view FieldTypeName(FieldType type);

struct FieldSpec {
  std::string_view name;
  FieldType type = FieldType::kString;
  bool required = false;
};
using Schema = std::span<const FieldSpec>;

// A body that passed DecodeBody: every field present is declared and of its declared type, so
// the accessors only choose between the value and the default of an absent (or null) field.
// Asking for a field as another type than declared gives the default.
class DecodedBody {
 public:
  DecodedBody() = default;
  explicit DecodedBody(boost::json::object object) : object_(std::move(object)) {}

  // Present and not null.
  bool Has(std::string_view name) const;
  std::string String(std::string_view name, std::string_view fallback = {}) const;
  int64_t Int(std::string_view name, int64_t fallback = 0) const;
  bool Bool(std::string_view name, bool fallback = false) const;
  std::vector<std::string> StringList(std::string_view name) const;
  std::map<std::string, std::string> StringMap(std::string_view name) const;
  // The object of a kObject field; nullptr when absent.
  const boost::json::object* Object(std::string_view name) const;
  const boost::json::object& object() const { return object_; }

 private:
  boost::json::object object_;
};

// Parses `body` as one JSON object and checks it against `schema`: unknown fields, missing
// required fields, wrong types, strings (keys included, at any depth) holding a NUL byte, nesting
// deeper than kMaxJsonDepth and a body over `max_bytes` are refused. An empty body is an empty
// object. A field given as null counts as absent.
inline constexpr std::size_t kMaxJsonDepth = 32;
Result<DecodedBody> DecodeBody(std::string_view body, Schema schema,
                               std::size_t max_bytes = limits::kApiMaxBodyBytes);
Result<DecodedBody> DecodeBody(std::string_view body, std::initializer_list<FieldSpec> schema,
                               std::size_t max_bytes = limits::kApiMaxBodyBytes);

// ---- Names ----

// A resource name in a request (a user, a job name, a token's name): 1 to kApiMaxNameBytes
// characters of A-Z, a-z, 0-9, '-', '_' and '.', starting with a letter or digit, without "..".
// So a name is safe in a path segment, a file name, a log line and a shell word. The error names
// `field` and the offending character (quotes, ';', '/', whitespace, NUL and other control bytes
// are shown by name, not printed).
Status ValidateName(std::string_view field, std::string_view value);
// A cluster name: ValidateName and herd's own rule for cluster names (controller/state
// ValidateClusterName: lowercase, starting with a letter, at most 40), so the API accepts exactly
// the clusters the CLI can make.
Status ValidateClusterNameField(std::string_view field, std::string_view value);

// ---- Targets ----

// A request target split for routing: "/api/v1/clusters/a%2Db/jobs/7?follow=1&tail=10" gives
// segments {"api", "v1", "clusters", "a-b", "jobs", "7"} and query {{"follow", "1"}, {"tail",
// "10"}}. Segments and query names and values are percent-decoded ('+' is a space in the query).
struct Target {
  std::vector<std::string> segments;
  std::vector<std::pair<std::string, std::string>> query;

  // The value of the first query parameter of this name.
  std::optional<std::string_view> Query(std::string_view name) const;
  // Whether the segments match `pattern`, where a pattern segment starting with ':' matches any
  // one segment and is captured (in order) into `captures` when given.
  bool Match(std::initializer_list<std::string_view> pattern,
             std::vector<std::string>* captures = nullptr) const;
};

// Refuses (InvalidArgument naming the part): a target not starting with '/', a fragment, a bad
// or NUL-decoding percent escape, an encoded '/' in a segment, an empty segment inside the path
// ("//"), a "." or ".." segment (raw or encoded), and control bytes. A single trailing '/' is
// ignored.
Result<Target> ParseTarget(std::string_view target);

// A path segment or query value that must be a non-negative integer (a job id); the error names
// `field`.
Result<int64_t> ParseId(std::string_view field, std::string_view text);

// ---- Errors ----

// Authentication failures are PermissionDenied with this prefix: HttpError answers them 401 with
// "WWW-Authenticate: Bearer" and code "UNAUTHENTICATED" (no or unknown token), and every other
// PermissionDenied 403 (a known user not allowed to do this).
inline constexpr std::string_view kUnauthenticatedPrefix = "unauthenticated: ";
Status Unauthenticated(std::string why);

// HTTP status of a herd Status code: InvalidArgument 400, PermissionDenied 401/403 (above),
// NotFound 404, AlreadyExists 409, FailedPrecondition 409, DeadlineExceeded 504, Unavailable 503,
// anything else 500.
int HttpStatusOf(const Status& status);
// A JSON error response {"error": message, "code": CodeName (or "UNAUTHENTICATED")} with the
// status of HttpStatusOf. `status` must not be OK.
HttpResponse HttpError(const Status& status);
// The Status an error response stands for, for the client: the code from the body's "code"
// (or, for a body that is not such JSON, from the HTTP status) and the message from its "error"
// (or the body's first line, cut).
Status StatusFromResponse(int http_status, std::string_view body);

// `text` for an error message: at most `max` bytes, control and non-ASCII bytes as \xNN.
std::string Printable(std::string_view text, std::size_t max = 80);

}  // namespace herd::api_http
