// herd jobs launch|queue|logs|cancel (managed jobs, controller/jobs/managed_jobs.hpp) and the
// hidden `herd jobs _controller ID`, the process that drives one managed job, and `herd jobs
// _release ID`, a team server's release of a failed job's buckets.
#include <ctime>
#include <iostream>

#include "controller/cli/common.hpp"
#include "controller/cli/remote.hpp"
#include "controller/core/table.hpp"
#include "controller/jobs/managed_jobs.hpp"

namespace herd::cli {
namespace {

using controller::FollowManagedLogs;
using controller::ListManagedJobs;

class JobsCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("jobs", "managed jobs: relaunched on new nodes after node loss");
    cmd_->require_subcommand(1);
    launch_ = cmd_->add_subcommand("launch", "start a managed job");
    launch_->add_option("--infra", infra_, "local (default), ssh/<pool>, aws[/REGION[/ZONE]]");
    AddTaskFlags(launch_, flags_);
    AddLaunchFlags(launch_, flags_);
    launch_->add_flag("-d,--detach-run", detach_, "do not stream the job's logs");
    launch_->add_flag("-y,--yes", yes_, "do not ask");
    launch_->add_option("args", launch_args_, "TASK.yaml, or a command after --");
    AddTaskJsonFlag(launch_, task_json_);
    queue_ = cmd_->add_subcommand("queue", "list managed jobs");
    queue_->add_flag("-s,--skip-finished", queue_skip_, "only jobs that have not ended");
    queue_->add_option("-o,--output", queue_output_, "output format")
        ->check(CLI::IsMember({"json"}));
    logs_ = cmd_->add_subcommand("logs", "stream a managed job's logs, every attempt");
    logs_->add_option("job", logs_args_, "managed job id (default: the latest)");
    logs_->add_flag("--no-follow", logs_no_follow_, "print what is there and exit");
    cancel_ = cmd_->add_subcommand("cancel", "cancel managed jobs");
    cancel_->add_option("jobs", cancel_args_, "managed job ids");
    cancel_->add_flag("-a,--all", cancel_all_, "every managed job not yet ended");
    cancel_->add_flag("-y,--yes", cancel_yes_, "do not ask");
    controller_ = cmd_->add_subcommand("_controller", "");
    controller_->group("");  // internal: the per-job controller process
    controller_->add_option("id", controller_id_, "managed job id")->required();
    release_ = cmd_->add_subcommand("_release", "");
    release_->group("");  // internal: a team server releases a failed job's buckets as its user
    release_->add_option("id", release_id_, "managed job id")->required();
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  void TakeCommandAfterDashes(const std::vector<std::string>& words) override {
    if (launch_->parsed()) launch_args_.insert(launch_args_.end(), words.begin(), words.end());
  }
  bool Remote() const override { return !controller_->parsed() && !release_->parsed(); }
  int RunRemote(CliContext& ctx, const controller::ApiConfig& api,
                const std::vector<std::string>& args) override {
    if (!launch_->parsed()) return Command::RunRemote(ctx, api, args);
    auto t = BuildTask(launch_args_, flags_);
    if (!t.ok()) return Fail(ctx, t.status(), 2);
    // A git workdir travels as such: the server's managed job clones it for each attempt.
    std::vector<std::string> remote = {"jobs", "launch"};
    if (!infra_.empty()) remote.insert(remote.end(), {"--infra", infra_});
    AppendTaskFlags(flags_, remote);
    if (detach_) remote.push_back("-d");
    if (ctx.quiet) remote.push_back("-q");
    return cli::RunRemote(ctx, api, {remote, "", &*t});
  }
  int Run(CliContext& ctx) override {
    if (controller_->parsed()) return controller::RunManagedController(ctx.Ops(), controller_id_);
    if (release_->parsed()) {
      return controller::ReleaseEndedManagedJob(release_id_, ctx.out, ctx.err);
    }
    if (launch_->parsed()) return Launch(ctx);
    if (queue_->parsed()) return Queue(ctx);
    if (logs_->parsed()) return Logs(ctx);
    return Cancel(ctx);
  }

