#include "controller/server/warm_protocol.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cerrno>

namespace herd::server {

bool IsWarmRead(const std::vector<std::string>& args) {
  if (args.empty()) return false;
  if (std::find(args.begin(), args.end(), "--") != args.end()) return false;
  const std::string& verb = args[0];
  if (verb == "status" || verb == "queue" || verb == "nodes" || verb == "infra") return true;
  if (verb == "logs") return std::find(args.begin(), args.end(), "--no-follow") != args.end();
  return verb == "jobs" && args.size() > 1 && args[1] == "queue";
}

bool SendAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

std::string EncodeWarmRequest(const std::vector<std::string>& args) {
  boost::json::array words;
  for (const auto& a : args) words.emplace_back(a);
  return boost::json::serialize(boost::json::object{{"args", std::move(words)}}) + "\n";
}

Result<std::vector<std::string>> DecodeWarmRequest(std::string_view line) {
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(line, ec);
  const boost::json::object* o = ec ? nullptr : v.if_object();
  const boost::json::value* args = o == nullptr ? nullptr : o->if_contains("args");
  if (args == nullptr || !args->is_array() || o->size() != 1) {
    return InvalidArgument("a warm request is {\"args\": [words]} on one line");
  }
  std::vector<std::string> words;
  for (const auto& w : args->as_array()) {
    if (!w.is_string()) return InvalidArgument("a warm request's args are strings");
    words.emplace_back(w.as_string());
  }
  if (!IsWarmRead(words)) {
    return InvalidArgument("`" + (words.empty() ? std::string() : words[0]) +
                           "` is not a command a warm worker runs");
  }
  return words;
}

}  // namespace herd::server
