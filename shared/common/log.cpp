#include "shared/common/log.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

namespace herd::log {
namespace {
std::atomic<Level> g_level{Level::kInfo};
std::mutex g_mu;
std::string g_tag;  // guarded by g_mu

const char* LevelName(Level l) {
  switch (l) {
    case Level::kDebug:
      return "D";
    case Level::kInfo:
      return "I";
    case Level::kWarn:
      return "W";
    case Level::kError:
      return "E";
    case Level::kOff:  // never written: nothing is at this level
      break;
  }
  return "?";
}
}  // namespace

void SetLevel(Level level) { g_level = level; }
Level GetLevel() { return g_level; }
void SetTag(std::string_view tag) {
  std::lock_guard lock(g_mu);
  g_tag = tag;
}

Line::Line(Level level, const char* file, int line) : level_(level) {
  const char* base = std::strrchr(file, '/');
  stream_ << (base ? base + 1 : file) << ':' << line << "] ";
}

Line::~Line() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%H:%M:%S", &tm);
  std::string out;
  {
    std::lock_guard lock(g_mu);
    out = std::string(LevelName(level_)) + ts + "." + std::to_string(ms.count() + 1000).substr(1) +
          " " + std::to_string(::getpid()) + (g_tag.empty() ? "" : " " + g_tag) + " " +
          stream_.str() + "\n";
  }
  (void)!::write(STDERR_FILENO, out.data(), out.size());
}

}  // namespace herd::log
