#include "controller/server/http/request_codec.hpp"

#include <charconv>
#include <exception>

#include <boost/json.hpp>

#include "controller/state/herd_home.hpp"

namespace herd::api_http {
namespace json = boost::json;

namespace {

// The first NUL-holding string in `value` (keys and values, at any depth), as a path for the
// error ("name", "env.KEY", "args[2]"); nullopt when there is none.
std::optional<std::string> FindNul(const json::value& value, const std::string& path) {
  switch (value.kind()) {
    case json::kind::string:
      if (value.get_string().find('\0') != json::string::npos) return path;
      return std::nullopt;
    case json::kind::array: {
      const json::array& array = value.get_array();
      for (std::size_t i = 0; i < array.size(); ++i) {
        if (auto found = FindNul(array[i], path + "[" + std::to_string(i) + "]")) return found;
      }
      return std::nullopt;
    }
    case json::kind::object:
      for (const auto& kv : value.get_object()) {
        std::string child = path + "." + Printable(kv.key(), 40);
        if (kv.key().find('\0') != std::string_view::npos) return child + " (its name)";
        if (auto found = FindNul(kv.value(), child)) return found;
      }
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

Status WrongType(const FieldSpec& spec, std::string_view detail = {}) {
  std::string msg =
      "field '" + std::string(spec.name) + "' must be " + std::string(FieldTypeName(spec.type));
  if (!detail.empty()) msg += " (" + std::string(detail) + ")";
  return InvalidArgument(std::move(msg));
}

Status CheckType(const FieldSpec& spec, const json::value& value) {
  switch (spec.type) {
    case FieldType::kString:
      return value.is_string() ? Status::Ok() : WrongType(spec);
    case FieldType::kInt:
      if (value.is_int64()) return Status::Ok();
      if (value.is_uint64()) return WrongType(spec, "out of range");
      return WrongType(spec);
    case FieldType::kBool:
      return value.is_bool() ? Status::Ok() : WrongType(spec);
    case FieldType::kStringList:
      if (!value.is_array()) return WrongType(spec);
      for (std::size_t i = 0; i < value.get_array().size(); ++i) {
        if (!value.get_array()[i].is_string()) {
          return WrongType(spec, "item " + std::to_string(i) + " is not a string");
        }
      }
      return Status::Ok();
    case FieldType::kStringMap:
      if (!value.is_object()) return WrongType(spec);
      for (const auto& kv : value.get_object()) {
        if (!kv.value().is_string()) {
          return WrongType(spec, "the value of '" + Printable(kv.key(), 40) + "' is not a string");
        }
      }
      return Status::Ok();
    case FieldType::kObject:
      return value.is_object() ? Status::Ok() : WrongType(spec);
  }
  return WrongType(spec);
}

// Why character `c` may not be in a name, for the message.
std::string DescribeChar(char c) {
  switch (c) {
    case '\0':
      return "a NUL byte";
    case ' ':
      return "a space";
    case '\t':
    case '\n':
    case '\r':
    case '\v':
    case '\f':
      return "whitespace";
    case '"':
    case '\'':
    case '`':
      return "a quote";
    default:
      break;
  }
  auto u = static_cast<unsigned char>(c);
  if (u < 0x20 || u >= 0x7f) return "a control or non-ASCII byte";
  return std::string("'") + c + "'";
}

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes `text` (and '+' as a space when `plus_is_space`); `what` names it in errors.
Result<std::string> Decode(std::string_view text, bool plus_is_space, std::string_view what) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      int hi = i + 2 < text.size() ? Hex(text[i + 1]) : -1;
      int lo = hi >= 0 ? Hex(text[i + 2]) : -1;
      if (hi < 0 || lo < 0) {
        return InvalidArgument(std::string(what) + ": bad percent escape in '" + Printable(text) +
                               "'");
      }
      c = static_cast<char>(hi * 16 + lo);
      if (c == '\0') return InvalidArgument(std::string(what) + ": encoded NUL byte");
      i += 2;
    } else if (c == '+' && plus_is_space) {
      c = ' ';
    }
    out += c;
  }
  return out;
}

}  // namespace

