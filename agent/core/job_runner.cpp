#include "agent/core/job_runner.hpp"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cstring>
#include <filesystem>
#include <set>
#include <variant>

#include "agent/core/process_key.hpp"
#include "agent/job/job_env.hpp"
#include "agent/process/crash_point.hpp"
#include "shared/common/log.hpp"
#include "shared/common/unix_time.hpp"
#include "shared/proto/frame.hpp"
#include "shared/proto/job_state.hpp"

namespace herd::agent {

namespace fs = std::filesystem;
using namespace herd::v1;

namespace {

std::string SafeName(const std::string& name) {
  std::string out;
  for (char c : name)
    out +=
        (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  return out.empty() ? "task" : out;
}

// Tells a node to stop what it runs of this attempt of the job (its supervisors and their groups).
HeadToAgent KillJobMessage(int64_t job_id, int32_t attempt,
                           std::chrono::milliseconds grace = limits::kKillGracePeriod) {
  HeadToAgent msg;
  msg.mutable_kill()->set_job_id(job_id);
  msg.mutable_kill()->set_attempt(attempt);
  msg.mutable_kill()->set_grace_ms(grace.count());
  return msg;
}

}  // namespace

JobRunner::JobRunner(boost::asio::io_context& io, Options options, Clock& clock, JobStore& store,
                     NodeRegistry& nodes, LogFanout& fanout, Host host)
    : io_(io),
      options_(std::move(options)),
      clock_(clock),
      store_(store),
      nodes_(nodes),
      fanout_(fanout),
      host_(std::move(host)),
      facts_(store_, [this](int64_t id) -> const JobInfo* {
        auto it = jobs_.find(id);
        return it == jobs_.end() ? nullptr : &it->second.rec.info;
      }) {}

JobRunner::~JobRunner() { *alive_ = false; }

Result<HeadToClient> JobRunner::Submit(const SubmitJob& submit) {
  const TaskSpec& spec = submit.task();
  auto records = SubmitRecords(submit, NowUnixMs());
  if (!records.ok()) return records.status();
  if (auto why = WhyBadLimits(spec)) return InvalidArgument(*why);
  if (auto why = WhyNeverFits(spec)) {
    return FailedPrecondition("the task cannot run on this cluster: " + *why);
  }
  if (auto why = WhyNeedsLostNodes(spec)) {
    return Unavailable("the task cannot run now: " + *why);
  }
  HERD_RETURN_IF_ERROR(
      sched::ValidateDependencies(submit, [this](int64_t id) { return facts_.Get(id); }));
  // One transaction (the log path names the id; an array's jobs get consecutive ids).
  ArrayIdSetter array_ids;
  HERD_RETURN_IF_ERROR(store_.AddJobs(*records, [&](herd::v1::JobInfo& info) {
    array_ids(info);
    info.set_log_path(options_.state_dir + "/logs/" + std::to_string(info.job_id()) + "-" +
                      SafeName(spec.name()) + "/run.log");
  }));
  HeadToClient reply;
  SubmitReply* submitted = reply.mutable_submit_reply();
  submitted->set_job_id(records->front().info.job_id());
  for (JobRecord& rec : *records) {
    const int64_t id = rec.info.job_id();
    if (rec.info.array_size() > 0) submitted->add_array_job_ids(id);
    std::error_code ec;
    fs::create_directories(fs::path(rec.info.log_path()).parent_path(), ec);
    JobRun& run = jobs_[id];
    run.rec = std::move(rec);
    if (Status s = run.log.Open(fanout_, id, run.rec.info.log_path()); !s.ok()) {
      // Stored already: it ends FAILED_DRIVER rather than vanishing.
      Finalize(id, JOB_STATE_FAILED_DRIVER,
               "ERROR: Job " + std::to_string(id) + ": " + s.message());
    }
  }
  HERD_LOG(kInfo) << "job " << submitted->job_id() << " (" << spec.name() << ") submitted by "
                  << submit.user()
                  << (submit.has_array()
                          ? " as an array of " + std::to_string(records->size()) + " jobs"
                          : std::string());
  return reply;
}

Status JobRunner::Subscribe(const ConnPtr& conn, uint64_t request_id,
                            const herd::v1::Subscribe& sub) {
  int64_t job_id = sub.job_id();
  if (job_id == 0) {
    HERD_ASSIGN_OR_RETURN(job_id, store_.LatestJobId());
    if (job_id == 0) return NotFound("no job has been submitted");
  }
  // The job's state first (the client prints its banner from it), then the log from the offset.
  // --tail N: from where the last N lines start (or the offset asked, if later).
  auto from = [&](const std::string& path, uint64_t size) {
    if (sub.tail_lines() <= 0) return sub.offset();
    return std::max(sub.offset(), OffsetOfLastLines(path, size, sub.tail_lines()));
  };
  auto active = jobs_.find(job_id);
  if (active != jobs_.end()) {
    JobRun& run = active->second;
    fanout_.Subscribe(run.log, run.rec.info, conn, request_id, from(run.log.path(), run.log.size()),
                      sub.follow());
    return Status::Ok();
  }
  HERD_ASSIGN_OR_RETURN(JobRecord rec, store_.GetJob(job_id));
  std::error_code ec;
  const uint64_t size = fs::file_size(rec.info.log_path(), ec);
  fanout_.SubscribeEnded(rec.info, conn, request_id, from(rec.info.log_path(), ec ? 0 : size));
  return Status::Ok();
}

Result<std::vector<int64_t>> JobRunner::Cancel(const CancelRequest& req) {
  std::vector<int64_t> ids;
  if (req.all()) {
    for (const auto& [id, run] : jobs_) ids.push_back(id);
  } else {
    for (int64_t id : req.job_ids()) {
      if (!jobs_.count(id)) {
        HERD_RETURN_IF_ERROR(store_.GetJob(id).status());
        continue;  // already finished: nothing to cancel
      }
      ids.push_back(id);
    }
  }
  for (int64_t id : ids) {
    JobRun& run = jobs_.at(id);
    HERD_LOG(kInfo) << "cancelling job " << id;
    if (run.rec.info.state() == JOB_STATE_PENDING) {
      Finalize(id, JOB_STATE_CANCELLED, "");
      continue;
    }
    run.stop = JobStop::kCancelling;
    KillJobProcesses(
        run, CancelGrace(req.has_grace_ms() ? std::optional<int64_t>(req.grace_ms()) : std::nullopt,
                         run.rec.spec));
    // A cancel is the user's decision: a rank whose agent is away does not hold the job open.
    // It counts as killed now; the job is over by the time its agent returns, and the agent is
    // then told to kill what it still runs of it (CatchUp).
    for (auto& [name, proc] : run.procs) {
      const NodeEntry* node = nodes_.Find(proc.node_id);
      if (proc.exited() || (node && node->conn)) continue;
      HERD_LOG(kWarn) << "job " << id << ": " << (proc.label.setup ? "setup rank " : "rank ")
                      << proc.label.rank << " on " << proc.node_id
                      << ", whose agent is away, is killed when the agent returns";
      proc.state = ProcState::kExited;
      proc.exit_code = limits::kKilledRankExitCode;
    }
    MaybeAdvance(run);
  }
  return ids;
}

void JobRunner::CatchUp(const ConnPtr& conn, const std::string& id, const Register& reg,
                        bool agent_restarted) {
  // Catch up on what the agent did while it was away, and re-send what it never got.
  std::map<std::string, const ProcessProgress*> progress;
  for (const auto& p : reg.running()) progress[ProcessKeyString(p.key())] = &p;
  std::vector<int64_t> lost_jobs;
  for (auto& [job_id, run] : jobs_) {
    for (auto& [name, proc] : run.procs) {
      if (proc.node_id != id || proc.exited()) continue;
      auto p = progress.find(name);
      HeadToAgent m;
      // An agent persists a process before spawning it and its successor resolves that entry
      // (Worker::AdoptProcesses), so one it does not report was never started: send it (again).
      // Unless the head knows it started (its table was lost), or, restored from the journal, it
      // was never rebuilt whole (only the run phase is, by ResumeRestored).
      if (p == progress.end() && (agent_restarted || proc.restored) &&
          (proc.started || proc.start.script().empty())) {
        lost_jobs.push_back(job_id);
        break;
      }
      if (p != progress.end() && !proc.started) {
        // Its ProcessStarted was lost with the old connection (or a restarted head never got it).
        ProcessStarted started;
        *started.mutable_key() = proc.start.key();
        started.set_pid(p->second->pid());
        HandleStarted(started);
      }
      if (p == progress.end()) {  // the StartProcess was lost with the old connection
        *m.mutable_start() = proc.start;
      } else if (p->second->exited() || p->second->output_bytes() > proc.received) {
        *m.mutable_resend()->mutable_key() = proc.start.key();
        m.mutable_resend()->set_from_offset(proc.received);
      } else {
        continue;
      }
      conn->Send(proto::Encode(m));
    }
    if (run.stop != JobStop::kNone) {
      conn->Send(proto::Encode(KillJobMessage(job_id, run.rec.info.attempt(), run.kill_grace)));
    }
  }
  // Processes the agent still runs of jobs that are over here (failed while its node was lost,
  // or ended while it was away): kill them, once per job.
  std::set<std::pair<int64_t, int32_t>> stale;
  for (const auto& p : reg.running()) {
    if (p.exited()) continue;
    auto job = jobs_.find(p.key().job_id());
    if (job == jobs_.end() || job->second.rec.info.attempt() != p.key().attempt())
      stale.emplace(p.key().job_id(), p.key().attempt());
  }
  for (const auto& [job_id, attempt] : stale) {
    HERD_LOG(kInfo) << "node " << id << " still runs job " << job_id << ", which is over: killing";
    conn->Send(proto::Encode(KillJobMessage(job_id, attempt)));
  }
  for (const auto& [job_id, attempt] : orphaned_) {
    conn->Send(proto::Encode(KillJobMessage(job_id, attempt)));
  }
  for (int64_t job_id : lost_jobs) {
    JobRun& run = jobs_.at(job_id);
    for (auto& [name, proc] : run.procs) {
      if (proc.node_id == id && !proc.exited()) {
        proc.state = ProcState::kExited;
        proc.exit_code = limits::kKilledRankExitCode;
      }
    }
    // The new agent finds the old processes by their group marker and kills them.
    KillJobProcesses(run);
    Finalize(job_id, JOB_STATE_FAILED_DRIVER,
             "ERROR: Job " + std::to_string(job_id) + " failed: the agent on " + id +
                 " does not know the job's process there (restarted without its process table, "
                 "or the head restarted while starting it)");
  }
}

void JobRunner::NodeLost(const std::string& node_id, const std::string& why) {
  for (int64_t id : JobsRunningOn(node_id)) {
    auto& run = jobs_.at(id);
    if (run.stop == JobStop::kCancelling) {
      // Cancelled before its node was lost: it ends CANCELLED, as the user asked.
      for (auto& [name, proc] : run.procs) {
        if (proc.node_id == node_id && !proc.exited()) {
          proc.state = ProcState::kExited;
          proc.exit_code = limits::kKilledRankExitCode;
        }
      }
      MaybeAdvance(run);
      continue;
    }
    std::string ranks;
    for (auto& [name, proc] : run.procs) {
      if (proc.node_id == node_id && !proc.exited()) {
        proc.state = ProcState::kExited;
        proc.exit_code = limits::kKilledRankExitCode;
        ranks += (ranks.empty() ? "" : ", ") +
                 std::string(proc.label.setup ? "setup rank " : "rank ") +
                 std::to_string(proc.label.rank);
        if (!proc.label.setup && run.rec.info.first_failed_rank() < 0) {
          run.rec.info.set_first_failed_rank(proc.label.rank);
          run.rec.info.set_first_failed_node(node_id);
        }
      }
    }
    if (run.rec.info.first_failed_node().empty()) run.rec.info.set_first_failed_node(node_id);
    // The other nodes' processes are stopped now, with the job's grace to save a checkpoint (a
    // managed job is recovered next); the lost node's, if it comes back, when it registers again
    // (HandleRegister kills what it still runs of jobs that are over).
    KillJobProcesses(run, StopGrace(run.rec.spec));
    Finalize(id, LostNodeState(run.phase),
             "ERROR: Job " + std::to_string(id) + " failed: node " + node_id + " (" + ranks +
                 ") was lost: " + why);
  }
}

void JobRunner::EndJobsOnDrained(const std::string& node_id, const std::string& drain_reason) {
  for (int64_t id : JobsRunningOn(node_id)) {
    JobRun& run = jobs_.at(id);
    if (run.rec.info.first_failed_node().empty()) run.rec.info.set_first_failed_node(node_id);
    KillJobProcesses(run);
    // FAILED_DRIVER: the program did not fail, its node did (a managed job is recovered).
    Finalize(id, JOB_STATE_FAILED_DRIVER,
             "ERROR: Job " + std::to_string(id) + " failed: node " + node_id +
                 " was drained: " + drain_reason);
  }
}

bool JobRunner::RunsOn(const std::string& node_id, const ProcessKey& key) {
  JobRun* run;
  ProcEntry* proc;
  if (!FindJobOfProcess(key, &run, &proc) || proc->node_id == node_id) return true;
  HERD_LOG(kError) << "ignoring a report of node " << node_id << " about " << ProcessKeyString(key)
                   << ", which runs on node " << proc->node_id;
  return false;
}

int JobRunner::FindJobOfProcess(const ProcessKey& key, JobRun** run, ProcEntry** proc) {
  auto it = jobs_.find(key.job_id());
  if (it == jobs_.end() || it->second.rec.info.attempt() != key.attempt()) return 0;
  auto p = it->second.procs.find(ProcessKeyString(key));
  if (p == it->second.procs.end()) return 0;
  *run = &it->second;
  *proc = &p->second;
  return 1;
}

void JobRunner::HandleStarted(const ProcessStarted& started) {
  JobRun* run;
  ProcEntry* proc;
  if (!FindJobOfProcess(started.key(), &run, &proc)) return;  // stale attempt or finished job
  if (proc->started) return;                                  // idempotent re-send
  proc->started = true;
  if (proc->state == ProcState::kSent) proc->state = ProcState::kStarted;
  proc->pid = started.pid();
  proc->label.pid = started.pid();
  proc->prefixer = std::make_unique<LinePrefixer>(PrefixFor(proc->label));
  Journal(*run, JournalStarted{ProcessKeyString(started.key()), started.pid()});
}

void JobRunner::HandleOutput(const ProcessOutput& out) {
  JobRun* run;
  ProcEntry* proc;
  if (!FindJobOfProcess(out.key(), &run, &proc) || !proc->prefixer) return;
  uint64_t begin = out.offset();
  uint64_t end = begin + out.data().size();
  if (end <= proc->received) return;  // a repeat
  if (begin > proc->received) {       // a gap: ask for it again, in order
    HERD_LOG(kWarn) << "output gap for " << ProcessKeyString(out.key()) << ": have "
                    << proc->received << ", got offset " << begin;
    HeadToAgent m;
    *m.mutable_resend()->mutable_key() = out.key();
    m.mutable_resend()->set_from_offset(proc->received);
    SendToAgent(proc->node_id, m);
    return;
  }
  std::string_view fresh = std::string_view(out.data()).substr(proc->received - begin);
  std::string lines;
  proc->prefixer->Feed(fresh, lines);
  proc->received = end;
  if (!lines.empty()) {
    const JournalOutput output{0, ProcessKeyString(out.key()),
                               proc->received - proc->prefixer->pending_bytes()};
    AppendLog(*run, lines, &output);
  }
  if (proc->state == ProcState::kExitPending && proc->received >= proc->exit.output_bytes()) {
    ProcessExit(*run, *proc);
  }
}

void JobRunner::HandleExited(const ProcessExited& exited) {
  JobRun* run;
  ProcEntry* proc;
  if (!FindJobOfProcess(exited.key(), &run, &proc) || proc->exited()) return;
  proc->exit = exited;
  if (!proc->prefixer) {  // never started (spawn error): label without pid
    proc->prefixer = std::make_unique<LinePrefixer>(PrefixFor(proc->label));
  }
  if (exited.output_bytes() > proc->received) {
    proc->state = ProcState::kExitPending;
    HeadToAgent m;
    *m.mutable_resend()->mutable_key() = exited.key();
    m.mutable_resend()->set_from_offset(proc->received);
    SendToAgent(proc->node_id, m);
    return;
  }
  ProcessExit(*run, *proc);
}

std::vector<int64_t> JobRunner::JobsRunningOn(const std::string& node_id) const {
  std::vector<int64_t> ids;
  for (const auto& [job_id, run] : jobs_) {
    for (const auto& [name, proc] : run.procs) {
      if (proc.node_id == node_id && !proc.exited()) {
        ids.push_back(job_id);
        break;
      }
    }
  }
  return ids;
}

std::string JobRunner::RestartCommand() const { return "`herd start " + options_.cluster + "`"; }

std::optional<std::string> JobRunner::WhyNeedsLostNodes(const TaskSpec& spec,
                                                        std::string* lost_names) {
  // Until every node registered, the missing ones are still starting, not lost.
  if (static_cast<int>(nodes_.size()) < options_.expected_nodes) return std::nullopt;
  const JobDemand d = DemandOf(0, spec);
  int present = 0;
  std::vector<const NodeEntry*> lost;
  for (const NodeEntry* node : nodes_.Order()) {
    if (!sched::RankFits(d, node->info, node->info.cpus(), node->info.gpu_count())) continue;
    if (nodes_.IsLost(*node)) {
      lost.push_back(node);
    } else {
      ++present;
    }
  }
  if (present >= d.num_nodes || lost.empty()) return std::nullopt;
  if (lost_names) {
    lost_names->clear();
    for (const NodeEntry* node : lost) {
      *lost_names += (lost_names->empty() ? "" : ",") + node->info.node_id();
    }
  }
  auto count = [](int n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  std::string why = "it needs " + count(d.num_nodes, "node", "nodes") + " and only " +
                    std::to_string(present) + " of those that could hold it " +
                    (present == 1 ? "is" : "are") + " up; ";
  for (std::size_t i = 0; i < lost.size(); ++i) {
    const NodeHealth h = nodes_.HealthOf(*lost[i]);
    why += (i ? "; " : "") + lost[i]->info.node_id() + " is " +
           (h.condition() == NODE_CONDITION_STOPPED ? "stopped (" + lost[i]->left_reason + ", "
                                                    : "lost (") +
           "no message from its agent for " + std::to_string(h.silent_ms() / 1000) + " s)";
  }
  why += ". Start " + std::string(lost.size() == 1 ? "its agent" : "their agents") +
         " again with " + RestartCommand();
  if (present > 0) {
    why += ", or run on " + count(present, "node", "nodes") + " (--num-nodes " +
           std::to_string(present) + ")";
  }
  return why;
}

std::optional<std::string> JobRunner::WhyNeverFits(const TaskSpec& spec) {
  // Until every node registered, a node still to come may hold it: the job waits (Schedule).
  if (static_cast<int>(nodes_.size()) < options_.expected_nodes) return std::nullopt;
  const JobDemand d = DemandOf(0, spec);
  // Counted in place; the copies WhyInfeasible words its reason from are made only if short.
  int capable = 0;
  for (const auto& [id, node] : nodes_.nodes()) {
    if (sched::RankFits(d, node.info, node.info.cpus(), node.info.gpu_count())) ++capable;
  }
  if (capable >= d.num_nodes) return std::nullopt;
  std::vector<NodeInfo> infos;
  std::vector<bool> lost;
  for (const NodeEntry* node : nodes_.Order()) {
    infos.push_back(node->info);
    lost.push_back(!NodeRegistry::Up(*node));
  }
  return sched::WhyInfeasible(d, infos, lost);
}

void JobRunner::Recover() {
  auto active = store_.ActiveJobs();
  if (!active.ok()) {
    HERD_LOG(kError) << "cannot read active jobs: " << active.status().message();
    return;
  }
  for (auto& rec : *active) {
    int64_t id = rec.info.job_id();
    JobRun& run = jobs_[id];
    run.rec = rec;
    // One that cannot be opened is not restored (RestoreRun) and ends FAILED_DRIVER.
    static_cast<void>(run.log.Open(fanout_, id, rec.info.log_path(), /*resume=*/true));
    if (rec.info.state() != JOB_STATE_PENDING && !RestoreRun(run)) {
      // No journal (a job of an older head): its processes cannot be followed again.
      orphaned_.emplace_back(id, rec.info.attempt());
      Finalize(id, JOB_STATE_FAILED_DRIVER,
               "ERROR: Job " + std::to_string(id) + " failed: the head restarted while it ran");
    } else if (rec.info.state() != JOB_STATE_PENDING) {
      // Its time limit counts from its start, before this head's.
      const auto ran = std::chrono::milliseconds(
          std::max<int64_t>(0, clock_.UnixMs() - rec.info.started_unix_ms()));
      deadlines_.Start(id, clock_.Now() - ran, rec.spec);
      ResumeRestored(run);
    }
  }
}

void JobRunner::ResumeRestored(JobRun& run) {
  // A head that died between two steps of a phase change left nothing that would move the job
  // on (no process of the current phase will exit again): take the step now.
  const int64_t id = run.rec.info.job_id();
  std::vector<ProcEntry*> setup;  // by rank
  for (auto& [name, proc] : run.procs) {
    if (proc.label.setup) setup.push_back(&proc);
  }
  std::sort(setup.begin(), setup.end(),
            [](const ProcEntry* a, const ProcEntry* b) { return a->label.rank < b->label.rank; });
  bool setup_whole = !setup.empty() && static_cast<int>(setup.size()) == setup[0]->label.num_nodes;
  for (std::size_t r = 0; setup_whole && r < setup.size(); ++r) {
    setup_whole = setup[r]->label.rank == static_cast<int>(r);
  }
  if (run.phase == JobPhase::kSetup && !setup_whole) {
    // Died while journaling the setup processes: a node has no record, so whether it got its
    // setup is unknown (and the phase would end without it). Fail clearly rather than guess.
    KillJobProcesses(run);
    Finalize(id, JOB_STATE_FAILED_DRIVER,
             "ERROR: Job " + std::to_string(id) +
                 " failed: the head restarted while starting its setup (" +
                 std::to_string(setup.size()) + " of " +
                 std::to_string(setup.empty() ? 0 : setup[0]->label.num_nodes) +
                 " setup processes recorded)");
    return;
  }
  if (run.phase == JobPhase::kSetup && setup_whole) {
    // Setup processes journaled but not confirmed started may not have reached their agents:
    // rebuild their StartProcess (the journal has every setup node's rank and ip, so the cluster
    // of that moment), for Register to send it to an agent that does not report it. With a setup
    // record missing, that cluster is unknown and such a process fails the job (FAILED_DRIVER).
    JobEnvContext ctx;
    ctx.cluster_name = options_.cluster;
    ctx.cloud = options_.cloud;
    ctx.job_id = id;
    ctx.task_id = MakeTaskId(std::chrono::system_clock::time_point(
                                 std::chrono::milliseconds(run.rec.info.submitted_unix_ms())),
                             options_.cluster, id);
    ctx.user = run.rec.info.user();
    ctx.spec = &run.rec.spec;
    for (const ProcEntry* proc : setup) ctx.cluster_ips.push_back(proc->label.ip);
    for (const auto& g : run.gang) ctx.gang_ips.push_back(nodes_.nodes().at(g).info.addresses(0));
    for (const auto& g : run.rec.info.rank_gpus()) {
      ctx.gang_gpus.emplace_back(g.indices().begin(), g.indices().end());
    }
    int rebuilt = 0;
    for (ProcEntry* proc : setup) {
      if (proc->started || proc->exited() || !proc->start.script().empty()) continue;
      ++rebuilt;
      StartProcess& sp = proc->start;  // key and log name from the journal
      sp.set_script(run.rec.spec.setup());
      auto env = SetupEnv(ctx, proc->label.rank);
      sp.mutable_env()->insert(env.begin(), env.end());
      for (const auto& u : SetupUnsetEnv()) sp.add_unset_env(u);
      sp.set_cwd(run.rec.spec.workdir());
      if (run.rec.spec.has_container()) *sp.mutable_container() = run.rec.spec.container();
    }
    if (rebuilt > 0) {
      HERD_LOG(kInfo) << "job " << id << ": the head restarted while starting its setup; "
                      << rebuilt << " setup process(es) not confirmed started are sent on Register";
    }
  }
  bool phase_over = true;
  std::set<int> run_ranks;
  bool run_incomplete = false;  // a run process never started, known only from the journal
  const bool in_setup = run.phase == JobPhase::kSetup;
  for (const auto& [name, proc] : run.procs) {
    if (proc.label.setup == in_setup && !proc.exited()) phase_over = false;
    if (proc.label.setup) continue;
    run_ranks.insert(proc.label.rank);
    run_incomplete = run_incomplete || (!proc.started && !proc.exited());
  }
  if (!in_setup && (run_ranks.size() < run.gang.size() || run_incomplete)) {
    // RUNNING, but not every run process was journaled, or one may not have been sent: start
    // the phase again; it rebuilds every rank's StartProcess, and the agents report what they
    // already run (a rank is started once).
    HERD_LOG(kInfo) << "job " << id << ": the head restarted while starting its run; resuming";
    StartPhase(run, JobPhase::kRun);
  } else if (phase_over) {
    HERD_LOG(kInfo) << "job " << id << ": the head restarted after its "
                    << (in_setup ? "setup" : "run") << " ended; moving on";
    MaybeAdvance(run);
  } else {
    return;
  }
  // Nodes of processes just started are lost like others if they do not register again.
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;  // ended
  for (const auto& [name, proc] : it->second.procs) {
    nodes_[proc.node_id];  // known from now on, as every node of a job is
    if (!proc.exited()) nodes_.ExpectBack(proc.node_id);
  }
}

void JobRunner::Journal(JobRun& run, const JournalRecord& record) {
  if (Status s = run.journal.Append(JournalPathFor(run.rec.info.log_path()), record); !s.ok()) {
    HERD_LOG(kError) << "job " << run.rec.info.job_id() << ": " << s.message()
                     << "; the job would not survive a head restart";
  }
}

bool JobRunner::RestoreRun(JobRun& run) {
  const int64_t id = run.rec.info.job_id();
  const std::string path = JournalPathFor(run.rec.info.log_path());
  const auto records = ReadJournal(path);
  if (!records) return false;
  uint64_t committed_size = 0;
  std::map<std::string, uint64_t> committed;
  for (const JournalRecord& record : *records) {
    if (const auto* p = std::get_if<JournalProcess>(&record)) {
      StartProcess sp;
      sp.mutable_key()->set_job_id(p->job_id);
      sp.mutable_key()->set_attempt(p->attempt);
      sp.mutable_key()->set_kind(static_cast<ProcessKind>(p->kind));
      sp.mutable_key()->set_rank(p->rank);
      sp.set_log_name(p->log_name);
      ProcEntry& proc = run.procs[ProcessKeyString(sp.key())];
      proc.start = sp;
      proc.restored = true;
      proc.node_id = p->node_id;
      proc.label.setup = p->setup;
      proc.label.rank = p->rank;
      proc.label.ip = p->ip;
      proc.label.num_nodes = p->num_nodes;
    } else if (const auto* s = std::get_if<JournalStarted>(&record)) {
      auto it = run.procs.find(s->key);
      if (it == run.procs.end()) continue;
      it->second.started = true;
      if (it->second.state == ProcState::kSent) it->second.state = ProcState::kStarted;
      it->second.pid = s->pid;
      it->second.label.pid = s->pid;
    } else if (const auto* o = std::get_if<JournalOutput>(&record)) {
      if (!run.procs.count(o->key)) continue;
      committed_size = o->log_size;
      committed[o->key] = o->committed;
    } else if (const auto* x = std::get_if<JournalExit>(&record)) {
      auto it = run.procs.find(x->key);
      if (it == run.procs.end()) continue;
      committed_size = x->log_size;
      it->second.state = ProcState::kExited;
      it->second.exit_code = x->exit_code;
      it->second.exit.set_exit_code(x->exit_code);
    }
  }
  if (run.procs.empty()) return false;
  // Whatever run.log holds beyond the last record was appended by a head that died before it
  // recorded it; it comes again from the agents.
  if (!run.log.Truncate(committed_size)) return false;
  run.phase = PhaseOfState(run.rec.info.state());
  for (const auto& n : run.rec.info.node_ids()) run.gang.push_back(n);
  for (auto& [key, proc] : run.procs) {
    proc.received = committed.count(key) ? committed[key] : 0;
    if (proc.started || proc.exited()) {
      proc.prefixer = std::make_unique<LinePrefixer>(PrefixFor(proc.label));
    }
    if (proc.exited() && proc.exit_code != 0) run.stop = JobStop::kKilling;  // fail fast under way
    // A node that does not come back is lost like any other (CheckNodes).
    nodes_[proc.node_id];  // known from now on, as every node of a job is
    if (!proc.exited()) nodes_.ExpectBack(proc.node_id);
  }
  HERD_LOG(kInfo) << "job " << id << " restored from " << path << ": " << run.procs.size()
                  << " process(es), run.log at " << committed_size << " bytes";
  return true;
}

void JobRunner::Schedule() {
  // Called on every registration and job end: with nothing pending there is nothing to place, and
  // building the node states (a sorted copy of every node) would make registering N agents O(N^2).
  if (std::none_of(jobs_.begin(), jobs_.end(),
                   [](const auto& j) { return j.second.rec.info.state() == JOB_STATE_PENDING; })) {
    return;
  }
  const std::vector<NodeEntry*>& order = nodes_.Order();
  std::vector<NodeState>& states = nodes_.SchedStates();  // reset in place: no NodeInfo copied
  for (std::size_t i = 0; i < order.size(); ++i) {
    // A drained node takes no new job (its running ones are reserved below as usual).
    states[i].alive = NodeRegistry::Up(*order[i]) && !NodeRegistry::Drained(*order[i]);
    states[i].cpus_used = 0;
    states[i].gpu_used.clear();
  }
  std::vector<JobDemand> fifo;
  std::map<int64_t, int> array_active;  // array id -> its jobs started or let through this pass
  for (auto& [id, run] : jobs_) {
    if (run.rec.info.state() == JOB_STATE_PENDING) continue;
    if (run.rec.info.array_size() > 0) ++array_active[run.rec.info.array_id()];
    // What a started job holds is in its record (node_ids, rank_gpus): the same after a restart.
    Reserve(states, DemandOf(id, run.rec.spec), run.rec.info);
  }
  // Dependencies summed up once per pass: an array's jobs often wait for the same ones.
  std::map<int64_t, sched::DependencyState> deps;
  const sched::DependencyOf dependency_of = [&](int64_t dep) -> const sched::DependencyState& {
    auto it = deps.find(dep);
    if (it == deps.end()) {
      it = deps.emplace(dep, sched::SummarizeDependency(
                                 dep, [this](int64_t id) { return facts_.Get(id); }))
               .first;
    }
    return it->second;
  };
  std::vector<std::pair<int64_t, std::string>> never;  // after-ok dependencies that failed
  std::vector<JobRun*> new_reasons;  // persisted together: an array's jobs change at once
  for (auto& [id, run] : jobs_) {
    if (run.rec.info.state() != JOB_STATE_PENDING) continue;
    const herd::v1::JobInfo& info = run.rec.info;
    if (sched::Gated(info)) {
      const sched::Gate gate = sched::CheckGate(info, dependency_of, array_active[info.array_id()]);
      if (gate.verdict == sched::GateVerdict::kNever) {
        never.emplace_back(id, gate.reason);
        continue;
      }
      if (gate.verdict == sched::GateVerdict::kWait) {
        if (run.gate_reason != gate.reason) {
          // Said once (queue shows it; a follower of the job sees it): PENDING with the reason.
          run.gate_reason = gate.reason;
          run.rec.info.set_message("Job " + std::to_string(id) + " is " +
                                   (gate.reason.rfind("waiting", 0) == 0 ? "" : "waiting: ") +
                                   gate.reason + ".");
          new_reasons.push_back(&run);
        }
        continue;
      }
      if (!run.gate_reason.empty()) {
        run.gate_reason.clear();
        run.rec.info.clear_message();  // persisted when it starts, or with its next reason
      }
      if (info.array_size() > 0) ++array_active[info.array_id()];
    }
    fifo.push_back(DemandOf(id, run.rec.spec));
  }
  PersistAndNotify(new_reasons);
  for (const auto& [id, reason] : never) {
    Finalize(id, JOB_STATE_CANCELLED,
             "ERROR: Job " + std::to_string(id) + " was cancelled: " + reason);
  }
  if (fifo.empty()) return;
  ScheduleResult result = herd::agent::Schedule(fifo, states);
  bool cluster_complete = static_cast<int>(states.size()) >= options_.expected_nodes;
  for (const auto& inf : result.infeasible) {
    if (!cluster_complete) continue;  // more nodes may still register
    Finalize(inf.job_id, JOB_STATE_FAILED,
             "ERROR: Job " + std::to_string(inf.job_id) + " cannot run: " + inf.reason);
  }
  for (const auto& p : result.start) {
    auto it = jobs_.find(p.job_id);
    if (it == jobs_.end()) continue;
    if (!it->second.waiting_for.empty()) {
      it->second.waiting_for.clear();
      it->second.rec.info.clear_message();  // persisted by StartPhase
    }
    StartJob(it->second, p);
  }
  NoteWaitingForLostNodes();
}

void JobRunner::NoteWaitingForLostNodes() {
  const bool any_lost = std::any_of(nodes_.nodes().begin(), nodes_.nodes().end(),
                                    [this](const auto& n) { return nodes_.IsLost(n.second); });
  for (auto& [id, run] : jobs_) {
    if (run.rec.info.state() != JOB_STATE_PENDING) continue;
    std::string names;
    std::optional<std::string> why;
    if (any_lost) why = WhyNeedsLostNodes(run.rec.spec, &names);
    if (names == run.waiting_for) continue;  // said already (or nothing to say)
    run.waiting_for = names;
    if (!why) {
      run.rec.info.clear_message();
    } else {
      const std::string line = "Job " + std::to_string(id) + " is waiting: " + *why + ".";
      HERD_LOG(kWarn) << line;
      AppendLog(run, line + "\n");
      run.rec.info.set_message(line);
    }
    PersistAndNotify(run, false);
  }
}

void JobRunner::StartJob(JobRun& run, const Placement& placement) {
  const std::vector<std::string>& gang = placement.node_ids;
  run.gang = gang;
  run.rec.info.clear_node_ids();
  for (const auto& n : gang) run.rec.info.add_node_ids(n);
  // Persisted with the state change in StartPhase; released when the job leaves jobs_.
  run.rec.info.clear_rank_gpus();
  if (DemandOf(0, run.rec.spec).gpus_per_node > 0) {
    for (const auto& gpus : placement.gpus) {
      run.rec.info.add_rank_gpus()->mutable_indices()->Add(gpus.begin(), gpus.end());
    }
  }
  run.rec.info.set_started_unix_ms(NowUnixMs());
  std::string gpus;  // "; GPUs 0,1 | 2,3" (per rank), for whoever reads the agent log
  for (int r = 0; r < run.rec.info.rank_gpus_size(); ++r) {
    gpus += r == 0 ? "; GPUs " : " | ";
    for (int i = 0; i < run.rec.info.rank_gpus(r).indices_size(); ++i) {
      gpus += (i ? "," : "") + std::to_string(run.rec.info.rank_gpus(r).indices(i));
    }
  }
  HERD_LOG(kInfo) << "job " << run.rec.info.job_id() << " placed on " << gang.size() << " node(s)"
                  << gpus;
  deadlines_.Start(run.rec.info.job_id(), clock_.Now(), run.rec.spec);
  StartPhase(run, run.rec.spec.setup().empty() ? JobPhase::kRun : JobPhase::kSetup);
}

void JobRunner::StartPhase(JobRun& run, JobPhase phase) {
  const int64_t id = run.rec.info.job_id();
  const int32_t attempt = run.rec.info.attempt();
  const bool setup = phase == JobPhase::kSetup;
  run.phase = phase;
  run.rec.info.set_state(StateOfPhase(phase));
  PersistAndNotify(run, false);
  if (!setup) CrashPoint("head-run-persisted");

  // The cluster's alive nodes: only setup runs on them and only SetupEnv lists them, so a run
  // phase does not walk every node of a large cluster.
  std::vector<const NodeInfo*> cluster;
  if (setup) {
    for (const NodeEntry* n : nodes_.Order()) {
      if (NodeRegistry::Up(*n)) cluster.push_back(&n->info);
    }
  }
  JobEnvContext ctx;
  ctx.cluster_name = options_.cluster;
  ctx.cloud = options_.cloud;
  ctx.job_id = id;
  ctx.task_id = !run.rec.info.task_id().empty()
                    ? run.rec.info.task_id()
                    : MakeTaskId(std::chrono::system_clock::time_point(
                                     std::chrono::milliseconds(run.rec.info.submitted_unix_ms())),
                                 options_.cluster, id);
  ctx.attempt = attempt;
  ctx.user = run.rec.info.user();
  ctx.spec = &run.rec.spec;
  ctx.array_id = run.rec.info.array_id();
  ctx.array_rank = run.rec.info.array_rank();
  ctx.array_index = run.rec.info.array_index();
  ctx.array_size = run.rec.info.array_size();
  for (const NodeInfo* n : cluster) ctx.cluster_ips.push_back(n->addresses(0));
  for (const auto& g : run.gang) ctx.gang_ips.push_back(nodes_.nodes().at(g).info.addresses(0));
  for (const auto& g : run.rec.info.rank_gpus()) {
    ctx.gang_gpus.emplace_back(g.indices().begin(), g.indices().end());
  }

  std::string dir = std::to_string(id) + "-" + SafeName(run.rec.spec.name());
  std::vector<std::pair<std::string, int>> targets;  // node, rank
  if (setup) {
    for (std::size_t i = 0; i < cluster.size(); ++i) targets.emplace_back(cluster[i]->node_id(), i);
  } else {
    for (std::size_t r = 0; r < run.gang.size(); ++r) targets.emplace_back(run.gang[r], r);
  }
  if (!setup && run.rec.spec.run().empty()) {
    Finalize(id, JOB_STATE_SUCCEEDED, "");
    return;
  }
  for (const auto& [node_id, rank] : targets) {
    HeadToAgent msg;
    StartProcess* sp = msg.mutable_start();
    sp->mutable_key()->set_job_id(id);
    sp->mutable_key()->set_attempt(attempt);
    sp->mutable_key()->set_kind(setup ? PROCESS_KIND_SETUP : PROCESS_KIND_RUN);
    sp->mutable_key()->set_rank(rank);
    sp->set_script(setup ? run.rec.spec.setup() : run.rec.spec.run());
    auto env = setup ? SetupEnv(ctx, rank) : RunEnv(ctx, rank);
    sp->mutable_env()->insert(env.begin(), env.end());
    if (setup) {
      for (const auto& u : SetupUnsetEnv()) sp->add_unset_env(u);
    } else {
      sp->set_hang_timeout_ms(run.rec.spec.hang_timeout_ms());
    }
    sp->set_cwd(run.rec.spec.workdir());
    if (run.rec.spec.has_container()) *sp->mutable_container() = run.rec.spec.container();
    sp->set_log_name(dir + (setup ? "/setup-" + node_id + ".log"
                                  : "/tasks/" + std::to_string(rank) + "-" + node_id + ".log"));
    ProcEntry& proc = run.procs[ProcessKeyString(sp->key())];
    proc.start = *sp;
    proc.node_id = node_id;
    proc.label.setup = setup;
    proc.label.rank = rank;
    proc.label.ip = nodes_.nodes().at(node_id).info.addresses(0);
    proc.label.num_nodes = static_cast<int>(setup ? cluster.size() : run.gang.size());
    Journal(run, JournalProcess{id, attempt, static_cast<int>(sp->key().kind()), rank, node_id,
                                setup, proc.label.num_nodes, proc.label.ip, sp->log_name()});
    if (rank + 1 == static_cast<int>(targets.size())) {
      CrashPoint(setup ? "head-setup-journaled" : "head-run-journaled");
    } else if (setup && rank == 0) {
      CrashPoint("head-setup-partly-journaled");
    }
    SendToAgent(node_id, msg);
  }
}

void JobRunner::ProcessExit(JobRun& run, ProcEntry& proc) {
  proc.state = ProcState::kExited;
  proc.exit_code = proc.exit.exit_code();
  HERD_LOG(kInfo) << "job " << run.rec.info.job_id() << " " << (proc.label.setup ? "setup" : "run")
                  << " rank " << proc.label.rank << " on " << proc.node_id << " exited "
                  << proc.exit_code << (run.stop != JobStop::kNone ? " (after kill)" : "");
  if (proc.prefixer) {
    std::string tail;
    proc.prefixer->Flush(tail);
    if (!proc.exit.spawn_error().empty()) {
      tail +=
          PrefixFor(proc.label) + "herd: cannot start process: " + proc.exit.spawn_error() + "\n";
    }
    if (!proc.exit.output_error().empty())
      tail += PrefixFor(proc.label) + "herd: " + proc.exit.output_error() + "\n";
    if (!tail.empty()) AppendLog(run, tail);
  }
  if (!proc.exit.output_error().empty() && run.stop == JobStop::kNone && run.driver_error.empty()) {
    run.driver_error = "ERROR: Job " + std::to_string(run.rec.info.job_id()) + " failed: node " +
                       proc.node_id + " (" + (proc.label.setup ? "setup, " : "") + "rank " +
                       std::to_string(proc.label.rank) +
                       ") could not store its output and was stopped: " + proc.exit.output_error();
  }
  const RankExitStep step = OnRankExit(proc.exit_code, run.stop);
  proc.exit_code = step.exit_code;
  if (step.fail_fast) {
    // Fail fast: the first non-zero exit kills every other process of the job.
    if (!proc.label.setup && run.rec.info.first_failed_rank() < 0) {
      run.rec.info.set_first_failed_rank(proc.label.rank);
      run.rec.info.set_first_failed_node(proc.node_id);
    }
    if (proc.label.setup && run.rec.info.first_failed_node().empty()) {
      run.rec.info.set_first_failed_node(proc.node_id);
    }
    KillJobProcesses(run);
  }
  Journal(run, JournalExit{run.log.size(), ProcessKeyString(proc.start.key()), proc.exit_code});
  MaybeAdvance(run);
}

void JobRunner::MaybeAdvance(JobRun& run) {
  PhaseCheck check;
  check.job_id = run.rec.info.job_id();
  check.phase = run.phase;
  check.stop = run.stop;
  check.driver_error = run.driver_error;
  check.stop_error = run.stop_error;
  check.first_failed_rank = run.rec.info.first_failed_rank();
  check.first_failed_node = run.rec.info.first_failed_node();
  const bool in_setup = run.phase == JobPhase::kSetup;
  for (const auto& [name, proc] : run.procs) {
    if (proc.label.setup == in_setup) {
      check.processes.push_back({proc.label.rank, proc.exited(), proc.exit_code});
    }
  }
  const PhaseStep step = DecidePhaseEnd(check);
  switch (step.next) {
    case PhaseStep::Next::kWait:
      return;
    case PhaseStep::Next::kStartRun:
      CrashPoint("head-setup-done");
      return StartPhase(run, JobPhase::kRun);
    case PhaseStep::Next::kFinalize:
      return Finalize(check.job_id, step.state, step.error_line);
  }
}

void JobRunner::KillJobProcesses(JobRun& run, std::chrono::milliseconds grace) {
  run.stop = Killed(run.stop);
  run.kill_grace = grace;
  std::set<std::string> nodes;
  for (const auto& [name, proc] : run.procs) nodes.insert(proc.node_id);
  for (const auto& n : nodes) {
    SendToAgent(n, KillJobMessage(run.rec.info.job_id(), run.rec.info.attempt(), grace));
  }
}

void JobRunner::Finalize(int64_t job_id, JobState state, const std::string& error_line) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  JobRun& run = it->second;
  if (!error_line.empty()) AppendLog(run, error_line + "\n");
  run.rec.info.set_state(state);
  run.rec.info.set_ended_unix_ms(NowUnixMs());
  run.rec.info.clear_exits();
  std::vector<std::pair<int, const ProcEntry*>> ranks;
  for (const auto& [name, proc] : run.procs) {
    if (!proc.label.setup) ranks.emplace_back(proc.label.rank, &proc);
  }
  std::sort(ranks.begin(), ranks.end());
  for (const auto& [rank, proc] : ranks) {
    RankExit* e = run.rec.info.add_exits();
    e->set_rank(rank);
    e->set_node_id(proc->node_id);
    e->set_exit_code(proc->exited() ? proc->exit_code : limits::kKilledRankExitCode);
    e->set_pid(proc->pid);
  }
  if (!error_line.empty()) run.rec.info.set_message(error_line);
  run.rec.info.set_end_reason(run.end_reason);
  deadlines_.Forget(job_id);
  // Leftovers of a finished job (daemons it started, children that escaped) are swept too.
  if (!run.procs.empty() && run.stop == JobStop::kNone) KillJobProcesses(run);
  HERD_LOG(kInfo) << "job " << job_id << " " << proto::JobStateName(state);
  PersistAndNotify(run, true);
  run.log.Close();
  if (Status s = run.journal.Finish(); !s.ok()) {
    HERD_LOG(kWarn) << "job " << job_id << ": " << s.message();
  }
  jobs_.erase(it);
  stacks_.FinishJob(job_id);  // a capture still waiting answers with what it has
  // Freed resources may let the next job start; defer to keep this call's callers simple.
  auto alive = alive_;
  boost::asio::post(io_, [this, alive] {
    if (*alive) Schedule();
  });
}

void JobRunner::AppendLog(JobRun& run, std::string_view bytes, const JournalOutput* output) {
  if (const int err = run.log.Write(bytes); err != 0) {
    HERD_LOG(kError) << "cannot append to " << run.rec.info.log_path() << ": " << std::strerror(err)
                     << "; stopping job " << run.rec.info.job_id();
    // Output that cannot be kept (disk full): the job is stopped, not left running blind. Later
    // bytes still reach following clients; run.log is not written again.
    if (run.driver_error.empty()) {
      char host[256] = "";
      ::gethostname(host, sizeof host - 1);
      run.driver_error = "ERROR: Job " + std::to_string(run.rec.info.job_id()) +
                         " failed: the head (" + host + ") cannot write " +
                         run.rec.info.log_path() + ": " + std::strerror(err);
    }
    if (run.stop == JobStop::kNone && !run.procs.empty()) KillJobProcesses(run);
  }
  // Journaled before any client sees the bytes: a restarted head never takes back what a client
  // printed.
  if (output) {
    JournalOutput record = *output;
    record.log_size = run.log.size() + bytes.size();
    Journal(run, record);
  }
  fanout_.Publish(run.log, bytes);
}

void JobRunner::PersistAndNotify(const std::vector<JobRun*>& runs) {
  if (runs.empty()) return;
  std::vector<const JobRecord*> records;
  records.reserve(runs.size());
  for (const JobRun* run : runs) records.push_back(&run->rec);
  if (auto s = store_.UpdateJobs(records); !s.ok()) {
    HERD_LOG(kError) << s.message();
  }
  for (JobRun* run : runs) fanout_.Notify(run->log, run->rec.info, false);
}

void JobRunner::PersistAndNotify(JobRun& run, bool end_of_stream) {
  if (auto s = store_.UpdateJob(run.rec); !s.ok()) {
    HERD_LOG(kError) << s.message();
  }
  fanout_.Notify(run.log, run.rec.info, end_of_stream);
}

}  // namespace herd::agent
