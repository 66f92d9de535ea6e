// The cluster operations: what `herd launch`, `exec`, `status`, `queue`, `logs`, `cancel`,
// `nodes`, `stop`, `start`, `down` and `autostop` do, on clusters by name. One ClusterOps is built
// from the parts it drives, so that a test gives it fakes and a server can run it for many users:
//
//   ClusterOps ops(SystemParts());                 // system_parts.hpp: OpenSSH, the real providers
//   auto r = ops.Launch(task, {.cluster = "demo"});
//   auto last = ops.TailLogs("demo", r->job_id, {.follow = true});
//   ops.Down("demo");
//
// Every call opens the store afresh (parts.open_store): calls may run in many threads at once,
// and each cluster's own changes are serialised by its lock file (controller/state/cluster_lock).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "controller/core/head_client.hpp"
#include "controller/core/progress.hpp"
#include "controller/provider/provider.hpp"
#include "controller/ssh/ssh_runner.hpp"
#include "controller/state/cluster_lock.hpp"
#include "controller/state/cluster_record.hpp"
#include "controller/state/cluster_store.hpp"
#include "controller/task/task.hpp"
#include "herd/v1/common.pb.h"
#include "shared/common/clock.hpp"
#include "shared/common/status.hpp"

namespace herd::storage {
struct StorageParts;
struct PreparedStorage;
}  // namespace herd::storage

namespace herd::ops {

using controller::ClusterRecord;
using controller::HeadApi;
using controller::ProgressFn;
using Task = task::Task;
using Resources = task::Resources;

// ---- The parts ----------------------------------------------------------------------------------

// The provider of an infra ("local", "ssh/POOL", "aws[/REGION[/ZONE]]"). `resources` (the task's)
// matter only to a provider that makes machines to fit them; null when none are known (stop,
// down). InvalidArgument for an infra herd does not provide.
using ProviderFactory = std::function<Result<std::unique_ptr<controller::Provider>>(
    const std::string& infra, const Resources* resources)>;

// A connection to the cluster store: one of its own per call, or one a long-lived process keeps
// (KeepClusterStoreOpen in system_parts.hpp; ClusterStore serializes its calls).
using StoreOpener = std::function<Result<std::shared_ptr<controller::ClusterStore>>()>;
// The opener of a connection of its own per call to the store at path() (path asked each time).
StoreOpener OwnConnectionTo(std::function<std::string()> path);

// How ClusterOps::AskEachHead asks: a child process per cluster (the default: a CLI ends soon
// after, and a question that hangs is killed with its process), or a thread per cluster (a
// long-lived process, the API server's warm worker: forking the whole process per cluster per read
// cost more than the question itself).
enum class AskMode { kProcess, kThread };
void SetAskMode(AskMode mode);

// Reaches a cluster's head. start_mux: whether a connection that had to dial the head itself may
// leave a mux behind for the commands after it (false for a cluster going away).
class HeadConnector {
 public:
  virtual ~HeadConnector() = default;
  virtual Result<std::unique_ptr<HeadApi>> Connect(const ClusterRecord& cluster,
                                                   bool start_mux) = 0;
};

struct ClusterOpsParts {
  ProviderFactory providers;
  std::shared_ptr<controller::SshRunner> ssh;
  StoreOpener open_store;
  std::shared_ptr<HeadConnector> heads;
  std::shared_ptr<Clock> clock;
  std::string user;  // who submits jobs (JobInfo.user)
  // Bucket file_mounts (controller/storage). Null: a task with buckets is refused, and stop/down
  // touch no bucket (the fakes of the unit tests).
  std::shared_ptr<storage::StorageParts> storage;
};

// ---- The operations -----------------------------------------------------------------------------

struct LaunchOptions {
  std::string cluster;
  std::string infra;  // "" (the task's resources.infra, else "local"), "local", "ssh/<pool>"
  int num_nodes = 0;  // 0: the task's num_nodes
  bool no_setup = false;
  ProgressFn progress;
  // A managed job's (herd jobs) SKYPILOT_TASK_ID, the same for every attempt, and this attempt's
  // number; ""/0 for an ordinary launch (the head makes the id, attempt 1).
  std::string task_id;
  int attempt = 0;
  // The managed job this launch is an attempt of (0: none): it holds the task's buckets beyond
  // this cluster (storage::PrepareBuckets).
  int64_t managed_job = 0;
  // Provision an UP cluster again before its bootstrap: the provider's Provision (idempotent)
  // makes again what is missing of it, a lost node among them, and returns the others as they
  // are; the bootstrap then starts an agent where none runs and keeps the running ones. A managed
  // job's recovery of a lost worker (jobs::ReplaceableLostNodes) relaunches on the same cluster so.
  bool repair_nodes = false;
};

struct LaunchResult {
  int64_t job_id = 0;                  // 0 when the task has nothing to run
  std::vector<int64_t> array_job_ids;  // a job array's jobs (job_id is the first); empty otherwise
  ClusterRecord cluster;
  int agents_uploaded = 0;   // nodes whose herdlet binary was (re)uploaded
  int agents_restarted = 0;  // nodes whose agent was (re)started
  // The connection the job was submitted through, still open: following the job on it saves a
  // second connection. Null when nothing was submitted.
  std::shared_ptr<HeadApi> head;
};

struct ExecOptions {
  ProgressFn progress;
  // A job array and dependencies (SubmitJob's array, after_any, after_ok); task and user are the
  // operation's.
  herd::v1::SubmitJob extras;
};

struct TailOptions {
  bool follow = true;
  uint64_t offset = 0;
  HeadApi::StreamCallbacks callbacks;  // on_data defaults to stdout
};

// What `herd status` shows of an UP cluster besides its record: the nodes its head is without.
struct ClusterHealth {
  bool answered = false;  // the head answered within limits::kStatusHeadTimeout
  std::string error;      // when it did not: why
  // The cluster's nodes that its head reports LOST or STOPPED, or does not know at all, in
  // cluster order, with the word for each ("lost", "stopped", "not registered").
  std::vector<std::pair<std::string, std::string>> down;
  // Nodes drained (no new jobs; `herd nodes --undrain`), with the reason: the cluster stays UP.
  std::vector<std::pair<std::string, std::string>> drained;
  // A Slurm cluster's allocation as squeue shows it ("RUNNING", "TIMEOUT", "PREEMPTED", ...; ""
  // for other providers). When it is not RUNNING the head is not asked and error says why.
  std::string allocation{};
  bool allocation_alive = true;
  // Its team server stops it (SetAutostop.server_stops) and the head says it has been idle past
  // its autostop: `herd status` shows AUTOSTOPPING.
  bool autostop_due = false;
};

// What the team server's autostop sweep (ClusterOps::SweepAutostop) did with one cluster whose
// head said its autostop is due.
struct AutostopOutcome {
  std::string cluster;
  bool down = false;  // torn down rather than stopped
  Status status;      // OK: stopped (torn down); else why not (it stays as it is)
};

// What `herd status` learned from the providers themselves (ClusterOps::Refresh).
struct RefreshOutcome {
  // The status to show instead of the record's: "AUTOSTOPPING" (machines stopping, autostop
  // set), "INIT" (machines stopping without autostop, or only some running).
  std::map<std::string, std::string> shown;
  std::vector<std::string> notes;  // one line each, for the user
};

class ClusterOps {
 public:
  explicit ClusterOps(ClusterOpsParts parts);

