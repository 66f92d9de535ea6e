// A process and its descendants as /proc shows them, with their CPU time: what a rank is, for the
// hang watch (hang_watch.hpp) and for stack captures (stack_capture.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace herd::agent {

struct ProcStat {
  int pid = 0;
  int ppid = 0;
  std::string comm;
  // utime + stime + cutime + cstime, in clock ticks: its own CPU time and that of the children it
  // reaped.
  uint64_t cpu_ticks = 0;
};

// One line of /proc/PID/stat; false when it does not parse.
bool ParseProcStat(const std::string& line, ProcStat& out);
// Every process of proc_root ("/proc"), unordered; vanished ones skipped.
std::vector<ProcStat> ReadAllProcStats(const std::string& proc_root = "/proc");
// root and its descendants among all: root first, then the others by pid. Empty when root is
// not among them.
std::vector<ProcStat> TreeOf(const std::vector<ProcStat>& all, int root);
uint64_t CpuTicks(const std::vector<ProcStat>& tree);

}  // namespace herd::agent
