// herd stop CLUSTER... | -a: stop clusters' machines; they keep their files, and `herd start`
// brings them back.
#include <ostream>

#include "controller/cli/common.hpp"

namespace herd::cli {
namespace {

class StopCommand final : public ClustersCommand {
 public:
  StopCommand() : ClustersCommand("stop", "stop clusters' machines (they keep their files)") {}

 private:
  int RunOne(CliContext& ctx, const std::string& cluster) override {
    auto s = ctx.Ops().Stop(cluster, ctx.progress.Callback());
    ctx.progress.Done();
    if (!s.ok()) return FailForStatus(ctx, s);
    ctx.err << "Cluster " << cluster << " stopped.\n";
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> MakeStopCommand() { return std::make_unique<StopCommand>(); }

}  // namespace herd::cli