  // Provisions (or reuses) the cluster, bootstraps the agents over SSH, syncs workdir and
  // file_mounts, runs setup and submits the task. Returns once the job is submitted.
  Result<LaunchResult> Launch(const Task& task, const LaunchOptions& options);
  // Syncs workdir and submits the task's run on an UP cluster (no provisioning, setup or mounts).
  Result<LaunchResult> Exec(const std::string& cluster, const Task& task,
                            const ExecOptions& options);
  // Streams the job's merged log; returns the last JobInfo seen (ExitCodeForJob gives the code).
  Result<herd::v1::JobInfo> TailLogs(const std::string& cluster, int64_t job_id,
                                     const TailOptions& options);
  // Newest first; older_left_out (optional) gets how many older jobs the head left out.
  Result<std::vector<herd::v1::JobInfo>> Queue(const std::string& cluster, bool skip_finished,
                                               int64_t* older_left_out = nullptr);
  // grace: as HeadApi::Cancel (unset: the job's own, else limits::kDefaultStopGrace).
  Result<std::vector<int64_t>> Cancel(
      const std::string& cluster, const std::vector<int64_t>& jobs, bool all,
      std::optional<std::chrono::milliseconds> grace = std::nullopt);
  Result<herd::v1::NodesReply> Nodes(const std::string& cluster);

