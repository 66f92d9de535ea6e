#include "controller/ops/namespace_anchor.hpp"

#include <signal.h>

#include <fstream>
#include <string>

#include "controller/ssh/subprocess.hpp"

namespace herd::ops {

using controller::ClusterRecord;
using controller::SpawnDetached;

namespace {

std::string AnchorPidFile(const ClusterRecord& c) { return c.state_dir + "/ns-anchor.pid"; }

bool AnchorAlive(int pid) {
  if (pid <= 0) return false;
  std::ifstream cmd("/proc/" + std::to_string(pid) + "/cmdline");
  std::string argv0;
  std::getline(cmd, argv0, '\0');
  return argv0 == "sleep";
}

}  // namespace

Result<int> EnsureNamespaceAnchor(const ClusterRecord& c) {
  int pid = 0;
  {
    std::ifstream in(AnchorPidFile(c));
    in >> pid;
  }
  if (AnchorAlive(pid)) return pid;
  HERD_ASSIGN_OR_RETURN(pid_t p, SpawnDetached({"sleep", "infinity"}, "/dev/null"));
  std::ofstream(AnchorPidFile(c)) << p << "\n";
  return static_cast<int>(p);
}

void KillNamespaceAnchor(const ClusterRecord& c) {
  int pid = 0;
  std::ifstream in(AnchorPidFile(c));
  if (in >> pid && AnchorAlive(pid)) ::kill(pid, SIGKILL);
}

}  // namespace herd::ops
