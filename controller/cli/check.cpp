// herd check [TASK.yaml]: validate a task and print it normalised, and warn when it can run only
// on infra that is not usable here; without a task, say which infra are usable and why not
// (SkyPilot's `sky check`).
#include <iostream>

#include "controller/cli/command.hpp"
#include "controller/core/table.hpp"
#include "controller/optimizer/optimizer.hpp"
#include "controller/state/api_config.hpp"
#include "controller/task/task.hpp"

namespace herd::cli {
namespace {

class CheckCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand(
        "check",
        "validate a task YAML and print it normalised; without one, say which infra "
        "herd can use here");
    cmd_->add_option("task", file_, "task YAML");
    cmd_->add_option("--env", envs_, "K=V or K")->allow_extra_args(false);
    cmd_->add_option("--env-file", env_files_, "dotenv file")->allow_extra_args(false);
    cmd_->add_option("--secret", secrets_, "K=V or K")->allow_extra_args(false);
    cmd_->add_option("-o,--output", output_, "output format")->check(CLI::IsMember({"json"}));
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  int Run(CliContext& ctx) override {
    auto env = optimizer::ProbeEnvironment();
    if (file_.empty()) {
      if (!env.ok()) {
        ctx.err << "herd: " << env.status().message() << "\n";
        return 2;
      }
      return Infra(ctx, *env);
    }
    task::ParseOptions opts;
    opts.env_overrides = envs_;
    opts.env_files = env_files_;
    opts.secret_overrides = secrets_;
    // Says which reason a `secrets:` reference is refused with (no server, or a server).
    auto api = controller::LoadApiConfig();
    opts.team_server = api.ok() && api->has_value();
    int rc = task::RunCheck(file_, opts, output_ == "json", ctx.out, ctx.err);
    if (rc != 0) return rc;
    // Where it could run: a warning only (the task itself is valid). A pipeline's tasks are not
    // planned here (ParseTaskFile takes one task).
    auto t = task::ParseTaskFile(file_, opts);
    if (!t.ok()) return rc;
    auto catalog = optimizer::LoadAwsCatalog();
    if (!t.ok() || !env.ok() || !catalog.ok()) {
      const Status& s = !t.ok() ? t.status() : !env.ok() ? env.status() : catalog.status();
      ctx.err << "warning: cannot tell where the task can run: " << s.message() << "\n";
      return rc;
    }
    auto plan = optimizer::PlanTask(*t, *env, *catalog);
    if (!plan.ok()) {
      ctx.err << "warning: " << plan.status().message() << "\n";
    } else if (!plan->Chosen().usable) {
      ctx.err << "warning: the task names " << plan->Chosen().infra
              << ", which is not usable here: " << plan->Chosen().why_unusable << "\n";
    }
    return rc;
  }

 private:
  static int Infra(CliContext& ctx, const optimizer::Environment& env) {
    controller::Table table({"INFRA", "USABLE", "WHY"});
    int usable = 0;
    for (const auto& s : env.All()) {
      table.AddRow({s.infra, s.usable ? "yes" : "no", s.reason});
      usable += s.usable ? 1 : 0;
    }
    ctx.out << table.Render();
    if (env.ssh_pools.empty() && !env.ssh_pools_note.empty()) {
      ctx.out << "ssh: " << env.ssh_pools_note << "\n";
    }
    ctx.out << "\n"
            << usable << " of " << env.All().size()
            << " usable. Prices of local, ssh/<pool> and slurm/<cluster>: `prices:` in "
               "~/.herd/config.yaml "
               "($0 when not listed).\n";
    return 0;
  }

  CLI::App* cmd_ = nullptr;
  std::string file_, output_;
  std::vector<std::string> envs_, env_files_, secrets_;
};

}  // namespace

std::unique_ptr<Command> MakeCheckCommand() { return std::make_unique<CheckCommand>(); }

}  // namespace herd::cli
