#include "controller/ops/system_parts.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

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
    if (*what == kAutostopLockWhat) {
      return Cancelled("cluster " + c.name + " was " +
                       (c.autostop_down ? "taken down" : "stopped") +
                       " for its autostop (by the team server)");
    }
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
  std::string mux = via_mux_ ? MuxSocketPath(c.state_dir) : std::string();
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

namespace {

// The idle kept head connections of this process (KeepHeadConnections), one per cluster.
class KeptHeads {
 public:
  // A kept connection of key that is still open, or null.
  std::unique_ptr<HeadApi> Take(const std::string& key) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = idle_.find(key);
    if (it == idle_.end()) return nullptr;
    std::unique_ptr<HeadApi> kept = std::move(it->second);
    idle_.erase(it);
    return kept->StillOpen() ? std::move(kept) : nullptr;
  }
  // Keeps client for the next command of key (one per key: a second one is closed), and drops
  // the kept connections that closed meanwhile (a cluster taken down or launched again).
  void Give(const std::string& key, std::unique_ptr<HeadApi> client) {
    std::lock_guard<std::mutex> l(mu_);
    std::erase_if(idle_, [](auto& kv) { return !kv.second->StillOpen(); });
    idle_.try_emplace(key, std::move(client));
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<HeadApi>> idle_;
};

// Set once by KeepHeadConnections, for the rest of the process (never destroyed: a question
// thread of AskEachHead may give its connection back after main returned).
std::atomic<KeptHeads*> kept_heads{nullptr};

// One command's use of a head connection, kept or new: given back to the kept ones at its end
// when only reads went over it and each one succeeded.
class KeptHead final : public HeadApi {
 public:
  using DialFn = std::function<Result<std::unique_ptr<HeadApi>>()>;
  KeptHead(KeptHeads& pool, std::string key, std::unique_ptr<HeadApi> client, bool reused,
           DialFn dial)
      : pool_(pool),
        key_(std::move(key)),
        client_(std::move(client)),
        reused_(reused),
        dial_(std::move(dial)) {}
  ~KeptHead() override {
    if (clean_ && client_) pool_.Give(key_, std::move(client_));
  }

  Result<int64_t> Submit(const herd::v1::TaskSpec& task, const std::string& user,
                         const std::string& task_id, int attempt) override {
    clean_ = false;
    return client_->Submit(task, user, task_id, attempt);
  }
  Result<herd::v1::SubmitReply> SubmitRequest(const herd::v1::SubmitJob& request) override {
    clean_ = false;
    return client_->SubmitRequest(request);
  }
  Result<std::vector<herd::v1::JobInfo>> Queue(bool skip_finished,
                                               int64_t* older_left_out) override {
    return Read([&](HeadApi& h) { return h.Queue(skip_finished, older_left_out); });
  }
  Result<std::vector<int64_t>> Cancel(const std::vector<int64_t>& job_ids, bool all,
                                      std::optional<std::chrono::milliseconds> grace) override {
    clean_ = false;
    return client_->Cancel(job_ids, all, grace);
  }
  Result<herd::v1::StackReply> Stacks(int64_t job_id) override {
    return Read([&](HeadApi& h) { return h.Stacks(job_id); });
  }
  Result<herd::v1::NodesReply> Nodes() override {
    return Read([](HeadApi& h) { return h.Nodes(); });
  }
  Result<herd::v1::NodesReply> Drain(const std::string& node_id, bool drain,
                                     const std::string& reason) override {
    clean_ = false;
    return client_->Drain(node_id, drain, reason);
  }
  Status SetAutostop(const herd::v1::SetAutostop& setting) override {
    clean_ = false;
    return client_->SetAutostop(setting);
  }
  Result<herd::v1::JobInfo> Stream(int64_t job_id, uint64_t offset, bool follow,
                                   const StreamCallbacks& callbacks, int tail_lines) override {
    if (follow) {
      clean_ = false;
      return client_->Stream(job_id, offset, follow, callbacks, tail_lines);
    }
    // Asked again on a fresh connection only while nothing of the first answer was passed on.
    bool passed_on = false;
    StreamCallbacks cb = callbacks;
    if (callbacks.on_data) {
      cb.on_data = [&](std::string_view bytes) {
        passed_on = true;
        callbacks.on_data(bytes);
      };
    }
    if (callbacks.on_status) {
      cb.on_status = [&](const herd::v1::JobInfo& job) {
        passed_on = true;
        callbacks.on_status(job);
      };
    }
    return Read([&](HeadApi& h) { return h.Stream(job_id, offset, follow, cb, tail_lines); },
                &passed_on);
  }
  bool StillOpen() override { return client_->StillOpen(); }

