// Fuzz target: the API server's request decoding (controller/server/http/request_codec). The
// input is a request as the handler sees it: its target up to the first newline, its body after.
// Any bytes must give a decoded request or an InvalidArgument naming what is wrong, never a crash;
// and what is accepted keeps the promises the routes rely on: no segment is empty, ".", ".." or
// holds '/' or NUL; a name that passes ValidateName is a safe file name; an error response maps
// back to the same Status.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "controller/server/http/request_codec.hpp"

namespace {

using namespace herd::api_http;

const FieldSpec kSchema[] = {
    {"name", FieldType::kString, true}, {"num_nodes", FieldType::kInt},
    {"detach", FieldType::kBool},       {"args", FieldType::kStringList},
    {"env", FieldType::kStringMap},     {"task", FieldType::kObject},
};

void Check(bool ok) {
  if (!ok) std::abort();
}

// An error of the codec: InvalidArgument, and its HTTP form maps back to it.
void CheckRefusal(const herd::Status& status) {
  Check(status.code() == herd::Code::kInvalidArgument && !status.message().empty());
  HttpResponse response = HttpError(status);
  Check(response.status == 400);
  herd::Status back = StatusFromResponse(response.status, response.body);
  Check(back.code() == status.code() && back.message() == status.message());
}

void CheckName(std::string_view value) {
  herd::Status status = ValidateName("name", value);
  if (!status.ok()) return CheckRefusal(status);
  Check(!value.empty() && value.size() <= herd::limits::kApiMaxNameBytes);
  Check(value.find("..") == std::string_view::npos && value.front() != '.' && value.front() != '-');
  for (char c : value) {
    Check((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '_' || c == '.');
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::size_t newline = input.find('\n');
  std::string_view target = input.substr(0, newline);
  std::string_view body =
      newline == std::string_view::npos ? std::string_view() : input.substr(newline + 1);

  auto parsed = ParseTarget(target);
  if (!parsed.ok()) {
    CheckRefusal(parsed.status());
  } else {
    for (const std::string& segment : parsed->segments) {
      Check(!segment.empty() && segment != "." && segment != "..");
      Check(segment.find('/') == std::string::npos && segment.find('\0') == std::string::npos);
      CheckName(segment);
      auto id = ParseId("id", segment);
      if (id.ok()) {
        Check(*id >= 0);
      } else {
        CheckRefusal(id.status());
      }
    }
    for (const auto& [name, value] : parsed->query) {
      Check(!name.empty() && name.find('\0') == std::string::npos &&
            value.find('\0') == std::string::npos);
      Check(parsed->Query(name).has_value());
    }
    std::vector<std::string> captures;
    if (parsed->Match({"api", "v1", "clusters", ":name", "jobs", ":id"}, &captures)) {
      Check(captures.size() == 2 && captures[0] == parsed->segments[3]);
    }
  }

  // The body against a schema, with a limit the fuzzer can reach.
  auto decoded = DecodeBody(body, kSchema, 4096);
  if (!decoded.ok()) {
    CheckRefusal(decoded.status());
    return 0;
  }
  Check(body.size() <= 4096);
  std::string name = decoded->String("name");
  Check(decoded->Has("name") && name.find('\0') == std::string::npos);
  CheckName(name);
  decoded->Int("num_nodes", 1);
  decoded->Bool("detach");
  for (const std::string& arg : decoded->StringList("args")) {
    Check(arg.find('\0') == std::string::npos);
  }
  for (const auto& [key, value] : decoded->StringMap("env")) {
    Check(key.find('\0') == std::string::npos && value.find('\0') == std::string::npos);
  }
  if (decoded->Has("task")) Check(decoded->Object("task") != nullptr);
  return 0;
}
