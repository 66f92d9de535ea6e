// The team server's side of autostop for cloud clusters (ClusterOps::SweepAutostop, AutostopNow):
// the head of a cluster whose autostop the server carries out (SetAutostop.server_stops) only
// reports, in its NodesReply, that it has been idle long enough; `herd _autostop-sweep`, which
// the server runs for each of its users, stops (or tears down) such clusters through the same
// Stop and Down as `herd stop` / `herd down`, with the server's own cloud credentials.
#include <filesystem>
#include <utility>

#include "controller/ops/cluster_ops.hpp"
#include "controller/ops/namespace_anchor.hpp"
#include "controller/state/api_config.hpp"
#include "controller/state/cluster_lock.hpp"
#include "controller/state/herd_home.hpp"
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

Status ClusterOps::SetAutostop(const std::string& cluster, int idle_minutes, bool down) {
  HERD_ASSIGN_OR_RETURN(auto lock,
                        ClusterLock::Acquire(cluster, limits::kClusterLockWait, "herd autostop"));
  HERD_ASSIGN_OR_RETURN(auto store, parts_.open_store());
  HERD_ASSIGN_OR_RETURN(ClusterRecord c, Get(cluster));
  herd::v1::SetAutostop setting;
  setting.set_idle_minutes(idle_minutes < 0 ? -1 : idle_minutes);
  setting.set_down(idle_minutes >= 0 && down);
  if (idle_minutes >= 0 && c.provider != "local") {
    HERD_ASSIGN_OR_RETURN(auto provider, parts_.providers(c.infra, nullptr));
    const std::string provider_dir = c.state_dir + "/provider";
    if (!down) HERD_RETURN_IF_ERROR(provider->CheckStoppable(c.name, provider_dir));
    if (controller::AutostopByServer()) {
      // Under a team server: the server stops the machines with its own credentials once the
      // head reports the cluster idle long enough (SweepAutostop); no key goes to the head.
      HERD_RETURN_IF_ERROR(provider->CheckAutostop(c.name, provider_dir));
      setting.set_server_stops(true);
    } else {
      // A cloud's machines stop themselves: the head calls the cloud with a key scoped to them.
      HERD_ASSIGN_OR_RETURN(controller::AutostopGrant g,
                            provider->GrantAutostop(c.name, provider_dir));
      herd::v1::CloudAutostop* cloud = setting.mutable_cloud();
      cloud->set_provider(g.provider);
      cloud->set_region(g.region);
      cloud->set_endpoint(g.endpoint);
      for (const auto& id : g.instance_ids) cloud->add_instance_ids(id);
      cloud->set_access_key_id(g.access_key_id);
      cloud->set_secret_access_key(g.secret_access_key);
    }
  } else if (idle_minutes >= 0) {
    // The local provider's "cloud API" is this machine: the head node enters the controller's
    // network and mount namespaces and runs this same herd with this controller's state. PID 1's
    // namespaces may be out of reach (a sandboxed init), so a process of ours pins them.
    std::error_code ec;
    std::string self = fs::read_symlink("/proc/self/exe", ec).string();
    if (ec) return IoError("cannot find the herd binary: " + ec.message());
    HERD_ASSIGN_OR_RETURN(int anchor, EnsureNamespaceAnchor(c));
    auto q = [](const std::string& s) { return "'" + s + "'"; };
    setting.set_command("exec nsenter --target " + std::to_string(anchor) +
                        " --mount --net -- env HERD_HOME=" + q(controller::HerdHome()) +
                        " HOME=" + q(controller::UserHome()) + " " + q(self) +
                        (down ? " down " : " stop ") + c.name + " -y");
  }
  HERD_ASSIGN_OR_RETURN(auto client, ConnectHead(c));
  HERD_RETURN_IF_ERROR(client->SetAutostop(setting));
  c.autostop_idle_minutes = idle_minutes < 0 ? -1 : idle_minutes;
  c.autostop_down = idle_minutes >= 0 && down;
  return store->Put(c);
}

}  // namespace herd::ops
