// Reading /proc to find the processes of a herd process group and the zombies the agent adopted
// as a child subreaper. Linux only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace herd::agent::procfs {

// The fields of /proc/PID/stat that process supervision needs.
struct ProcStat {
  char state = '?';  // 'R', 'S', 'Z', ...
  int ppid = 0;
  int session = 0;
  uint64_t start_time = 0;  // field 22: clock ticks after boot; with the pid, names one process
};

// nullopt when the process does not exist (any more).
std::optional<ProcStat> ReadStat(int pid);

// True when pid exists and is not a zombie: a zombie has already died and cannot be signalled.
bool IsLive(int pid);

// The arguments of a process (/proc/PID/cmdline); empty when it is gone or a kernel thread.
std::vector<std::string> ReadCmdline(int pid);

// Every numeric entry of /proc.
std::vector<int> AllPids();

// Live processes (not zombies, not this process) whose initial environment holds exactly the entry
// `key_value` ("KEY=VALUE"). Processes whose environ cannot be read are skipped.
std::vector<int> FindLiveByEnvEntry(std::string_view key_value);

}  // namespace herd::agent::procfs
