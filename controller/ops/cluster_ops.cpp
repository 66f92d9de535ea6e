#include "controller/ops/cluster_ops.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "controller/bootstrap/agent_bootstrap.hpp"
#include "controller/bootstrap/remote_scripts.hpp"
#include "controller/core/mux.hpp"
#include "controller/core/trace.hpp"
#include "controller/ops/agent_install.hpp"
#include "controller/ops/container_check.hpp"
#include "controller/ops/namespace_anchor.hpp"
#include "controller/ops/node_targets.hpp"
#include "controller/ssh/parallel.hpp"
#include "controller/ssh/ssh_command.hpp"
#include "controller/ssh/ssh_key.hpp"
#include "controller/ssh/subprocess.hpp"
#include "controller/state/api_config.hpp"
#include "controller/state/cluster_lock.hpp"
#include "controller/state/herd_home.hpp"
#include "controller/state/ssh_config.hpp"
#include "controller/storage/storage_ops.hpp"
#include "shared/common/agent_layout.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"
#include "shared/tls/certs.hpp"

namespace herd::ops {

StoreOpener OwnConnectionTo(std::function<std::string()> path) {
  return [path = std::move(path)]() -> Result<std::shared_ptr<controller::ClusterStore>> {
    HERD_ASSIGN_OR_RETURN(auto store, controller::ClusterStore::Open(path()));
    return std::shared_ptr<controller::ClusterStore>(std::move(store));
  };
}

namespace fs = std::filesystem;
using namespace herd::controller;
using herd::v1::JobInfo;

namespace {

// The head listens here on its node. Nodes are separate machines (or namespaces), so one fixed
// port serves every cluster; the controller reaches it through an SSH forward, never directly.
constexpr int kHeadPort = 46590;

void Report(const ProgressFn& p, const std::string& stage, int done, int total) {
  if (p) p(stage, done, total);
}

Result<ClusterRecord> Lookup(ClusterStore& store, const std::string& name) {
  HERD_RETURN_IF_ERROR(ValidateClusterName(name));
  HERD_ASSIGN_OR_RETURN(auto rec, store.Get(name));
  if (!rec) {
    return NotFound("cluster " + name + " does not exist (see `herd status`; create it with " +
                    "`herd launch -c " + name + " TASK.yaml`)");
  }
  return *rec;
}

bool IsAws(const std::string& infra) { return infra == "aws" || infra.rfind("aws/", 0) == 0; }
bool IsSlurm(const std::string& infra) { return infra == "slurm" || infra.rfind("slurm/", 0) == 0; }

// ControlPath sockets must fit sun_path: keep the directory short and per cluster.
std::string ControlDirFor(const std::string& state_dir) {
  std::size_t h = std::hash<std::string>{}(state_dir);
  char buf[64];
  std::snprintf(buf, sizeof buf, "/tmp/herd-cm-%u-%08zx", static_cast<unsigned>(::getuid()),
                h & 0xffffffffu);
  return buf;
}

Status MakeClusterKey(const std::string& key_path) {
  if (fs::exists(key_path)) return Status::Ok();
  HERD_RETURN_IF_ERROR(EnsureDir(fs::path(key_path).parent_path().string()));
  HERD_RETURN_IF_ERROR(MakeEd25519KeyPair(key_path, "herd-cluster"));
  return Status::Ok();
}

// A task in a container image (launch, and exec with --image-id): every node must be able to start
// it before anything is synced or submitted (a Slurm cluster's agents are not under the login
// node's home: its nodes find out at the job's start). Nothing to do without an image.
Status CheckImageOnNodes(SshRunner& ssh, const ClusterRecord& c, const Task& task,
                         const ProgressFn& progress) {
  const Resources& res = task::PrimaryResources(task);
  if (res.container_image.empty() || c.provider == "slurm") return Status::Ok();
  const int total = static_cast<int>(c.nodes.size());
  Report(progress, "Checking the nodes' container runtime", 0, total);
  std::vector<NodeToCheck> nodes;
  for (const auto& node : c.nodes) nodes.push_back({node.name, TargetOf(c, node)});
  HERD_RETURN_IF_ERROR(CheckNodesForImage(ssh, nodes,
                                          std::string(kDefaultAgentDir) + "/bin/herdlet",
                                          res.container_image, task.envs, task.secrets));
  Report(progress, "Checking the nodes' container runtime", total, total);
  return Status::Ok();
}

}  // namespace

ClusterOps::ClusterOps(ClusterOpsParts parts) : parts_(std::move(parts)) {}

// A connection to the head if every node of c is registered and alive there; null otherwise.
std::unique_ptr<HeadApi> ClusterOps::ConnectIfAllAgentsAlive(const ClusterRecord& c) {
  auto client = ConnectHead(c);
  if (!client.ok()) return nullptr;
  auto nodes = (*client)->Nodes();
  if (!nodes.ok()) return nullptr;
  std::set<std::string> alive;
  for (int i = 0; i < nodes->nodes_size(); ++i) {
    if (nodes->alive(i)) alive.insert(nodes->nodes(i).node_id());
  }
  for (const auto& n : c.nodes) {
    if (!alive.count(n.name)) return nullptr;
  }
  return std::move(client).value();
}

Status ClusterOps::WaitSsh(const ClusterRecord& c, const ProgressFn& progress) {
  auto targets = TargetsOf(c);
  std::atomic<int> ready{0};
  int total = static_cast<int>(targets.size());
  Report(progress, "Waiting for SSH", 0, total);
  return ForEachParallel(
      targets.size(),
      [&](std::size_t i) -> Status {
        HERD_RETURN_IF_ERROR(parts_.ssh->WaitReady(targets[i], limits::kSshWaitTotal));
        Report(progress, "Waiting for SSH", ++ready, total);
        return Status::Ok();
      },
      [&](std::size_t i) { return DescribeTarget(targets[i]); });
}

Status ClusterOps::WaitAgents(const ClusterRecord& c, const ProgressFn& progress) {
  const auto deadline = parts_.clock->Now() + limits::kAgentRegisterTimeout;
  int total = static_cast<int>(c.nodes.size());
  Status last = Unavailable("no answer yet");
  while (parts_.clock->Now() < deadline) {
    auto client = ConnectHead(c);
    if (client.ok()) {
      auto nodes = (*client)->Nodes();
      if (nodes.ok()) {
        int alive = 0;
        std::set<std::string> up;
        for (int i = 0; i < nodes->nodes_size(); ++i) {
          if (nodes->alive(i)) {
            ++alive;
            up.insert(nodes->nodes(i).node_id());
          }
        }
        Report(progress, "Agents registered", alive, total);
        if (alive >= total) return Status::Ok();
        std::string missing;
        for (const auto& n : c.nodes) {
          if (!up.count(n.name))
            missing += (missing.empty() ? "" : ", ") + n.name + " (" + n.ip + ")";
        }
        last =
            Unavailable(std::to_string(alive) + " of " + std::to_string(total) +
                        " agents registered; not registered: " + missing +
                        (c.provider == "slurm"
                             ? " (its log: herdlet.log in /tmp/herd-" + c.name +
                                   "-<Slurm job>/<node>/ on the node)"
                             : std::string(" (its log: ~/.herd/agent/herdlet.log on the node)")));
      } else {
        last = nodes.status();
      }
    } else {
      last = client.status();
    }
    parts_.clock->SleepFor(limits::kAgentRegisterPoll);
  }
  return last.WithContext("cluster " + c.name + ": agents did not come up within " +
                          FormatSeconds(limits::kAgentRegisterTimeout));
}

// workdir -> ~/sky_workdir on every node (honouring .gitignore), and, on launch, file_mounts.
Status ClusterOps::SyncFiles(const ClusterRecord& c, const Task& task, bool mounts,
                             const ProgressFn& progress) {
  SshRunner& ssh = *parts_.ssh;
  // Each machine once: a Slurm cluster's nodes are all reached through its login node.
  std::vector<SshTarget> targets;
  for (const auto& t : TargetsOf(c)) {
    if (std::none_of(targets.begin(), targets.end(), [&](const SshTarget& u) {
          return u.host == t.host && u.port == t.port && u.user == t.user;
        })) {
      targets.push_back(t);
    }
  }
  std::vector<std::string> synced;  // what went into the synced machines' homes (or absolute)
  if (!task.workdir.empty()) {
    if (!fs::is_directory(task.workdir)) {
      return InvalidArgument("workdir: " + task.workdir + " is not a directory");
    }
    synced.push_back("sky_workdir");
    Report(progress, "Syncing workdir " + task.workdir, 0, static_cast<int>(targets.size()));
    std::string src = fs::absolute(task.workdir).string() + "/";
    HERD_RETURN_IF_ERROR(ForEachParallel(
        targets.size(),
        [&](std::size_t i) {
          return ssh.Rsync(targets[i], src, "sky_workdir/", true, limits::kSshWaitTotal);
        },
        [&](std::size_t i) { return DescribeTarget(targets[i]); }));
  }
  if (mounts) {
    for (const auto& [remote, local] : task.file_mounts) {
      if (!fs::exists(local))
        return InvalidArgument("file_mounts." + remote + ": " + local + " does not exist");
      std::string dst = remote.rfind("~/", 0) == 0 ? remote.substr(2) : remote;
      bool dir = fs::is_directory(local);
      std::string src = fs::absolute(local).string() + (dir ? "/" : "");
      std::string parent = dir ? dst : fs::path(dst).parent_path().string();
      synced.push_back(dst);
      HERD_RETURN_IF_ERROR(ForEachParallel(
          targets.size(),
          [&](std::size_t i) -> Status {
            if (!parent.empty()) {
              HERD_ASSIGN_OR_RETURN(auto r, ssh.Run(targets[i], "mkdir -p '" + parent + "'",
                                                    limits::kSshConnectTimeout));
              if (r.exit_code != 0) return IoError("mkdir " + parent + ": " + r.err);
            }
            return ssh.Rsync(targets[i], src, dir ? dst + "/" : dst, false, limits::kSshWaitTotal);
          },
          [&](std::size_t i) { return DescribeTarget(targets[i]); }));
    }
  }
  if (IsSlurm(c.infra) && !synced.empty()) {
    // The nodes behind the login node may not share its home: the provider copies them on.
    HERD_ASSIGN_OR_RETURN(auto provider, parts_.providers(c.infra, nullptr));
    HERD_RETURN_IF_ERROR(provider->SpreadFiles(c.name, c.state_dir + "/provider", synced));
  }
  return Status::Ok();
}

// Submits (through `client`, else a new connection to the head) and keeps the connection in
// result.head for following the job.
Status ClusterOps::Submit(const ClusterRecord& c, herd::v1::TaskSpec spec, LaunchResult& result,
                          std::unique_ptr<HeadApi> client, const std::string& task_id, int attempt,
                          const herd::v1::SubmitJob* extras) {
  if (!client) {
    HERD_ASSIGN_OR_RETURN(client, ConnectHead(c));
  }
  // A task no set of the cluster's nodes could hold is refused by the head, before it is queued
  // (Head::WhyNeverFits): no round trip for the nodes first.
  if (extras == nullptr) {
    HERD_ASSIGN_OR_RETURN(result.job_id, client->Submit(spec, parts_.user, task_id, attempt));
  } else {
    herd::v1::SubmitJob request = *extras;
    *request.mutable_task() = std::move(spec);
    request.set_user(parts_.user);
    request.set_task_id(task_id);
    request.set_attempt(attempt);
    HERD_ASSIGN_OR_RETURN(herd::v1::SubmitReply reply, client->SubmitRequest(request));
    result.job_id = reply.job_id();
    result.array_job_ids.assign(reply.array_job_ids().begin(), reply.array_job_ids().end());
  }
  result.head = std::move(client);
  return Status::Ok();
}

Result<std::unique_ptr<HeadApi>> ClusterOps::ConnectHead(const ClusterRecord& c, bool start_mux) {
  if (c.status == ClusterStatus::kStopped) {
    return FailedPrecondition("cluster " + c.name + " is STOPPED; start it with `herd start " +
                              c.name + "`");
  }
  return parts_.heads->Connect(c, start_mux);
}

Result<ClusterRecord> ClusterOps::Get(const std::string& cluster) {
  HERD_ASSIGN_OR_RETURN(auto store, parts_.open_store());
  return Lookup(*store, cluster);
}

Result<LaunchResult> ClusterOps::Launch(const Task& task, const LaunchOptions& o) {
  if (task.storage_mounts.empty()) return LaunchPrepared(task, o, nullptr);
  HERD_RETURN_IF_ERROR(ValidateClusterName(o.cluster));
  if (!parts_.storage) return FailedPrecondition("bucket file_mounts are not available here");
  // Buckets first: a bucket that is missing, or a store that refuses the credentials, fails the
  // launch before any node is provisioned.
  Report(o.progress, "Preparing " + std::to_string(task.storage_mounts.size()) + " bucket(s)", 0,
         static_cast<int>(task.storage_mounts.size()));
  HERD_ASSIGN_OR_RETURN(auto prepared,
                        storage::PrepareBuckets(task, o.cluster, *parts_.storage, o.managed_job));
  auto result = LaunchPrepared(task, o, &prepared);
  if (!result.ok()) storage::UndoPrepare(prepared, o.cluster, *parts_.storage);
  return result;
}

void ClusterOps::ReleaseStorage(const ClusterRecord& c, bool cluster_gone) {
  if (!parts_.storage || !storage::ClusterHasBuckets(c.name, *parts_.storage)) return;
  std::vector<controller::SshTarget> targets;
  if (c.status == ClusterStatus::kUp) {
    targets = TargetsOf(c);
    // Jobs still writing would keep the flush waiting: a cluster going away cancels them first
    // (`herd stop` already has).
    if (cluster_gone) {
      if (auto client = ConnectHead(c, false); client.ok()) {
        (void)(*client)->Cancel({}, true, std::chrono::milliseconds(0));
      }
    }
  }
  if (Status s = storage::ReleaseClusterStorage(*parts_.ssh, targets, c.name, cluster_gone,
                                                *parts_.storage);
      !s.ok()) {
    HERD_LOG(kWarn) << "cluster " << c.name << ": buckets: " << s.message();
  }
}

Result<LaunchResult> ClusterOps::LaunchPrepared(const Task& task, const LaunchOptions& o,
                                                const storage::PreparedStorage* prepared) {
  HERD_RETURN_IF_ERROR(ValidateClusterName(o.cluster));
  HERD_ASSIGN_OR_RETURN(auto lock,
                        ClusterLock::Acquire(o.cluster, limits::kClusterLockWait, "herd launch"));
  HERD_ASSIGN_OR_RETURN(auto store, parts_.open_store());
  HERD_ASSIGN_OR_RETURN(auto existing, store->Get(o.cluster));
  const Resources& res = task::PrimaryResources(task);
  std::string infra = !o.infra.empty() ? o.infra : !res.infra.empty() ? res.infra : "";
  int n = o.num_nodes > 0 ? o.num_nodes : task.num_nodes;
  SshRunner& ssh = *parts_.ssh;

  ClusterRecord c;
  bool fresh = !existing.has_value();
  if (existing) {
    c = *existing;
    if (!infra.empty() && infra != c.infra) {
      return FailedPrecondition("cluster " + c.name + " runs on " + c.infra + ", not " + infra +
                                "; use another name or `herd down " + c.name + "` first");
    }
    if (n > static_cast<int>(c.nodes.size()) && !c.nodes.empty()) {
      return FailedPrecondition("cluster " + c.name + " has " + std::to_string(c.nodes.size()) +
                                " node(s); the task needs " + std::to_string(n));
    }
  } else {
    c.name = o.cluster;
    c.infra = infra.empty() ? "local" : infra;
    c.provider = c.infra == "local" ? "local"
                 : IsAws(c.infra)   ? "aws"
                 : IsSlurm(c.infra) ? "slurm"
                                    : "ssh";
    c.state_dir = ClusterDir(c.name);
    c.certs_dir = c.state_dir + "/certs";
    c.ssh_key_path = c.state_dir + "/ssh/id_ed25519";
    c.known_hosts_path = c.state_dir + "/ssh/known_hosts";
    c.control_dir = ControlDirFor(c.state_dir);
    c.head_port = kHeadPort;
    c.launched_unix_ms = parts_.clock->UnixMs();
    c.resources = task::ResourcesSummary(task);
    if (o.num_nodes > 0) {
      c.resources = std::to_string(n) + c.resources.substr(c.resources.find('x'));
    }
    HERD_RETURN_IF_ERROR(EnsureDir(c.state_dir));
    HERD_RETURN_IF_ERROR(tls::InitClusterCerts(c.certs_dir, c.name));
    HERD_RETURN_IF_ERROR(MakeClusterKey(c.ssh_key_path));
    HERD_RETURN_IF_ERROR(store->Put(c));
  }

  // A stopped cluster's bucket mounts are made again once its agents run.
  const bool was_stopped = !fresh && c.status == ClusterStatus::kStopped;
  // ... and must still exist: a deleted one fails the start before any node starts.
  if (was_stopped && parts_.storage) {
    std::vector<std::string> prepared_by_launch;
    if (prepared != nullptr) {
      for (const auto& m : prepared->mounts) prepared_by_launch.push_back(m.target);
    }
    HERD_RETURN_IF_ERROR(
        storage::CheckClusterBuckets(c.state_dir, *parts_.storage, prepared_by_launch));
  }
  bool ssh_ready = false;  // the provider just brought every node's sshd up and waited for it
  std::unique_ptr<Provider> provider;
  bool provisioned = false;
  // Provisions (or starts) the nodes and records them.
  auto provision = [&]() -> Status {
    if (!provider) {
      HERD_ASSIGN_OR_RETURN(provider, parts_.providers(c.infra, &res));
    }
    ssh_ready = provider->SshReadyOnReturn();
    Report(o.progress, "Provisioning " + std::to_string(n) + " node(s) on " + c.infra, 0, n);
    std::vector<NodeHandle> handles;
    if (!fresh && c.status == ClusterStatus::kStopped) {
      HERD_ASSIGN_OR_RETURN(handles, provider->Start(c.name, c.state_dir + "/provider"));
    } else {
      std::string pub;
      {
        std::ifstream in(c.ssh_key_path + ".pub");
        std::getline(in, pub);
      }
      // A Slurm cluster allocated again keeps as many nodes as it had.
      const int want = c.provider == "slurm" ? std::max(n, static_cast<int>(c.nodes.size())) : n;
      ProvisionRequest req{c.name, want, c.state_dir + "/provider", pub};
      HERD_ASSIGN_OR_RETURN(handles, provider->Provision(req));
    }
    c.nodes.clear();
    for (std::size_t i = 0; i < handles.size(); ++i) {
      NodeRecord r;
      r.name = handles[i].name;
      r.ip = handles[i].ip;
      r.ssh_port = handles[i].ssh_port;
      r.ssh_user = handles[i].ssh_user;
      r.identity_file = handles[i].identity_file;
      r.netns = handles[i].netns;
      r.host_home = handles[i].host_home;
      r.internal_ip = handles[i].internal_ip;
      r.jump = handles[i].jump;
      r.spot_metadata = handles[i].spot_metadata;
      r.is_head = i == 0;
      c.nodes.push_back(r);
    }
    HERD_RETURN_IF_ERROR(store->Put(c));
    Report(o.progress, "Provisioning " + std::to_string(n) + " node(s) on " + c.infra, n, n);
    provisioned = true;
    return Status::Ok();
  };
  if (fresh || c.status != ClusterStatus::kUp || o.repair_nodes) {
    HERD_RETURN_IF_ERROR(provision());
  }
  HERD_RETURN_IF_ERROR(WriteSshConfig(c));
  LaunchResult result;
  // Relaunch of an UP cluster with nothing changed: its agents run what this launch would install
  // and all answer through the head, so SSH probing and bootstrap (a sha256sum of the agent binary
  // on every node) are skipped. Anything else takes the full path below, which repairs.
  std::unique_ptr<HeadApi> head;
  if (!fresh && c.status == ClusterStatus::kUp && !c.agents_stamp.empty()) {
    auto stamp = AgentStamp(c);
    if (stamp.ok() && *stamp == c.agents_stamp) head = ConnectIfAllAgentsAlive(c);
  }
  if (!head) {
    BootstrapResult boot;
    if (c.provider == "slurm") {
      // The agents run inside the allocation: one that ended (or an UP cluster whose agents are
      // gone) is provisioned again (the provider keeps an allocation that still runs), then the
      // provider starts the agents there.
      if (!provisioned) HERD_RETURN_IF_ERROR(provision());
      HERD_ASSIGN_OR_RETURN(boot, StartProviderAgents(*provider, c, o.progress));
    } else {
      if (!ssh_ready) HERD_RETURN_IF_ERROR(WaitSsh(c, o.progress));
      HERD_ASSIGN_OR_RETURN(boot, BootstrapCluster(ssh, c, o.progress));
    }
    c.status = ClusterStatus::kUp;  // ConnectHead needs it; only kept once the agents are up
    c.agent_version = "0.1.0";
    if (auto s = WaitAgents(c, o.progress); !s.ok()) {
      c.status = ClusterStatus::kInit;
      c.agents_stamp.clear();
      (void)store->Put(c);
      return s;
    }
    auto stamp = AgentStamp(c);
    c.agents_stamp = stamp.ok() ? *stamp : "";
    HERD_RETURN_IF_ERROR(store->Put(c));
    result.agents_uploaded = boot.uploaded;
    result.agents_restarted = boot.restarted;
  }
  HERD_RETURN_IF_ERROR(CheckImageOnNodes(ssh, c, task, o.progress));
  HERD_RETURN_IF_ERROR(SyncFiles(c, task, true, o.progress));
  if (was_stopped && parts_.storage) {
    std::vector<std::string> remounted_by_launch;
    if (prepared != nullptr) {
      for (const auto& m : prepared->mounts) remounted_by_launch.push_back(m.target);
    }
    HERD_RETURN_IF_ERROR(storage::RemountCluster(ssh, TargetsOf(c), c.state_dir, c.name,
                                                 *parts_.storage, remounted_by_launch));
  }
  if (prepared != nullptr) {
    Report(o.progress, "Mounting " + std::to_string(prepared->mounts.size()) + " bucket(s)", 0,
           static_cast<int>(c.nodes.size()));
    HERD_RETURN_IF_ERROR(
        storage::MountOnNodes(ssh, TargetsOf(c), *prepared, *parts_.storage, c.name));
    HERD_RETURN_IF_ERROR(storage::RecordClusterMounts(c.state_dir, prepared->mounts));
  }

  result.cluster = c;
  herd::v1::TaskSpec spec = task::ToSpec(task);
  spec.set_num_nodes(task.num_nodes);
  // A run that wrote into a mounted bucket ends only once its writes are in the bucket.
  if (prepared != nullptr && prepared->flush && !spec.run().empty()) {
    spec.set_run(storage::WrapRunWithFlush(spec.run()));
  }
  if (o.no_setup) spec.clear_setup();
  if (!spec.run().empty() || !spec.setup().empty()) {
    HERD_RETURN_IF_ERROR(Submit(c, spec, result, std::move(head), o.task_id, o.attempt));
  }
  return result;
}

Result<LaunchResult> ClusterOps::Exec(const std::string& cluster, const Task& task,
                                      const ExecOptions& o) {
  HERD_ASSIGN_OR_RETURN(auto store, parts_.open_store());
  TraceMark("state db open");
  HERD_ASSIGN_OR_RETURN(ClusterRecord c, Lookup(*store, cluster));
  TraceMark("cluster record read");
  if (c.status != ClusterStatus::kUp) {
    return FailedPrecondition("cluster " + c.name + " is " + std::string(Name(c.status)) +
                              "; start it with `herd start " + c.name + "`");
  }
  // As at launch: a node without the image's runtime fails the exec before anything is submitted.
  HERD_RETURN_IF_ERROR(CheckImageOnNodes(*parts_.ssh, c, task, o.progress));
  HERD_RETURN_IF_ERROR(SyncFiles(c, task, false, o.progress));
  herd::v1::TaskSpec spec = task::ToSpec(task);
  spec.clear_setup();  // exec skips setup (SkyPilot)
  // The cluster's bucket mounts (made by launch) are flushed before an exec'd run is done too.
  if (parts_.storage && !spec.run().empty() &&
      storage::ClusterHasBuckets(c.name, *parts_.storage)) {
    spec.set_run(storage::WrapRunWithFlush(spec.run()));
  }
  LaunchResult result;
  result.cluster = c;
  HERD_RETURN_IF_ERROR(Submit(c, spec, result, nullptr, "", 0, &o.extras));
  return result;
}

Result<JobInfo> ClusterOps::TailLogs(const std::string& cluster, int64_t job_id,
                                     const TailOptions& o) {
  HERD_ASSIGN_OR_RETURN(ClusterRecord c, Get(cluster));
  HERD_ASSIGN_OR_RETURN(auto client, ConnectHead(c));
  auto cb = o.callbacks;
  if (!cb.on_data) {
    cb.on_data = [](std::string_view b) {
      std::fwrite(b.data(), 1, b.size(), stdout);
      std::fflush(stdout);
    };
  }
  return client->Stream(job_id, o.offset, o.follow, cb);
}

Result<std::vector<JobInfo>> ClusterOps::Queue(const std::string& cluster, bool skip_finished,
                                               int64_t* older_left_out) {
  HERD_ASSIGN_OR_RETURN(ClusterRecord c, Get(cluster));
  HERD_ASSIGN_OR_RETURN(auto client, ConnectHead(c));
  return client->Queue(skip_finished, older_left_out);
}

Result<std::vector<int64_t>> ClusterOps::Cancel(const std::string& cluster,
                                                const std::vector<int64_t>& jobs, bool all,
                                                std::optional<std::chrono::milliseconds> grace) {
  HERD_ASSIGN_OR_RETURN(ClusterRecord c, Get(cluster));
  HERD_ASSIGN_OR_RETURN(auto client, ConnectHead(c));
  return client->Cancel(jobs, all, grace);
}

Result<herd::v1::NodesReply> ClusterOps::Nodes(const std::string& cluster) {
  HERD_ASSIGN_OR_RETURN(ClusterRecord c, Get(cluster));
  HERD_ASSIGN_OR_RETURN(auto client, ConnectHead(c));
  return client->Nodes();
}

Status ClusterOps::Stop(const std::string& cluster, const ProgressFn& progress) {
  HERD_ASSIGN_OR_RETURN(auto lock,
                        ClusterLock::Acquire(cluster, limits::kClusterLockWait, kStopLockWhat));
  return StopHolding(std::move(lock), cluster, progress);
}

Status ClusterOps::StopHolding(ClusterLock lock, const std::string& cluster,
                               const ProgressFn& progress) {
  HERD_ASSIGN_OR_RETURN(auto store, parts_.open_store());
  HERD_ASSIGN_OR_RETURN(ClusterRecord c, Lookup(*store, cluster));
  if (c.status == ClusterStatus::kStopped) return Status::Ok();
  HERD_ASSIGN_OR_RETURN(auto provider, parts_.providers(c.infra, nullptr));
  HERD_RETURN_IF_ERROR(provider->CheckStoppable(c.name, c.state_dir + "/provider"));
  if (auto client = ConnectHead(c, false); client.ok())
    (void)(*client)->Cancel({}, true, std::chrono::milliseconds(0));
  StopMux(MuxSocketPath(c.state_dir));
  SshRunner& ssh = *parts_.ssh;
  Report(progress, "Stopping " + std::to_string(c.nodes.size()) + " node(s)", 0,
         static_cast<int>(c.nodes.size()));
  ReleaseStorage(c, false);
  BootstrapOptions bo;
  HERD_RETURN_IF_ERROR(StopAgents(ssh, TargetsOf(c), bo));
  HERD_RETURN_IF_ERROR(provider->Stop(c.name, c.state_dir + "/provider"));
  for (const auto& t : TargetsOf(c)) (void)ssh.CloseMaster(t);
  c.status = ClusterStatus::kStopped;
  return store->Put(c);
}

Result<ClusterRecord> ClusterOps::Start(const std::string& cluster, const ProgressFn& progress) {
  HERD_ASSIGN_OR_RETURN(ClusterRecord c, Get(cluster));
  Task empty;
  LaunchOptions o;
  o.cluster = cluster;
  o.progress = progress;
  empty.num_nodes = static_cast<int>(c.nodes.size());
  HERD_ASSIGN_OR_RETURN(auto r, Launch(empty, o));
  return r.cluster;
}

Status ClusterOps::Down(const std::string& cluster, const ProgressFn& progress) {
  HERD_ASSIGN_OR_RETURN(auto lock,
                        ClusterLock::Acquire(cluster, limits::kClusterLockWait, kDownLockWhat));
  return DownHolding(std::move(lock), cluster, progress);
}

Status ClusterOps::DownHolding(ClusterLock lock, const std::string& cluster,
                               const ProgressFn& progress) {
  HERD_ASSIGN_OR_RETURN(auto store, parts_.open_store());
  HERD_ASSIGN_OR_RETURN(ClusterRecord c, Lookup(*store, cluster));
  SshRunner& ssh = *parts_.ssh;
  Report(progress, "Tearing down " + std::to_string(c.nodes.size()) + " node(s)", 0,
         static_cast<int>(c.nodes.size()));
  // The nodes' job containers (image_id: docker:): podman keeps them, and their writable layers,
  // beyond the node's processes. Best effort, nothing to do where none was started: a local
  // node's home is looked at here, without a command on it; existing machines get it with the
  // removal of what herd installed (below); cloud instances go as a whole.
  const std::string agent_dir = std::string(kDefaultAgentDir);
  const std::string remove_containers = "[ -d '" + agent_dir + "/state/containers' ] && '" +
                                        agent_dir + "/bin/herdlet' --remove-containers \"$HOME/" +
                                        agent_dir + "/state\"; ";
  if (c.status == ClusterStatus::kUp && c.provider != "ssh" && c.provider != "aws") {
    const std::vector<SshTarget> targets = TargetsOf(c);
    for (std::size_t i = 0; i < targets.size() && i < c.nodes.size(); ++i) {
      const std::string& home = c.nodes[i].host_home;
      std::error_code ec;
      const bool here = c.provider == "local" || !home.empty();
      if (here && (home.empty() || !fs::exists(home + "/" + agent_dir + "/state/containers", ec))) {
        continue;
      }
      (void)ssh.Run(targets[i], "cd && " + remove_containers + "true",
                    limits::kContainerRemoveTimeout + limits::kSshConnectTimeout);
    }
  }
  ReleaseStorage(c, true);
  if (c.status == ClusterStatus::kUp && c.provider == "ssh") {
    // Machines that are not ours: cancel the jobs, stop the agents, remove what herd installed.
    // (Local nodes and cloud instances are removed as a whole.)
    if (auto client = ConnectHead(c, false); client.ok())
      (void)(*client)->Cancel({}, true, std::chrono::milliseconds(0));
    BootstrapOptions bo;
    HERD_RETURN_IF_ERROR(StopAgents(ssh, TargetsOf(c), bo));
    // The agent's cgroups go too (it records where, kCgroupScopeFile): an agent stopped while a
    // job's cgroup was still being emptied left them. Only empty cgroups can be removed.
    const std::string scope_file = bo.remote_dir + "/state/" + kCgroupScopeFile;
    for (const auto& t : TargetsOf(c)) {
      (void)ssh.Run(
          t,
          remove_containers + "S=$(cat '" + scope_file +
              "' 2>/dev/null); case \"$S\" in /sys/fs/cgroup/*) "
              "for g in \"$S\"/*/; do rmdir \"$g\" 2>/dev/null; done; rmdir \"$S\" 2>/dev/null;; "
              "esac; rm -rf '" +
              bo.remote_dir + "'",
          limits::kContainerRemoveTimeout + limits::kSshConnectTimeout);
    }
  }
  StopMux(MuxSocketPath(c.state_dir));
  for (const auto& t : TargetsOf(c)) (void)ssh.CloseMaster(t);
  HERD_ASSIGN_OR_RETURN(auto provider, parts_.providers(c.infra, nullptr));
  HERD_RETURN_IF_ERROR(provider->Teardown(c.name, c.state_dir + "/provider"));
  HERD_RETURN_IF_ERROR(RemoveSshConfig(c.name));
  HERD_RETURN_IF_ERROR(store->Remove(c.name));
  KillNamespaceAnchor(c);
  std::error_code ec;
  fs::remove_all(c.state_dir, ec);
  fs::remove_all(c.control_dir, ec);
  lock.ReleaseAndRemove();  // the last file of the cluster
  Report(progress, "Tearing down " + std::to_string(c.nodes.size()) + " node(s)",
         static_cast<int>(c.nodes.size()), static_cast<int>(c.nodes.size()));
  return Status::Ok();
}

Status ClusterOps::ReleaseManagedJobStorage(int64_t managed_job) {
  // One stat for users without buckets, as ClusterHasBuckets.
  std::error_code ec;
  if (!parts_.storage || !fs::exists(storage::StorageDbPath(), ec)) return Status::Ok();
  return storage::ReleaseManagedJobStorage(managed_job, *parts_.storage);
}

Result<std::vector<ClusterRecord>> ClusterOps::List() {
  HERD_ASSIGN_OR_RETURN(auto store, parts_.open_store());
  return store->List();
}

namespace {
// The answer of a health question as its process writes it to the pipe: 'N' and a NodesReply, or
// 'E' and why there is none.
// A provider with a scheduler of its own (Slurm) is asked first: 'S', its state and a newline come
// before the answer, and a cluster whose allocation ended is not asked further.
std::string AskHead(ClusterOps& ops, const ClusterRecord& c) {
  std::string prefix;
  if (c.provider == "slurm") {
    auto provider = ops.parts().providers(c.infra, nullptr);
    if (!provider.ok()) return "E" + provider.status().message();
    auto a = (*provider)->Allocation(c.name, c.state_dir + "/provider");
    if (!a.ok()) return "E" + a.status().message();
    if (a->known) {
      prefix = "S" + a->state + "\n";
      if (!a->alive) return prefix + "E" + a->detail;
    }
  }
  auto client = ops.ConnectHead(c);
  if (!client.ok()) return prefix + "E" + client.status().message();
  auto nodes = (*client)->Nodes();
  if (!nodes.ok()) return prefix + "E" + nodes.status().message();
  return prefix + "N" + nodes->SerializeAsString();
}

ClusterHealth HealthFrom(const ClusterRecord& c, std::string answer) {
  ClusterHealth h;
  if (!answer.empty() && answer[0] == 'S') {
    std::size_t nl = answer.find('\n');
    h.allocation = answer.substr(1, nl == std::string::npos ? std::string::npos : nl - 1);
    h.allocation_alive = h.allocation == "RUNNING";
    answer = nl == std::string::npos ? "" : answer.substr(nl + 1);
  }
  herd::v1::NodesReply reply;
  if (answer.empty() || answer[0] != 'N' || !reply.ParseFromString(answer.substr(1))) {
    h.error = answer.size() > 1 && answer[0] == 'E' ? answer.substr(1) : "no answer";
    return h;
  }
  h.answered = true;
  h.autostop_due = reply.autostop_due();
  std::map<std::string, herd::v1::NodeCondition> known;
  for (int i = 0; i < reply.nodes_size() && i < reply.health_size(); ++i) {
    if (reply.health(i).drained()) {
      h.drained.emplace_back(reply.nodes(i).node_id(), reply.health(i).drain_reason());
    }
  }
  for (int i = 0; i < reply.nodes_size(); ++i) {
    known[reply.nodes(i).node_id()] = i < reply.health_size() ? reply.health(i).condition()
                                      : i < reply.alive_size() && reply.alive(i)
                                          ? herd::v1::NODE_CONDITION_UP
                                          : herd::v1::NODE_CONDITION_LOST;
  }
  for (const auto& n : c.nodes) {
    auto it = known.find(n.name);
    if (it == known.end()) {
      h.down.emplace_back(n.name, "not registered");
    } else if (it->second == herd::v1::NODE_CONDITION_LOST) {
      h.down.emplace_back(n.name, "lost");
    } else if (it->second == herd::v1::NODE_CONDITION_STOPPED) {
      h.down.emplace_back(n.name, "stopped");
    }
  }
  return h;
}
}  // namespace

std::map<std::string, ClusterHealth> ClusterOps::Health(
    const std::vector<ClusterRecord>& clusters) {
  std::vector<const ClusterRecord*> up;
  for (const auto& c : clusters) {
    if (c.status == ClusterStatus::kUp) up.push_back(&c);
  }
  // The question holds its own ClusterOps (AskEachHead: it may outlive this call).
  auto answers = AskEachHead(
      up,
      [parts = parts_](const ClusterRecord& c) {
        ClusterOps ops(parts);
        return AskHead(ops, c);
      },
      limits::kStatusHeadTimeout);
  std::map<std::string, ClusterHealth> out;
  for (const ClusterRecord* c : up) {
    const auto& answer = answers[c->name];
    out[c->name] = !answer ? ClusterHealth{false,
                                           "the head did not answer within " +
                                               FormatSeconds(limits::kStatusHeadTimeout),
                                           {},
                                           {}}
                           : HealthFrom(*c, *answer);
  }
  return out;
}

}  // namespace herd::ops
