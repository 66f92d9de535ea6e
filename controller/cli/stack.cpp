// herd stack CLUSTER [JOB]: the stacks of every rank of a running job (Python frames through
// faulthandler, native frames with eu-stack or gdb), captured without stopping it; also written
// into the job's log.
#include <ostream>

#include "controller/cli/common.hpp"

namespace herd::cli {
namespace {

class StackCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("stack", "show the stacks of every rank of a running job");
    AddTargetFlags(cmd_, target_);
    cmd_->add_option("args", args_, "CLUSTER [JOB] (default: the latest job)");
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  bool Remote() const override { return target_.endpoint.empty(); }
  std::string Cluster() const override { return args_.empty() ? "" : args_[0]; }
  int Run(CliContext& ctx) override {
    auto [cluster, rest] = SplitCluster(args_, target_);
    auto ids = ParseJobIds(rest);
    if (!ids.ok()) return Fail(ctx, ids.status(), 2);
    if (ids->size() > 1) return Fail(ctx, InvalidArgument("give one job id"), 2);
    auto client = ConnectTarget(ctx, cluster, target_);
    if (!client.ok()) return FailForStatus(ctx, client.status());
    auto stacks = (*client)->Stacks(ids->empty() ? 0 : ids->front());
    if (!stacks.ok()) return FailForStatus(ctx, stacks.status());
    ctx.out << stacks->text();
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  TargetFlags target_;
  std::vector<std::string> args_;
};

}  // namespace

std::unique_ptr<Command> MakeStackCommand() { return std::make_unique<StackCommand>(); }

}  // namespace herd::cli
