// What several `herd` commands share: errors and exit codes, time columns, JSON forms of jobs,
// task flags, the flags that name a head directly, following a job's log, and Ctrl-C.
#pragma once

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "controller/cli/command.hpp"
#include "controller/core/head_client.hpp"
#include "controller/jobs/managed_job_store.hpp"
#include "controller/task/task.hpp"
#include "herd/v1/common.pb.h"
#include "shared/common/status.hpp"

namespace herd::cli {

// `herd VERB CLUSTER [-y]`: a command on one cluster by name (stop, start, down); the command's
// file gives its Run.
class OneClusterCommand : public Command {
 public:
  OneClusterCommand(std::string verb, std::string help)
      : verb_(std::move(verb)), help_(std::move(help)) {}
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand(verb_, help_);
    cmd_->add_option("cluster", cluster_, "cluster name")->required();
    cmd_->add_flag("-y,--yes", yes_, "do not ask");
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  bool Remote() const override { return true; }
  std::string Cluster() const override { return cluster_; }

 protected:
  std::string verb_, help_;
  CLI::App* cmd_ = nullptr;
  std::string cluster_;
  bool yes_ = false;
};

// `stop` and `down`: one or more clusters by name, or -a for every cluster (asked on a terminal
// unless -y). Each is done in turn; one that fails does not keep the others from it.
class ClustersCommand : public Command {
 public:
  ClustersCommand(std::string verb, std::string help)
      : verb_(std::move(verb)), help_(std::move(help)) {}
  CLI::App* Add(CLI::App& app) override;
  bool Chosen() const override { return cmd_->parsed(); }
  bool Remote() const override { return true; }
  std::string Cluster() const override { return clusters_.size() == 1 ? clusters_[0] : ""; }
  // The first non-zero exit code of the clusters', 0 when all went well.
  int Run(CliContext& ctx) override;

 protected:
  // Does the verb to one cluster; prints its error and returns its exit code, or 0.
  virtual int RunOne(CliContext& ctx, const std::string& cluster) = 0;

  std::string verb_, help_;
  CLI::App* cmd_ = nullptr;
  std::vector<std::string> clusters_;
  bool all_ = false, yes_ = false;
};

// Asks `question [Y/n]` on the terminal; without one (scripts, tests, the API server's runs)
// there is nobody to ask, and the answer is yes.
bool ConfirmOnTty(CliContext& ctx, const std::string& question);

// Prints "herd: MESSAGE" and returns the exit code: `code`, or 102 for NotFound when code is 1.
int Fail(CliContext& ctx, const Status& s, int code = 1);
// 102 NotFound, 2 InvalidArgument, 1 otherwise.
int FailForStatus(CliContext& ctx, const Status& s);

// Ctrl-C detaches from a stream; the job keeps running. Installed by commands that follow.
void InstallSigint();
bool Interrupted();

std::string CurrentUser();
std::string Ago(int64_t unix_ms);
std::string Duration(const herd::v1::JobInfo& j);
boost::json::object JobJson(const herd::v1::JobInfo& j);
boost::json::object ManagedJobJson(const jobs::ManagedJob& j);

// Prints a job's log stream (with the banner when asked); returns the exit code of REFERENCE.md.
// `cluster` is named in the reattach hint after a Ctrl-C.
// tail_lines > 0: from the log's last tail_lines lines (`logs --tail N`).
int FollowJob(CliContext& ctx, controller::HeadApi& client, const std::string& cluster,
              int64_t job_id, uint64_t offset, bool follow, bool banner, int num_nodes,
              int tail_lines = 0);

// The flags that shape the task.
struct TaskFlags {
  std::vector<std::string> envs, env_files, secrets;
  int num_nodes = 0;
  std::string gpus, cpus, memory, name, workdir;
  // Where and on what the task's cluster is made (AddLaunchFlags: launch and jobs launch).
  bool use_spot = false;
  std::string instance_type, disk_size, region, zone;
  std::string image_id;  // --image-id docker:IMAGE
  std::vector<std::string> ports;
  // Run limits (task/run_limits.hpp); empty: the task's config.herd or none.
  std::string time_limit, signal, grace, hang_timeout;
};
void AddTaskFlags(CLI::App* cmd, TaskFlags& f);
// --use-spot, --instance-type, --disk-size, --ports, --region, --zone (SkyPilot's launch flags).
void AddLaunchFlags(CLI::App* cmd, TaskFlags& f);
// What the flags say, applied to a task built without BuildTask (launch with no task).
Status ApplyTaskFlags(const TaskFlags& f, task::Task& t);
// The positional arguments are a task YAML or a command (SkyPilot's rule). A file of several
// tasks (a pipeline) is refused: only `herd launch` runs those (BuildPipeline).
Result<task::Task> BuildTask(const std::vector<std::string>& args, const TaskFlags& f);
// The same for every task of a pipeline file (one task for a plain file or a command); the flags
// apply to each task.
Result<task::Pipeline> BuildPipeline(const std::vector<std::string>& args, const TaskFlags& f);

// workdir: {url, ref}: Clone puts the repository in a new directory under
// <herd home>/git-workdirs and points the task's workdir at it; the directory is removed when
// this object goes (after the command synced it). Nothing for a task without a git workdir.
class GitWorkdirClone {
 public:
  GitWorkdirClone() = default;
  GitWorkdirClone(const GitWorkdirClone&) = delete;
  GitWorkdirClone& operator=(const GitWorkdirClone&) = delete;
  ~GitWorkdirClone();
  Status Clone(task::Task& task);

 private:
  std::vector<task::Task> cloned_;
};

// The flags that say which head to talk to when it is not a cluster of this machine's.
struct TargetFlags {
  std::string endpoint;
  std::string certs;
};
void AddTargetFlags(CLI::App* cmd, TargetFlags& t);
// A cluster by name (through SSH), or a head given directly with --endpoint/--certs.
Result<std::unique_ptr<controller::HeadApi>> ConnectTarget(CliContext& ctx,
                                                           const std::string& cluster,
                                                           const TargetFlags& t);
// [NAME] then the rest: with --endpoint there is no cluster name.
std::pair<std::string, std::vector<std::string>> SplitCluster(const std::vector<std::string>& args,
                                                              const TargetFlags& t);

// `--task-json FILE` (hidden; how the API server hands a remote CLI's task to the command it
// runs): the task's stored form (controller/jobs/task_codec.hpp), and its secrets from stdin when
// HERD_TASK_SECRETS_ON_STDIN is 1.
inline constexpr char kTaskSecretsOnStdinEnv[] = "HERD_TASK_SECRETS_ON_STDIN";
Result<task::Task> LoadTaskJson(const std::string& path);
void AddTaskJsonFlag(CLI::App* cmd, std::string& path);

// The flags of the task's shape that a command sends to the server besides the task itself.
void AppendTaskFlags(const TaskFlags& f, std::vector<std::string>& args);

Result<std::vector<int64_t>> ParseJobIds(const std::vector<std::string>& args);

// After a launch or exec: the JSON line (-o json), the submitted line, the job's log followed
// unless detached, and the block of useful commands when show_block.
int JobOutcome(CliContext& ctx, controller::HeadApi* client, const ops::LaunchResult& r,
               bool detach, bool json, int num_nodes, bool show_block);

}  // namespace herd::cli
