// herd stop CLUSTER: stop a cluster's machines; they keep their files, and `herd start`
// brings them back.
#include <ostream>

#include "controller/cli/common.hpp"

namespace herd::cli {
namespace {

class StopCommand final : public OneClusterCommand {
 public:
  StopCommand() : OneClusterCommand("stop", "stop a cluster's machines (they keep their files)") {}
  int Run(CliContext& ctx) override {
    auto s = ctx.Ops().Stop(cluster_, ctx.progress.Callback());
    ctx.progress.Done();
    if (!s.ok()) return FailForStatus(ctx, s);
    ctx.err << "Cluster " << cluster_ << " stopped.\n";
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> MakeStopCommand() { return std::make_unique<StopCommand>(); }

}  // namespace herd::cli
