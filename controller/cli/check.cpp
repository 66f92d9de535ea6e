// herd check TASK.yaml: validate a task and print it normalised.
#include <iostream>

#include "controller/cli/command.hpp"
#include "controller/state/api_config.hpp"
#include "controller/task/task.hpp"

namespace herd::cli {
namespace {

class CheckCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("check", "validate a task YAML and print it normalised");
    cmd_->add_option("task", file_, "task YAML")->required();
    cmd_->add_option("--env", envs_, "K=V or K")->allow_extra_args(false);
    cmd_->add_option("--env-file", env_files_, "dotenv file")->allow_extra_args(false);
    cmd_->add_option("--secret", secrets_, "K=V or K")->allow_extra_args(false);
    cmd_->add_option("-o,--output", output_, "output format")->check(CLI::IsMember({"json"}));
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  int Run(CliContext& ctx) override {
    task::ParseOptions opts;
    opts.env_overrides = envs_;
    opts.env_files = env_files_;
    opts.secret_overrides = secrets_;
    // Says which reason a `secrets:` reference is refused with (no server, or a server).
    auto api = controller::LoadApiConfig();
    opts.team_server = api.ok() && api->has_value();
    return task::RunCheck(file_, opts, output_ == "json", ctx.out, ctx.err);
  }

 private:
  CLI::App* cmd_ = nullptr;
  std::string file_, output_;
  std::vector<std::string> envs_, env_files_, secrets_;
};

}  // namespace

std::unique_ptr<Command> MakeCheckCommand() { return std::make_unique<CheckCommand>(); }

}  // namespace herd::cli
