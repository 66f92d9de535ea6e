// The API server's implementation (api_server.hpp), internal to controller/server: one class
// whose parts live in one file per area:
//   api_server.cpp           start, listen, dispatch of the routes, stop; TLS files, first admin
//   server_commands.cpp      POST /api/v1/run: a CLI command as a child or a warm worker
//   server_uploads.cpp       POST /api/v1/uploads and unpacking them into a command's directory
//   server_requests.cpp      /api/v1/requests: list, one, its log (followed), cancel
//   server_users.cpp         /api/v1/users, /api/v1/tokens, /api/v1/audit (admins)
//   server_managed_jobs.cpp  managed jobs' controllers hosted here (job_keeper.hpp), their secrets
//   server_gpu_samples.cpp   the GPU sampler's parts (gpu_sampler.hpp): users, reads, the store
//   server_autostop.cpp      users' cloud clusters stopped for their autostop (`herd
//   _autostop-sweep`)
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json/value.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "controller/server/api_server.hpp"
#include "controller/server/command_runner.hpp"
#include "controller/server/dashboard/dashboard.hpp"
#include "controller/server/gpu_sampler.hpp"
#include "controller/server/http/http_server.hpp"
#include "controller/server/http/request_codec.hpp"
#include "controller/server/idle_trim.hpp"
#include "controller/server/job_keeper.hpp"
#include "controller/server/read_coalescer.hpp"
#include "controller/server/store/api_store.hpp"
#include "controller/server/warm_workers.hpp"

namespace herd::server::detail {

// A JSON answer: the value serialized, a newline after it.
api_http::HttpResponse Json(const boost::json::value& v, int status = 200);
boost::json::object UserJson(const User& u);

class ServerImpl final : public ApiServer, public std::enable_shared_from_this<ServerImpl> {
 public:
  ServerImpl(ApiServerOptions o, std::unique_ptr<ApiStore> store)
      : options_(std::move(o)),
        home_(options_.home, options_.state_dir),
        store_(std::move(store)),
        pool_(4),
        warm_({std::min(options_.warm_workers_per_user, limits::kApiWarmWorkersMax),
               limits::kApiWarmWorkersMax, limits::kApiWarmQueueWait}) {}

  Status Listen(boost::asio::io_context& io);
  uint16_t port() const override;
  std::string endpoint() const override;
  void Stop() override;
  // Interrupts the running commands and waits until each one's request has ended (its OnExit
  // ran Finished), not only its process: a server started again on this database must not find
  // it RUNNING. Wait also means the command let go of its Responder, whose connection must not
  // outlive the io_context.
  void StopCommands();
  // Names this server in the requests it accepts, and ends what an earlier run of it (killed, or
  // crashed) left PENDING or RUNNING: their commands died with it.
  Status TakeOver(std::string holder);
  // Managed jobs' controllers run here, as the keeper's children (job_keeper.hpp).
  Status StartKeeper();
  // The dashboard's GPU samples are taken here (gpu_sampler.hpp), not by the pages that show them.
  Status StartSampler();
  // Users' cloud clusters are stopped for their autostop here (server_autostop.cpp), with this
  // server's credentials, not by their heads.
  void StartAutostopSweeps();

 private:
  std::map<std::string, std::shared_ptr<RunningCommand>> RunningById();

  // ---- dispatch (api_server.cpp)
  // Every limits::kApiIdleTrimAfter: memory back to the system when no request came (IdleTrim).
  void ArmIdleTrim();  // trim_mu_ held
  static void TrimHeap();
  void Handle(api_http::HttpRequest req, const std::shared_ptr<api_http::Responder>& res);
  static api_http::HttpResponse Answer(const Result<boost::json::value>& v);
  Result<User> Authenticate(const api_http::HttpRequest& req);
  static Status RequireAdmin(const User& u);
  void Audit(const User& u, const std::string& verb, const std::string& target,
             const std::string& result);

  // ---- commands (server_commands.cpp)
  // `warm`: a read may run in a warm worker (false: one that found none runs as a child).
  void Run(const User& user, const api_http::HttpRequest& req,
           const std::shared_ptr<api_http::Responder>& res, bool warm = true);
  // A read shares the next run of the same words of its user (read_coalescer.hpp) in a warm
  // worker, on a thread of reads_pool_; when no worker could run it, it runs as a child like any
  // command, from a handler thread of its own.
  void RunWarm(const User& user, const api_http::HttpRequest& req,
               const std::shared_ptr<api_http::Responder>& res,
               const std::vector<std::string>& args);
  void Finished(const User& user, const std::string& id, const std::string& verb,
                const std::string& cluster, const std::string& dir, bool mutating, int code,
                const std::string& last_err);
  Status MaybeReleaseUnmade(const std::string& user, const std::string& cluster);
  Status EnsureUserHome(const std::string& user);
  // The command's environment: this server's, with the user's home (HOME, HERD_HOME under it)
  // and name, and never a server to send the command to again.
  std::vector<std::string> ChildEnv(const std::string& user, bool secrets_on_stdin);
  WarmWorkers::Spawn WarmSpawn(const std::string& user);

