// herd queue CLUSTER: the jobs of a cluster, newest first.
#include <map>
#include <ostream>
#include <vector>

#include "controller/cli/common.hpp"
#include "controller/core/table.hpp"
#include "shared/common/limits.hpp"
#include "shared/proto/job_state.hpp"

namespace herd::cli {
namespace {

class QueueCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("queue", "list the jobs of a cluster");
    AddTargetFlags(cmd_, target_);
    cmd_->add_option("cluster", cluster_, "cluster name");
    cmd_->add_flag("-s,--skip-finished", skip_, "only jobs that have not finished");
    cmd_->add_flag("-r,--array", expand_,
                   "one line per job of an array (by default an array is one line with its "
                   "jobs counted by state)");
    cmd_->add_option("-o,--output", output_, "output format")->check(CLI::IsMember({"json"}));
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  bool Remote() const override { return target_.endpoint.empty(); }
  std::string Cluster() const override { return cluster_; }
  int Run(CliContext& ctx) override {
    auto client = ConnectTarget(ctx, cluster_, target_);
    if (!client.ok()) return FailForStatus(ctx, client.status());
    int64_t left_out = 0;
    auto jobs = (*client)->Queue(skip_, &left_out);
    if (!jobs.ok()) return FailForStatus(ctx, jobs.status());
    // The head lists the newest jobs that fit one reply; the line says how many it left out.
    const std::string left_out_line =
        left_out == 0 ? ""
                      : std::to_string(left_out) + " older job" + (left_out == 1 ? "" : "s") +
                            " not shown: the head lists the newest " +
                            std::to_string(jobs->size()) + " (as many as fit one reply, at most " +
                            std::to_string(limits::kMaxJobsListed) + ")\n";
    if (output_ == "json") {
      boost::json::array arr;
      for (const auto& j : *jobs) arr.push_back(JobJson(j));
      ctx.out << boost::json::serialize(arr) << "\n";
      ctx.err << left_out_line;
      return 0;
    }
    if (!cluster_.empty()) ctx.out << "Job queue of cluster " << cluster_ << "\n";
    controller::Table table({"ID", "NAME", "USER", "SUBMITTED", "STARTED", "DURATION", "RESOURCES",
                             "STATUS", "LOG", "ATTEMPT"});
    // Newest first; an array's line stands where its newest job is.
    std::map<int64_t, std::vector<const herd::v1::JobInfo*>> arrays;
    if (!expand_) {
      for (const auto& j : *jobs) {
        if (j.array_size() > 0) arrays[j.array_id()].push_back(&j);
      }
    }
    for (const auto& j : *jobs) {
      auto array = arrays.find(j.array_id());
      if (j.array_size() > 0 && array != arrays.end()) {
        if (array->second.front() == &j) table.AddRow(ArrayRow(array->second));
        continue;
      }
      std::string id = std::to_string(j.job_id());
      if (j.array_size() > 0) {
        id += " (" + std::to_string(j.array_id()) + "_" + std::to_string(j.array_index()) + ")";
      }
      table.AddRow({id, j.name().empty() ? "-" : j.name(), j.user(), Ago(j.submitted_unix_ms()),
                    Ago(j.started_unix_ms()), Duration(j), j.resources(), StatusCell(j),
                    j.log_path(), std::to_string(j.attempt())});
    }
    ctx.out << table.Render() << left_out_line;
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  TargetFlags target_;
  std::string cluster_, output_;
  bool skip_ = false, expand_ = false;

  // A PENDING job that waits for something says what (its dependencies, its array's limit, lost
  // nodes): "PENDING (waiting for job 4 (RUNNING) to end)".
  static std::string StatusCell(const herd::v1::JobInfo& j) {
    std::string cell(proto::JobStateName(j.state()));
    const std::string prefix = "Job " + std::to_string(j.job_id()) + " is ";
    if (j.state() == herd::v1::JOB_STATE_PENDING && j.message().rfind(prefix, 0) == 0) {
      std::string why = j.message().substr(prefix.size());
      if (!why.empty() && why.back() == '.') why.pop_back();
      if (why.rfind("waiting: ", 0) == 0) why = why.substr(9);
      cell += " (" + why + ")";
    }
    return cell;
  }

  // One line for the jobs of an array in this listing (newest first): "5_[0-99%8]", its jobs
  // counted by state ("8 RUNNING, 80 PENDING, 12 SUCCEEDED").
  static std::vector<std::string> ArrayRow(const std::vector<const herd::v1::JobInfo*>& jobs) {
    const herd::v1::JobInfo& newest = *jobs.front();
    std::map<int, int> by_state;
    int64_t submitted = newest.submitted_unix_ms(), started = 0;
    for (const auto* j : jobs) {
      ++by_state[j->state()];
      if (j->started_unix_ms() > 0 && (started == 0 || j->started_unix_ms() < started)) {
        started = j->started_unix_ms();
      }
    }
    // Running first, then waiting, then ended (the job state enum's order is SkyPilot's).
    std::string states;
    for (int s :
         {herd::v1::JOB_STATE_RUNNING, herd::v1::JOB_STATE_SETTING_UP, herd::v1::JOB_STATE_PENDING,
          herd::v1::JOB_STATE_INIT, herd::v1::JOB_STATE_SUCCEEDED, herd::v1::JOB_STATE_FAILED,
          herd::v1::JOB_STATE_FAILED_SETUP, herd::v1::JOB_STATE_FAILED_DRIVER,
          herd::v1::JOB_STATE_CANCELLED}) {
      auto it = by_state.find(s);
      if (it == by_state.end()) continue;
      if (!states.empty()) states += ", ";
      states += std::to_string(it->second) + " " +
                std::string(proto::JobStateName(static_cast<herd::v1::JobState>(s)));
    }
    std::string listed;
    if (static_cast<int>(jobs.size()) < newest.array_size()) {
      listed = " (" + std::to_string(jobs.size()) + " of " + std::to_string(newest.array_size()) +
               " listed)";
    }
    return {std::to_string(newest.array_id()) + "_[" + newest.array_spec() + "]",
            newest.name().empty() ? "-" : newest.name(),
            newest.user(),
            Ago(submitted),
            Ago(started),
            "-",
            newest.resources(),
            states + listed,
            "-",
            std::to_string(newest.attempt())};
  }
};

}  // namespace

std::unique_ptr<Command> MakeQueueCommand() { return std::make_unique<QueueCommand>(); }

}  // namespace herd::cli
