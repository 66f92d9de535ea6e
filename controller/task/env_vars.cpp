#include "controller/task/env_vars.hpp"

#include <cctype>

#include "controller/task/resource_values.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"

namespace herd::task {
namespace {

bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Value part of a dotenv line; line_no only for messages.
Result<std::string> DotenvValue(std::string_view raw, std::string_view where) {
  std::string_view v = Trim(raw);
  if (v.empty()) return std::string();
  char quote = v.front();
  if (quote == '\'' || quote == '"') {
    std::string out;
    size_t i = 1;
    for (; i < v.size() && v[i] != quote; ++i) {
      if (quote == '"' && v[i] == '\\' && i + 1 < v.size()) {
        char next = v[++i];
        out += next == 'n' ? '\n' : next == 't' ? '\t' : next;
      } else {
        out += v[i];
      }
    }
    if (i >= v.size()) {
      return InvalidArgument(std::string(where) + ": unterminated " + quote + " quote");
    }
    std::string_view rest = Trim(v.substr(i + 1));
    if (!rest.empty() && rest.front() != '#') {
      return InvalidArgument(std::string(where) + ": unexpected text after the closing quote: '" +
                             std::string(rest) + "'");
    }
    return out;
  }
  // Unquoted: a '#' after whitespace starts a comment.
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] == '#' && (v[i - 1] == ' ' || v[i - 1] == '\t')) {
      v = Trim(v.substr(0, i));
      break;
    }
  }
  return std::string(v);
}

}  // namespace

bool IsEnvName(std::string_view name) {
  if (name.empty() || !IsNameStart(name.front())) return false;
  for (char c : name) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

Result<std::pair<std::string, std::string>> ParseEnvOverride(std::string_view text,
                                                             std::string_view flag,
                                                             const EnvLookup& getenv) {
  auto eq = text.find('=');
  std::string name(text.substr(0, eq));
  if (!IsEnvName(name)) {
    return InvalidArgument(std::string(flag) + " '" + std::string(text) +
                           "': expected NAME=VALUE or NAME, where NAME is letters, digits and '_' "
                           "not starting with a digit");
  }
  if (eq != std::string_view::npos) return std::pair{name, std::string(text.substr(eq + 1))};
  std::optional<std::string> value = getenv(name);
  if (!value) {
    return InvalidArgument(std::string(flag) + " " + name + ": " + name +
                           " is not set in the local environment; pass " + std::string(flag) + " " +
                           name + "=VALUE");
  }
  return std::pair{name, *value};
}

Result<EnvPairs> ParseEnvFileText(std::string_view text, std::string_view source) {
  EnvPairs pairs;
  int line_no = 0;
  while (!text.empty()) {
    ++line_no;
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    line = Trim(line);
    if (line.empty() || line.front() == '#') continue;
    if (line.starts_with("export ")) line = Trim(line.substr(7));
    std::string where = std::string(source) + ":" + std::to_string(line_no);
    auto eq = line.find('=');
    std::string_view name = eq == std::string_view::npos ? line : Trim(line.substr(0, eq));
    if (eq == std::string_view::npos || !IsEnvName(name)) {
      return InvalidArgument(where + ": expected NAME=VALUE, got '" + std::string(line) + "'");
    }
    HERD_ASSIGN_OR_RETURN(std::string value, DotenvValue(line.substr(eq + 1), where));
    pairs.emplace_back(std::string(name), std::move(value));
  }
  return pairs;
}

Result<EnvPairs> ReadEnvFile(const std::string& path) {
  HERD_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, limits::kMaxTaskFileBytes,
                                                       "an --env-file may be at most " +
                                                           BytesText(limits::kMaxTaskFileBytes)));
  return ParseEnvFileText(text, path);
}

Result<std::string> SubstituteVars(std::string_view text, const EnvLookup& lookup) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] != '$' || i + 1 >= text.size()) {
      out += text[i++];
      continue;
    }
    std::string name;
    size_t next = 0;
    if (text[i + 1] == '{') {
      auto close = text.find('}', i + 2);
      if (close == std::string_view::npos) {
        return InvalidArgument("unterminated '${' in '" + std::string(text) + "'");
      }
      name = std::string(text.substr(i + 2, close - i - 2));
      if (!IsEnvName(name)) {
        return InvalidArgument("'${" + name + "}' is not a valid variable reference");
      }
      next = close + 1;
    } else if (IsNameStart(text[i + 1])) {
      size_t end = i + 1;
      while (end < text.size() && IsNameChar(text[end])) ++end;
      name = std::string(text.substr(i + 1, end - i - 1));
      next = end;
    } else {
      out += text[i++];
      continue;
    }
    std::optional<std::string> value = lookup(name);
    if (!value) {
      return InvalidArgument("variable " + name + " is not set: define it in envs or pass --env " +
                             name + "=VALUE");
    }
    out += *value;
    i = next;
  }
  return out;
}

std::string BytesText(std::size_t bytes) {
  std::string text = std::to_string(bytes) + " bytes";
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) {
    text += " (" + std::to_string(bytes >> 20) + " MiB)";
  } else if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) {
    text += " (" + std::to_string(bytes >> 10) + " KiB)";
  }
  return text;
}

Result<std::string> ReadTextFile(const std::string& path, std::size_t max_bytes,
                                 std::string_view limit_text) {
  auto text = ReadFile(path, max_bytes);
  if (text.ok()) return text;
  const Status& s = text.status();
  if (s.code() == Code::kInvalidArgument) {
    return InvalidArgument(s.message() + "; " + std::string(limit_text));
  }
  // kIo for a missing file too: the CLI keeps its not-found exit code for jobs and clusters.
  return IoError(s.message());
}

}  // namespace herd::task
