// Minimal leveled logging to stderr: HERD_LOG(kInfo) << "text";
#pragma once

#include <sstream>
#include <string_view>

namespace herd::log {

// kOff logs nothing (a fuzz target, where every input is a bad frame the head would log).
enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

void SetLevel(Level level);
Level GetLevel();
// Tag written before every line, e.g. the node id of an agent.
void SetTag(std::string_view tag);

class Line {
 public:
  Line(Level level, const char* file, int line);
  ~Line();
  template <typename T>
  Line& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  Level level_;
  std::ostringstream stream_;
};

}  // namespace herd::log

#define HERD_LOG(level)                                      \
  if (::herd::log::Level::level < ::herd::log::GetLevel()) { \
  } else                                                     \
    ::herd::log::Line(::herd::log::Level::level, __FILE__, __LINE__)
