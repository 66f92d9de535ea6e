// herd cancel CLUSTER JOB... | -a: cancel jobs of a cluster.
#include <chrono>
#include <optional>
#include <ostream>

#include "controller/cli/common.hpp"

namespace herd::cli {
namespace {

class CancelCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("cancel", "cancel jobs");
    AddTargetFlags(cmd_, target_);
    cmd_->add_option("args", args_, "CLUSTER JOB...");
    cmd_->add_flag("-a,--all", all_, "every unfinished job");
    cmd_->add_flag("-y,--yes", yes_, "do not ask");
    cmd_->add_option("--grace", grace_,
                     "seconds between SIGTERM and SIGKILL (default: the job's --grace, else 30)");
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  bool Remote() const override { return target_.endpoint.empty(); }
  std::string Cluster() const override { return args_.empty() ? "" : args_[0]; }
  int Run(CliContext& ctx) override {
    auto [cluster, rest] = SplitCluster(args_, target_);
    auto ids = ParseJobIds(rest);
    if (!ids.ok()) return Fail(ctx, ids.status(), 2);
    if (ids->empty() && !all_) return Fail(ctx, InvalidArgument("give job ids or -a/--all"), 2);
    std::optional<std::chrono::milliseconds> grace;
    if (!grace_.empty()) {
      auto g = task::ParseGrace(grace_);
      if (!g.ok()) return Fail(ctx, InvalidArgument("--grace: " + g.status().message()), 2);
      grace = *g;
    }
    auto client = ConnectTarget(ctx, cluster, target_);
    if (!client.ok()) return FailForStatus(ctx, client.status());
    auto done = (*client)->Cancel(*ids, all_, grace);
    if (!done.ok()) return FailForStatus(ctx, done.status());
    if (done->empty()) {
      ctx.out << "No job to cancel.\n";
    } else {
      ctx.out << "Cancelling job(s):";
      for (auto id : *done) ctx.out << " " << id;
      ctx.out << "\n";
    }
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  TargetFlags target_;
  std::vector<std::string> args_;
  bool all_ = false, yes_ = false;
  std::string grace_;
};

}  // namespace

std::unique_ptr<Command> MakeCancelCommand() { return std::make_unique<CancelCommand>(); }

}  // namespace herd::cli
