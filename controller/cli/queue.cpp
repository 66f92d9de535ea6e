// herd queue CLUSTER: the jobs of a cluster, newest first.
#include <ostream>

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
    for (const auto& j : *jobs) {
      table.AddRow({std::to_string(j.job_id()), j.name().empty() ? "-" : j.name(), j.user(),
                    Ago(j.submitted_unix_ms()), Ago(j.started_unix_ms()), Duration(j),
                    j.resources(), std::string(proto::JobStateName(j.state())), j.log_path(),
                    std::to_string(j.attempt())});
    }
    ctx.out << table.Render() << left_out_line;
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  TargetFlags target_;
  std::string cluster_, output_;
  bool skip_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeQueueCommand() { return std::make_unique<QueueCommand>(); }

}  // namespace herd::cli