std::string Printable(std::string_view text, std::size_t max) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    auto u = static_cast<unsigned char>(text[i]);
    if (u < 0x20 || u >= 0x7f || u == '\\') {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    } else {
      out += static_cast<char>(u);
    }
  }
  return out;
}

std::string_view FieldTypeName(FieldType type) {
  switch (type) {
    case FieldType::kString:
      return "a string";
    case FieldType::kInt:
      return "an integer";
    case FieldType::kBool:
      return "true or false";
    case FieldType::kStringList:
      return "a list of strings";
    case FieldType::kStringMap:
      return "an object of strings";
    case FieldType::kObject:
      return "an object";
  }
  return "?";
}

// ---- DecodedBody ----

bool DecodedBody::Has(std::string_view name) const {
  const json::value* v = object_.if_contains(name);
  return v != nullptr && !v->is_null();
}

std::string DecodedBody::String(std::string_view name, std::string_view fallback) const {
  const json::value* v = object_.if_contains(name);
  if (v == nullptr || !v->is_string()) return std::string(fallback);
  return std::string(v->get_string());
}

int64_t DecodedBody::Int(std::string_view name, int64_t fallback) const {
  const json::value* v = object_.if_contains(name);
  return v != nullptr && v->is_int64() ? v->get_int64() : fallback;
}

bool DecodedBody::Bool(std::string_view name, bool fallback) const {
  const json::value* v = object_.if_contains(name);
  return v != nullptr && v->is_bool() ? v->get_bool() : fallback;
}

std::vector<std::string> DecodedBody::StringList(std::string_view name) const {
  std::vector<std::string> out;
  const json::value* v = object_.if_contains(name);
  if (v == nullptr || !v->is_array()) return out;
  for (const json::value& item : v->get_array()) {
    if (item.is_string()) out.emplace_back(item.get_string());
  }
  return out;
}

std::map<std::string, std::string> DecodedBody::StringMap(std::string_view name) const {
  std::map<std::string, std::string> out;
  const json::value* v = object_.if_contains(name);
  if (v == nullptr || !v->is_object()) return out;
  for (const auto& kv : v->get_object()) {
    if (kv.value().is_string()) out.emplace(std::string(kv.key()), kv.value().get_string());
  }
  return out;
}

const json::object* DecodedBody::Object(std::string_view name) const {
  const json::value* v = object_.if_contains(name);
  return v != nullptr && v->is_object() ? &v->get_object() : nullptr;
}

// ---- DecodeBody ----

Result<DecodedBody> DecodeBody(std::string_view body, Schema schema, std::size_t max_bytes) {
  if (body.size() > max_bytes) {
    return InvalidArgument("request body of " + std::to_string(body.size()) +
                           " bytes is over the limit of " + std::to_string(max_bytes));
  }
  std::size_t first = body.find_first_not_of(" \t\r\n");
  json::value parsed;
  if (first == std::string_view::npos) {
    parsed = json::object();
  } else {
    json::parse_options options;
    options.max_depth = kMaxJsonDepth;
    boost::system::error_code ec;
    try {
      parsed = json::parse(body, ec, {}, options);
    } catch (const std::exception& e) {  // allocation failures only; parse errors go to ec
      return InvalidArgument(std::string("request body is not JSON: ") + e.what());
    }
    if (ec) return InvalidArgument("request body is not JSON: " + ec.message());
  }
  if (!parsed.is_object()) return InvalidArgument("request body must be a JSON object");
  json::object& object = parsed.get_object();
  for (const auto& kv : object) {
    bool known = false;
    for (const FieldSpec& spec : schema) known = known || spec.name == kv.key();
    if (!known) return InvalidArgument("unknown field '" + Printable(kv.key(), 40) + "'");
  }
  for (const FieldSpec& spec : schema) {
    const json::value* value = object.if_contains(spec.name);
    if (value == nullptr || value->is_null()) {
      if (spec.required) return InvalidArgument("missing field '" + std::string(spec.name) + "'");
      continue;
    }
    HERD_RETURN_IF_ERROR(CheckType(spec, *value));
    if (auto where = FindNul(*value, std::string(spec.name))) {
      return InvalidArgument("field '" + *where + "' holds a NUL byte");
    }
  }
  return DecodedBody(std::move(object));
}

