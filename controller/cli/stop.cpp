// herd stop CLUSTER: stop a cluster's machines; they keep their files, and `herd start`
// brings them back.
#include <ostream>

#include "controller/cli/common.hpp"

namespace herd::cli {
namespace {

class StopCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("stop", "stop a cluster's machines (they keep their files)");
    cmd_->add_option("cluster", cluster_, "cluster name")->required();
    cmd_->add_flag("-y,--yes", yes_, "do not ask");
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  bool Remote() const override { return true; }
  std::string Cluster() const override { return cluster_; }
  int Run(CliContext& ctx) override {
    auto s = ctx.Ops().Stop(cluster_, ctx.progress.Callback());
    ctx.progress.Done();
    if (!s.ok()) return FailForStatus(ctx, s);
    ctx.err << "Cluster " << cluster_ << " stopped.\n";
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  std::string cluster_;
  bool yes_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeStopCommand() { return std::make_unique<StopCommand>(); }

}  // namespace herd::cli
