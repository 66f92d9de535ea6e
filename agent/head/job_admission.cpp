#include "agent/head/job_admission.hpp"

#include "shared/proto/job_array.hpp"
#include "shared/proto/job_state.hpp"
#include "shared/proto/resources_summary.hpp"

namespace herd::agent {

using herd::v1::JobInfo;

Result<std::vector<JobRecord>> SubmitRecords(const herd::v1::SubmitJob& submit,
                                             int64_t now_unix_ms) {
  const herd::v1::TaskSpec& spec = submit.task();
  if (spec.num_nodes() < 1) return InvalidArgument("num_nodes must be at least 1");
  if (submit.attempt() < 0) return InvalidArgument("attempt must not be negative");
  if (submit.has_array()) {
    HERD_RETURN_IF_ERROR(proto::ValidateJobArray(submit.array()));
    if (!submit.task_id().empty() || submit.attempt() > 0) {
      return InvalidArgument("a managed job's attempt cannot be an array");
    }
  }
  JobRecord base;
  base.spec = spec;
  JobInfo& info = base.info;
  info.set_name(spec.name());
  info.set_user(submit.user());
  info.set_submitted_unix_ms(now_unix_ms);
  info.set_state(herd::v1::JOB_STATE_PENDING);
  info.set_num_nodes(spec.num_nodes());
  info.set_resources(proto::ResourcesSummary(spec));
  info.set_first_failed_rank(-1);
  // A managed job's controller resubmits on a new cluster with the next attempt and its own task
  // id, so SKYPILOT_TASK_ID (checkpoint paths, --rdzv_id) stays the same across attempts.
  info.set_attempt(submit.attempt() > 0 ? submit.attempt() : 1);
  info.set_task_id(submit.task_id());
  for (int64_t id : submit.after_any()) info.add_after_any(id);
  for (int64_t id : submit.after_ok()) info.add_after_ok(id);
  std::vector<JobRecord> records;
  if (!submit.has_array()) {
    records.push_back(std::move(base));
    return records;
  }
  const herd::v1::JobArray& array = submit.array();
  const std::string described = proto::DescribeJobArray(array);
  records.reserve(array.indices_size());
  for (int k = 0; k < array.indices_size(); ++k) {
    JobRecord rec = base;
    rec.info.set_array_rank(k);
    rec.info.set_array_index(array.indices(k));
    rec.info.set_array_size(array.indices_size());
    rec.info.set_array_max_running(array.max_running());
    rec.info.set_array_spec(described);
    records.push_back(std::move(rec));
  }
  return records;
}

std::optional<sched::JobFacts> JobFactsCache::Get(int64_t job_id) {
  auto fact_of = [](const JobInfo& info) {
    return sched::JobFacts{info.state(), info.array_id(), info.array_size()};
  };
  if (const JobInfo* info = active_(job_id)) return fact_of(*info);
  if (auto it = ended_.find(job_id); it != ended_.end()) return it->second;
  if (missing_.count(job_id)) return std::nullopt;
  auto rec = store_.GetJob(job_id);
  if (!rec.ok()) {
    // NotFound is final (ids are never reused); another error is not cached.
    if (rec.status().code() == Code::kNotFound) missing_[job_id] = true;
    return std::nullopt;
  }
  const sched::JobFacts facts = fact_of(rec->info);
  // A job neither active nor ended (a record the head has not loaded) is not cached.
  if (proto::IsTerminal(facts.state)) ended_[job_id] = facts;
  return facts;
}

}  // namespace herd::agent
