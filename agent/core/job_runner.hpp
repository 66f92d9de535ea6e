// The head's job runner: a cluster's active jobs from their submit to their end. It admits jobs
// (SubmitJob -> PENDING rows in the job store), places them (agent/sched), runs their phases
// (setup on every node, a barrier, run on the gang: job_phase.hpp decides between them), follows
// their processes' reports (started, output, exits, hung ranks, stacks), writes run.log and
// run.journal, enforces run limits (job_limits.hpp) and ends them (Finalize). After a head restart
// it restores the jobs it was running from their journals (Recover).
//
// The head (head.hpp) owns the connections and the node registry and routes to it: messages of
// registered agents, the job requests of clients, a node lost or drained. Everything runs on the
// head's io_context thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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
#include "shared/common/status.hpp"
#include "shared/transport/transport.hpp"

namespace herd::agent {

class JobRunner {
 public:
  using ConnPtr = std::shared_ptr<transport::Connection>;

  struct Options {
    std::string cluster;
    std::string cloud = "local";
    std::string state_dir;  // logs/<id>-<name>/run.log
    // Nodes the cluster is meant to have (Head::Options::expected_nodes).
    int expected_nodes = 0;
  };
  // What the runner needs of the head around it.
  struct Host {
    // A message to a node's agent (kept for its re-registration when it is away).
    std::function<void(const std::string& node_id, const herd::v1::HeadToAgent&)> send_to_agent;
    // A reply to a client's request (an answer that comes later than the request's handler).
    std::function<void(const ConnPtr&, uint64_t request_id, herd::v1::HeadToClient)> send_to_client;
  };

  JobRunner(boost::asio::io_context& io, Options options, Clock& clock, JobStore& store,
            NodeRegistry& nodes, LogFanout& fanout, Host host);
  ~JobRunner();
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;

  // Start-up: the store's active jobs, each restored from its journal (or ended FAILED_DRIVER when
  // it cannot be), with what a head that died in the middle of a phase change left undone.
  void Recover();
  bool empty() const { return jobs_.empty(); }

  // Clients.
  // Admits a submit (its limits, whether the cluster could ever hold it, lost nodes it needs, its
  // dependencies) and queues its job(s) PENDING; the reply names them. Nothing is queued on error.
  Result<herd::v1::HeadToClient> Submit(const herd::v1::SubmitJob& submit);
  // Follows a job (active or ended) from sub's offset; an error for the head to reply.
  Status Subscribe(const ConnPtr& conn, uint64_t request_id, const herd::v1::Subscribe& sub);
  // Cancels the jobs asked for (all active ones with req.all()); the ids cancelled. An unknown id
  // is an error and cancels nothing; an ended one is left out.
  Result<std::vector<int64_t>> Cancel(const herd::v1::CancelRequest& req);
  // `herd stack`: the stacks of a running job, into run.log and (later) the reply; the job goes
  // on. An error for the head to reply when the job is not running.
  Status RequestStacks(const ConnPtr& conn, uint64_t request_id, const herd::v1::StackRequest& req);

  // Agents (from registered nodes, after RunsOn where the message names a process).
  // False (and logged) when key names a process of this head that runs on another node than
  // node_id: an agent reports only its own processes. True for keys this head does not know.
  bool RunsOn(const std::string& node_id, const herd::v1::ProcessKey& key);
  void HandleStarted(const herd::v1::ProcessStarted& started);
  void HandleOutput(const herd::v1::ProcessOutput& out);
  void HandleExited(const herd::v1::ProcessExited& exited);
  // A rank without progress for its hang timeout: stacks of every rank into run.log, then the
  // job is stopped (FAILED, JOB_END_REASON_HUNG).
  void HandleHung(const herd::v1::ProcessHung& hung);
  void HandleStackReport(const std::string& node_id, const herd::v1::StackReport& report);
  // Node id (re)registered on conn: catch up on what its agent did while away, re-send what it
  // never got, kill what it still runs of jobs that are over. agent_restarted: a new agent
  // process (a higher incarnation), which adopted the old one's processes.
  void CatchUp(const ConnPtr& conn, const std::string& node_id, const herd::v1::Register& reg,
               bool agent_restarted);

  // Nodes.
  // node_id was lost (NodeRegistry::MarkLost done): its jobs end, or end CANCELLED if cancelled.
  // `why` ends the jobs' message ("... was lost: WHY").
  void NodeLost(const std::string& node_id, const std::string& why);
  // node_id was drained because its agent reported it unhealthy: its jobs end FAILED_DRIVER.
  void EndJobsOnDrained(const std::string& node_id, const std::string& drain_reason);
  // node_id's cloud will take it back (a spot interruption notice, for `when`): every job with a
  // process on it is stopped on all its nodes with SIGTERM and its grace (StopGrace), says so in
  // its log, and ends FAILED_DRIVER (a managed job is recovered) once its processes exited.
  void StopJobsOnSpotNotice(const std::string& node_id, const std::string& when);
  // The active jobs with a process on node_id that has not exited, by id.
  std::vector<int64_t> JobsRunningOn(const std::string& node_id) const;

  // Places what can start now (on every registration, job end and node change).
  void Schedule();
  // From the head's periodic check: a --signal or --time-limit that fell due, captures past
  // their deadline.
  void CheckRunLimits();

  // "`herd start CLUSTER`": what starts the agents of this cluster that are not running.
  std::string RestartCommand() const;

 private:
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

  void SendToAgent(const std::string& node_id, const herd::v1::HeadToAgent& msg) {
    host_.send_to_agent(node_id, msg);
  }
  // Rebuilds a SETTING_UP/RUNNING job from its journal; false when it cannot.
  bool RestoreRun(JobRun& run);
  // After RestoreRun: takes the phase change a head that died in the middle of it did not finish.
  void ResumeRestored(JobRun& run);
  void Journal(JobRun& run, const JournalRecord& record);
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

  // Run limits and stacks (job_runner_limits.cpp, over JobDeadlines and StackCollector).
  void OnDeadline(const JobDeadlines::Event& event);
  // Asks every node of the job for its run ranks' stacks; done gets them (or what came by
  // limits::kStackCaptureTimeout).
  void CaptureStacks(JobRun& run, StackCollector::Done done);
  // Appends a capture to the job's run.log (each rank's under its prefix, then the comparison)
  // when the job is still active; returns the text either way.
  std::string WriteStacks(const StackCollector::Result& result, const std::string& headline);

  boost::asio::io_context& io_;
  Options options_;
  Clock& clock_;
  JobStore& store_;
  NodeRegistry& nodes_;
  LogFanout& fanout_;
  Host host_;
  std::map<int64_t, JobRun> jobs_;  // active jobs by id (FIFO)
  // Jobs a previous head process was running: every node that registers is told to kill them.
  std::vector<std::pair<int64_t, int32_t>> orphaned_;
  // Other jobs' states for the dependency gate (over store_ and jobs_).
  JobFactsCache facts_;
  JobDeadlines deadlines_;
  StackCollector stacks_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace herd::agent
