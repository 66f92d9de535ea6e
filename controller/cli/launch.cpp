// herd launch: provision a cluster (or reuse it) and run a task on it.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <optional>
#include <ostream>

#include "controller/cli/common.hpp"
#include "controller/cli/remote.hpp"
#include "controller/optimizer/failover.hpp"
#include "controller/optimizer/optimizer.hpp"
#include "controller/task/task.hpp"
#include "shared/common/limits.hpp"

namespace herd::cli {
namespace {

std::string RandomClusterName() {
  std::srand(static_cast<unsigned>(std::time(nullptr) ^ ::getpid()));
  char buf[16];
  std::snprintf(buf, sizeof buf, "herd-%04x", std::rand() & 0xffff);
  return buf;
}

class LaunchCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("launch", "provision a cluster (or reuse it) and run a task");
    cmd_->add_option("-c,--cluster", cluster_, "cluster name (default: a new name)");
    cmd_->add_option(
        "--infra", infra_,
        "local (default), ssh/<pool>, aws[/REGION[/ZONE]], slurm[/CLUSTER[/PARTITION]]");
    AddTaskFlags(cmd_, flags_);
    AddLaunchFlags(cmd_, flags_);
    cmd_->add_flag("-d,--detach-run", detach_, "do not stream the job's logs");
    cmd_->add_flag("-y,--yes", yes_, "do not ask");
    cmd_->add_flag("--dryrun", dryrun_,
                   "print the resources considered and the choice, then stop (nothing is made)");
    cmd_->add_flag("--no-setup", no_setup_, "skip the task's setup");
    cmd_->add_flag("-r,--retry-until-up", retry_until_up_,
                   "when every candidate is out of capacity, keep trying (with backoff) until "
                   "one comes up");
    cmd_->add_option("-i,--idle-minutes-to-autostop", idle_,
                     "stop the cluster after this many idle minutes")
        ->check(CLI::NonNegativeNumber);
    cmd_->add_flag("--down", down_,
                   "tear the cluster down instead of stopping it; without -i: once its jobs are "
                   "done (idle for 0 minutes), as SkyPilot's --down");
    cmd_->add_option("-o,--output", output_, "output format")->check(CLI::IsMember({"json"}));
    cmd_->add_option("args", args_, "TASK.yaml, or a command after --");
    AddTaskJsonFlag(cmd_, task_json_);
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  void TakeCommandAfterDashes(const std::vector<std::string>& words) override {
    args_.insert(args_.end(), words.begin(), words.end());
  }
  // A dry run plans here: it needs this machine's catalog and infra, and makes nothing.
  bool Remote() const override { return !dryrun_; }
  std::string Cluster() const override { return cluster_; }
  int RunRemote(CliContext& ctx, const controller::ApiConfig& api,
                const std::vector<std::string>&) override {
    if (task_json_.empty() && !args_.empty()) {
      auto p = BuildPipeline(args_, flags_);
      if (!p.ok()) return Fail(ctx, p.status(), 2);
      if (p->tasks.size() > 1) {
        return Fail(ctx,
                    InvalidArgument("a pipeline of " + std::to_string(p->tasks.size()) +
                                    " tasks is not sent through the team server: launch its "
                                    "tasks one by one, or run it from this machine with "
                                    "HERD_API_SERVER=local"),
                    2);
      }
    }
    auto t = Task();
    if (!t.ok()) return Fail(ctx, t.status(), 2);
    // The clone is uploaded as the workdir, as a local one would be.
    GitWorkdirClone clone;
    if (auto s = clone.Clone(*t); !s.ok()) return Fail(ctx, s, 2);
    t->git_workdir.reset();
    // The name is chosen here, so that the server knows what the launch makes.
    if (cluster_.empty()) cluster_ = RandomClusterName();
    std::vector<std::string> args = {"launch", "-c", cluster_};
    if (!infra_.empty()) args.insert(args.end(), {"--infra", infra_});
    AppendTaskFlags(flags_, args);
    if (detach_) args.push_back("-d");
    if (no_setup_) args.push_back("--no-setup");
    if (retry_until_up_) args.push_back("-r");
    if (idle_ >= 0) args.insert(args.end(), {"-i", std::to_string(idle_)});
    if (down_) args.push_back("--down");
    if (!output_.empty()) args.insert(args.end(), {"-o", output_});
    if (ctx.quiet) args.push_back("-q");
    return cli::RunRemote(ctx, api, {args, cluster_, &*t});
  }
  int Run(CliContext& ctx) override {
    if (task_json_.empty() && !args_.empty()) {
      auto p = BuildPipeline(args_, flags_);
      if (!p.ok()) return Fail(ctx, p.status(), 2);
      if (p->tasks.size() > 1) return RunPipeline(ctx, *p);
    }
    auto t = Task();
    if (!t.ok()) return Fail(ctx, t.status(), 2);
    // As SkyPilot, before anything is made: EC2 cannot stop spot instances, only end them.
    if (IdleMinutes() >= 0 && !down_ && task::PrimaryResources(*t).use_spot) {
      return Fail(ctx,
                  InvalidArgument("-i: spot instances cannot be stopped; add --down to tear the "
                                  "cluster down when idle"),
                  2);
    }
    GitWorkdirClone clone;
    if (auto s = clone.Clone(*t); !s.ok()) return Fail(ctx, s, 2);
    ops::LaunchOptions o;
    o.cluster = cluster_.empty() ? RandomClusterName() : cluster_;
    bool fresh = false;
    if (int code = Prepare(ctx, *t, o, &fresh); code >= 0) return code;
    InstallSigint();
    Result<ops::LaunchResult> r =
        fresh ? LaunchFailingOver(ctx, *t, *plan_, o) : ctx.Ops().Launch(*t, o);
    ctx.progress.Done();
    if (!r.ok()) return FailForStatus(ctx, r.status());
    if (IdleMinutes() >= 0) {
      if (auto s = ctx.Ops().SetAutostop(o.cluster, IdleMinutes(), down_); !s.ok()) {
        return FailForStatus(ctx, s);
      }
    }
    return JobOutcome(ctx, r->head.get(), *r, detach_, output_ == "json", t->num_nodes,
                      !ctx.quiet && output_ != "json");
  }

