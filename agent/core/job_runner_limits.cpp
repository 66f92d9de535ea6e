// The job runner's run limits and stacks: the glue between its jobs and the parts that decide
// (agent/head/job_limits.hpp: JobDeadlines, grace; agent/head/stack_collector.hpp: captures and
// their comparison). Kept out of job_runner.cpp, which runs the phases.
#include <algorithm>
#include <set>

#include "agent/core/job_runner.hpp"
#include "agent/core/process_key.hpp"
#include "shared/common/log.hpp"
#include "shared/proto/frame.hpp"

namespace herd::agent {

using namespace herd::v1;
using std::chrono::milliseconds;

namespace {

std::string JobWord(int64_t id) { return "job " + std::to_string(id); }

}  // namespace

void JobRunner::CheckRunLimits() {
  for (const JobDeadlines::Event& e : deadlines_.Due(clock_.Now())) OnDeadline(e);
  stacks_.Expire(clock_.Now());
}

void JobRunner::OnDeadline(const JobDeadlines::Event& e) {
  auto it = jobs_.find(e.job_id);
  if (it == jobs_.end()) return;
  JobRun& run = it->second;
  if (run.stop != JobStop::kNone) return;
  const TaskSpec& spec = run.rec.spec;
  const std::string limit = DurationText(milliseconds(spec.time_limit_ms()));
  if (e.kind == JobDeadlines::Event::Kind::kSignal) {
    AppendLog(run, "herd: sending " + SignalText(e.signal) + " to every process of " +
                       JobWord(e.job_id) + ": its time limit (" + limit + ") is " +
                       DurationText(milliseconds(spec.limit_signal_before_ms())) + " away\n");
    std::set<std::string> nodes;
    for (const auto& [name, proc] : run.procs) {
      if (!proc.exited()) nodes.insert(proc.node_id);
    }
    HeadToAgent msg;
    msg.mutable_signal()->set_job_id(e.job_id);
    msg.mutable_signal()->set_attempt(run.rec.info.attempt());
    msg.mutable_signal()->set_signal(e.signal);
    for (const auto& n : nodes) SendToAgent(n, msg);
    return;
  }
  const milliseconds grace = StopGrace(spec);
  HERD_LOG(kInfo) << JobWord(e.job_id) << " reached its time limit of " << limit;
  AppendLog(run, "herd: " + JobWord(e.job_id) + " reached its time limit of " + limit +
                     ": SIGTERM to every process, SIGKILL after " + DurationText(grace) + "\n");
  run.stop_error =
      "ERROR: Job " + std::to_string(e.job_id) + " failed: it reached its time limit of " + limit;
  run.end_reason = JOB_END_REASON_TIME_LIMIT;
  KillJobProcesses(run, grace);
}

void JobRunner::StopJobsOnSpotNotice(const std::string& node_id, const std::string& when) {
  for (int64_t id : JobsRunningOn(node_id)) {
    JobRun& run = jobs_.at(id);
    if (run.stop != JobStop::kNone) continue;  // ending already (cancelled, failed, timed out)
    const milliseconds grace = StopGrace(run.rec.spec);
    HERD_LOG(kWarn) << JobWord(id) << ": node " << node_id << " got a spot interruption notice for "
                    << when;
    AppendLog(run, "herd: node " + node_id + " got a spot interruption notice for " + when +
                       ": SIGTERM to every process of " + JobWord(id) + ", SIGKILL after " +
                       DurationText(grace) + "\n");
    if (run.rec.info.first_failed_node().empty()) run.rec.info.set_first_failed_node(node_id);
    // FAILED_DRIVER: the program did not fail, its node is taken away (a managed job is
    // recovered), whatever the ranks' exit codes (a rank that saves on SIGTERM exits 0).
    run.driver_error = "ERROR: Job " + std::to_string(id) + " failed: node " + node_id +
                       " got a spot interruption notice for " + when;
    KillJobProcesses(run, grace);
  }
}

void JobRunner::HandleHung(const ProcessHung& hung) {
  JobRun* found = nullptr;
  ProcEntry* proc = nullptr;
  if (!FindJobOfProcess(hung.key(), &found, &proc) || !found || !proc) return;
  JobRun& run = *found;
  if (run.stop != JobStop::kNone || run.hang_seen || proc->exited() || proc->label.setup) return;
  run.hang_seen = true;
  const int64_t id = run.rec.info.job_id();
  const std::string who = "rank " + std::to_string(proc->label.rank) + " on " + proc->node_id;
  const std::string idle = DurationText(milliseconds(run.rec.spec.hang_timeout_ms()));
  HERD_LOG(kWarn) << JobWord(id) << ": " << who << " made no progress for " << idle;
  AppendLog(run, "herd: " + who + " made no progress (no output, no CPU time) for " + idle +
                     ": capturing the stacks of every rank\n");
  CaptureStacks(run, [this, id, who, idle](const StackCollector::Result& result) {
    WriteStacks(result, "stacks of " + JobWord(id) + " (" + who + " hung)");
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    JobRun& r = it->second;
    if (r.stop != JobStop::kNone) return;  // it ended or was cancelled meanwhile
    const StackComparison cmp = CompareStacks(result.texts);
    r.stop_error =
        "ERROR: Job " + std::to_string(id) + " failed: " + who +
        " hung (no output and no CPU time for " + idle + ")" +
        (cmp.differing.empty() ? ""
                               : "; ranks that differ from the rest: " + RankList(cmp.differing)) +
        " (" + DescribeComparison(cmp) + ")";
    r.end_reason = JOB_END_REASON_HUNG;
    KillJobProcesses(r, StopGrace(r.rec.spec));
  });
}

void JobRunner::HandleStackReport(const std::string& node_id, const StackReport& report) {
  if (!RunsOn(node_id, report.key())) return;
  std::string text = report.text();
  if (text.size() > limits::kMaxStackReportBytes) text.resize(limits::kMaxStackReportBytes);
  stacks_.Report(report.capture_id(), ProcessKeyString(report.key()), std::move(text));
}

Status JobRunner::RequestStacks(const ConnPtr& conn, uint64_t request_id, const StackRequest& req) {
  int64_t id = req.job_id();
  if (id == 0 && !jobs_.empty()) id = jobs_.rbegin()->first;
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.phase != JobPhase::kRun ||
      it->second.stop != JobStop::kNone) {
    return FailedPrecondition(id == 0 ? "no job is running"
                                      : JobWord(id) +
                                            " is not running: herd stack "
                                            "shows the stacks of a RUNNING job");
  }
  std::weak_ptr<transport::Connection> weak = conn;
  CaptureStacks(it->second, [this, weak, request_id, id](const StackCollector::Result& result) {
    std::string text = WriteStacks(result, "stacks of " + JobWord(id) + " (herd stack)");
    auto c = weak.lock();
    if (!c) return;
    if (text.size() > limits::kMaxFrameBytes / 2) {
      text.resize(limits::kMaxFrameBytes / 2);
      text += "\n[cut: the whole capture is in the job's log]\n";
    }
    HeadToClient reply;
    reply.mutable_stack_reply()->set_job_id(id);
    reply.mutable_stack_reply()->set_text(std::move(text));
    host_.send_to_client(c, request_id, std::move(reply));
  });
  return Status::Ok();
}

