#include "controller/core/trace.hpp"

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "shared/common/file_util.hpp"

namespace herd::controller {
namespace {

// The time of `clock` (the boot clock, this process's CPU time) in ms.
double ClockMs(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// When the kernel started this process, in CLOCK_BOOTTIME milliseconds (field 22 of
// /proc/self/stat, in clock ticks); the first mark's time when it cannot be read.
double ProcessStartMs(double fallback) {
  auto file = ReadFile("/proc/self/stat");
  if (!file.ok()) return fallback;
  const std::string& stat = *file;
  auto close = stat.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return fallback;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  // After ") " the fields start at 3 (state); starttime is field 22.
  for (int i = 3; i < 22 && (fields >> field); ++i) {
  }
  unsigned long long ticks = 0;
  if (!(fields >> ticks)) return fallback;
  long hz = ::sysconf(_SC_CLK_TCK);
  if (hz <= 0) return fallback;
  return static_cast<double>(ticks) * 1e3 / static_cast<double>(hz);
}

struct Tracer {
  bool on = false;
  double start = 0;
  double last = 0;
  Tracer() {
    const char* env = std::getenv("HERD_TRACE");
    on = env && *env && std::string_view(env) != "0";
    if (!on) return;
    start = ProcessStartMs(ClockMs(CLOCK_BOOTTIME));
    last = start;
  }
};

}  // namespace

void TraceMark(std::string_view stage) {
  static Tracer t;
  if (!t.on) return;
  double now = ClockMs(CLOCK_BOOTTIME);
  // The process's own CPU time so far (user and system, all threads) at the end of the line.
  std::fprintf(stderr, "herd trace: %7.1f ms (+%6.1f) %.*s [cpu %.1f ms]\n", now - t.start,
               now - t.last, static_cast<int>(stage.size()), stage.data(),
               ClockMs(CLOCK_PROCESS_CPUTIME_ID));
  t.last = now;
}

}  // namespace herd::controller
