// herd down CLUSTER: tear a cluster down: its machines, agents and files.
#include <ostream>

#include "controller/cli/common.hpp"

namespace herd::cli {
namespace {

class DownCommand final : public OneClusterCommand {
 public:
  DownCommand() : OneClusterCommand("down", "tear a cluster down: machines, agents, files") {}
  int Run(CliContext& ctx) override {
    auto s = ctx.Ops().Down(cluster_, ctx.progress.Callback());
    ctx.progress.Done();
    if (!s.ok()) return FailForStatus(ctx, s);
    ctx.err << "Cluster " << cluster_ << " terminated.\n";
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> MakeDownCommand() { return std::make_unique<DownCommand>(); }

}  // namespace herd::cli