  Status Stop(const std::string& cluster, const ProgressFn& progress = {});
  Result<ClusterRecord> Start(const std::string& cluster, const ProgressFn& progress = {});
  Status Down(const std::string& cluster, const ProgressFn& progress = {});
  // The end of a managed job: its hold on its buckets goes, and the non-persistent ones herd made
  // that no cluster mounts any more are deleted (storage::ReleaseManagedJobStorage).
  Status ReleaseManagedJobStorage(int64_t managed_job);
  // After idle_minutes without an active job the head stops (or, with down, tears down) the
  // cluster by itself; idle_minutes < 0 cancels. Needs a provider whose machines herd may stop:
  // `local` (the head runs `herd stop|down` here) or `aws` (the head calls EC2 with a key scoped
  // to its instances). Under a team server (controller::AutostopByServer) a cloud cluster's head
  // gets no key: it only reports the autostop due, and the server stops it (SweepAutostop).
  Status SetAutostop(const std::string& cluster, int idle_minutes, bool down);
  // The team server's side of autostop (cluster_autostop.cpp), run as `herd _autostop-sweep` for
  // each of its users: asks the heads of the UP cloud clusters with autostop set (as Health) and
  // stops (tears down, with --down) each whose head says its autostop is due, with AutostopNow.
  // A head that does not answer is not stopped on a guess, unless an earlier sweep's stop of the
  // cluster did not finish (it had stopped the agents): that stop is finished.
  std::vector<AutostopOutcome> SweepAutostop(const ProgressFn& progress = {});
  // Under the cluster's lock (taken at once, kAutostopLockWhat; a command holding it is using the
  // cluster: Unavailable), asks the head again and stops the cluster (tears it down when its
  // autostop says --down) only while the head still says its autostop is due: FailedPrecondition
  // when it does not (a job came), Unavailable when it does not answer and no earlier stop is
  // left to finish.
  Status AutostopNow(const std::string& cluster, const ProgressFn& progress = {});
  // SkyPilot's status refresh (cluster_refresh.cpp): asks each cluster's provider for its
  // machines (with all, every UP or STOPPED cluster: `status -r`; else only UP clusters with
  // autostop on a cloud, which may have stopped themselves) and updates the records: STOPPED when
  // every machine is stopped; a cluster whose machines are all gone is torn down (what is left of
  // it, its record included), as SkyPilot drops an autodowned cluster. Providers that cannot tell
  // (ssh pools, user-mode local nodes) are left as they are.
  RefreshOutcome Refresh(const std::vector<controller::ClusterRecord>& clusters, bool all);

  // Every cluster's record.
  Result<std::vector<ClusterRecord>> List();
  Result<ClusterRecord> Get(const std::string& cluster);
  // Asks the head of every UP cluster of `clusters` at once which nodes it is without. Each
  // question runs in a process of its own, killed at limits::kStatusHeadTimeout: status never
  // waits longer, whatever a head, a mux or an ssh renewal of the forward does. Keyed by cluster
  // name; clusters not UP are not asked.
  std::map<std::string, ClusterHealth> Health(const std::vector<ClusterRecord>& clusters);
  // Asks the heads of `clusters` at once, each question in a child process of its own (head
  // clients are synchronous), killed at `timeout`: keyed by cluster name, what ask returned in the
  // child, or nullopt for a child that did not answer in time. A child that could not be started
  // answers "E<why>". In AskMode::kThread (SetAskMode) each question is a thread of this process
  // instead, with the same answers and the same timeout; a thread still asking at `timeout` is
  // left to end by itself and its answer dropped, so `ask` (copied into each thread) must hold
  // everything it uses by value, nothing of the caller's.
  std::map<std::string, std::optional<std::string>> AskEachHead(
      const std::vector<const ClusterRecord*>& clusters,
      const std::function<std::string(const ClusterRecord&)>& ask,
      std::chrono::milliseconds timeout);

  // A connection to the cluster's head (parts.heads), refused for a cluster that is STOPPED.
  Result<std::unique_ptr<HeadApi>> ConnectHead(const ClusterRecord& cluster, bool start_mux = true);

  const ClusterOpsParts& parts() const { return parts_; }

 private:
  Status WaitSsh(const ClusterRecord& c, const ProgressFn& progress);
  Status WaitAgents(const ClusterRecord& c, const ProgressFn& progress);
  Status SyncFiles(const ClusterRecord& c, const Task& task, bool mounts,
                   const ProgressFn& progress);
  std::unique_ptr<HeadApi> ConnectIfAllAgentsAlive(const ClusterRecord& c);
  // Launch after the task's buckets are ready (prepared: null for a task without buckets).
  Result<LaunchResult> LaunchPrepared(const Task& task, const LaunchOptions& options,
                                      const storage::PreparedStorage* prepared);
  // Stop/down: flush and unmount the cluster's buckets (on down, delete non-persistent ones).
  void ReleaseStorage(const ClusterRecord& c, bool cluster_gone);
  Status Submit(const ClusterRecord& c, herd::v1::TaskSpec spec, LaunchResult& result,
                std::unique_ptr<HeadApi> client, const std::string& task_id, int attempt,
                const herd::v1::SubmitJob* extras = nullptr);

  // Stop and Down once the cluster's lock is held.
  Status StopHolding(controller::ClusterLock lock, const std::string& cluster,
                     const ProgressFn& progress);
  Status DownHolding(controller::ClusterLock lock, const std::string& cluster,
                     const ProgressFn& progress);

  ClusterOpsParts parts_;
};

// What `herd down` and `herd stop` write into the cluster's lock while they hold it
// (ClusterLock::HeldFor): a follower that lost its head reads it to stop redialing at once.
inline constexpr char kDownLockWhat[] = "herd down";
inline constexpr char kStopLockWhat[] = "herd stop";
// What the team server's autostop (ClusterOps::AutostopNow) writes there: `herd status` shows the
// cluster AUTOSTOPPING while it holds the lock.
inline constexpr char kAutostopLockWhat[] = "herd autostop (idle)";

// Where the herdlet binary to install comes from: $HERDLET_BINARY, else next to this executable
// (installed layout), else ../agent/herdlet (build tree).
Result<std::string> HerdletBinary();

}  // namespace herd::ops