 private:
  // The launch of `t` as o.cluster: a new cluster (none of that name, or a dry run) is planned
  // (controller/optimizer): the table, then the user's yes, and *fresh is set (launch it through
  // LaunchFailingOver with plan_); an existing one keeps its infra and nodes. Fills the rest of
  // `o` from the flags. -1 to go on, or the exit code to end with (a dry run done: 0; aborted: 1;
  // a failure, reported).
  int Prepare(CliContext& ctx, const task::Task& t, ops::LaunchOptions& o, bool* fresh) {
    o.infra = infra_;
    *fresh = dryrun_ || cluster_.empty();
    if (!*fresh) {
      auto existing = ctx.Ops().Get(o.cluster);
      *fresh = !existing.ok() && existing.status().code() == Code::kNotFound;
      // The record holds what the plan chose ("aws/us-east-1/us-east-1a"); the infra the user
      // named then ("aws", "aws/us-east-1") still means that cluster.
      std::string named = !infra_.empty() ? infra_ : task::PrimaryResources(t).infra;
      if (existing.ok() && !named.empty() && existing->infra.rfind(named + "/", 0) == 0) {
        o.infra = existing->infra;
      }
    }
    if (*fresh) {
      auto env = optimizer::ProbeEnvironment();
      if (!env.ok()) return FailForStatus(ctx, env.status());
      auto catalog = optimizer::LoadAwsCatalog();
      if (!catalog.ok()) return FailForStatus(ctx, catalog.status());
      auto plan = optimizer::PlanTask(t, *env, *catalog, {infra_, flags_.num_nodes});
      if (!plan.ok()) return FailForStatus(ctx, plan.status());
      plan_ = *plan;
      if (auto s = optimizer::KeepCandidatesFor(*plan_, pipeline_rest_); !s.ok()) {
        return FailForStatus(ctx, s);
      }
      // With -o json stdout carries only the result.
      std::ostream& table = output_ == "json" ? ctx.err : ctx.out;
      if (!ctx.quiet || dryrun_) {
        table << optimizer::RenderConsidered(*plan_);
        table.flush();
      }
      if (dryrun_) return 0;
      if (!yes_ && !Confirm(ctx, "Launching a new cluster '" + o.cluster + "'. Proceed?")) {
        ctx.err << "Aborted.\n";
        return 1;
      }
    }
    o.num_nodes = flags_.num_nodes;
    o.no_setup = no_setup_;
    o.progress = ctx.progress.Callback();
    return -1;
  }

