// herd _mux (hidden): the per-cluster mux process that commands start (controller/core/mux.hpp).
#include "controller/core/mux.hpp"
#include "controller/cli/command.hpp"
#include "shared/common/log.hpp"

namespace herd::cli {
namespace {

class MuxCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("_mux", "");
    cmd_->group("");
    cmd_->add_option("--socket", socket_, "mux.sock path")->required();
    cmd_->add_option("--head", head_, "host:port of the head")->required();
    cmd_->add_option("--certs", certs_, "client certificate directory")->required();
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  int Run(CliContext& ctx) override {
    if (!ctx.verbose) log::SetLevel(log::Level::kInfo);  // mux.log: why it exited
    return controller::RunMuxProcess(socket_, head_, certs_);
  }

 private:
  CLI::App* cmd_ = nullptr;
  std::string socket_, head_, certs_;
};

}  // namespace

std::unique_ptr<Command> MakeMuxCommand() { return std::make_unique<MuxCommand>(); }

}  // namespace herd::cli
