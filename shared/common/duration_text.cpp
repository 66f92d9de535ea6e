#include "shared/common/duration_text.hpp"

#include <cstdint>

namespace herd {

std::string DurationText(std::chrono::milliseconds d) {
  const int64_t ms = d.count();
  if (ms % 1000 != 0) return std::to_string(ms) + "ms";
  int64_t s = ms / 1000;
  std::string out;
  auto put = [&](int64_t unit, const char* name) {
    if (s >= unit) {
      out += std::to_string(s / unit) + name;
      s %= unit;
    }
  };
  put(86400, "d");
  put(3600, "h");
  put(60, "m");
  put(1, "s");
  return out.empty() ? "0s" : out;
}

}  // namespace herd
