// herd exec: run a task on an UP cluster (no provisioning, setup or file mounts).
#include <ostream>

#include "controller/cli/common.hpp"
#include "controller/cli/remote.hpp"
#include "controller/core/trace.hpp"
#include "controller/task/task.hpp"

namespace herd::cli {
namespace {

class ExecCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("exec", "run a task on an UP cluster (no provisioning or setup)");
    AddTargetFlags(cmd_, target_);
    AddTaskFlags(cmd_, flags_);
    cmd_->add_flag("-d,--detach-run", detach_, "submit and return without streaming logs");
    cmd_->add_option("-o,--output", output_, "output format")->check(CLI::IsMember({"json"}));
    cmd_->add_option("args", args_, "CLUSTER, then TASK.yaml or a command after --");
    AddTaskJsonFlag(cmd_, task_json_);
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  void TakeCommandAfterDashes(const std::vector<std::string>& words) override {
    args_.insert(args_.end(), words.begin(), words.end());
  }
  bool Remote() const override { return target_.endpoint.empty(); }
  std::string Cluster() const override { return args_.empty() ? "" : args_[0]; }
  int RunRemote(CliContext& ctx, const controller::ApiConfig& api,
                const std::vector<std::string>&) override {
    auto [cluster, rest] = SplitCluster(args_, target_);
    if (cluster.empty()) return Fail(ctx, InvalidArgument("give a cluster name"), 2);
    auto t = BuildTask(rest, flags_);
    if (!t.ok()) return Fail(ctx, t.status(), 2);
    GitWorkdirClone clone;  // uploaded as the workdir
    if (auto s = clone.Clone(*t); !s.ok()) return Fail(ctx, s, 2);
    t->git_workdir.reset();
    std::vector<std::string> args = {"exec", cluster};
    AppendTaskFlags(flags_, args);
    if (detach_) args.push_back("-d");
    if (!output_.empty()) args.insert(args.end(), {"-o", output_});
    if (ctx.quiet) args.push_back("-q");
    return cli::RunRemote(ctx, api, {args, cluster, &*t});
  }
  int Run(CliContext& ctx) override {
    auto [cluster, rest] = SplitCluster(args_, target_);
    if (!task_json_.empty()) {
      // The server's command: the cluster alone, the task in the file.
      cluster = args_.empty() ? "" : args_[0];
      rest.clear();
    }
    auto t = task_json_.empty() ? BuildTask(rest, flags_) : LoadTaskJson(task_json_);
    if (!t.ok()) return Fail(ctx, t.status(), 2);
    GitWorkdirClone clone;
    if (auto s = clone.Clone(*t); !s.ok()) return Fail(ctx, s, 2);
    controller::TraceMark("task built");
    InstallSigint();
    if (target_.endpoint.empty()) {
      if (cluster.empty()) return Fail(ctx, InvalidArgument("give a cluster name"), 2);
      ops::ExecOptions o;
      o.progress = ctx.progress.Callback();
      auto r = ctx.Ops().Exec(cluster, *t, o);
      ctx.progress.Done();
      if (!r.ok()) return FailForStatus(ctx, r.status());
      return JobOutcome(ctx, r->head.get(), *r, detach_, output_ == "json", t->num_nodes, false);
    }
    auto client = ConnectTarget(ctx, "", target_);
    if (!client.ok()) return FailForStatus(ctx, client.status());
    auto id = (*client)->Submit(task::ToSpec(*t), CurrentUser());
    if (!id.ok()) return FailForStatus(ctx, id.status());
    ctx.err << "Job submitted, ID: " << *id << "\n";
    if (detach_) return 0;
    return FollowJob(ctx, **client, "", *id, 0, true, true, t->num_nodes);
  }

 private:
  CLI::App* cmd_ = nullptr;
  TargetFlags target_;
  TaskFlags flags_;
  std::vector<std::string> args_;
  bool detach_ = false;
  std::string output_, task_json_;
};

}  // namespace

std::unique_ptr<Command> MakeExecCommand() { return std::make_unique<ExecCommand>(); }

}  // namespace herd::cli
