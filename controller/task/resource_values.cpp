#include "controller/task/resource_values.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <system_error>
#include <utility>

namespace herd::task {

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

std::optional<double> ParseNumber(std::string_view text) {
  if (text.empty()) return std::nullopt;
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::optional<long long> ParseInteger(std::string_view text) {
  if (text.empty()) return std::nullopt;
  long long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string FormatNumber(double value) {
  std::array<char, 64> buf{};
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), value);
  if (ec != std::errc()) return "?";
  return std::string(buf.data(), end);
}

std::optional<Amount> ParseAmount(std::string_view text, bool allow_gb) {
  text = Trim(text);
  Amount amount;
  if (!text.empty() && text.back() == '+') {
    amount.at_least = true;
    text.remove_suffix(1);
  }
  if (allow_gb) {
    // "32GB" and "32G", any case, as people write memory sizes.
    auto ends_with_ci = [&](std::string_view suffix) {
      if (text.size() < suffix.size()) return false;
      for (size_t i = 0; i < suffix.size(); ++i) {
        char c = text[text.size() - suffix.size() + i];
        if (std::toupper(static_cast<unsigned char>(c)) != suffix[i]) return false;
      }
      return true;
    };
    if (ends_with_ci("GB")) {
      text.remove_suffix(2);
    } else if (ends_with_ci("G")) {
      text.remove_suffix(1);
    }
  }
  auto value = ParseNumber(Trim(text));
  if (!value || *value <= 0) return std::nullopt;
  amount.value = *value;
  return amount;
}

Result<Amount> ParseSize(std::string_view text) {
  std::string_view rest = Trim(text);
  Amount amount;
  if (!rest.empty() && rest.back() == '+') {
    amount.at_least = true;
    rest = Trim(rest.substr(0, rest.size() - 1));
  }
  // The number is the longest prefix of digits, signs, '.', and exponents; the rest is the unit.
  std::size_t end = 0;
  while (end < rest.size()) {
    char c = rest[end];
    bool exponent = (c == 'e' || c == 'E') && end + 1 < rest.size() &&
                    (std::isdigit(static_cast<unsigned char>(rest[end + 1])) ||
                     rest[end + 1] == '-' || rest[end + 1] == '+');
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '+' &&
        !exponent) {
      break;
    }
    end += exponent ? 2 : 1;
  }
  std::string_view number = rest.substr(0, end);
  std::string unit(Trim(rest.substr(end)));
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto value = ParseNumber(number);
  if (!value) {
    return InvalidArgument("expected a size such as 256, 256GB, 1TB or 512Gi+, got '" +
                           std::string(Trim(text)) + "'");
  }
  // Powers of 1024 relative to GB, by the unit's first letter.
  static constexpr std::pair<char, int> kScale[] = {
      {'K', -2}, {'M', -1}, {'G', 0}, {'T', 1}, {'P', 2}};
  int power = 0;
  if (!unit.empty()) {
    bool known = false;
    for (auto [letter, p] : kScale) {
      if (unit[0] != letter) continue;
      std::string_view tail = std::string_view(unit).substr(1);
      if (tail.empty() || tail == "B" || tail == "I" || tail == "IB") {
        power = p;
        known = true;
      }
    }
    if (!known) {
      return InvalidArgument("unknown unit '" + std::string(Trim(rest.substr(end))) + "' in '" +
                             std::string(Trim(text)) +
                             "' (use KB, MB, GB, TB or PB, or Ki, Mi, Gi, Ti, Pi)");
    }
  }
  if (*value <= 0) {
    return InvalidArgument("'" + std::string(Trim(text)) + "' must be a positive size");
  }
  amount.value = std::ldexp(*value, 10 * power);
  if (!std::isfinite(amount.value)) {
    return InvalidArgument("'" + std::string(Trim(text)) + "' is too large");
  }
  return amount;
}

bool IsAcceleratorName(std::string_view name) {
  if (name.empty() || !std::isalnum(static_cast<unsigned char>(name.front()))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

Result<Accelerator> ParseAccelerator(std::string_view text) {
  text = Trim(text);
  Accelerator acc;
  std::string_view name = text;
  if (auto colon = text.find(':'); colon != std::string_view::npos) {
    name = Trim(text.substr(0, colon));
    std::string_view count_text = Trim(text.substr(colon + 1));
    auto count = ParseNumber(count_text);
    if (!count || *count <= 0) {
      return InvalidArgument("count '" + std::string(count_text) +
                             "' must be a positive number (e.g. L4:4 or T4:0.5)");
    }
    acc.count = *count;
  }
  if (!IsAcceleratorName(name)) {
    return InvalidArgument("expected NAME or NAME:COUNT (e.g. L4:4, H100, T4:0.5), got '" +
                           std::string(text) + "'");
  }
  acc.name = std::string(name);
  return acc;
}

Result<std::string> ParsePortRange(std::string_view text) {
  text = Trim(text);
  auto port = [](std::string_view p) -> std::optional<long long> {
    auto v = ParseInteger(Trim(p));
    if (!v || *v < 1 || *v > 65535) return std::nullopt;
    return v;
  };
  auto dash = text.find('-');
  if (dash == std::string_view::npos) {
    auto p = port(text);
    if (!p) {
      return InvalidArgument("expected a port 1-65535 or a range like '10000-10100', got '" +
                             std::string(text) + "'");
    }
    return std::to_string(*p);
  }
  auto lo = port(text.substr(0, dash));
  auto hi = port(text.substr(dash + 1));
  if (!lo || !hi) {
    return InvalidArgument("expected a port 1-65535 or a range like '10000-10100', got '" +
                           std::string(text) + "'");
  }
  if (*lo > *hi) {
    return InvalidArgument("range '" + std::string(text) + "' ends before it starts");
  }
  return std::to_string(*lo) + "-" + std::to_string(*hi);
}

Result<std::string> ParseContainerImage(std::string_view image_id) {
  if (!image_id.starts_with(kDockerImagePrefix)) {
    return InvalidArgument("expected docker:IMAGE (e.g. docker:nvcr.io/nvidia/pytorch:24.01-py3)");
  }
  std::string_view image = image_id.substr(kDockerImagePrefix.size());
  // A reference's characters (registry host and port, path, tag, digest); the first is never a
  // '-', which podman would read as an option.
  constexpr std::size_t kMaxImageReference = 255;
  const bool ok = !image.empty() && image.size() <= kMaxImageReference && image[0] != '-' &&
                  std::all_of(image.begin(), image.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
                           c == '-' || c == '/' || c == ':' || c == '@';
                  });
  if (!ok) {
    return InvalidArgument("'" + std::string(image) +
                           "' is not an image reference (expected e.g. "
                           "docker:nvcr.io/nvidia/pytorch:24.01-py3)");
  }
  return std::string(image);
}

}  // namespace herd::task