  // The autostop to set after the launch: -i, else 0 with --down alone (SkyPilot: tear down
  // once the jobs are done), else none (-1).
  int IdleMinutes() const { return idle_ >= 0 ? idle_ : down_ ? 0 : -1; }

  // A new cluster: the plan's candidates, the cheapest first, until one comes up
  // (optimizer/failover.hpp); what a failed attempt left is torn down before the next. The task
  // becomes the one launched.
  Result<ops::LaunchResult> LaunchFailingOver(CliContext& ctx, task::Task& t,
                                              const optimizer::Plan& plan, ops::LaunchOptions& o) {
    std::optional<ops::LaunchResult> launched;
    auto attempt = [&](const task::Task& applied, const optimizer::Candidate& c) -> Status {
      o.infra = c.infra;
      auto r = ctx.Ops().Launch(applied, o);
      ctx.progress.Done();
      if (!r.ok()) return r.status();
      launched = std::move(*r);
      t = applied;
      return Status::Ok();
    };
    auto cleanup = [&](const optimizer::Candidate&) {
      if (auto s = ctx.Ops().Down(o.cluster); !s.ok()) {
        ctx.err << "herd: removing what the failed attempt left of " << o.cluster
                << " failed: " << s.message() << "\n";
      }
    };
    optimizer::FailoverOptions fo;
    fo.retry_until_up = retry_until_up_;
    fo.note = [&](const std::string& line) {
      ctx.err << line << "\n";
      ctx.err.flush();
    };
    fo.sleep =
        optimizer::InterruptibleSleep(*ctx.Ops().parts().clock, [] { return Interrupted(); });
    auto chosen = optimizer::LaunchWithFailover(t, plan, attempt, cleanup, fo);
    if (!chosen.ok()) {
      // A new cluster that got no nodes is not left listed INIT (SkyPilot removes the cluster's
      // entry when provisioning fails): what the provider may have made goes with it. One that
      // got nodes (its agents or setup failed) stays for the user to look at and `herd down`;
      // so does one whose launch was interrupted.
      auto left = ctx.Ops().Get(o.cluster);
      if (left.ok() && left->nodes.empty() && !Interrupted() &&
          chosen.status().code() != Code::kCancelled) {
        if (auto s = ctx.Ops().Down(o.cluster); !s.ok()) {
          ctx.err << "herd: removing what the failed launch left of " << o.cluster
                  << " failed: " << s.message() << "; `herd down " << o.cluster << "` removes it\n";
        }
      }
      return chosen.status();
    }
    return std::move(*launched);
  }

