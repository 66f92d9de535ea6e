// herd down CLUSTER... | -a: tear clusters down: their machines, agents and files.
#include <ostream>

#include "controller/cli/common.hpp"

namespace herd::cli {
namespace {

class DownCommand final : public ClustersCommand {
 public:
  DownCommand() : ClustersCommand("down", "tear clusters down: machines, agents, files") {}

 private:
  int RunOne(CliContext& ctx, const std::string& cluster) override {
    auto s = ctx.Ops().Down(cluster, ctx.progress.Callback());
    ctx.progress.Done();
    if (!s.ok()) return FailForStatus(ctx, s);
    ctx.err << "Cluster " << cluster << " terminated.\n";
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> MakeDownCommand() { return std::make_unique<DownCommand>(); }

}  // namespace herd::cli
