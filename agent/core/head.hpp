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
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/logs/log_merger.hpp"
#include "agent/sched/scheduler.hpp"
#include "agent/store/job_store.hpp"
#include "herd/v1/agent.pb.h"
#include "herd/v1/client.pb.h"
#include "shared/common/limits.hpp"
#include "shared/transport/transport.hpp"

namespace herd::agent {

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

  Head(boost::asio::io_context& io, Options options);
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
  using Clock = std::chrono::steady_clock;
  using ConnPtr = std::shared_ptr<transport::Connection>;

  struct NodeEntry {
    herd::v1::NodeInfo info;
    uint64_t incarnation = 0;
    ConnPtr conn;
    Clock::time_point last_seen;
    bool alive = false;
    // Its agent of incarnation left_incarnation said it was stopping (Leaving): while no newer
    // agent registered, the node is STOPPED (NodeHealth), with the reason it gave.
    bool left = false;
    uint64_t left_incarnation = 0;
    std::string left_reason;
    int64_t left_unix_ms = 0;
  };
  struct ProcEntry {
    herd::v1::StartProcess start;  // kept to re-send after a re-registration
    bool restored = false;  // rebuilt from the journal: `start` holds only key and log (until
                            // ResumeRestored rebuilds a run phase whole)
    std::string node_id;
    ProcessLabel label;
    int pid = 0;
    bool started = false;
    uint64_t received = 0;  // bytes of output appended so far (the per-process sequence number)
    bool exited = false;
    int exit_code = 0;
    bool exit_waiting_for_output = false;
    herd::v1::ProcessExited exit;
    std::unique_ptr<LinePrefixer> prefixer;
  };
  struct Subscriber {
    std::weak_ptr<transport::Connection> conn;
    uint64_t request_id = 0;
    // run.log bytes queued for it so far. A client that falls behind (more than
    // Options::subscriber_lag_bytes queued) gets no live data; CatchUp serves it from run.log,
    // where every byte already is, once its queue has drained: the head's memory per client stays
    // bounded and a slow terminal is not dropped (it was at kMaxQueuedBytesPerPeer).
    uint64_t sent = 0;
    bool lagging = false;
  };
  // A log sent to a client from run.log, paced: at most subscriber_lag_bytes / 2 is queued at a
  // time, the next part once its queue is down to a quarter of subscriber_lag_bytes (CatchUp).
  // Then JobStatus{final_info, end_of_stream}. `herd logs` of a finished job, a not-followed
  // subscription, and a lagging follower whose job ended; a log of any size (a week-long run's)
  // reaches the client without ever being queued whole (that dropped the client at
  // kMaxQueuedBytesPerPeer, again at every reconnect).
  struct Replay {
    std::weak_ptr<transport::Connection> conn;
    uint64_t request_id = 0;
    std::string path;
    uint64_t next = 0;
    uint64_t end = 0;
    herd::v1::JobInfo final_info;
  };
  struct JobRun {
    JobRecord rec;
    std::map<std::string, ProcEntry> procs;  // by ProcessKeyString
    std::vector<std::string> gang;           // node ids in rank order
    bool in_setup = false;
    bool killing = false;  // fail-fast or cancel sent KillJob; later non-zero exits report 137
    bool cancel_requested = false;
    // PENDING, waiting for these lost nodes (their names): said once in run.log and in the job's
    // message (NoteWaitingForLostNodes), cleared when the job is placed or they are back.
    std::string waiting_for;
    // Set when output could not be stored (a node-local log or run.log on a full disk): the job
    // is stopped and ends FAILED_DRIVER with this message.
    std::string driver_error;
    int fd = -1;
    uint64_t log_size = 0;
    // run.journal next to run.log: what a restarted head needs to carry on with the job (its
    // processes, their pids and exits, and how many output bytes of each are in run.log).
    int journal_fd = -1;
    std::vector<Subscriber> subs;
  };

  // Connections.
  void OnMessage(const ConnPtr& conn, std::string message);
  void OnClose(const ConnPtr& conn, const Status& why);
  void SendToAgent(const std::string& node_id, const herd::v1::HeadToAgent& msg);
  void SendToClient(const ConnPtr& conn, uint64_t request_id, herd::v1::HeadToClient msg);
  void ReplyError(const ConnPtr& conn, uint64_t request_id, const Status& status);

  // Agents.
  void HandleAgent(const ConnPtr& conn, const herd::v1::AgentToHead& msg);
  void HandleRegister(const ConnPtr& conn, const herd::v1::Register& reg);
  // The node a message's connection registered as; nodes_.end() for a connection that is not (or
  // no longer) a node's: one that never registered is dropped, a fenced-out one is ignored.
  std::map<std::string, NodeEntry>::iterator RegisteredNode(const ConnPtr& conn);
  // OK when the peer's certificate proves node node_id of this head's cluster; why not otherwise.
  Status ProvesNode(const transport::PeerIdentity& peer, const std::string& node_id) const;
  // False (and logged) when key names a process of this head that runs on another node than
  // node_id: an agent reports only its own processes. True for keys this head does not know.
  bool RunsOn(const std::string& node_id, const herd::v1::ProcessKey& key);
  void HandleStarted(const herd::v1::ProcessStarted& started);
  void HandleOutput(const herd::v1::ProcessOutput& out);
  void HandleExited(const herd::v1::ProcessExited& exited);
  void CheckNodes();
  void NodeLost(const std::string& node_id);
  // An agent's last message before it stops on SIGTERM: the node is STOPPED until it registers.
  void HandleLeaving(const ConnPtr& conn, const herd::v1::Leaving& leaving);
  // UP, RECONNECTING, LOST or STOPPED, as `herd nodes` and `herd status` show it.
  herd::v1::NodeHealth HealthOf(const NodeEntry& node) const;
  // Declared lost (silent for limits::kNodeLostAfter; after a head restart, not registered within
  // it): a submit that needs it is refused. A node only reconnecting is not.
  bool IsLost(const NodeEntry& node) const;
  // "`herd start CLUSTER`": what starts the agents of this cluster that are not running.
  std::string RestartCommand() const;

