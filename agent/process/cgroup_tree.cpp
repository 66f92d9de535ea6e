#include "agent/process/cgroup_tree.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "agent/process/proc_scan.hpp"
#include "shared/common/log.hpp"

namespace herd::agent {
namespace {

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  for (;;) {
    size_t end = s.find(sep, pos);
    out.emplace_back(s.substr(pos, end == std::string_view::npos ? end : end - pos));
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  return out;
}

bool WriteFile(const std::string& path, const std::string& data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = ::write(fd, data.data(), data.size());
  ::close(fd);
  return n == static_cast<ssize_t>(data.size());
}

// A mount of a cgroup hierarchy, from /proc/self/mountinfo.
struct CgroupMount {
  std::string kind;        // "cgroup2" or "cgroup1/<controller>"
  std::string controller;  // v1 controller looked up in /proc/self/cgroup; "" for v2
  std::string mount_root;  // the part of the hierarchy the mount shows (containers: not "/")
  std::string mount_point;
};

std::vector<CgroupMount> FindMounts() {
  std::vector<CgroupMount> v2, pids, freezer;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // id parent maj:min root mount-point options [optional...] - fstype source super-options
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash)), tail(line.substr(dash + 3));
    std::string id, parent, devno, root, point, fstype, source, super;
    head >> id >> parent >> devno >> root >> point;
    tail >> fstype >> source >> super;
    if (fstype == "cgroup2") {
      v2.push_back({"cgroup2", "", root, point});
    } else if (fstype == "cgroup") {
      for (const std::string& opt : Split(super, ',')) {
        if (opt == "pids") pids.push_back({"cgroup1/pids", "pids", root, point});
        if (opt == "freezer") freezer.push_back({"cgroup1/freezer", "freezer", root, point});
      }
    }
  }
  // v2 first: it reports only live processes and can kill a whole cgroup atomically.
  std::vector<CgroupMount> all = v2;
  all.insert(all.end(), pids.begin(), pids.end());
  all.insert(all.end(), freezer.begin(), freezer.end());
  return all;
}

// The agent's own cgroup path in the hierarchy of `controller` ("" = the v2 hierarchy).
std::optional<std::string> OwnCgroupPath(const std::string& controller) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    // hierarchy-id:controller-list:path
    size_t a = line.find(':');
    size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    std::string list = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    if (controller.empty()) {
      if (line.compare(0, a, "0") == 0 && list.empty()) return path;
      continue;
    }
    for (const std::string& c : Split(list, ','))
      if (c == controller) return path;
  }
  return std::nullopt;
}

// Moves a short-lived child of ours into a fresh cgroup under base: succeeds only where the agent
// really can create cgroups and move processes (not in gVisor, not read-only, not under a v2 parent
// that refuses). Cleans up after itself.
bool ProbeBase(const std::string& base) {
  std::string dir = base + "/herd-probe-" + std::to_string(::getpid());
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return false;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    ::rmdir(dir.c_str());
    return false;
  }
  pid_t child = ::fork();
  if (child == 0) {
    // Only async-signal-safe calls: wait for the parent to close its end, then leave.
    char c;
    ::close(fds[1]);
    while (::read(fds[0], &c, 1) < 0 && errno == EINTR) {
    }
    ::_exit(0);
  }
  ::close(fds[0]);
  bool moved = false;
  if (child > 0) {
    moved = WriteFile(dir + "/cgroup.procs", std::to_string(child) + "\n");
    if (moved) {
      std::ifstream procs(dir + "/cgroup.procs");
      int pid = 0;
      moved = false;
      while (procs >> pid) moved = moved || pid == child;
    }
  }
  ::close(fds[1]);
  if (child > 0) {
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
  }
  ::rmdir(dir.c_str());
  return moved;
}

std::optional<CgroupHierarchy> Detect() {
  for (const CgroupMount& m : FindMounts()) {
    auto own = OwnCgroupPath(m.controller);
    if (!own) continue;
    std::string rel = *own;
    // Inside a container without a cgroup namespace the path is the host's; strip the mount root.
    if (m.mount_root != "/") {
      if (rel.compare(0, m.mount_root.size(), m.mount_root) != 0) continue;
      rel = rel.substr(m.mount_root.size());
    }
    std::string base = m.mount_point + (rel == "/" ? "" : rel);
    if (ProbeBase(base)) return CgroupHierarchy{m.kind, base};
    HERD_LOG(kDebug) << "cannot use " << m.kind << " at " << base;
  }
  HERD_LOG(kWarn) << "no usable cgroup hierarchy (need cgroup v2, or v1 pids/freezer, writable): "
                     "KillGroup relies on the HERD_PROCESS_GROUP environment sweep alone";
  return std::nullopt;
}

// cgroup directory names cannot hold '/', and "." or ".." mean something else: escape such bytes.
std::string EscapeName(const std::string& name) {
  std::string out;
  for (unsigned char c : name) {
    if (std::isalnum(c) || c == '-' || c == '_' || (c == '.' && !out.empty())) {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

}  // namespace

const std::optional<CgroupHierarchy>& DetectCgroupHierarchy() {
  static const std::optional<CgroupHierarchy> detected = Detect();
  return detected;
}

CgroupTree::CgroupTree(std::optional<CgroupHierarchy> hierarchy, std::string scope)
    : hierarchy_(std::move(hierarchy)) {
  if (!hierarchy_) return;
  // The scope may be a path ("herd/node-1"): several agents on one machine share "herd".
  std::string dir = hierarchy_->base;
  for (const std::string& part : Split(scope, '/')) {
    if (part.empty()) continue;
    dir += "/" + EscapeName(part);
    scope_dirs_.push_back(dir);
  }
  if (scope_dirs_.empty()) scope_dirs_.push_back(dir + "/herd");
}

std::string CgroupTree::GroupDir(const std::string& group) const {
  return hierarchy_ ? scope_dirs_.back() + "/" + EscapeName(group) : std::string();
}

Result<std::string> CgroupTree::Prepare(const std::string& group) {
  if (!hierarchy_) return FailedPrecondition("cgroups are not available");
  std::string dir = GroupDir(group);
  std::vector<std::string> dirs = scope_dirs_;
  dirs.push_back(dir);
  for (const std::string& d : dirs) {
    if (::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError("mkdir " + d, errno);
  }
  return dir + "/cgroup.procs";
}

std::vector<int> CgroupTree::LivePids(const std::string& group) const {
  std::vector<int> pids;
  if (!hierarchy_) return pids;
  std::ifstream in(GroupDir(group) + "/cgroup.procs");
  int pid = 0;
  while (in >> pid) {
    if (pid != ::getpid() && procfs::IsLive(pid)) pids.push_back(pid);
  }
  return pids;
}

bool CgroupTree::KillAll(const std::string& group) const {
  return hierarchy_ && hierarchy_->kind == "cgroup2" &&
         WriteFile(GroupDir(group) + "/cgroup.kill", "1");
}

bool CgroupTree::Remove(const std::string& group) const {
  if (!hierarchy_) return true;
  std::string dir = GroupDir(group);
  return ::rmdir(dir.c_str()) == 0 || errno == ENOENT;
}

void CgroupTree::RemoveScope() const {
  // Innermost first; stops (harmlessly) at the first directory still holding a group.
  for (auto it = scope_dirs_.rbegin(); it != scope_dirs_.rend(); ++it)
    if (::rmdir(it->c_str()) != 0) break;
}

}  // namespace herd::agent
