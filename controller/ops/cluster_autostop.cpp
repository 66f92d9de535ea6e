// The team server's side of autostop for cloud clusters (ClusterOps::SweepAutostop, AutostopNow):
// the head of a cluster whose autostop the server carries out (SetAutostop.server_stops) only
// reports, in its NodesReply, that it has been idle long enough; `herd _autostop-sweep`, which
// the server runs for each of its users, stops (or tears down) such clusters through the same
// Stop and Down as `herd stop` / `herd down`, with the server's own cloud credentials.
#include <utility>

#include "controller/ops/cluster_ops.hpp"
#include "controller/state/cluster_lock.hpp"
#include "shared/common/limits.hpp"

namespace herd::ops {

using controller::ClusterLock;
using controller::ClusterRecord;
using controller::ClusterStatus;

namespace {

bool ServerMayStop(const ClusterRecord& c) {
  return c.status == ClusterStatus::kUp && c.autostop_idle_minutes >= 0 && c.provider != "local";
}

}  // namespace

std::vector<AutostopOutcome> ClusterOps::SweepAutostop(const ProgressFn& progress) {
  std::vector<AutostopOutcome> out;
  auto all = List();
  if (!all.ok()) {
    out.push_back({"", false, all.status()});
    return out;
  }
  std::vector<ClusterRecord> asked;
  for (const ClusterRecord& c : *all) {
    if (ServerMayStop(c)) asked.push_back(c);
  }
  if (asked.empty()) return out;
  // Every head at once, within kStatusHeadTimeout; then one cluster after another.
  const std::map<std::string, ClusterHealth> health = Health(asked);
  for (const ClusterRecord& c : asked) {
    auto h = health.find(c.name);
    if (h == health.end() || !h->second.answered || !h->second.autostop_due) continue;
    out.push_back({c.name, c.autostop_down, AutostopNow(c.name, progress)});
  }
  return out;
}

Status ClusterOps::AutostopNow(const std::string& cluster, const ProgressFn& progress) {
  // At once: a command that holds the lock is using the cluster, which is then not idle; the
  // next sweep looks again.
  auto lock = ClusterLock::Acquire(cluster, std::chrono::milliseconds(0), kAutostopLockWhat);
  if (!lock.ok()) return Unavailable(lock.status().message());
  HERD_ASSIGN_OR_RETURN(ClusterRecord c, Get(cluster));
  if (!ServerMayStop(c)) {
    return FailedPrecondition("cluster " + cluster + " is no longer UP with autostop set");
  }
  {
    // Asked again under the lock: a job submitted since the sweep's question keeps the cluster.
    auto client = ConnectHead(c, false);
    if (!client.ok()) {
      return Unavailable("the head did not answer (" + client.status().message() +
                         "); not stopped");
    }
    auto nodes = (*client)->Nodes();
    if (!nodes.ok()) {
      return Unavailable("the head did not answer (" + nodes.status().message() + "); not stopped");
    }
    if (!nodes->autostop_due()) {
      return FailedPrecondition("cluster " + cluster + " is no longer idle");
    }
  }
  return c.autostop_down ? DownHolding(std::move(*lock), cluster, progress)
                         : StopHolding(std::move(*lock), cluster, progress);
}

}  // namespace herd::ops
