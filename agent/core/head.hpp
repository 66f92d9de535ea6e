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
// The head routes connections between its parts (agent/head): the NodeRegistry (registration,
// fencing by incarnation, liveness and health), the job phase machine (job_phase.hpp: explicit
// phase, stop and process states and the decisions between them), the RunJournal (typed
// run.journal records), the run.log fan-out (RunLog, LogFanout) and Autostop. The job store, the
// clock and the spawner of the autostop command are injected (HeadParts), so that the timers'
// decisions run on simulated time in tests.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/head/autostop.hpp"
#include "agent/head/job_admission.hpp"
#include "agent/head/job_limits.hpp"
#include "agent/head/job_phase.hpp"
#include "agent/head/log_fanout.hpp"
#include "agent/head/node_registry.hpp"
#include "agent/head/run_journal.hpp"
#include "agent/head/stack_collector.hpp"
#include "agent/logs/log_merger.hpp"
#include "agent/sched/scheduler.hpp"
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

  struct ProcEntry {
    herd::v1::StartProcess start;  // kept to re-send after a re-registration
    bool restored = false;  // rebuilt from the journal: `start` holds only key and log (until
                            // ResumeRestored rebuilds a run phase whole)
    std::string node_id;
    ProcessLabel label;
    ProcState state = ProcState::kSent;
    // Its ProcessStarted came (pid known). A process may exit without one: a spawn error, its
    // node lost, a cancel while its agent was away.
    bool started = false;
    int pid = 0;
    uint64_t received = 0;  // bytes of output appended so far (the per-process sequence number)
    int exit_code = 0;
    herd::v1::ProcessExited exit;
    bool exited() const { return state == ProcState::kExited; }
    std::unique_ptr<LinePrefixer> prefixer;
  };
  struct JobRun {
    JobRecord rec;
    std::map<std::string, ProcEntry> procs;  // by ProcessKeyString
    std::vector<std::string> gang;           // node ids in rank order
    JobPhase phase = JobPhase::kPending;
    JobStop stop = JobStop::kNone;
    // PENDING, waiting for these lost nodes (their names): said once in run.log and in the job's
    // message (NoteWaitingForLostNodes), cleared when the job is placed or they are back.
    std::string waiting_for;
    // PENDING, held back by its dependencies or its array's limit (agent/sched/job_gate.hpp): the
    // reason, said once in the job's message, cleared when the gate opens.
    std::string gate_reason;
    // Set when output could not be stored (a node-local log or run.log on a full disk): the job
    // is stopped and ends FAILED_DRIVER with this message.
    std::string driver_error;
    // Set when herd stops the job itself (its time limit, a hung rank): it ends FAILED with this
    // message and reason, whatever its ranks' exit codes.
    std::string stop_error;
    herd::v1::JobEndReason end_reason = herd::v1::JOB_END_REASON_UNSPECIFIED;
    // The grace of the KillJob sent last (sent again to an agent that re-registers).
    std::chrono::milliseconds kill_grace = limits::kKillGracePeriod;
    bool hang_seen = false;  // a ProcessHung came: its stacks are being captured, then it ends
    RunLog log;              // run.log and its followers
    // run.journal next to run.log: what a restarted head needs to carry on with the job (its
    // processes, their pids and exits, and how many output bytes of each are in run.log).
    RunJournal journal;
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
  // The node a message's connection registered as; null for a connection that is not (or no
  // longer) a node's: one that never registered is dropped, a fenced-out one is ignored.
  NodeEntry* RegisteredNode(const ConnPtr& conn);
  // OK when the peer's certificate proves node node_id of this head's cluster; why not otherwise.
  Status ProvesNode(const transport::PeerIdentity& peer, const std::string& node_id) const;
  // False (and logged) when key names a process of this head that runs on another node than
  // node_id: an agent reports only its own processes. True for keys this head does not know.
  bool RunsOn(const std::string& node_id, const herd::v1::ProcessKey& key);
  void HandleStarted(const herd::v1::ProcessStarted& started);
  void HandleOutput(const herd::v1::ProcessOutput& out);
  void HandleExited(const herd::v1::ProcessExited& exited);
  // Every kNodeCheckInterval: nodes silent too long are lost (NodeRegistry::CheckLiveness),
  // then autostop's check.
  void CheckNodes();
  void NodeLost(const std::string& node_id);
  // An agent's last message before it stops on SIGTERM: the node is STOPPED until it registers.
  void HandleLeaving(const ConnPtr& conn, const herd::v1::Leaving& leaving);
  // Drains node_id for `reason` (kept in jobs.db; empty: undrains it). end_jobs: the jobs with a
  // process on it end FAILED_DRIVER now (its agent reported it unhealthy), else they finish.
  void Drain(const std::string& node_id, const std::string& reason, bool end_jobs);
  // The active jobs with a process on node_id that has not exited, by id.
  std::vector<int64_t> JobsRunningOn(const std::string& node_id) const;
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

  // Jobs.
  void Recover();
  // Rebuilds a SETTING_UP/RUNNING job from its journal; false when it cannot.
  bool RestoreRun(JobRun& run);
  // After RestoreRun: takes the phase change a head that died in the middle of it did not finish.
  void ResumeRestored(JobRun& run);
  void Journal(JobRun& run, const JournalRecord& record);
  void Schedule();
  void StartJob(JobRun& run, const Placement& placement);
  // Starts the setup or run phase (phase kSetup or kRun) of a placed job.
  void StartPhase(JobRun& run, JobPhase phase);
  void ProcessExit(JobRun& run, ProcEntry& proc);
  void MaybeAdvance(JobRun& run);
  // SIGTERM to every process of the job, SIGKILL after grace.
  void KillJobProcesses(JobRun& run, std::chrono::milliseconds grace = limits::kKillGracePeriod);
  void Finalize(int64_t job_id, herd::v1::JobState state, const std::string& error_line);
  // output: a record written with run.log's new size (its log_size) once the bytes are in.
  void AppendLog(JobRun& run, std::string_view bytes, const JournalOutput* output = nullptr);
  void PersistAndNotify(JobRun& run, bool end_of_stream);
  // Several jobs' records in one transaction, then their followers (none ends its stream).
  void PersistAndNotify(const std::vector<JobRun*>& runs);
  // Why no set of the cluster's nodes, alive or not, could ever hold `spec` (a Submit is refused
  // then, before it is queued); nullopt when some could, or while nodes are still to register.
  std::optional<std::string> WhyNeverFits(const herd::v1::TaskSpec& spec);
  // Why `spec` cannot be placed now because nodes it needs are lost (NodeRegistry::IsLost): the
  // lost nodes that could hold a rank, and how to bring them back; nullopt when the nodes not
  // lost are enough.
  // lost_names, when given, gets the names of those lost nodes (comma-separated).
  std::optional<std::string> WhyNeedsLostNodes(const herd::v1::TaskSpec& spec,
                                               std::string* lost_names = nullptr);
  // After a scheduling pass: a PENDING job that nodes lost since its submit keep from being
  // placed gets a line in run.log (its followers see it) and its message says why and how to
  // bring them back; it stays queued and runs once they are back.
  void NoteWaitingForLostNodes();
  int FindJobOfProcess(const herd::v1::ProcessKey& key, JobRun** run, ProcEntry** proc);

  // Run limits and stacks (head_limits.cpp, over JobDeadlines and StackCollector).
  // From CheckNodes: a --signal or --time-limit that fell due, captures past their deadline.
  void CheckRunLimits();
  void OnDeadline(const JobDeadlines::Event& event);
  // A rank without progress for its hang timeout: stacks of every rank into run.log, then the
  // job is stopped (FAILED, JOB_END_REASON_HUNG).
  void HandleHung(const herd::v1::ProcessHung& hung);
  void HandleStackReport(const std::string& node_id, const herd::v1::StackReport& report);
  // `herd stack`: the stacks of a running job, into run.log and the reply; the job goes on.
  void RequestStacks(const ConnPtr& conn, uint64_t request_id, const herd::v1::StackRequest& req);
  // Asks every node of the job for its run ranks' stacks; done gets them (or what came by
  // limits::kStackCaptureTimeout).
  void CaptureStacks(JobRun& run, StackCollector::Done done);
  // Appends a capture to the job's run.log (each rank's under its prefix, then the comparison)
  // when the job is still active; returns the text either way.
  std::string WriteStacks(const StackCollector::Result& result, const std::string& headline);

  boost::asio::io_context& io_;
  Options options_;
  std::unique_ptr<Clock> own_clock_;  // when HeadParts gave none
  Clock& clock_;
  std::unique_ptr<CommandSpawner> own_spawner_;  // when HeadParts gave none
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<transport::Server> server_;
  boost::asio::steady_timer check_timer_;
  NodeRegistry nodes_;
  LogFanout fanout_;                // before jobs_: their RunLogs are registered with it
  std::map<int64_t, JobRun> jobs_;  // active jobs by id (FIFO)
  // Jobs a previous head process was running: every node that registers is told to kill them.
  std::vector<std::pair<int64_t, int32_t>> orphaned_;
  Autostop autostop_;
  // Other jobs' states for the dependency gate (made in Start, over store_ and jobs_).
  std::unique_ptr<JobFactsCache> facts_;
  JobDeadlines deadlines_;
  StackCollector stacks_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace herd::agent
