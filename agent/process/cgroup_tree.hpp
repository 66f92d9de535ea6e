// Per-group cgroups for the processes the agent spawns, so that KillGroup finds every descendant,
// including those that called setsid. Works with cgroup v2 (unified or hybrid) or a v1 pids or
// freezer hierarchy, whichever this machine lets the agent use; none is required.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "shared/common/status.hpp"

namespace herd::agent {

// A cgroup hierarchy where the agent can create cgroups and move processes into them.
struct CgroupHierarchy {
  std::string kind;  // "cgroup2", "cgroup1/pids", "cgroup1/freezer"
  std::string base;  // the agent's own cgroup in that hierarchy, e.g. /sys/fs/cgroup/unified
};

// Probes once per process (by moving a short-lived child into a test cgroup, so the answer is what
// really works here, not what the mounts suggest) and caches the answer. nullopt: no cgroups.
const std::optional<CgroupHierarchy>& DetectCgroupHierarchy();

// The cgroups <base>/<scope>/<group>; scope may have several components ("herd/node-1"). Every
// method is a no-op when hierarchy is nullopt.
class CgroupTree {
 public:
  CgroupTree(std::optional<CgroupHierarchy> hierarchy, std::string scope);

  bool enabled() const { return hierarchy_.has_value(); }
  // The directory of the group's cgroup ("" when disabled); it need not exist.
  std::string GroupDir(const std::string& group) const;
  // The directory that holds the groups' cgroups ("" when disabled); it need not exist.
  std::string ScopeDir() const { return hierarchy_ ? scope_dirs_.back() : std::string(); }
  // Creates the group's cgroup if needed and returns the cgroup.procs file a new process writes
  // its pid to.
  Result<std::string> Prepare(const std::string& group);
  // Live (non-zombie) processes in the group's cgroup.
  std::vector<int> LivePids(const std::string& group) const;
  // cgroup v2 (5.14+) kills the whole cgroup atomically, racing no fork; false where unsupported.
  bool KillAll(const std::string& group) const;
  // Removes the group's cgroup if it is empty; true when it is gone.
  bool Remove(const std::string& group) const;
  // Removes the scope directories that no group cgroup is left in.
  void RemoveScope() const;

 private:
  std::optional<CgroupHierarchy> hierarchy_;
  std::vector<std::string> scope_dirs_;  // outermost first; the last one holds the groups
};

}  // namespace herd::agent
