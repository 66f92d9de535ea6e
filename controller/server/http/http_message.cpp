#include "controller/server/http/http_message.hpp"

#include <algorithm>

namespace herd::api_http {
namespace {

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

}  // namespace

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return Lower(x) == Lower(y); });
}

void Headers::Set(std::string name, std::string value) {
  std::erase_if(fields_, [&](const auto& field) { return EqualsIgnoreCase(field.first, name); });
  fields_.emplace_back(std::move(name), std::move(value));
}

std::optional<std::string_view> Headers::Get(std::string_view name) const {
  for (const auto& [key, value] : fields_) {
    if (EqualsIgnoreCase(key, name)) return std::string_view(value);
  }
  return std::nullopt;
}

std::optional<std::string> BearerToken(const Headers& headers) {
  std::optional<std::string_view> value = headers.Get("Authorization");
  if (!value) return std::nullopt;
  constexpr std::string_view kScheme = "bearer";
  std::string_view v = *value;
  if (v.size() <= kScheme.size() || !EqualsIgnoreCase(v.substr(0, kScheme.size()), kScheme) ||
      (v[kScheme.size()] != ' ' && v[kScheme.size()] != '\t')) {
    return std::nullopt;
  }
  v.remove_prefix(kScheme.size());
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  if (v.empty()) return std::nullopt;
  return std::string(v);
}

}  // namespace herd::api_http
