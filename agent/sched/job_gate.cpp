#include "agent/sched/job_gate.hpp"

#include "shared/common/limits.hpp"
#include "shared/proto/job_state.hpp"

namespace herd::sched {
namespace {

using herd::v1::JobState;

bool Ended(JobState s) { return s == herd::v1::JOB_STATE_UNKNOWN || proto::IsTerminal(s); }

std::string Named(int64_t dep, int64_t id) {
  if (id == dep) return "job " + std::to_string(dep);
  return "job " + std::to_string(id) + " of array " + std::to_string(dep);
}

}  // namespace

DependencyState SummarizeDependency(int64_t dep, const FactsOf& facts_of) {
  DependencyState st;
  st.dep = dep;
  auto note = [&](int64_t id, const std::optional<JobFacts>& f) {
    const JobState s = f ? f->state : herd::v1::JOB_STATE_UNKNOWN;
    if (!Ended(s)) {
      if (st.unfinished == 0) st.unfinished = id, st.unfinished_state = s;
    } else if (s != herd::v1::JOB_STATE_SUCCEEDED && st.unsuccessful == 0) {
      st.unsuccessful = id, st.unsuccessful_state = s;
    }
  };
  auto facts = facts_of(dep);
  note(dep, facts);
  if (facts && facts->array_id == dep && facts->array_size > 1) {
    for (int32_t k = 1; k < facts->array_size; ++k) note(dep + k, facts_of(dep + k));
  }
  return st;
}

bool Gated(const herd::v1::JobInfo& job) {
  return job.after_ok_size() > 0 || job.after_any_size() > 0 ||
         (job.array_size() > 0 && job.array_max_running() > 0);
}

Gate CheckGate(const herd::v1::JobInfo& job, const DependencyOf& dependency_of, int array_active) {
  // A failed after-ok dependency decides at once, whatever else is still running.
  for (int64_t dep : job.after_ok()) {
    const DependencyState& st = dependency_of(dep);
    if (st.unsuccessful != 0) {
      return {GateVerdict::kNever, "its dependency " + Named(dep, st.unsuccessful) + " ended " +
                                       std::string(proto::JobStateName(st.unsuccessful_state)) +
                                       " (--after-ok)"};
    }
  }
  for (const auto* deps : {&job.after_ok(), &job.after_any()}) {
    for (int64_t dep : *deps) {
      const DependencyState& st = dependency_of(dep);
      if (st.unfinished != 0) {
        return {GateVerdict::kWait, "waiting for " + Named(dep, st.unfinished) + " (" +
                                        std::string(proto::JobStateName(st.unfinished_state)) +
                                        ") to end"};
      }
    }
  }
  if (job.array_size() > 0 && job.array_max_running() > 0 &&
      array_active >= job.array_max_running()) {
    return {GateVerdict::kWait, "array " + std::to_string(job.array_id()) + " runs its limit of " +
                                    std::to_string(job.array_max_running()) + " jobs at once"};
  }
  return {};
}

Status ValidateDependencies(const herd::v1::SubmitJob& submit, const FactsOf& facts_of) {
  const int total = submit.after_any_size() + submit.after_ok_size();
  if (total > limits::kMaxJobDependencies) {
    return InvalidArgument("a job may depend on at most " +
                           std::to_string(limits::kMaxJobDependencies) + " jobs");
  }
  for (const auto* deps : {&submit.after_any(), &submit.after_ok()}) {
    const char* flag = deps == &submit.after_ok() ? "--after-ok" : "--after";
    for (int64_t dep : *deps) {
      if (dep < 1 || !facts_of(dep)) {
        return InvalidArgument(
            std::string(flag) + " " + std::to_string(dep) + ": no job " + std::to_string(dep) +
            " on this cluster (a job can only wait for jobs submitted before it, so a "
            "job cannot wait for itself and waits cannot form a cycle)");
      }
    }
  }
  return Status::Ok();
}

}  // namespace herd::sched
