// herd start CLUSTER: bring a stopped cluster (or one whose agents died) back up.
#include <ostream>

#include "controller/cli/common.hpp"

namespace herd::cli {
namespace {

class StartCommand final : public OneClusterCommand {
 public:
  StartCommand() : OneClusterCommand("start", "start a stopped cluster again") {}
  int Run(CliContext& ctx) override {
    auto r = ctx.Ops().Start(cluster_, ctx.progress.Callback());
    ctx.progress.Done();
    if (!r.ok()) return FailForStatus(ctx, r.status());
    ctx.err << "Cluster " << cluster_ << " is UP.\n";
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> MakeStartCommand() { return std::make_unique<StartCommand>(); }

}  // namespace herd::cli