  // ---- managed jobs (server_managed_jobs.cpp)
  // A managed job's secrets, sealed under its user for its controllers: the reference the job
  // records (jobs::ManagedSecretsKey gives the key).
  Result<std::string> KeepManagedSecrets(const std::string& user, const std::string& json);
  // After `herd jobs launch`: the keeper looks at once; a launch that failed made no job, and
  // the secrets it sealed go.
  void LaunchedManaged(const std::string& user, const std::string& verb, int code,
                       const std::string& secrets_ref);

  // ---- GPU samples (server_gpu_samples.cpp)
  Result<std::vector<std::string>> UsersWithClusters();
  // `herd infra -o json` as `user`, interrupted at `deadline` or when `stop` is requested.
  Result<std::vector<ClusterGpus>> ReadGpus(const std::string& user,
                                            GpuSamplerParts::SteadyTime deadline,
                                            std::stop_token stop);

  // ---- autostop (server_autostop.cpp)
  // One sweep: `herd _autostop-sweep` as each user with clusters whose last one ended.
  void SweepAutostop(std::map<std::string, std::shared_ptr<RunningCommand>>& running);
  // Interrupts the sweeps still running, waits for them and ends the thread; idempotent.
  void StopAutostopSweeps();

  // ---- uploads (server_uploads.cpp)
  // An upload's place in the command's directory: "workdir" or "mounts/N".
  static Status ValidateUploadName(const std::string& name);
  void Upload(const User& user, const api_http::HttpRequest& req,
              const std::shared_ptr<api_http::Responder>& res);
  // Extracts an upload of `user` into `dest` (made), then removes the upload. GNU tar keeps
  // members inside dest: it strips leading '/' and refuses names with "..".
  Status Unpack(const std::string& user, const std::string& upload, const std::string& dest);

  // ---- requests (server_requests.cpp)
  Result<RequestRecord> OwnRequest(const User& user, const std::string& id);
  Result<boost::json::value> GetRequest(const User& user, const std::string& id);
  void ListRequests(const User& user, const api_http::Target& t,
                    const std::shared_ptr<api_http::Responder>& res);
  void RequestLog(const User& user, const std::string& id, bool follow,
                  const std::shared_ptr<api_http::Responder>& res);
  static Result<std::string> ReadFileFrom(const std::string& path, uint64_t offset);
  Result<boost::json::value> CancelRequest(const User& user, const std::string& id);

  // ---- users, tokens and the audit trail (server_users.cpp)
  Result<boost::json::value> ListUsers(const User& user);
  Result<boost::json::value> AddUser(const User& admin, const std::string& raw);
  Result<boost::json::value> DeleteUser(const User& admin, const std::string& name);
  Result<boost::json::value> ListTokens(const User& user, const api_http::Target& t);
  Result<boost::json::value> CreateToken(const User& user, const std::string& raw);
  Result<boost::json::value> RevokeToken(const User& user, const std::string& id);
  Result<boost::json::value> Audit(const User& user, const api_http::Target& t);

  ApiServerOptions options_;
  ServerHome home_;
  std::unique_ptr<ApiStore> store_;
  boost::asio::thread_pool pool_;
  WarmWorkers warm_;
  // A read's round holds a warm worker and a thread while it runs: as many threads as workers.
  boost::asio::thread_pool reads_pool_{limits::kApiWarmWorkersMax};
  ReadCoalescer coalescer_{
      [this](std::function<void()> fn) { boost::asio::post(reads_pool_, std::move(fn)); }};
  std::unique_ptr<api_http::HttpServer> http_;
  std::atomic<std::uint64_t> requests_seen_{0};
  std::mutex trim_mu_;
  std::unique_ptr<boost::asio::steady_timer> trim_timer_;  // these three: under trim_mu_
  bool trim_stopped_ = false;
  IdleTrim idle_trim_{&ServerImpl::TrimHeap};
  std::unique_ptr<ServerKeeper> keeper_;
  std::unique_ptr<dashboard::Dashboard> dashboard_;
  std::unique_ptr<GpuSampler> sampler_;
  std::jthread autostop_thread_;
  std::string holder_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<RunningCommand>> running_;
  // Every command started and not seen done yet, for Stop to wait on.
  std::vector<std::shared_ptr<RunningCommand>> started_;
};

}  // namespace herd::server::detail
