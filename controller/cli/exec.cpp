// herd exec: run a task on an UP cluster (no provisioning, setup or file mounts).
#include <ostream>

#include "controller/cli/common.hpp"
#include "controller/cli/remote.hpp"
#include "controller/core/trace.hpp"
#include "controller/task/task.hpp"
#include "shared/proto/job_array.hpp"

namespace herd::cli {
namespace {

class ExecCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("exec", "run a task on an UP cluster (no provisioning or setup)");
    AddTargetFlags(cmd_, target_);
    AddTaskFlags(cmd_, flags_);
    cmd_->add_flag("-d,--detach-run", detach_, "submit and return without streaming logs");
    cmd_->add_option("--array", array_,
                     "submit a job array, one job per index (Slurm's syntax: 0-99%8, 1,3,5-7, "
                     "0-15:4); each gets SKYPILOT_JOB_RANK, SKYPILOT_NUM_JOBS, HERD_ARRAY_INDEX");
    cmd_->add_option("--after", after_, "start after these jobs end (JOB[,JOB...]; afterany)");
    cmd_->add_option("--after-ok", after_ok_,
                     "start after these jobs succeed; cancelled if one does not (afterok)");
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
    auto extras = Extras();
    if (!extras.ok()) return Fail(ctx, extras.status(), 2);
    std::vector<std::string> args = {"exec", cluster};
    AppendTaskFlags(flags_, args);
    if (!array_.empty()) args.insert(args.end(), {"--array", array_});
    if (!after_.empty()) args.insert(args.end(), {"--after", after_});
    if (!after_ok_.empty()) args.insert(args.end(), {"--after-ok", after_ok_});
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
    auto extras = Extras();
    if (!extras.ok()) return Fail(ctx, extras.status(), 2);
    GitWorkdirClone clone;
    if (auto s = clone.Clone(*t); !s.ok()) return Fail(ctx, s, 2);
    controller::TraceMark("task built");
    InstallSigint();
    if (target_.endpoint.empty()) {
      if (cluster.empty()) return Fail(ctx, InvalidArgument("give a cluster name"), 2);
      ops::ExecOptions o;
      o.progress = ctx.progress.Callback();
      o.extras = std::move(*extras);
      auto r = ctx.Ops().Exec(cluster, *t, o);
      ctx.progress.Done();
      if (!r.ok()) return FailForStatus(ctx, r.status());
      if (!r->array_job_ids.empty()) return ArraySubmitted(ctx, cluster, r->array_job_ids);
      return JobOutcome(ctx, r->head.get(), *r, detach_, output_ == "json", t->num_nodes, false);
    }
    auto client = ConnectTarget(ctx, "", target_);
    if (!client.ok()) return FailForStatus(ctx, client.status());
    herd::v1::SubmitJob request = std::move(*extras);
    *request.mutable_task() = task::ToSpec(*t);
    request.set_user(CurrentUser());
    auto reply = (*client)->SubmitRequest(request);
    if (!reply.ok()) return FailForStatus(ctx, reply.status());
    if (reply->array_job_ids_size() > 0) {
      return ArraySubmitted(ctx, "",
                            {reply->array_job_ids().begin(), reply->array_job_ids().end()});
    }
    const int64_t id = reply->job_id();
    ctx.err << "Job submitted, ID: " << id << "\n";
    if (detach_) return 0;
    return FollowJob(ctx, **client, "", id, 0, true, true, t->num_nodes);
  }

 private:
  CLI::App* cmd_ = nullptr;
  TargetFlags target_;
  TaskFlags flags_;
  std::vector<std::string> args_;
  bool detach_ = false;
  std::string output_, task_json_;
  std::string array_, after_, after_ok_;

  // The array and dependencies the flags ask for (checked here; the head checks them again).
  Result<herd::v1::SubmitJob> Extras() const {
    herd::v1::SubmitJob extras;
    if (!array_.empty()) {
      HERD_ASSIGN_OR_RETURN(*extras.mutable_array(), proto::ParseJobArray(array_, "--array"));
    }
    if (!after_.empty()) {
      HERD_ASSIGN_OR_RETURN(auto ids, proto::ParseJobIdList(after_, "--after"));
      for (int64_t id : ids) extras.add_after_any(id);
    }
    if (!after_ok_.empty()) {
      HERD_ASSIGN_OR_RETURN(auto ids, proto::ParseJobIdList(after_ok_, "--after-ok"));
      for (int64_t id : ids) extras.add_after_ok(id);
    }
    return extras;
  }

  // An array is not followed (its jobs run over time, a few at once): it says what was queued
  // and how to watch it, as sbatch --array does.
  int ArraySubmitted(CliContext& ctx, const std::string& cluster, const std::vector<int64_t>& ids) {
    if (output_ == "json") {
      boost::json::object o;
      o["cluster"] = cluster;
      o["job_id"] = ids.front();
      o["array_job_ids"] = boost::json::array(ids.begin(), ids.end());
      ctx.out << boost::json::serialize(o) << "\n";
    }
    ctx.err << "Job array submitted, ID: " << ids.front() << " (" << ids.size() << " jobs, IDs "
            << ids.front() << "-" << ids.back() << ")\n";
    if (!cluster.empty() && !ctx.quiet) {
      ctx.err << "  Watch it:  herd queue " << cluster << " (one line per array; -r: one per job)\n"
              << "  A job's log:  herd logs " << cluster << " " << ids.front() << "\n";
    }
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> MakeExecCommand() { return std::make_unique<ExecCommand>(); }

}  // namespace herd::cli