 private:
  // A read; on a kept connection that turned out closed (Unavailable), once more on a new one.
  template <typename F>
  auto Read(F call, const bool* passed_on = nullptr) -> decltype(call(std::declval<HeadApi&>())) {
    auto r = call(*client_);
    if (!r.ok() && reused_ && r.status().code() == Code::kUnavailable &&
        !(passed_on && *passed_on)) {
      reused_ = false;
      auto fresh = dial_();
      if (!fresh.ok()) {
        clean_ = false;
        return fresh.status();
      }
      client_ = std::move(fresh).value();
      r = call(*client_);
    }
    if (!r.ok()) clean_ = false;
    return r;
  }

  KeptHeads& pool_;
  const std::string key_;
  std::unique_ptr<HeadApi> client_;
  bool reused_;
  DialFn dial_;
  bool clean_ = true;
};

// Heads through `dial` (SshHeadConnector), their connections kept (KeepHeadConnections).
class KeptHeadConnector final : public HeadConnector {
 public:
  KeptHeadConnector(std::shared_ptr<HeadConnector> dial, KeptHeads& pool)
      : dial_(std::move(dial)), pool_(pool) {}
  Result<std::unique_ptr<HeadApi>> Connect(const ClusterRecord& c, bool start_mux) override {
    // A cluster launched again under its name is another head.
    const std::string key = c.name + '\n' + c.state_dir + '\n' +
                            std::to_string(c.launched_unix_ms) + '\n' + std::to_string(c.head_port);
    KeptHead::DialFn dial = [d = dial_, c, start_mux] { return d->Connect(c, start_mux); };
    std::unique_ptr<HeadApi> client = pool_.Take(key);
    const bool reused = client != nullptr;
    if (!reused) {
      HERD_ASSIGN_OR_RETURN(client, dial());
    }
    return std::unique_ptr<HeadApi>(
        std::make_unique<KeptHead>(pool_, key, std::move(client), reused, std::move(dial)));
  }

 private:
  std::shared_ptr<HeadConnector> dial_;
  KeptHeads& pool_;
};

}  // namespace

void KeepHeadConnections() {
  if (kept_heads.load() == nullptr) kept_heads = new KeptHeads();
}

namespace {

// The connection every SystemParts shares once KeepClusterStoreOpen was called, by the store's
// path (never destroyed: a question thread of AskEachHead may still use it after main returned).
struct KeptStore {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<ClusterStore>> by_path;
};
std::atomic<KeptStore*> kept_store{nullptr};

Result<std::shared_ptr<ClusterStore>> OpenClusterStore() {
  const std::string path = StateDbPath();
  KeptStore* kept = kept_store.load();
  if (kept == nullptr) {
    HERD_ASSIGN_OR_RETURN(auto store, ClusterStore::Open(path));
    return std::shared_ptr<ClusterStore>(std::move(store));
  }
  std::lock_guard<std::mutex> l(kept->mu);
  auto& store = kept->by_path[path];
  if (!store) {
    HERD_ASSIGN_OR_RETURN(auto opened, ClusterStore::Open(path));
    store = std::move(opened);
  }
  return store;
}

}  // namespace

void KeepClusterStoreOpen() {
  if (kept_store.load() == nullptr) kept_store = new KeptStore();
}

ClusterOpsParts SystemParts(std::string user) {
  ClusterOpsParts p;
  p.providers = MakeSystemProvider;
  p.ssh = std::make_shared<OpenSshRunner>();
  p.open_store = OpenClusterStore;
  if (KeptHeads* kept = kept_heads.load()) {
    // A kept connection is dialled once and serves many reads: its own, not relayed by the mux.
    p.heads = std::make_shared<KeptHeadConnector>(
        std::make_shared<SshHeadConnector>(p.ssh, p.open_store, /*via_mux=*/false), *kept);
  } else {
    p.heads = std::make_shared<SshHeadConnector>(p.ssh, p.open_store);
  }
  p.clock = std::make_shared<SystemClock>();
  p.user = user.empty() ? CurrentUser() : std::move(user);
  p.storage = std::make_shared<storage::StorageParts>(storage::SystemStorageParts());
  return p;
}

}  // namespace herd::ops