void JobRunner::CaptureStacks(JobRun& run, StackCollector::Done done) {
  std::vector<StackCollector::Rank> ranks;
  std::set<std::string> nodes;
  for (const auto& [name, proc] : run.procs) {
    if (proc.label.setup || proc.exited()) continue;
    ranks.push_back({proc.label.rank, name});
    nodes.insert(proc.node_id);
  }
  const int64_t job_id = run.rec.info.job_id();
  const int32_t attempt = run.rec.info.attempt();
  const uint64_t capture =
      stacks_.Begin(job_id, ranks, clock_.Now() + limits::kStackCaptureTimeout, std::move(done));
  HeadToAgent msg;
  msg.mutable_capture_stacks()->set_job_id(job_id);
  msg.mutable_capture_stacks()->set_attempt(attempt);
  msg.mutable_capture_stacks()->set_capture_id(capture);
  for (const auto& n : nodes) SendToAgent(n, msg);
}

std::string JobRunner::WriteStacks(const StackCollector::Result& result,
                                   const std::string& headline) {
  auto it = jobs_.find(result.job_id);
  std::string text = "herd: " + headline + "\n";
  for (const auto& [rank, report] : result.texts) {
    std::string prefix = "(rank=" + std::to_string(rank) + ") ";
    if (it != jobs_.end()) {
      for (const auto& [name, proc] : it->second.procs) {
        if (!proc.label.setup && proc.label.rank == rank && proc.prefixer) {
          prefix = proc.prefixer->prefix();
        }
      }
    }
    text += PrefixLines(prefix, report);
  }
  if (!result.missing.empty()) {
    text += "herd: no stacks from rank(s) " + RankList(result.missing) + " within " +
            DurationText(std::chrono::duration_cast<milliseconds>(limits::kStackCaptureTimeout)) +
            "\n";
  }
  text += "herd: " + DescribeComparison(CompareStacks(result.texts)) + "\n";
  if (it != jobs_.end()) AppendLog(it->second, text);
  return text;
}

}  // namespace herd::agent
