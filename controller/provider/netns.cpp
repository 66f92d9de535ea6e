#include "controller/provider/netns.hpp"

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <thread>

#include "controller/ssh/subprocess.hpp"
#include "shared/common/limits.hpp"

namespace herd::controller::netns {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

std::string Path(const std::string& name) { return "/run/netns/" + name; }

bool Exists(const std::string& name) {
  struct stat st {};
  return ::stat(Path(name).c_str(), &st) == 0;
}

Result<std::string> IpOutput(const std::string& ns, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"ip"};
  if (!ns.empty()) {
    argv.push_back("-n");
    argv.push_back(ns);
  }
  argv.insert(argv.end(), args.begin(), args.end());
  HERD_ASSIGN_OR_RETURN(ProcResult r, RunProcess(argv, {}, limits::kLocalCommandTimeout));
  if (r.timed_out || r.exit_code != 0) {
    return IoError(JoinArgv(argv) + " failed" +
                   (r.timed_out ? std::string(" (timed out)")
                                : " (exit " + std::to_string(r.exit_code) + ")") +
                   ": " + Trim(r.err));
  }
  return std::move(r.out);
}

Status Ip(const std::string& ns, const std::vector<std::string>& args) {
  return IpOutput(ns, args).status();
}

Status IpBatch(const std::string& ns, const std::vector<std::string>& lines, bool force) {
  if (lines.empty()) return Status::Ok();
  std::vector<std::string> argv = {"ip"};
  if (!ns.empty()) {
    argv.push_back("-n");
    argv.push_back(ns);
  }
  if (force) argv.push_back("-force");
  argv.push_back("-batch");
  argv.push_back("-");
  std::string input;
  for (const auto& l : lines) input += l + "\n";
  HERD_ASSIGN_OR_RETURN(ProcResult r, RunProcess(argv, input, limits::kLocalCommandTimeout));
  if (r.timed_out || r.exit_code != 0) {
    return IoError(JoinArgv(argv) + " failed" +
                   (r.timed_out ? std::string(" (timed out)")
                                : " (exit " + std::to_string(r.exit_code) + ")") +
                   ": " + Trim(r.err) + " (commands: " + Trim(input) + ")");
  }
  return Status::Ok();
}

Result<std::vector<std::string>> LinkNames(const std::string& ns) {
  HERD_ASSIGN_OR_RETURN(std::string out, IpOutput(ns, {"-o", "link", "show"}));
  std::vector<std::string> names;
  std::size_t pos = 0;
  while (pos < out.size()) {
    std::size_t eol = out.find('\n', pos);
    if (eol == std::string::npos) eol = out.size();
    std::string_view line(out.data() + pos, eol - pos);
    pos = eol + 1;
    // "3: n0@if2: <BROADCAST,...> ..."
    std::size_t a = line.find(": ");
    if (a == std::string_view::npos) continue;
    std::string_view rest = line.substr(a + 2);
    std::size_t b = rest.find_first_of("@:");
    if (b == std::string_view::npos) continue;
    names.emplace_back(rest.substr(0, b));
  }
  return names;
}

Status Ensure(const std::string& name) {
  if (Exists(name)) return Status::Ok();
  return Ip("", {"netns", "add", name});
}

Status Delete(const std::string& name) {
  if (!Exists(name)) return Status::Ok();
  return Ip("", {"netns", "delete", name});
}

std::vector<std::string> ListWithPrefix(const std::string& prefix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/run/netns", ec)) {
    std::string n = e.path().filename().string();
    if (n.starts_with(prefix)) out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool IsAlive(pid_t pid) {
  if (pid <= 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!stat || !std::getline(stat, line)) return false;
  auto rp = line.rfind(')');
  if (rp == std::string::npos || rp + 2 >= line.size()) return false;
  char state = line[rp + 2];
  return state != 'Z' && state != 'X';
}

std::vector<pid_t> ProcessesIn(const std::string& name) {
  std::vector<pid_t> out;
  struct stat target {};
  if (::stat(Path(name).c_str(), &target) != 0) return out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string n = e.path().filename().string();
    if (n.empty() || !std::all_of(n.begin(), n.end(), ::isdigit)) continue;
    struct stat st {};
    if (::stat(("/proc/" + n + "/ns/net").c_str(), &st) != 0) continue;
    if (!SameFile(st, target)) continue;
    pid_t pid = static_cast<pid_t>(std::stol(n));
    if (IsAlive(pid)) out.push_back(pid);
  }
  return out;
}

Status KillAll(const std::string& name, std::chrono::milliseconds grace,
               std::chrono::milliseconds timeout) {
  auto pids = ProcessesIn(name);
  if (pids.empty()) return Status::Ok();
  const auto start = Clock::now();
  for (pid_t p : pids) ::kill(p, SIGTERM);
  while (true) {
    std::this_thread::sleep_for(limits::kKillSweepInterval);
    pids = ProcessesIn(name);
    if (pids.empty()) return Status::Ok();
    auto elapsed = Clock::now() - start;
    if (elapsed >= grace) {
      for (pid_t p : pids) ::kill(p, SIGKILL);
    } else {
      // Children started after the first sweep get their SIGTERM too.
      for (pid_t p : pids) ::kill(p, SIGTERM);
    }
    if (elapsed >= grace + timeout) break;
  }
  std::string left;
  for (pid_t p : pids) left += (left.empty() ? "" : " ") + std::to_string(p);
  return Internal("processes in network namespace " + name + " survived SIGKILL: " + left);
}

}  // namespace herd::controller::netns
