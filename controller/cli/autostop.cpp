// herd autostop CLUSTER -i MINUTES [--down] | --cancel: stop or tear down a cluster when idle.
#include <ostream>

#include "controller/cli/common.hpp"

namespace herd::cli {
namespace {

class AutostopCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("autostop", "stop or tear down a cluster when it is idle");
    cmd_->add_option("cluster", cluster_, "cluster name")->required();
    cmd_->add_option("-i,--idle-minutes", idle_, "idle minutes before stopping")
        ->check(CLI::NonNegativeNumber);
    cmd_->add_flag("--down", down_, "tear down instead of stopping");
    cmd_->add_flag("--cancel", cancel_, "turn autostop off");
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  bool Remote() const override { return true; }
  std::string Cluster() const override { return cluster_; }
  int Run(CliContext& ctx) override {
    if (!cancel_ && idle_ < 0) {
      return Fail(ctx, InvalidArgument("autostop: give -i MINUTES or --cancel"), 2);
    }
    int minutes = cancel_ ? -1 : idle_;
    auto s = ctx.Ops().SetAutostop(cluster_, minutes, down_);
    if (!s.ok()) return FailForStatus(ctx, s);
    if (minutes < 0) {
      ctx.err << "Autostop of cluster " << cluster_ << " cancelled.\n";
    } else {
      ctx.err << "Cluster " << cluster_ << " will be " << (down_ ? "torn down" : "stopped")
              << " after " << minutes << " idle minute(s).\n";
    }
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  std::string cluster_;
  int idle_ = -1;
  bool down_ = false, cancel_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeAutostopCommand() { return std::make_unique<AutostopCommand>(); }

}  // namespace herd::cli
