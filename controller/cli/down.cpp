// herd down CLUSTER: tear a cluster down: its machines, agents and files.
#include <ostream>

#include "controller/cli/common.hpp"

namespace herd::cli {
namespace {

class DownCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("down", "tear a cluster down: machines, agents, files");
    cmd_->add_option("cluster", cluster_, "cluster name")->required();
    cmd_->add_flag("-y,--yes", yes_, "do not ask");
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  bool Remote() const override { return true; }
  std::string Cluster() const override { return cluster_; }
  int Run(CliContext& ctx) override {
    auto s = ctx.Ops().Down(cluster_, ctx.progress.Callback());
    ctx.progress.Done();
    if (!s.ok()) return FailForStatus(ctx, s);
    ctx.err << "Cluster " << cluster_ << " terminated.\n";
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  std::string cluster_;
  bool yes_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeDownCommand() { return std::make_unique<DownCommand>(); }

}  // namespace herd::cli
