// The head: the cluster's job queue and gang scheduler. Agents (including the head node's own
// worker) register here over /v1/agent; clients submit, follow, list and cancel over /v1/client.
// Everything runs on one io_context thread, so the state below needs no locks.
//
// A job's path (docs/ARCHITECTURE.md): SubmitJob -> PENDING (SQLite) -> the scheduler places it on
// num_nodes distinct nodes -> SETTING_UP (setup on every node of the cluster, in parallel) ->
// barrier
// -> RUNNING (run on each node of the gang, ranks in cluster order) -> SUCCEEDED | FAILED |
// FAILED_SETUP | FAILED_DRIVER | CANCELLED. Output of every process is prefixed line by line,
// appended to the merged run.log and fanned out to subscribed clients from their offsets.
//
// The head routes connections between its parts: the NodeRegistry (agent/head: registration,
// fencing by incarnation, liveness and health), the JobRunner (job_runner.hpp: admission,
// placement, the phases of each job over the job phase machine of agent/head/job_phase.hpp, its
// run.journal, run limits and stacks), the run.log fan-out (RunLog, LogFanout) and Autostop. The
// job store, the clock and the spawner of the autostop command are injected (HeadParts), so that
// the timers' decisions run on simulated time in tests.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "agent/core/job_runner.hpp"
#include "agent/head/autostop.hpp"
#include "agent/head/log_fanout.hpp"
#include "agent/head/node_registry.hpp"
#include "agent/store/job_store.hpp"
#include "herd/v1/agent.pb.h"
#include "herd/v1/client.pb.h"
#include "shared/common/clock.hpp"
#include "shared/common/limits.hpp"
#include "shared/transport/transport.hpp"

namespace herd::agent {

// What the head is built from; each left empty gets the real one.
struct HeadParts {
  Clock* clock = nullptr;             // SystemClock: liveness, autostop and node health times
  std::unique_ptr<JobStore> store;    // Start opens <state_dir>/jobs.db
  CommandSpawner* spawner = nullptr;  // ShellSpawner: runs the autostop command
};

class Head {
 public:
  struct Options {
    std::string cluster;
    std::string cloud = "local";
    std::string state_dir;  // jobs.db and logs/
    transport::TlsFiles tls;
    std::string listen_host = "127.0.0.1";
    uint16_t listen_port = 0;
    // Nodes the cluster is meant to have. Until that many have registered, a job that does not fit
    // waits instead of failing as infeasible (the workers may still be starting).
    int expected_nodes = 0;
    // A following client with more than this queued is served from run.log once it has drained
    // (limits::kSubscriberLagBytes; tests set it small).
    std::size_t subscriber_lag_bytes = limits::kSubscriberLagBytes;
    // Clients with more than this queued are dropped (transport::ServerOptions; tests set it
    // small to show that no replay queues a whole log at once).
    std::size_t max_queued_bytes_per_peer = limits::kMaxQueuedBytesPerPeer;
  };

  Head(boost::asio::io_context& io, Options options, HeadParts parts = {});
  ~Head();

  Status Start();
  void Stop();
  uint16_t port() const;
  // Handles one websocket message as if it had arrived on conn: the server's on_message path
  // without a socket. The register fuzzer (tests/fuzz) drives the head through it.
  void InjectMessage(const std::shared_ptr<transport::Connection>& conn, std::string message) {
    OnMessage(conn, std::move(message));
  }

 private:
  using ConnPtr = std::shared_ptr<transport::Connection>;

  // Connections.
  void OnMessage(const ConnPtr& conn, std::string message);
  void OnClose(const ConnPtr& conn, const Status& why);
  void SendToAgent(const std::string& node_id, const herd::v1::HeadToAgent& msg);
  void SendToClient(const ConnPtr& conn, uint64_t request_id, herd::v1::HeadToClient msg);
  void ReplyError(const ConnPtr& conn, uint64_t request_id, const Status& status);

  // Agents.
  void HandleAgent(const ConnPtr& conn, const herd::v1::AgentToHead& msg);
  void HandleRegister(const ConnPtr& conn, const herd::v1::Register& reg);
  // The node a message's connection registered as; null for a connection that is not (or no
  // longer) a node's: one that never registered is dropped, a fenced-out one is ignored.
  NodeEntry* RegisteredNode(const ConnPtr& conn);
  // OK when the peer's certificate proves node node_id of this head's cluster; why not otherwise.
  Status ProvesNode(const transport::PeerIdentity& peer, const std::string& node_id) const;
  // Every kNodeCheckInterval: nodes silent too long, or whose agent's connection closed and
  // stayed closed for kNodeClosedGrace, are lost (NodeRegistry::CheckLiveness), then autostop's
  // check.
  void CheckNodes();
  void NodeLost(const std::string& node_id);
  // An agent's last message before it stops on SIGTERM: the node is STOPPED until it registers.
  void HandleLeaving(const ConnPtr& conn, const herd::v1::Leaving& leaving);
  // Drains node_id for `reason` (kept in jobs.db; empty: undrains it). end_jobs: the jobs with a
  // process on it end FAILED_DRIVER now (its agent reported it unhealthy), else they finish.
  void Drain(const std::string& node_id, const std::string& reason, bool end_jobs);

  // Clients.
  void HandleClient(const ConnPtr& conn, const herd::v1::ClientToHead& msg);
  void Submit(const ConnPtr& conn, uint64_t request_id, const herd::v1::SubmitJob& submit);
  void Subscribe(const ConnPtr& conn, uint64_t request_id, const herd::v1::Subscribe& sub);
  void Queue(const ConnPtr& conn, uint64_t request_id, const herd::v1::QueueRequest& req);
  void Cancel(const ConnPtr& conn, uint64_t request_id, const herd::v1::CancelRequest& req);
  void Nodes(const ConnPtr& conn, uint64_t request_id);
  void SetAutostop(const ConnPtr& conn, uint64_t request_id, const herd::v1::SetAutostop& req);

  boost::asio::io_context& io_;
  Options options_;
  std::unique_ptr<Clock> own_clock_;  // when HeadParts gave none
  Clock& clock_;
  std::unique_ptr<CommandSpawner> own_spawner_;  // when HeadParts gave none
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<transport::Server> server_;
  boost::asio::steady_timer check_timer_;
  NodeRegistry nodes_;
  LogFanout fanout_;  // before runner_: its jobs' RunLogs are registered with it
  // The jobs (made in Start, over store_).
  std::unique_ptr<JobRunner> runner_;
  Autostop autostop_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace herd::agent
