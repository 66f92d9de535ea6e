// The team server's side of autostop for cloud clusters (ClusterOps::SweepAutostop, AutostopNow):
// the head of a cluster whose autostop the server carries out (SetAutostop.server_stops) only
// reports, in its NodesReply, that it has been idle long enough; `herd _autostop-sweep`, which
// the server runs for each of its users, stops (or tears down) such clusters through the same
// Stop and Down as `herd stop` / `herd down`, with the server's own cloud credentials.
#include <filesystem>
#include <utility>

#include "controller/ops/cluster_ops.hpp"
#include "controller/state/cluster_lock.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"

namespace herd::ops {

using controller::ClusterLock;
using controller::ClusterRecord;
using controller::ClusterStatus;

namespace fs = std::filesystem;

namespace {

// Written under the lock before the stop, removed once it is done (the record says STOPPED, or
// the cluster is gone with its directory): a stop that failed after the agents were stopped
// (EC2 refused, the network was down) leaves a head that no longer answers, and the next sweep
// finishes that stop instead of leaving the machines running.
std::string StoppingMarker(const ClusterRecord& c) { return c.state_dir + "/autostop-stopping"; }

// Whether the head says its autostop is due; an error when it does not answer.
Result<bool> HeadSaysDue(ClusterOps& ops, const ClusterRecord& c) {
  HERD_ASSIGN_OR_RETURN(auto client, ops.ConnectHead(c, false));
  HERD_ASSIGN_OR_RETURN(herd::v1::NodesReply nodes, client->Nodes());
  return nodes.autostop_due();
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
    if (ServerSweepsAutostop(c)) asked.push_back(c);
  }
  if (asked.empty()) return out;
  // Every head at once, within kStatusHeadTimeout; then one cluster after another.
  const std::map<std::string, ClusterHealth> health = Health(asked);
  for (const ClusterRecord& c : asked) {
    auto h = health.find(c.name);
    const bool due = h != health.end() && h->second.answered && h->second.autostop_due;
    std::error_code ec;
    if (!due && !fs::exists(StoppingMarker(c), ec)) continue;
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
  if (!ServerSweepsAutostop(c)) {
    return FailedPrecondition("cluster " + cluster + " is no longer UP with autostop set");
  }
  // Asked again under the lock: a job submitted since the sweep's question keeps the cluster. A
  // head that does not answer is stopped only when an earlier stop of this cluster's autostop
  // did not finish (it stopped the agents first).
  const std::string marker = StoppingMarker(c);
  std::error_code ec;
  const bool resuming = fs::exists(marker, ec);
  Result<bool> due = HeadSaysDue(*this, c);
  if (!due.ok() && !resuming) {
    return Unavailable("the head did not answer (" + due.status().message() + "); not stopped");
  }
  if (due.ok() && !*due) {
    fs::remove(marker, ec);  // the head runs again (a `herd start`): nothing left to finish
    return FailedPrecondition("cluster " + cluster + " is no longer idle");
  }
  HERD_RETURN_IF_ERROR(WriteFileAtomic(marker, "", 0644));
  Status s = c.autostop_down ? DownHolding(std::move(*lock), cluster, progress)
                             : StopHolding(std::move(*lock), cluster, progress);
  if (s.ok()) fs::remove(marker, ec);
  return s;
}

}  // namespace herd::ops
