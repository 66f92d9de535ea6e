// The keeper of a team server's managed jobs: it runs each unfinished managed job's controller
// (`herd jobs _controller ID`) on exactly one server, and starts it again when it dies.
//
// Through a server, `herd jobs launch` only records the job (kManagedSupervisedEnv); the keeper
// finds it in its user's managed job table (<state>/users/<user>/herd/managed_jobs.db), takes the
// job's lease row in the server database ("managed/<user>/<id>", ApiStore::TryAcquireLease, TTL
// limits::kManagedLeaseTtl) and starts the controller as a child of its own thread (its own
// process group, PR_SET_PDEATHSIG SIGKILL: it dies with the server), the job's secrets (sealed in
// the database under the user, ManagedSecretsKey) on its stdin. Every limits::kManagedKeeperTick
// it renews the leases it holds and starts again a controller that exited while its job is
// unfinished: the controller resumes the job's current attempt (managed_jobs.cpp). A server that
// dies stops renewing; once its leases expire another server's keeper takes them and resumes the
// controllers (limits::kManagedTakeoverWithin). A keeper that cannot renew a lease kills that
// controller before the lease can expire (kManagedLeaseFenceMargin), so no two controllers of a
// job run at once. When a job ends, its lease is released and its sealed secrets deleted. A job
// whose controller cannot run ends FAILED_CONTROLLER here, and its buckets are released as its
// user (`herd jobs _release ID`), as its controller's end would have.
//
// JobKeeper holds the decisions (tested with fakes); KeeperWorld is what they act on.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "shared/common/clock.hpp"
#include "shared/common/status.hpp"

namespace herd::server {

class ApiStore;

// One managed job as the keeper sees it.
struct KeptJob {
  std::string user;
  int64_t id = 0;
  bool finished = false;    // in a final state
  std::string secrets_ref;  // ManagedJob::secrets_ref
};

// "managed/<user>/<id>": the lease of the job's controller.
std::string ManagedLeaseName(const std::string& user, int64_t id);

// What the keeper reads and changes. The server's is ServerKeeperWorld (job_keeper.cpp).
class KeeperWorld {
 public:
  virtual ~KeeperWorld() = default;
  // Every user's managed jobs.
  virtual Result<std::vector<KeptJob>> ListJobs() = 0;
  // The lease calls of ApiStore, for this server (its holder id and kManagedLeaseTtl).
  virtual Result<bool> TryAcquire(const std::string& lease) = 0;
  virtual Status Renew(const std::string& lease) = 0;
  virtual void Release(const std::string& lease) = 0;
  // Starts the job's controller. NotFound: it cannot ever start (its secrets are gone); anything
  // else is tried again later.
  virtual Status StartController(const KeptJob& job) = 0;
  // Whether the controller this keeper started for the job still runs.
  virtual bool ControllerRunning(const KeptJob& job) = 0;
  // Kills it (and its process group) now; nothing when none runs.
  virtual void StopController(const KeptJob& job) = 0;
  // Ends the job FAILED_CONTROLLER with `why` (unless it ended meanwhile).
  virtual void FailJob(const KeptJob& job, const std::string& why) = 0;
  // After FailJob: lets go of the buckets the job holds, as the job's controller does at its end
  // (`herd jobs _release ID` run as the user, in the background). Its cluster is not taken down
  // (as a local FAILED_CONTROLLER job's is not): the buckets it mounts and its node key go with
  // its `herd down`.
  virtual void ReleaseStorage(const KeptJob& job) = 0;
  // Deletes the job's sealed secrets (none: nothing).
  virtual void DropSecrets(const KeptJob& job) = 0;
};

class JobKeeper {
 public:
  JobKeeper(KeeperWorld& world, Clock& clock) : world_(world), clock_(clock) {}

  // One pass: fence leases not renewed in time, renew the rest, take the leases of unfinished
  // jobs no live server holds, (re)start their controllers, let go of finished jobs.
  void Tick();
  // Kills every controller this keeper runs and releases their leases (a server that stops: the
  // next holder takes over at once instead of after the TTL).
  void StopAll();

  // The jobs whose lease this keeper holds (by lease name), for tests and the log.
  std::vector<std::string> Held() const;

 private:
  struct Holding {
    KeptJob job;
    std::chrono::steady_clock::time_point renewed{};     // the last successful acquire or renew
    std::chrono::steady_clock::time_point started{};     // the running controller's start
    std::chrono::steady_clock::time_point restart_at{};  // no restart before
    bool ever_started = false;
    int quick_exits = 0;  // exits in a row within kManagedControllerQuickExit of a start
  };
  void Drop(const std::string& lease, bool release);
  // FailJob, ReleaseStorage, and the lease goes.
  void Fail(const std::string& lease, const KeptJob& job, const std::string& why);
  void Keep(Holding& h, bool unfinished);

  KeeperWorld& world_;
  Clock& clock_;
  std::map<std::string, Holding> held_;
  std::set<std::string> secrets_dropped_;  // finished jobs whose secrets were deleted
};

// The keeper of a running server: a thread that ticks every limits::kManagedKeeperTick (and at
// Kick), started by StartServerKeeper.
class ServerKeeper {
 public:
  virtual ~ServerKeeper() = default;
  // Ticks soon (a job was just launched).
  virtual void Kick() = 0;
  // Ends the thread; StopAll.
  virtual void Stop() = 0;
};

struct ServerKeeperOptions {
  std::string holder;     // this server's id in the lease rows
  std::string state_dir;  // holds users/<user>/ (HOME of each user's commands)
  std::string herd_binary;
  // The environment of the user's commands (ApiServer's), kManagedSupervisedEnv included.
  std::function<std::vector<std::string>(const std::string& user)> user_env;
};

// `store` must outlive the keeper.
Result<std::unique_ptr<ServerKeeper>> StartServerKeeper(ApiStore& store,
                                                        ServerKeeperOptions options);

}  // namespace herd::server
