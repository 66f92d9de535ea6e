// herd logs CLUSTER [JOB]: follow a job's merged log (the latest job by default).
#include <cstdint>
#include <ostream>

#include "controller/cli/common.hpp"
#include "shared/proto/job_state.hpp"

namespace herd::cli {
namespace {

class LogsCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("logs", "stream a job's logs (the latest job by default)");
    AddTargetFlags(cmd_, target_);
    cmd_->add_option("args", args_, "CLUSTER [JOB]");
    cmd_->add_flag("--no-follow", no_follow_, "print what is there and exit");
    cmd_->add_flag("--status", status_, "print only the job's status; exit code tells it");
    cmd_->add_option("--offset", offset_, "start at this byte of the merged log")
        ->check([](const std::string& value) -> std::string {
          // CLI11 would read "-5" into the unsigned offset as a huge number.
          if (value.find_first_not_of("0123456789") == std::string::npos && !value.empty()) {
            return "";
          }
          return "expected a byte offset (0 or more), got '" + value + "'";
        });
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  bool Remote() const override { return target_.endpoint.empty(); }
  std::string Cluster() const override { return args_.empty() ? "" : args_[0]; }
  int Run(CliContext& ctx) override {
    auto [cluster, rest] = SplitCluster(args_, target_);
    if (rest.size() > 1) return Fail(ctx, InvalidArgument("logs takes one job id"), 2);
    auto ids = ParseJobIds(rest);
    if (!ids.ok()) return Fail(ctx, ids.status(), 2);
    int64_t job = ids->empty() ? 0 : (*ids)[0];
    auto client = ConnectTarget(ctx, cluster, target_);
    if (!client.ok()) return FailForStatus(ctx, client.status());
    InstallSigint();
    if (status_) {
      controller::HeadApi::StreamCallbacks none;
      // Ask for the end of the log only: the status comes with end_of_stream.
      auto last = (*client)->Stream(job, UINT64_MAX, false, none);
      if (!last.ok()) return FailForStatus(ctx, last.status());
      ctx.out << "Job " << last->job_id() << ": " << proto::JobStateName(last->state()) << "\n";
      return controller::ExitCodeForJob(*last);
    }
    return FollowJob(ctx, **client, cluster, job, offset_, !no_follow_, false, 0);
  }

 private:
  CLI::App* cmd_ = nullptr;
  TargetFlags target_;
  std::vector<std::string> args_;
  uint64_t offset_ = 0;
  bool no_follow_ = false, status_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeLogsCommand() { return std::make_unique<LogsCommand>(); }

}  // namespace herd::cli