  // SkyPilot's pipeline: the tasks one after another on one cluster, each followed to its end;
  // the first that does not succeed stops the rest. A new cluster is planned for the first task
  // (the table, the user's yes, failover between the candidates, as a single task's launch); the
  // tasks after it run on the cluster it got. A dry run plans the first task and stops.
  int RunPipeline(CliContext& ctx, task::Pipeline& p) {
    if (detach_ || output_ == "json") {
      return Fail(ctx,
                  InvalidArgument("a pipeline is followed task by task, each waiting for the "
                                  "previous one: -d and -o json are not supported with it"),
                  2);
    }
    const std::string cluster = cluster_.empty() ? RandomClusterName() : cluster_;
    const std::size_t n = p.tasks.size();
    // The first task's plan keeps only the clusters the tasks after it can run on.
    for (std::size_t i = 1; i < n; ++i) pipeline_rest_.push_back(&p.tasks[i]);
    InstallSigint();
    for (std::size_t i = 0; i < n; ++i) {
      task::Task& t = p.tasks[i];
      ctx.err << "Pipeline" << (p.name.empty() ? "" : " " + p.name) << ": task " << i + 1 << " of "
              << n << (t.name.empty() ? "" : " (" + t.name + ")") << " on cluster " << cluster
              << "\n";
      GitWorkdirClone clone;
      if (auto s = clone.Clone(t); !s.ok()) return Fail(ctx, s, 2);
      ops::LaunchOptions o;
      o.cluster = cluster;
      bool fresh = false;
      if (i == 0) {
        if (int code = Prepare(ctx, t, o, &fresh); code >= 0) return code;
      } else {
        // The cluster the first task got, whatever infra the plan chose for it.
        auto made = ctx.Ops().Get(cluster);
        if (!made.ok()) return FailForStatus(ctx, made.status());
        o.infra = made->infra;
        o.num_nodes = flags_.num_nodes;
        o.no_setup = no_setup_;
        o.progress = ctx.progress.Callback();
      }
      auto r = fresh ? LaunchFailingOver(ctx, t, *plan_, o) : ctx.Ops().Launch(t, o);
      ctx.progress.Done();
      if (!r.ok()) return FailForStatus(ctx, r.status());
      if (i == 0 && IdleMinutes() >= 0) {
        if (auto s = ctx.Ops().SetAutostop(cluster, IdleMinutes(), down_); !s.ok()) {
          return FailForStatus(ctx, s);
        }
      }
      int code =
          JobOutcome(ctx, r->head.get(), *r, false, false, t.num_nodes, !ctx.quiet && i + 1 == n);
      if (code != 0 || Interrupted()) {
        if (i + 1 < n && !Interrupted()) {
          ctx.err << "Pipeline stopped: task " << i + 1 << " of " << n << " did not succeed; the "
                  << n - i - 1 << " after it did not run\n";
        }
        return code;
      }
    }
    return 0;
  }

  // Asks on the terminal; without one (scripts, tests, the API server's runs) there is nobody to
  // ask, and the launch goes ahead as with -y.
  static bool Confirm(CliContext& ctx, const std::string& question) {
    return ConfirmOnTty(ctx, question);
  }

  Result<task::Task> Task() {
    if (!task_json_.empty()) return LoadTaskJson(task_json_);
    if (!args_.empty()) return BuildTask(args_, flags_);
    // No task: a cluster of the flags' shape (SkyPilot's `sky launch -c NAME --gpus ...`).
    HERD_ASSIGN_OR_RETURN(task::Task t, task::ParseTaskYaml("{}", "<none>", {}));
    HERD_RETURN_IF_ERROR(ApplyTaskFlags(flags_, t));
    return t;
  }

  CLI::App* cmd_ = nullptr;
  std::string cluster_, infra_, output_, task_json_;
  TaskFlags flags_;
  std::vector<std::string> args_;
  std::vector<const task::Task*> pipeline_rest_;  // a pipeline's tasks after the first
  bool detach_ = false, yes_ = false, no_setup_ = false, down_ = false, dryrun_ = false;
  bool retry_until_up_ = false;
  std::optional<optimizer::Plan> plan_;  // of a new cluster
  int idle_ = -1;
};

}  // namespace

std::unique_ptr<Command> MakeLaunchCommand() { return std::make_unique<LaunchCommand>(); }

}  // namespace herd::cli
