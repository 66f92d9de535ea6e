// ClusterOps::Refresh: the clusters' machines as their providers see them, written back to the
// records (SkyPilot's `sky status -r`, and its automatic refresh of clusters that may have
// stopped themselves).
#include <algorithm>
#include <thread>
#include <vector>

#include "controller/core/mux.hpp"
#include "controller/ops/cluster_ops.hpp"
#include "controller/ops/node_targets.hpp"
#include "controller/state/cluster_lock.hpp"
#include "shared/common/limits.hpp"

namespace herd::ops {

using controller::ClusterRecord;
using controller::ClusterStatus;
using controller::MachinesState;

namespace {

bool MayHaveStoppedItself(const ClusterRecord& c) {
  return c.status == ClusterStatus::kUp && c.autostop_idle_minutes >= 0 && c.provider != "local";
}

}  // namespace

RefreshOutcome ClusterOps::Refresh(const std::vector<ClusterRecord>& clusters, bool all) {
  RefreshOutcome out;
  std::vector<const ClusterRecord*> asked;
  for (const ClusterRecord& c : clusters) {
    // The team server is stopping (tearing down) it for its autostop (AutostopNow holds the
    // lock until it is done): its machines are not asked meanwhile.
    if (MayHaveStoppedItself(c)) {
      if (auto what = controller::ClusterLock::HeldFor(c.name);
          what && *what == kAutostopLockWhat) {
        out.shown[c.name] = "AUTOSTOPPING";
        continue;
      }
    }
    if (all ? c.status == ClusterStatus::kUp || c.status == ClusterStatus::kStopped
            : MayHaveStoppedItself(c)) {
      asked.push_back(&c);
    }
  }
  // The providers are asked at once (a cloud API call, an squeue over SSH: each its own provider
  // object and connection), at most kSshMaxParallel at a time; what they say is acted on after,
  // one cluster at a time in the list's order (locks, the store, teardowns).
  std::vector<Result<controller::MachinesView>> answers(
      asked.size(), Result<controller::MachinesView>(Unavailable("not asked")));
  for (std::size_t first = 0; first < asked.size(); first += limits::kSshMaxParallel) {
    const std::size_t end =
        std::min(asked.size(), first + static_cast<std::size_t>(limits::kSshMaxParallel));
    std::vector<std::thread> threads;
    for (std::size_t i = first; i < end; ++i) {
      threads.emplace_back([this, &asked, &answers, i] {
        const ClusterRecord& c = *asked[i];
        auto provider = parts_.providers(c.infra, nullptr);
        answers[i] = provider.ok() ? (*provider)->Machines(c.name, c.state_dir + "/provider")
                                   : Result<controller::MachinesView>(provider.status());
      });
    }
    for (auto& t : threads) t.join();
  }
  for (std::size_t i = 0; i < asked.size(); ++i) {
    const ClusterRecord& c = *asked[i];
    const Result<controller::MachinesView>& seen = answers[i];
    if (!seen.ok()) {
      out.notes.push_back("Cluster " + c.name + ": cannot refresh: " + seen.status().message());
      continue;
    }
    switch (seen->state) {
      case MachinesState::kUnknown:
        break;
      case MachinesState::kRunning:
        if (c.status == ClusterStatus::kStopped) {
          out.shown[c.name] = "INIT";
          out.notes.push_back("Cluster " + c.name + ": its machines run (" + seen->detail +
                              ") though herd stopped it; `herd start " + c.name +
                              "` brings its agents back.");
        }
        break;
      case MachinesState::kStopping:
        out.shown[c.name] = c.autostop_idle_minutes >= 0 ? "AUTOSTOPPING" : "INIT";
        break;
      case MachinesState::kMixed:
        out.shown[c.name] = "INIT";
        out.notes.push_back("Cluster " + c.name + ": only some machines run (" + seen->detail +
                            "); `herd start " + c.name + "` or `herd down " + c.name + "`.");
        break;
      case MachinesState::kStopped: {
        if (c.status == ClusterStatus::kStopped) break;
        auto lock = controller::ClusterLock::Acquire(c.name, limits::kClusterLockWait,
                                                     "herd status --refresh");
        auto store = parts_.open_store();
        if (!lock.ok() || !store.ok()) {
          out.notes.push_back("Cluster " + c.name + ": cannot refresh: " +
                              (lock.ok() ? store.status() : lock.status()).message());
          break;
        }
        auto now = (*store)->Get(c.name);
        if (!now.ok() || !now->has_value() || (*now)->status != ClusterStatus::kUp) break;
        ClusterRecord r = **now;
        controller::StopMux(controller::MuxSocketPath(r.state_dir));
        for (const auto& t : TargetsOf(r)) (void)parts_.ssh->CloseMaster(t);
        r.status = ClusterStatus::kStopped;
        if (Status s = (*store)->Put(r); !s.ok()) {
          out.notes.push_back("Cluster " + c.name + ": cannot refresh: " + s.message());
        }
        break;
      }
      case MachinesState::kGone: {
        // Autodown (or a teardown outside herd): what is left (security group, key pair, the
        // autostop user, local files) goes, and with it the record.
        Status s = Down(c.name, nullptr);
        if (!s.ok()) {
          out.shown[c.name] = "INIT";
          out.notes.push_back("Cluster " + c.name + ": its machines are gone (" + seen->detail +
                              "), but removing the rest failed: " + s.message() + "; `herd down " +
                              c.name + "` again.");
        } else {
          out.notes.push_back("Cluster " + c.name + ": its machines are gone (" +
                              (c.autostop_down ? "autodown" : seen->detail) +
                              "); its record is removed.");
        }
        break;
      }
    }
  }
  return out;
}

}  // namespace herd::ops