Result<DecodedBody> DecodeBody(std::string_view body, std::initializer_list<FieldSpec> schema,
                               std::size_t max_bytes) {
  return DecodeBody(body, Schema(schema.begin(), schema.size()), max_bytes);
}

// ---- Names ----

Status ValidateName(std::string_view field, std::string_view value) {
  auto fail = [&](const std::string& why) {
    return InvalidArgument("invalid " + std::string(field) + " '" + Printable(value, 70) + "': " +
                           why + "; a name is 1 to " + std::to_string(limits::kApiMaxNameBytes) +
                           " characters of A-Z, a-z, 0-9, '-', '_' and '.', starting with a "
                           "letter or digit");
  };
  if (value.empty()) return fail("it is empty");
  if (value.size() > limits::kApiMaxNameBytes) {
    return fail("it has " + std::to_string(value.size()) + " characters");
  }
  for (char c : value) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) return fail("it contains " + DescribeChar(c));
  }
  char c = value.front();
  if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) {
    return fail("it starts with " + DescribeChar(c));
  }
  if (value.find("..") != std::string_view::npos) return fail("it contains '..'");
  return Status::Ok();
}

Status ValidateClusterNameField(std::string_view field, std::string_view value) {
  HERD_RETURN_IF_ERROR(ValidateName(field, value));
  return controller::ValidateClusterName(value).WithContext(field);
}

// ---- Targets ----

std::optional<std::string_view> Target::Query(std::string_view name) const {
  for (const auto& [key, value] : query) {
    if (key == name) return std::string_view(value);
  }
  return std::nullopt;
}

bool Target::Match(std::initializer_list<std::string_view> pattern,
                   std::vector<std::string>* captures) const {
  if (pattern.size() != segments.size()) return false;
  std::size_t i = 0;
  for (std::string_view want : pattern) {
    if (!want.starts_with(':') && want != segments[i]) return false;
    ++i;
  }
  if (captures != nullptr) {
    captures->clear();
    i = 0;
    for (std::string_view want : pattern) {
      if (want.starts_with(':')) captures->push_back(segments[i]);
      ++i;
    }
  }
  return true;
}

Result<Target> ParseTarget(std::string_view target) {
  if (target.empty() || target.front() != '/') {
    return InvalidArgument("request target '" + Printable(target) + "' does not start with '/'");
  }
  for (char c : target) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) {
      return InvalidArgument("request target holds a space or control byte");
    }
  }
  if (target.find('#') != std::string_view::npos) {
    return InvalidArgument("request target holds a fragment ('#')");
  }
  Target out;
  std::size_t q = target.find('?');
  std::string_view path = target.substr(0, q);
  std::string_view query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);

  path.remove_prefix(1);
  if (!path.empty() && path.back() == '/') path.remove_suffix(1);
  while (!path.empty()) {
    std::size_t slash = path.find('/');
    std::string_view raw = path.substr(0, slash);
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
    if (raw.empty()) return InvalidArgument("request path holds an empty segment ('//')");
    HERD_ASSIGN_OR_RETURN(std::string segment, Decode(raw, false, "request path"));
    if (segment == "." || segment == "..") {
      return InvalidArgument("request path holds a '" + segment + "' segment");
    }
    if (segment.find('/') != std::string::npos) {
      return InvalidArgument("request path segment '" + Printable(raw) + "' holds an encoded '/'");
    }
    out.segments.push_back(std::move(segment));
    if (slash != std::string_view::npos && path.empty()) {
      return InvalidArgument("request path holds an empty segment ('//')");
    }
  }

  while (!query.empty()) {
    std::size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    std::size_t eq = pair.find('=');
    HERD_ASSIGN_OR_RETURN(std::string name, Decode(pair.substr(0, eq), true, "query"));
    std::string value;
    if (eq != std::string_view::npos) {
      HERD_ASSIGN_OR_RETURN(value, Decode(pair.substr(eq + 1), true,
                                          "query parameter '" + Printable(name, 40) + "'"));
    }
    if (name.empty()) return InvalidArgument("query parameter without a name");
    out.query.emplace_back(std::move(name), std::move(value));
  }
  return out;
}

