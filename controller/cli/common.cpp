#include "controller/cli/common.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <ostream>

#include "controller/jobs/managed_jobs.hpp"
#include "controller/jobs/task_codec.hpp"
#include "controller/ops/system_parts.hpp"
#include "controller/state/api_config.hpp"
#include "controller/state/herd_home.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/host_port.hpp"
#include "shared/common/limits.hpp"
#include "shared/proto/job_state.hpp"

namespace herd::cli {

using namespace herd::controller;
using namespace herd::v1;

namespace {

std::atomic<bool> g_interrupted{false};

void OnSigint(int) { g_interrupted = true; }

}  // namespace

Result<std::optional<ApiConfig>> CliContext::Api() {
  if (!api_) api_ = LoadApiConfig();
  return *api_;
}

ops::ClusterOps& CliContext::Ops() {
  if (!ops_) ops_ = std::make_unique<ops::ClusterOps>(ops::SystemParts(CurrentUser()));
  return *ops_;
}

void InstallSigint() {
  struct sigaction sa {};
  sa.sa_handler = OnSigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: blocking calls return so the loop sees the flag
  sigaction(SIGINT, &sa, nullptr);
}

bool Interrupted() { return g_interrupted.load(); }

int Fail(CliContext& ctx, const Status& s, int code) {
  ctx.err << "herd: " << s.message() << "\n";
  if (s.code() == Code::kNotFound) return code == 1 ? kExitNotFound : code;
  return code;
}

CLI::App* ClustersCommand::Add(CLI::App& app) {
  cmd_ = app.add_subcommand(verb_, help_);
  cmd_->add_option("clusters", clusters_, "cluster names");
  cmd_->add_flag("-a,--all", all_, "every cluster");
  cmd_->add_flag("-y,--yes", yes_, "do not ask");
  return cmd_;
}

int ClustersCommand::Run(CliContext& ctx) {
  if (all_ && !clusters_.empty()) {
    return Fail(ctx, InvalidArgument(verb_ + ": give cluster names or -a, not both"), 2);
  }
  std::vector<std::string> names = clusters_;
  if (all_) {
    auto all = ctx.Ops().List();
    if (!all.ok()) return FailForStatus(ctx, all.status());
    for (const auto& c : *all) names.push_back(c.name);
    if (names.empty()) {
      ctx.err << "No existing clusters.\n";
      return 0;
    }
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    if (!yes_ && !ConfirmOnTty(ctx, "This will " + verb_ + " " + std::to_string(names.size()) +
                                        " cluster(s): " + list + ". Proceed?")) {
      ctx.err << "Aborted.\n";
      return 1;
    }
  }
  if (names.empty()) return Fail(ctx, InvalidArgument(verb_ + ": give a cluster name or -a"), 2);
  int first_failure = 0;
  for (const auto& name : names) {
    const int code = RunOne(ctx, name);
    if (code != 0 && first_failure == 0) first_failure = code;
  }
  return first_failure;
}

bool ConfirmOnTty(CliContext& ctx, const std::string& question) {
  if (!::isatty(STDIN_FILENO)) return true;
  ctx.err << question << " [Y/n]: ";
  ctx.err.flush();
  std::string answer;
  if (!std::getline(std::cin, answer)) return false;
  return answer.empty() || answer == "y" || answer == "Y" || answer == "yes" || answer == "Yes";
}

int FailForStatus(CliContext& ctx, const Status& s) {
  if (s.code() == Code::kNotFound) return Fail(ctx, s, kExitNotFound);
  if (s.code() == Code::kInvalidArgument) return Fail(ctx, s, 2);
  return Fail(ctx, s, 1);
}

std::string CurrentUser() {
  if (const char* u = ::getenv("USER"); u && *u) return u;
  if (const char* u = ::getenv("LOGNAME"); u && *u) return u;
  return "root";
}

void AddTargetFlags(CLI::App* cmd, TargetFlags& t) {
  cmd->add_option("--endpoint", t.endpoint, "the head's HOST:PORT (direct connection)");
  cmd->add_option("--certs", t.certs, "directory with ca.crt, client.crt, client.key");
}

namespace {

Result<HeadEndpoint> ResolveHead(const TargetFlags& t) {
  if (t.endpoint.empty()) return InvalidArgument("--endpoint HOST:PORT is required");
  HERD_ASSIGN_OR_RETURN(auto hp, ParseHostPort(t.endpoint, "--endpoint"));
  if (t.certs.empty()) return InvalidArgument("--certs DIR is required with --endpoint");
  return HeadEndpoint{hp.host, hp.port, t.certs};
}

}  // namespace

Result<std::unique_ptr<HeadApi>> ConnectTarget(CliContext& ctx, const std::string& cluster,
                                               const TargetFlags& t) {
  if (!t.endpoint.empty()) {
    HERD_ASSIGN_OR_RETURN(auto ep, ResolveHead(t));
    HERD_ASSIGN_OR_RETURN(auto client, HeadClient::Connect(ep));
    return std::unique_ptr<HeadApi>(std::move(client));
  }
  if (cluster.empty()) return InvalidArgument("give a cluster name (see `herd status`)");
  HERD_ASSIGN_OR_RETURN(auto c, ctx.Ops().Get(cluster));
  return ctx.Ops().ConnectHead(c);
}

std::string Ago(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  int64_t now = std::time(nullptr) * 1000;
  int64_t s = std::max<int64_t>(0, (now - unix_ms) / 1000);
  if (s < 60) return std::to_string(s) + " secs ago";
  if (s < 3600) return std::to_string(s / 60) + " mins ago";
  if (s < 86400) return std::to_string(s / 3600) + " hrs ago";
  return std::to_string(s / 86400) + " days ago";
}

std::string Duration(const JobInfo& j) {
  if (j.started_unix_ms() <= 0) return "-";
  int64_t end = j.ended_unix_ms() > 0 ? j.ended_unix_ms() : std::time(nullptr) * 1000;
  int64_t s = std::max<int64_t>(0, (end - j.started_unix_ms()) / 1000);
  if (s < 60) return std::to_string(s) + "s";
  if (s < 3600) return std::to_string(s / 60) + "m " + std::to_string(s % 60) + "s";
  return std::to_string(s / 3600) + "h " + std::to_string(s % 3600 / 60) + "m";
}

boost::json::object JobJson(const JobInfo& j) {
  boost::json::object o;
  o["id"] = j.job_id();
  o["name"] = j.name();
  o["user"] = j.user();
  o["status"] = proto::JobStateName(j.state());
  o["submitted_at_ms"] = j.submitted_unix_ms();
  o["started_at_ms"] = j.started_unix_ms();
  o["ended_at_ms"] = j.ended_unix_ms();
  o["num_nodes"] = j.num_nodes();
  o["resources"] = j.resources();
  o["log_path"] = j.log_path();
  boost::json::array codes, nodes;
  for (const auto& e : j.exits()) codes.push_back(e.exit_code());
  for (const auto& n : j.node_ids()) nodes.push_back(boost::json::string(n));
  o["exit_codes"] = std::move(codes);
  o["nodes"] = std::move(nodes);
  o["first_failed_rank"] = j.first_failed_rank();
  o["first_failed_node"] = j.first_failed_node();
  o["message"] = j.message();
  o["attempt"] = j.attempt();
  o["task_id"] = j.task_id();
  if (j.array_size() > 0) {
    o["array_id"] = j.array_id();
    o["array_index"] = j.array_index();
    o["array_rank"] = j.array_rank();
    o["array_size"] = j.array_size();
    o["array"] = j.array_spec();
  }
  if (j.after_any_size() > 0)
    o["after"] = boost::json::array(j.after_any().begin(), j.after_any().end());
  if (j.after_ok_size() > 0) {
    o["after_ok"] = boost::json::array(j.after_ok().begin(), j.after_ok().end());
  }
  // Why herd ended the job itself: "time_limit", "hung", or "" (it ended by itself or was
  // cancelled).
  o["end_reason"] = j.end_reason() == herd::v1::JOB_END_REASON_TIME_LIMIT ? "time_limit"
                    : j.end_reason() == herd::v1::JOB_END_REASON_HUNG     ? "hung"
                                                                          : "";
  return o;
}

boost::json::object ManagedJobJson(const jobs::ManagedJob& j) {
  boost::json::object o;
  o["id"] = j.id;
  o["name"] = j.name;
  o["user"] = j.user;
  o["status"] = std::string(jobs::StateName(j.state));
  o["submitted_at_ms"] = j.submitted_unix_ms;
  o["started_at_ms"] = j.started_unix_ms;
  o["ended_at_ms"] = j.ended_unix_ms;
  o["resources"] = j.resources;
  o["task_id"] = j.task_id;
  o["recoveries"] = j.recoveries;
  o["restarts_on_errors"] = j.restarts_on_errors;
  o["cluster"] = j.cluster;
  o["controller_pid"] = j.controller_pid;
  o["message"] = j.message;
  boost::json::array attempts;
  for (const auto& a : j.attempts) {
    attempts.push_back(boost::json::object{{"attempt", a.attempt},
                                           {"cluster", a.cluster},
                                           {"cluster_job_id", a.cluster_job_id},
                                           {"started_at_ms", a.start_unix_ms},
                                           {"ended_at_ms", a.end_unix_ms},
                                           {"outcome", a.outcome},
                                           {"reason", a.reason}});
  }
  o["attempts"] = std::move(attempts);
  return o;
}

// Prints a job's log stream with the banner; returns the exit code of REFERENCE.md.
int FollowJob(CliContext& ctx, HeadApi& client, const std::string& cluster, int64_t job_id,
              uint64_t offset, bool follow, bool banner, int num_nodes, int tail_lines) {
  bool started_banner = false;
  HeadApi::StreamCallbacks cb;
  cb.on_data = [&ctx](std::string_view bytes) {
    ctx.out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ctx.out.flush();
  };
  cb.on_status = [&](const JobInfo& j) {
    if (banner && !started_banner && j.state() >= JOB_STATE_SETTING_UP) {
      started_banner = true;
      ctx.err << "Job started. Streaming logs... (Ctrl-C to exit log streaming; job will not "
                 "be killed)\n";
    }
  };
  cb.interrupted = [] { return Interrupted(); };
  if (banner) ctx.err << "Waiting for task resources on " << num_nodes << " node(s).\n";
  auto last = client.Stream(job_id, offset, follow, cb, tail_lines);
  // Cancelled: the cluster was taken down or stopped while the job ran (HeadClient::Stream); the
  // job ended with it, by the user's decision, as a cancelled one does.
  if (!last.ok() && last.status().code() == Code::kCancelled) {
    return Fail(ctx, last.status(), kExitCancelled);
  }
  if (!last.ok()) return FailForStatus(ctx, last.status());
  const JobInfo& j = *last;
  if (Interrupted()) {
    ctx.err << "\nDetached from job " << j.job_id()
            << "; it keeps running. Reattach with: herd logs "
            << (cluster.empty() ? "..." : cluster) << " " << j.job_id() << "\n";
    return kExitNotFinished;
  }
  if (proto::IsTerminal(j.state())) {
    ctx.err << "Job finished (status: " << proto::JobStateName(j.state()) << ").\n";
  } else {
    ctx.err << "Job " << j.job_id() << " is " << proto::JobStateName(j.state()) << ".\n";
  }
  return ExitCodeForJob(j);
}

void AddTaskFlags(CLI::App* cmd, TaskFlags& f) {
  // One value per flag: `--env A=1 task.yaml` must not take the YAML as a second value.
  cmd->add_option("--env", f.envs, "K=V, or K to take the value from the local environment")
      ->allow_extra_args(false);
  cmd->add_option("--env-file", f.env_files, "a dotenv file of K=V lines")->allow_extra_args(false);
  cmd->add_option("--secret", f.secrets, "K=V, or K: like --env but never shown")
      ->allow_extra_args(false);
  cmd->add_option("--num-nodes", f.num_nodes, "number of nodes to run on")
      ->check(CLI::Range(1, limits::kMaxTaskNodes));
  cmd->add_option("--gpus", f.gpus, "accelerators per node, e.g. L4:4 (overrides the task)");
  cmd->add_option("--cpus", f.cpus, "CPUs per node, e.g. 8 or 8+");
  cmd->add_option("--image-id", f.image_id,
                  "run setup and run in this container image on every node, e.g. "
                  "docker:nvcr.io/nvidia/pytorch:24.01-py3 (overrides the task)");
  cmd->add_option("--memory", f.memory, "memory per node in GB, e.g. 32+");
  cmd->add_option("-n,--name", f.name, "job name");
  cmd->add_option("--workdir", f.workdir,
                  "a local directory synced to ~/sky_workdir (overrides the task's)");
  cmd->add_option("--time-limit", f.time_limit,
                  "end the job this long after it starts: 90m, 2h, Slurm's MINUTES or "
                  "D-HH:MM:SS (SIGTERM, then SIGKILL after --grace)");
  cmd->add_option("--signal", f.signal,
                  "SIG[@SECONDS]: send SIG to every process of the job SECONDS (default 60) "
                  "before --time-limit, e.g. USR1@300");
  cmd->add_option("--grace", f.grace,
                  "seconds between SIGTERM and SIGKILL when the job is stopped (time limit, hang, "
                  "recovery; default 30)");
  cmd->add_option("--hang-timeout", f.hang_timeout,
                  "declare a rank hung after this long without output or CPU time (e.g. 10m): "
                  "its stacks go to the log and the job ends");
}

void AddLaunchFlags(CLI::App* cmd, TaskFlags& f) {
  cmd->add_flag("--use-spot", f.use_spot, "spot instances (overrides the task)");
  cmd->add_option("--instance-type", f.instance_type, "an instance type, e.g. p5.48xlarge");
  cmd->add_option("--disk-size", f.disk_size, "disk size per node: GB (256) or with a unit (1TB)");
  cmd->add_option("--ports", f.ports, "a port or range to open (8080, 10000-10100); repeatable")
      ->allow_extra_args(false);
  cmd->add_option("--region", f.region, "AWS region (infra aws/REGION)");
  cmd->add_option("--zone", f.zone, "AWS zone (infra aws/REGION/ZONE)");
}

namespace {
Status ApplyRunLimitFlags(const TaskFlags& f, task::RunLimits& l);
}  // namespace

Status ApplyTaskFlags(const TaskFlags& f, task::Task& t) {
  if (f.num_nodes > 0) t.num_nodes = f.num_nodes;
  if (!f.gpus.empty()) HERD_RETURN_IF_ERROR(task::ApplyAcceleratorFlag(f.gpus, t.resources));
  if (!f.cpus.empty()) HERD_RETURN_IF_ERROR(task::ApplyCpusFlag(f.cpus, t.resources));
  if (!f.memory.empty()) HERD_RETURN_IF_ERROR(task::ApplyMemoryFlag(f.memory, t.resources));
  if (!f.name.empty()) HERD_RETURN_IF_ERROR(task::ApplyNameFlag(f.name, t));
  if (!f.workdir.empty()) HERD_RETURN_IF_ERROR(task::ApplyWorkdirFlag(f.workdir, t));
  if (f.use_spot) task::ApplyUseSpotFlag(t.resources);
  if (!f.instance_type.empty()) {
    HERD_RETURN_IF_ERROR(task::ApplyInstanceTypeFlag(f.instance_type, t.resources));
  }
  if (!f.image_id.empty()) HERD_RETURN_IF_ERROR(task::ApplyImageIdFlag(f.image_id, t.resources));
  if (!f.disk_size.empty()) HERD_RETURN_IF_ERROR(task::ApplyDiskSizeFlag(f.disk_size, t.resources));
  if (!f.ports.empty()) HERD_RETURN_IF_ERROR(task::ApplyPortsFlag(f.ports, t.resources));
  HERD_RETURN_IF_ERROR(ApplyRunLimitFlags(f, t.run_limits));
  return task::ApplyRegionZoneFlags(f.region, f.zone, t.resources);
}

namespace {

// --time-limit, --signal, --grace, --hang-timeout over the task's config.herd.
Status ApplyRunLimitFlags(const TaskFlags& f, task::RunLimits& l) {
  auto named = [](const char* flag, const Status& s) {
    return InvalidArgument(std::string(flag) + ": " + s.message());
  };
  if (!f.time_limit.empty()) {
    auto d = task::ParseTimeLimit(f.time_limit);
    if (!d.ok()) return named("--time-limit", d.status());
    l.time_limit = *d;
  }
  if (!f.signal.empty()) {
    auto s = task::ParseSignalSpec(f.signal);
    if (!s.ok()) return s.status();
    l.limit_signal = s->signal;
    l.limit_signal_before = s->before;
  }
  if (!f.grace.empty()) {
    auto d = task::ParseGrace(f.grace);
    if (!d.ok()) return named("--grace", d.status());
    l.grace = *d;
  }
  if (!f.hang_timeout.empty()) {
    auto d = task::ParseHangTimeout(f.hang_timeout);
    if (!d.ok()) return named("--hang-timeout", d.status());
    l.hang_timeout = *d;
  }
  return task::CheckRunLimits(l);
}

}  // namespace

// The positional arguments are a task YAML or a command (SkyPilot's rule).
namespace {

Result<task::Pipeline> BuildTasks(const std::vector<std::string>& args, const TaskFlags& f,
                                  bool one_task) {
  if (args.empty()) return InvalidArgument("give a task YAML or a command");
  task::ParseOptions opts;
  opts.env_overrides = f.envs;
  opts.env_files = f.env_files;
  opts.secret_overrides = f.secrets;
  // A file that cannot be read is reported by the command that talks to the server.
  auto api = LoadApiConfig();
  opts.team_server = api.ok() && api->has_value();
  task::Pipeline p;
  const std::string& first = args[0];
  bool yaml = args.size() == 1 && (first.ends_with(".yaml") || first.ends_with(".yml"));
  if (yaml && one_task) {
    HERD_ASSIGN_OR_RETURN(task::Task t, task::ParseTaskFile(first, opts));
    p.tasks.push_back(std::move(t));
  } else if (yaml) {
    HERD_ASSIGN_OR_RETURN(p, task::ParsePipelineFile(first, opts));
  } else {
    std::string cmd;
    for (const auto& a : args) cmd += (cmd.empty() ? "" : " ") + a;
    HERD_ASSIGN_OR_RETURN(task::Task t, task::ParseTaskYaml("{}", "<command>", opts));
    t.run = cmd;
    t.name = "herd-cmd";
    p.tasks.push_back(std::move(t));
  }
  for (task::Task& t : p.tasks) {
    HERD_RETURN_IF_ERROR(ApplyTaskFlags(f, t));
    // The file's own spec was measured by the parser; a command or flags change it.
    HERD_RETURN_IF_ERROR(task::CheckSpecSize(t, yaml ? first : "<command>"));
  }
  return p;
}

}  // namespace

Result<task::Task> BuildTask(const std::vector<std::string>& args, const TaskFlags& f) {
  HERD_ASSIGN_OR_RETURN(task::Pipeline p, BuildTasks(args, f, true));
  return std::move(p.tasks.front());
}

Result<task::Pipeline> BuildPipeline(const std::vector<std::string>& args, const TaskFlags& f) {
  return BuildTasks(args, f, false);
}

GitWorkdirClone::~GitWorkdirClone() {
  for (const task::Task& t : cloned_) task::RemoveGitWorkdir(t);
}

Status GitWorkdirClone::Clone(task::Task& task) {
  if (!task.git_workdir) return Status::Ok();
  HERD_RETURN_IF_ERROR(task::ResolveGitWorkdir(task, HerdHome() + "/git-workdirs"));
  cloned_.push_back(task);
  return Status::Ok();
}

namespace {

void PrintUsefulCommands(CliContext& ctx, const std::string& cluster, int64_t job_id,
                         int num_workers) {
  std::string j = job_id > 0 ? std::to_string(job_id) : "JOB_ID";
  ctx.err << "\nCluster " << cluster << " is UP. Useful commands:\n"
          << "  To cancel the job:        herd cancel " << cluster << " " << j << "\n"
          << "  To stream job logs:       herd logs " << cluster << " " << j << "\n"
          << "  To view the job queue:    herd queue " << cluster << "\n"
          << "  To log into the head:     ssh " << cluster << "\n";
  if (num_workers > 0) ctx.err << "  To log into worker 1:     ssh " << cluster << "-worker1\n";
  ctx.err << "  To submit another job:    herd exec " << cluster << " TASK.yaml\n"
          << "  To stop the cluster:      herd stop " << cluster << "\n"
          << "  To tear down the cluster: herd down " << cluster << "\n";
}

}  // namespace

int JobOutcome(CliContext& ctx, HeadApi* client, const ops::LaunchResult& r, bool detach, bool json,
               int num_nodes, bool show_block) {
  if (json) {
    boost::json::object o;
    o["cluster"] = r.cluster.name;
    o["job_id"] = r.job_id;
    const auto* head = controller::HeadNode(r.cluster);
    o["head_ip"] = head ? head->ip : "";
    o["agents_uploaded"] = r.agents_uploaded;
    o["agents_restarted"] = r.agents_restarted;
    ctx.out << boost::json::serialize(o) << "\n";
  }
  int workers = static_cast<int>(r.cluster.nodes.size()) - 1;
  if (r.job_id == 0 || detach) {
    if (r.job_id > 0 && !json) ctx.err << "Job submitted, ID: " << r.job_id << "\n";
    if (show_block) PrintUsefulCommands(ctx, r.cluster.name, r.job_id, workers);
    return 0;
  }
  ctx.err << "Job submitted, ID: " << r.job_id << "\n";
  int code = FollowJob(ctx, *client, r.cluster.name, r.job_id, 0, true, true, num_nodes);
  if (show_block) PrintUsefulCommands(ctx, r.cluster.name, r.job_id, workers);
  return code;
}

// [NAME] then the rest: with --endpoint there is no cluster name.
std::pair<std::string, std::vector<std::string>> SplitCluster(const std::vector<std::string>& args,
                                                              const TargetFlags& t) {
  if (!t.endpoint.empty() || args.empty()) return {"", args};
  return {args[0], std::vector<std::string>(args.begin() + 1, args.end())};
}

Result<std::vector<int64_t>> ParseJobIds(const std::vector<std::string>& args) {
  std::vector<int64_t> ids;
  for (const auto& a : args) {
    char* end = nullptr;
    long long v = std::strtoll(a.c_str(), &end, 10);
    if (a.empty() || *end != '\0' || v <= 0) {
      return InvalidArgument("job id: expected a positive number, got '" + a + "'");
    }
    ids.push_back(v);
  }
  return ids;
}

Result<task::Task> LoadTaskJson(const std::string& path) {
  HERD_ASSIGN_OR_RETURN(std::string json, ReadFile(path));
  HERD_ASSIGN_OR_RETURN(task::Task t, jobs::DecodeTask(json));
  HERD_ASSIGN_OR_RETURN(std::string secrets, TakeSecretsFromStdin(kTaskSecretsOnStdinEnv));
  if (!secrets.empty()) {
    try {
      const boost::json::value parsed = boost::json::parse(secrets);
      for (const auto& [k, v] : parsed.as_object()) {
        t.secrets[std::string(k)] = std::string(v.as_string());
      }
    } catch (const std::exception& e) {
      return InvalidArgument(
          std::string("the secrets on stdin are not a JSON object of strings: ") + e.what());
    }
  }
  return t;
}

void AddTaskJsonFlag(CLI::App* cmd, std::string& path) {
  cmd->add_option("--task-json", path, "")->group("");
}

void AppendTaskFlags(const TaskFlags& f, std::vector<std::string>& args) {
  if (f.num_nodes > 0) args.insert(args.end(), {"--num-nodes", std::to_string(f.num_nodes)});
}

}  // namespace herd::cli
