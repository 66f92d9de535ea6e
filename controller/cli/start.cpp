// herd start CLUSTER: bring a stopped cluster (or one whose agents died) back up.
#include <ostream>

#include "controller/cli/common.hpp"

namespace herd::cli {
namespace {

class StartCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("start", "start a stopped cluster again");
    cmd_->add_option("cluster", cluster_, "cluster name")->required();
    cmd_->add_flag("-y,--yes", yes_, "do not ask");
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  bool Remote() const override { return true; }
  std::string Cluster() const override { return cluster_; }
  int Run(CliContext& ctx) override {
    auto r = ctx.Ops().Start(cluster_, ctx.progress.Callback());
    ctx.progress.Done();
    if (!r.ok()) return FailForStatus(ctx, r.status());
    ctx.err << "Cluster " << cluster_ << " is UP.\n";
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  std::string cluster_;
  bool yes_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeStartCommand() { return std::make_unique<StartCommand>(); }

}  // namespace herd::cli