Result<int64_t> ParseId(std::string_view field, std::string_view text) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < 0 ||
      text.front() == '+' || text.front() == '-') {
    return InvalidArgument("invalid " + std::string(field) + " '" + Printable(text, 40) +
                           "': not a non-negative integer");
  }
  return value;
}

// ---- Errors ----

Status Unauthenticated(std::string why) {
  return PermissionDenied(std::string(kUnauthenticatedPrefix) + why);
}

namespace {
bool IsUnauthenticated(const Status& status) {
  return status.code() == Code::kPermissionDenied &&
         std::string_view(status.message()).starts_with(kUnauthenticatedPrefix);
}
}  // namespace

int HttpStatusOf(const Status& status) {
  switch (status.code()) {
    case Code::kOk:
      return 200;
    case Code::kInvalidArgument:
      return 400;
    case Code::kPermissionDenied:
      return IsUnauthenticated(status) ? 401 : 403;
    case Code::kNotFound:
      return 404;
    case Code::kAlreadyExists:
    case Code::kFailedPrecondition:
      return 409;
    case Code::kUnavailable:
      return 503;
    case Code::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

HttpResponse HttpError(const Status& status) {
  HttpResponse response;
  response.status = HttpStatusOf(status);
  if (response.status < 400) response.status = 500;  // an OK status is no error: a bug
  json::object body;
  body["error"] = status.ok() ? std::string("internal error: an error response without an error")
                              : status.message();
  body["code"] = IsUnauthenticated(status)
                     ? std::string_view("UNAUTHENTICATED")
                     : CodeName(status.ok() ? Code::kInternal : status.code());
  response.body = json::serialize(body);
  if (response.status == 401) response.headers.Add("WWW-Authenticate", "Bearer");
  return response;
}

Status StatusFromResponse(int http_status, std::string_view body) {
  std::string message;
  std::optional<Code> code;
  boost::system::error_code ec;
  json::value parsed;
  try {
    parsed = json::parse(body, ec);
  } catch (const std::exception&) {
    ec = make_error_code(json::error::syntax);
  }
  if (!ec && parsed.is_object()) {
    const json::object& object = parsed.get_object();
    if (const json::value* error = object.if_contains("error"); error && error->is_string()) {
      message = std::string(error->get_string());
    }
    if (const json::value* name = object.if_contains("code"); name && name->is_string()) {
      std::string_view text = name->get_string();
      if (text == "UNAUTHENTICATED") {
        code = Code::kPermissionDenied;
        if (!std::string_view(message).starts_with(kUnauthenticatedPrefix)) {
          message = std::string(kUnauthenticatedPrefix) + message;
        }
      }
      for (int c = static_cast<int>(Code::kInvalidArgument);
           !code && c <= static_cast<int>(Code::kInternal); ++c) {
        if (CodeName(static_cast<Code>(c)) == text) code = static_cast<Code>(c);
      }
    }
  }
  if (message.empty()) {
    std::string_view line = body.substr(0, body.find('\n'));
    message =
        "HTTP " + std::to_string(http_status) + (line.empty() ? "" : ": " + Printable(line, 200));
  }
  if (!code) {
    switch (http_status) {
      case 400:
      case 413:
      case 431:
        code = Code::kInvalidArgument;
        break;
      case 401:
      case 403:
        code = Code::kPermissionDenied;
        break;
      case 404:
        code = Code::kNotFound;
        break;
      case 409:
        code = Code::kFailedPrecondition;
        break;
      case 503:
        code = Code::kUnavailable;
        break;
      case 504:
        code = Code::kDeadlineExceeded;
        break;
      default:
        code = Code::kInternal;
    }
  }
  if (*code == Code::kOk) code = Code::kInternal;
  return Status(*code, std::move(message));
}

}  // namespace herd::api_http
