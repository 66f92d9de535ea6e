// herd start CLUSTER [-i N] [--down]: bring a stopped cluster (or one whose agents died) back up,
// optionally with autostop set as `herd autostop` sets it.
#include <ostream>

#include "controller/cli/common.hpp"

namespace herd::cli {
namespace {

class StartCommand final : public OneClusterCommand {
 public:
  StartCommand() : OneClusterCommand("start", "start a stopped cluster again") {}
  CLI::App* Add(CLI::App& app) override {
    CLI::App* cmd = OneClusterCommand::Add(app);
    cmd->add_option("-i,--idle-minutes-to-autostop", idle_,
                    "once up, stop the cluster after this many idle minutes")
        ->check(CLI::NonNegativeNumber);
    cmd->add_flag("--down", down_,
                  "tear the cluster down instead of stopping it (without -i: as soon as no job "
                  "is left to run)");
    return cmd;
  }
  int Run(CliContext& ctx) override {
    auto r = ctx.Ops().Start(cluster_, ctx.progress.Callback());
    ctx.progress.Done();
    if (!r.ok()) return FailForStatus(ctx, r.status());
    ctx.err << "Cluster " << cluster_ << " is UP.\n";
    if (idle_ >= 0 || down_) {
      const int minutes = idle_ >= 0 ? idle_ : 0;
      if (auto s = ctx.Ops().SetAutostop(cluster_, minutes, down_); !s.ok()) {
        return FailForStatus(ctx, s);
      }
      ctx.err << "Cluster " << cluster_ << " will be " << (down_ ? "torn down" : "stopped")
              << " after " << minutes << " idle minute(s).\n";
    }
    return 0;
  }

 private:
  int idle_ = -1;
  bool down_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeStartCommand() { return std::make_unique<StartCommand>(); }

}  // namespace herd::cli
