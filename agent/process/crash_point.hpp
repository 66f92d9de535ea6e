// Test-only fault injection. HERD_TEST_CRASH_AT=<point> in a process's environment makes it
// _exit(kCrashPointExitCode) when it reaches CrashPoint("<point>"), as a crash (or kill -9) at
// exactly that place would, for the places no external fault can hit reliably (between two
// writes). Unset (always, outside tests) it costs one string comparison. Points in use:
//   head-setup-partly-journaled  the first of several setup processes journaled, not sent
//   head-setup-journaled every setup process journaled, the last StartProcess not sent
//   head-setup-done     the last setup exit is journaled, the run phase not started
//   head-run-persisted  the job is RUNNING in jobs.db, no run process journaled yet
//   head-run-journaled  every run process journaled, the last StartProcess not sent
//   worker-before-spawn the process table says "starting", nothing spawned yet
//   worker-after-spawn  the supervisor runs and reported, the table not yet updated
//   spawn-before-report the supervisor was spawned, its "ok PID" not read yet
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace herd {

inline constexpr int kCrashPointExitCode = 86;

inline void CrashPoint(const char* point) {
  static const char* const at = std::getenv("HERD_TEST_CRASH_AT");
  if (at == nullptr || std::strcmp(at, point) != 0) return;
  const char msg[] = "herd: HERD_TEST_CRASH_AT reached; exiting\n";
  ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)ignored;
  ::_exit(kCrashPointExitCode);
}

}  // namespace herd