  // Clients.
  void HandleClient(const ConnPtr& conn, const herd::v1::ClientToHead& msg);
  void Submit(const ConnPtr& conn, uint64_t request_id, const herd::v1::SubmitJob& submit);
  void Subscribe(const ConnPtr& conn, uint64_t request_id, const herd::v1::Subscribe& sub);
  void Queue(const ConnPtr& conn, uint64_t request_id, const herd::v1::QueueRequest& req);
  void Cancel(const ConnPtr& conn, uint64_t request_id, const herd::v1::CancelRequest& req);
  void Nodes(const ConnPtr& conn, uint64_t request_id);
  void SetAutostop(const ConnPtr& conn, uint64_t request_id, const herd::v1::SetAutostop& req);
  void CheckAutostop();

  // Jobs.
  void Recover();
  // Rebuilds a SETTING_UP/RUNNING job from its journal; false when it cannot.
  bool RestoreRun(JobRun& run);
  // After RestoreRun: takes the phase change a head that died in the middle of it did not finish.
  void ResumeRestored(JobRun& run);
  void Journal(JobRun& run, const std::string& line);
  void Schedule();
  void StartJob(JobRun& run, const Placement& placement);
  void StartPhase(JobRun& run, bool setup);
  void ProcessExit(JobRun& run, ProcEntry& proc);
  void MaybeAdvance(JobRun& run);
  void KillJobProcesses(JobRun& run);
  void Finalize(int64_t job_id, herd::v1::JobState state, const std::string& error_line);
  // journal: a record ("o KEY COMMITTED") written with run.log's new size once the bytes are in.
  void AppendLog(JobRun& run, std::string_view bytes, const std::string& journal = "");
  void PersistAndNotify(JobRun& run, bool end_of_stream);
  Status ReplayLog(const ConnPtr& conn, uint64_t request_id, int64_t job_id,
                   const std::string& path, uint64_t from, uint64_t to);
  std::vector<herd::v1::NodeInfo> OrderedNodes(bool alive_only) const;
  // Every known node in cluster order (SortClusterOrder), kept across scheduling passes and rebuilt
  // only when a node is added or its info changes (NodeEntry addresses in nodes_ are stable):
  // copying and sorting every NodeInfo at each pass would be the head's main cost in a burst of
  // small jobs.
  const std::vector<NodeEntry*>& NodeOrder();
  // Why no set of the cluster's nodes, alive or not, could ever hold `spec` (a Submit is refused
  // then, before it is queued); nullopt when some could, or while nodes are still to register.
  std::optional<std::string> WhyNeverFits(const herd::v1::TaskSpec& spec);
  // Why `spec` cannot be placed now because nodes it needs are lost (IsLost): the lost nodes that
  // could hold a rank, and how to bring them back; nullopt when the nodes not lost are enough.
  // lost_names, when given, gets the names of those lost nodes (comma-separated).
  std::optional<std::string> WhyNeedsLostNodes(const herd::v1::TaskSpec& spec,
                                               std::string* lost_names = nullptr);
  // After a scheduling pass: a PENDING job that nodes lost since its submit keep from being
  // placed gets a line in run.log (its followers see it) and its message says why and how to
  // bring them back; it stays queued and runs once they are back.
  void NoteWaitingForLostNodes();
  // Serves lagging subscribers of every job and every Replay from run.log as far as their queues
  // allow; rearms catch_up_timer_ while any is left.
  void CatchUp();
  void CatchUp(JobRun& run);
  // Sends the next part of a replay; true when it is done (or its client gone) and can go.
  bool PumpReplay(Replay& replay);
  void StartReplay(Replay replay);
  int FindJobOfProcess(const herd::v1::ProcessKey& key, JobRun** run, ProcEntry** proc);

  boost::asio::io_context& io_;
  Options options_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<transport::Server> server_;
  boost::asio::steady_timer check_timer_;
  boost::asio::steady_timer catch_up_timer_;  // armed while a subscriber lags or replays_
  std::list<Replay> replays_;
  Clock::time_point last_check_ = Clock::now();  // when CheckNodes last ran
  Clock::time_point started_at_ = Clock::now();  // Start(): nodes known from jobs.db have
                                                 // kNodeLostAfter from then to register again
  std::map<std::string, NodeEntry> nodes_;
  uint64_t node_info_gen_ = 0;  // bumped whenever a node's info is set
  // NodeOrder's cache, valid for node_info_gen_ == node_order_gen_ and as many nodes as nodes_;
  // sched_nodes_ holds the same nodes' scheduler states (infos copied once per rebuild).
  std::vector<NodeEntry*> node_order_;
  uint64_t node_order_gen_ = UINT64_MAX;
  std::vector<NodeState> sched_nodes_;
  std::map<const transport::Connection*, std::string> agent_conns_;  // conn -> node id
  std::map<int64_t, JobRun> jobs_;                                   // active jobs by id (FIFO)
  // Jobs a previous head process was running: every node that registers is told to kill them.
  std::vector<std::pair<int64_t, int32_t>> orphaned_;
  herd::v1::SetAutostop autostop_;  // idle_minutes < 0: off
  Clock::time_point last_busy_ = Clock::now();
  bool autostop_fired_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace herd::agent
