// herd _autostop-sweep (hidden): the team server's autostop of its users' cloud clusters
// (ClusterOps::SweepAutostop), run by the server as each user every
// limits::kServerAutostopSweepInterval. One line per cluster whose head said its autostop is due,
// on stdout (the server logs it); exit 1 when one could not be stopped for another reason than
// being busy again or its head not answering (those wait for the next sweep).
#include <ostream>

#include "controller/cli/common.hpp"

namespace herd::cli {
namespace {

class AutostopSweepCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("_autostop-sweep", "");
    cmd_->group("");
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  int Run(CliContext& ctx) override {
    int code = 0;
    for (const ops::AutostopOutcome& o : ctx.Ops().SweepAutostop()) {
      if (o.status.ok()) {
        ctx.out << "Cluster " << o.cluster << ": idle past its autostop; "
                << (o.down ? "torn down" : "stopped") << ".\n";
        continue;
      }
      const bool later =
          o.status.code() == Code::kFailedPrecondition || o.status.code() == Code::kUnavailable;
      if (!later) code = 1;
      ctx.out << (o.cluster.empty() ? "" : "Cluster " + o.cluster + ": ") << "not "
              << (o.down ? "torn down" : "stopped") << ": " << o.status.message()
              << (later ? " (next sweep)" : "") << "\n";
    }
    return code;
  }

 private:
  CLI::App* cmd_ = nullptr;
};

}  // namespace

std::unique_ptr<Command> MakeAutostopSweepCommand() {
  return std::make_unique<AutostopSweepCommand>();
}

}  // namespace herd::cli