 private:
  int Launch(CliContext& ctx) {
    auto t = task_json_.empty() ? BuildTask(launch_args_, flags_) : LoadTaskJson(task_json_);
    if (!t.ok()) return Fail(ctx, t.status(), 2);
    controller::ManagedLaunchOptions o;
    o.infra = infra_;
    o.user = CurrentUser();
    auto id = controller::LaunchManagedJob(*t, o);
    if (!id.ok()) return FailForStatus(ctx, id.status());
    ctx.out << "Managed job ID: " << *id << "\n";
    ctx.out.flush();
    if (detach_) {
      ctx.err << "To stream its logs:  herd jobs logs " << *id << "\n"
              << "To see its status:   herd jobs queue\n"
              << "To cancel it:        herd jobs cancel " << *id << "\n";
      return 0;
    }
    InstallSigint();
    int code = FollowManagedLogs(*id, true, ctx.out, ctx.err, [] { return Interrupted(); });
    if (Interrupted()) {
      ctx.err << "Detached from managed job " << *id
              << "; it keeps running. Reattach with: herd jobs logs " << *id << "\n";
    }
    return code;
  }

  int Queue(CliContext& ctx) {
    auto list = ListManagedJobs();
    if (!list.ok()) return FailForStatus(ctx, list.status());
    std::vector<jobs::ManagedJob> shown;
    for (auto& j : *list) {
      if (!queue_skip_ || !jobs::IsTerminal(j.state)) shown.push_back(std::move(j));
    }
    if (queue_output_ == "json") {
      boost::json::array arr;
      for (const auto& j : shown) arr.push_back(ManagedJobJson(j));
      ctx.out << boost::json::serialize(arr) << "\n";
      return 0;
    }
    if (shown.empty()) {
      ctx.out << "No managed jobs.\n";
      return 0;
    }
    controller::Table table(
        {"ID", "NAME", "RESOURCES", "SUBMITTED", "DURATION", "#RECOVERIES", "STATUS", "CLUSTER"});
    const int64_t now = static_cast<int64_t>(std::time(nullptr)) * 1000;
    for (const auto& j : shown) {
      table.AddRow({std::to_string(j.id), j.name.empty() ? "-" : j.name, j.resources,
                    Ago(j.submitted_unix_ms), controller::ManagedDuration(j, now),
                    std::to_string(j.recoveries), std::string(jobs::StateName(j.state)),
                    j.cluster.empty() ? "-" : j.cluster});
    }
    ctx.out << table.Render();
    return 0;
  }

  int Logs(CliContext& ctx) {
    if (logs_args_.size() > 1) return Fail(ctx, InvalidArgument("logs takes one job id"), 2);
    auto ids = ParseJobIds(logs_args_);
    if (!ids.ok()) return Fail(ctx, ids.status(), 2);
    int64_t id = ids->empty() ? 0 : (*ids)[0];
    if (id == 0) {
      auto list = ListManagedJobs();
      if (!list.ok()) return FailForStatus(ctx, list.status());
      if (list->empty()) return Fail(ctx, NotFound("no managed jobs (see `herd jobs launch`)"));
      id = list->front().id;
    }
    InstallSigint();
    return FollowManagedLogs(id, !logs_no_follow_, ctx.out, ctx.err, [] { return Interrupted(); });
  }

  int Cancel(CliContext& ctx) {
    auto ids = ParseJobIds(cancel_args_);
    if (!ids.ok()) return Fail(ctx, ids.status(), 2);
    if (ids->empty() && !cancel_all_) {
      return Fail(ctx, InvalidArgument("give managed job ids or -a/--all"), 2);
    }
    return controller::CancelManagedJobs(ctx.Ops(), *ids, cancel_all_, ctx.out, ctx.err);
  }

  CLI::App* cmd_ = nullptr;
  CLI::App* launch_ = nullptr;
  CLI::App* queue_ = nullptr;
  CLI::App* logs_ = nullptr;
  CLI::App* cancel_ = nullptr;
  CLI::App* controller_ = nullptr;
  CLI::App* release_ = nullptr;
  std::string infra_, task_json_;
  TaskFlags flags_;
  std::vector<std::string> launch_args_;
  bool detach_ = false, yes_ = false;
  std::string queue_output_;
  bool queue_skip_ = false;
  std::vector<std::string> logs_args_;
  bool logs_no_follow_ = false;
  std::vector<std::string> cancel_args_;
  bool cancel_all_ = false, cancel_yes_ = false;
  int64_t controller_id_ = 0;
  int64_t release_id_ = 0;
};

}  // namespace

std::unique_ptr<Command> MakeJobsCommand() { return std::make_unique<JobsCommand>(); }

}  // namespace herd::cli
