#include "controller/ops/system_parts.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "controller/core/mux.hpp"
#include "controller/core/trace.hpp"
#include "controller/ops/node_targets.hpp"
#include "controller/provider/aws_provider.hpp"
#include "controller/provider/local_provider.hpp"
#include "controller/provider/slurm_provider.hpp"
#include "controller/provider/ssh_pool_provider.hpp"
#include "controller/ssh/kept_forward.hpp"
#include "controller/state/cluster_lock.hpp"
#include "controller/state/herd_home.hpp"
#include "controller/storage/storage_ops.hpp"
#include "shared/common/log.hpp"

namespace herd::ops {

using namespace herd::controller;

namespace {

bool IsAws(const std::string& infra) { return infra == "aws" || infra.rfind("aws/", 0) == 0; }

// Why a stream of cluster `c` that lost its head should not redial: a `herd down` or `herd stop`
// of the cluster is running (both take the cluster's lock before they stop its mux, close its
// ControlMasters or remove its nodes, and hold it until they are done), or has finished (the
// record is gone, STOPPED, or another cluster of the same name was launched since). Ok when none
// of these holds or cannot be read: a head that restarts is redialed as always.
Status WhyClusterGone(const ClusterRecord& c, const StoreOpener& open_store) {
  const std::string down = "cluster " + c.name + " was taken down (`herd down`)";
  const std::string stop = "cluster " + c.name + " was stopped (`herd stop`)";
  if (auto what = ClusterLock::HeldFor(c.name)) {
    if (*what == kDownLockWhat) return Cancelled(down);
    if (*what == kStopLockWhat) return Cancelled(stop);
  }
  auto store = open_store();
  if (!store.ok()) return Status::Ok();
  auto now = (*store)->Get(c.name);
  if (!now.ok()) return Status::Ok();
  if (!now->has_value() || (*now)->launched_unix_ms != c.launched_unix_ms) return Cancelled(down);
  if ((*now)->status == ClusterStatus::kStopped) return Cancelled(stop);
  return Status::Ok();
}

std::string CurrentUser() {
  if (const char* u = ::getenv("USER"); u && *u) return u;
  return "root";
}

}  // namespace

Result<std::unique_ptr<Provider>> MakeSystemProvider(const std::string& infra,
                                                     const Resources* res) {
  if (infra.empty() || infra == "local") return std::unique_ptr<Provider>(new LocalProvider());
  if (infra.rfind("ssh/", 0) == 0 && infra.size() > 4) {
    return std::unique_ptr<Provider>(new SshPoolProvider(infra.substr(4)));
  }
  if (IsAws(infra)) {
    HERD_ASSIGN_OR_RETURN(AwsLaunchSpec spec, ParseAwsInfra(infra));
    if (res != nullptr) {
      spec.demand = {res->accelerator,   res->accelerator_count, res->cpus,
                     res->cpus_at_least, res->memory_gb,         res->memory_at_least};
      spec.instance_type = res->instance_type;
      spec.use_spot = res->use_spot;
      spec.disk_size_gb = res->disk_size;
      spec.ports = res->ports;
    }
    // Each zone tried is printed on its own line, also over a live progress line.
    auto note = [](const std::string& line) {
      std::fprintf(stderr, "%s%s\n", ::isatty(STDERR_FILENO) ? "\r\033[K" : "", line.c_str());
      std::fflush(stderr);
    };
    return std::unique_ptr<Provider>(
        new AwsProvider(std::move(spec), nullptr, SystemGetenv, "", note));
  }
  if (IsSlurmInfra(infra)) {
    SlurmDemand demand;
    if (res != nullptr) {
      demand = {res->accelerator, res->accelerator_count, res->cpus.value_or(0),
                res->memory_gb.value_or(0)};
    }
    return std::unique_ptr<Provider>(
        new SlurmProvider(infra, std::move(demand), std::make_shared<OpenSshRunner>()));
  }
  return InvalidArgument("infra '" + infra +
                         "' is not available: herd provides 'local', 'ssh/<pool>', "
                         "'aws[/REGION[/ZONE]]' and 'slurm[/CLUSTER[/PARTITION]]'");
}

Result<std::unique_ptr<HeadApi>> SshHeadConnector::Connect(const ClusterRecord& c, bool start_mux) {
  const NodeRecord* head = HeadNode(c);
  if (!head) return FailedPrecondition("cluster " + c.name + " has no nodes");
  // The forward to the head outlives this command (KeptForward): a warm command dials the
  // recorded port and starts no ssh process; a failed dial renews the forward once.
  auto forward = [c, ssh = ssh_, target = TargetOf(c, *head),
                  ip = InternalIp(*head)](int stale) -> Result<int> {
    KeptForward kept(*ssh, target, ip, c.head_port, c.control_dir + "/head.port");
    if (stale < 0) return kept.Recorded();
    return kept.Renew(stale);
  };
  // A warm command goes through the cluster's mux (mux.hpp) when one runs; one that dialled the
  // head itself starts a mux for the commands after it.
  std::string mux = MuxSocketPath(c.state_dir);
  auto connect = [&](int port) -> Result<std::unique_ptr<HeadApi>> {
    HeadEndpoint endpoint{"127.0.0.1", static_cast<uint16_t>(port), c.certs_dir, mux};
    HERD_ASSIGN_OR_RETURN(auto client, HeadClient::Connect(endpoint));
    if (start_mux && !mux.empty() && !client->via_mux()) {
      Status spawned = SpawnMux(mux, endpoint.host + ":" + std::to_string(port), c.certs_dir);
      if (!spawned.ok()) {
        HERD_LOG(kDebug) << "no mux for " << c.name << ": " << spawned.message();
      }
    }
    // A stream that lost its connection redials through a renewed forward (the master may have
    // died with the old one).
    client->SetRedial([forward, endpoint]() mutable -> Result<HeadEndpoint> {
      HERD_ASSIGN_OR_RETURN(int p, forward(endpoint.port));
      endpoint.port = static_cast<uint16_t>(p);
      return endpoint;
    });
    client->SetGoneCheck([c, open = open_store_] { return WhyClusterGone(c, open); });
    return std::unique_ptr<HeadApi>(std::move(client));
  };
  HERD_ASSIGN_OR_RETURN(int port, forward(-1));
  TraceMark("kept forward port read");
  if (port > 0) {
    auto client = connect(port);
    if (client.ok()) return client;
    HERD_LOG(kDebug) << "the kept forward to the head of " << c.name << " (port " << port
                     << ") failed: " << client.status().message() << "; renewing it";
  }
  HERD_ASSIGN_OR_RETURN(port, forward(port));
  TraceMark("kept forward renewed");
  return connect(port);
}

ClusterOpsParts SystemParts(std::string user) {
  ClusterOpsParts p;
  p.providers = MakeSystemProvider;
  p.ssh = std::make_shared<OpenSshRunner>();
  p.open_store = [] { return ClusterStore::Open(StateDbPath()); };
  p.heads = std::make_shared<SshHeadConnector>(p.ssh, p.open_store);
  p.clock = std::make_shared<SystemClock>();
  p.user = user.empty() ? CurrentUser() : std::move(user);
  p.storage = std::make_shared<storage::StorageParts>(storage::SystemStorageParts());
  return p;
}

}  // namespace herd::ops
