#include "agent/process/proc_scan.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace herd::agent::procfs {
namespace {

// Reads a whole /proc file; /proc files report size 0, so read until EOF.
std::optional<std::string> ReadProcFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace

std::optional<ProcStat> ReadStat(int pid) {
  auto text = ReadProcFile("/proc/" + std::to_string(pid) + "/stat");
  if (!text) return std::nullopt;
  // "pid (comm) state ppid pgrp session ..."; comm may itself contain ") ", so use the last ')'.
  size_t close = text->rfind(')');
  if (close == std::string::npos || close + 2 >= text->size()) return std::nullopt;
  const char* p = text->c_str() + close + 2;
  ProcStat st;
  st.state = *p++;
  char* end = nullptr;
  st.ppid = static_cast<int>(std::strtol(p, &end, 10));
  std::strtol(end, &end, 10);  // pgrp
  st.session = static_cast<int>(std::strtol(end, &end, 10));
  for (int field = 7; field < 22; ++field) std::strtoll(end, &end, 10);  // tty_nr .. itrealvalue
  st.start_time = std::strtoull(end, &end, 10);
  return st;
}

std::vector<std::string> ReadCmdline(int pid) {
  std::vector<std::string> args;
  auto text = ReadProcFile("/proc/" + std::to_string(pid) + "/cmdline");
  if (!text) return args;
  size_t pos = 0;
  while (pos < text->size()) {
    size_t nul = text->find('\0', pos);
    if (nul == std::string::npos) nul = text->size();
    args.push_back(text->substr(pos, nul - pos));
    pos = nul + 1;
  }
  return args;
}

bool IsLive(int pid) {
  auto st = ReadStat(pid);
  return st && st->state != 'Z' && st->state != 'X';
}

std::vector<int> AllPids() {
  std::vector<int> pids;
  DIR* dir = ::opendir("/proc");
  if (!dir) return pids;
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid > 0 && end && *end == '\0') pids.push_back(static_cast<int>(pid));
  }
  ::closedir(dir);
  return pids;
}

std::vector<int> FindLiveByEnvEntry(std::string_view key_value) {
  std::vector<int> found;
  const int self = ::getpid();
  for (int pid : AllPids()) {
    if (pid == self) continue;
    auto env = ReadProcFile("/proc/" + std::to_string(pid) + "/environ");
    if (!env || env->empty()) continue;  // kernel threads and zombies have none
    // Entries are NUL-separated; match a whole entry only.
    std::string_view all(*env);
    bool match = false;
    size_t pos = 0;
    while (pos < all.size()) {
      size_t end = all.find('\0', pos);
      if (end == std::string_view::npos) end = all.size();
      if (all.substr(pos, end - pos) == key_value) {
        match = true;
        break;
      }
      pos = end + 1;
    }
    if (match && IsLive(pid)) found.push_back(pid);
  }
  return found;
}

}  // namespace herd::agent::procfs
