#include "controller/core/cli.hpp"

#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <boost/json.hpp>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>

#include "controller/core/head_client.hpp"
#include "controller/core/managed_jobs.hpp"
#include "controller/core/mux.hpp"
#include "controller/core/progress.hpp"
#include "controller/core/sdk.hpp"
#include "controller/core/table.hpp"
#include "controller/core/trace.hpp"
#include "controller/task/task.hpp"
#include "shared/common/heap.hpp"
#include "shared/common/host_port.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"
#include "shared/proto/job_state.hpp"
#include "shared/tls/certs.hpp"

namespace herd::controller {

using namespace herd::v1;

namespace {

std::atomic<bool> g_interrupted{false};
std::string g_cluster;  // the cluster the command is about, for hints

void OnSigint(int) { g_interrupted = true; }

// Ctrl-C detaches from a stream; the job keeps running.
void InstallSigint() {
  struct sigaction sa {};
  sa.sa_handler = OnSigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: blocking calls return so the loop sees the flag
  sigaction(SIGINT, &sa, nullptr);
}

std::string CurrentUser() {
  if (const char* u = ::getenv("USER"); u && *u) return u;
  if (const char* u = ::getenv("LOGNAME"); u && *u) return u;
  return "root";
}

// The flags that say which head to talk to.
struct TargetFlags {
  std::string endpoint;
  std::string certs;
};

void AddTargetFlags(CLI::App* cmd, TargetFlags& t) {
  cmd->add_option("--endpoint", t.endpoint, "the head's HOST:PORT (direct connection)");
  cmd->add_option("--certs", t.certs, "directory with ca.crt, client.crt, client.key");
}

Result<HeadEndpoint> ResolveHead(const TargetFlags& t) {
  if (t.endpoint.empty()) return InvalidArgument("--endpoint HOST:PORT is required");
  HERD_ASSIGN_OR_RETURN(auto hp, ParseHostPort(t.endpoint, "--endpoint"));
  if (t.certs.empty()) return InvalidArgument("--certs DIR is required with --endpoint");
  return HeadEndpoint{hp.host, hp.port, t.certs};
}

// A cluster by name (through SSH), or a head given directly with --endpoint/--certs.
Result<std::unique_ptr<HeadClient>> ConnectTarget(const std::string& cluster,
                                                  const TargetFlags& t) {
  if (!t.endpoint.empty()) {
    HERD_ASSIGN_OR_RETURN(auto ep, ResolveHead(t));
    return HeadClient::Connect(ep);
  }
  if (cluster.empty()) return InvalidArgument("give a cluster name (see `herd status`)");
  HERD_ASSIGN_OR_RETURN(auto c, sdk::GetCluster(cluster));
  return sdk::ConnectHead(c);
}

int Fail(const Status& s, int code = 1) {
  std::cerr << "herd: " << s.message() << "\n";
  if (s.code() == Code::kNotFound) return code == 1 ? kExitNotFound : code;
  return code;
}

int FailForStatus(const Status& s) {
  if (s.code() == Code::kNotFound) return Fail(s, kExitNotFound);
  if (s.code() == Code::kInvalidArgument) return Fail(s, 2);
  return Fail(s, 1);
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
int FollowJob(HeadClient& client, int64_t job_id, uint64_t offset, bool follow, bool banner,
              int num_nodes) {
  bool started_banner = false;
  HeadClient::StreamCallbacks cb;
  cb.on_data = [](std::string_view bytes) {
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    std::fflush(stdout);
  };
  cb.on_status = [&](const JobInfo& j) {
    if (banner && !started_banner && j.state() >= JOB_STATE_SETTING_UP) {
      started_banner = true;
      std::cerr << "Job started. Streaming logs... (Ctrl-C to exit log streaming; job will not "
                   "be killed)\n";
    }
  };
  cb.interrupted = [] { return g_interrupted.load(); };
  if (banner) std::cerr << "Waiting for task resources on " << num_nodes << " node(s).\n";
  auto last = client.Stream(job_id, offset, follow, cb);
  // Cancelled: the cluster was taken down or stopped while the job ran (HeadClient::Stream); the
  // job ended with it, by the user's decision, as a cancelled one does.
  if (!last.ok() && last.status().code() == Code::kCancelled) {
    return Fail(last.status(), kExitCancelled);
  }
  if (!last.ok()) return FailForStatus(last.status());
  const JobInfo& j = *last;
  if (g_interrupted) {
    std::cerr << "\nDetached from job " << j.job_id()
              << "; it keeps running. Reattach with: herd logs "
              << (g_cluster.empty() ? "..." : g_cluster) << " " << j.job_id() << "\n";
    return kExitNotFinished;
  }
  if (proto::IsTerminal(j.state())) {
    std::cerr << "Job finished (status: " << proto::JobStateName(j.state()) << ").\n";
  } else {
    std::cerr << "Job " << j.job_id() << " is " << proto::JobStateName(j.state()) << ".\n";
  }
  return ExitCodeForJob(j);
}

struct TaskFlags {
  std::vector<std::string> envs, env_files, secrets;
  int num_nodes = 0;
  std::string gpus, cpus, memory, name;
};

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
  cmd->add_option("--memory", f.memory, "memory per node in GB, e.g. 32+");
  cmd->add_option("-n,--name", f.name, "job name");
}

// The positional arguments are a task YAML or a command (SkyPilot's rule).
Result<task::Task> BuildTask(const std::vector<std::string>& args, const TaskFlags& f) {
  if (args.empty()) return InvalidArgument("give a task YAML or a command");
  task::ParseOptions opts;
  opts.env_overrides = f.envs;
  opts.env_files = f.env_files;
  opts.secret_overrides = f.secrets;
  task::Task t;
  const std::string& first = args[0];
  bool yaml = args.size() == 1 && (first.ends_with(".yaml") || first.ends_with(".yml"));
  if (yaml) {
    HERD_ASSIGN_OR_RETURN(t, task::ParseTaskFile(first, opts));
  } else {
    std::string cmd;
    for (const auto& a : args) cmd += (cmd.empty() ? "" : " ") + a;
    HERD_ASSIGN_OR_RETURN(t, task::ParseTaskYaml("{}", "<command>", opts));
    t.run = cmd;
    t.name = "herd-cmd";
  }
  if (f.num_nodes > 0) t.num_nodes = f.num_nodes;
  if (!f.gpus.empty()) HERD_RETURN_IF_ERROR(task::ApplyAcceleratorFlag(f.gpus, t.resources));
  if (!f.cpus.empty()) HERD_RETURN_IF_ERROR(task::ApplyCpusFlag(f.cpus, t.resources));
  if (!f.memory.empty()) HERD_RETURN_IF_ERROR(task::ApplyMemoryFlag(f.memory, t.resources));
  if (!f.name.empty()) HERD_RETURN_IF_ERROR(task::ApplyNameFlag(f.name, t));
  // The file's own spec was measured by the parser; a command or flags change it.
  HERD_RETURN_IF_ERROR(task::CheckSpecSize(t, yaml ? first : "<command>"));
  return t;
}

std::string RandomClusterName() {
  std::srand(static_cast<unsigned>(std::time(nullptr) ^ ::getpid()));
  char buf[16];
  std::snprintf(buf, sizeof buf, "herd-%04x", std::rand() & 0xffff);
  return buf;
}

void PrintUsefulCommands(const std::string& cluster, int64_t job_id, int num_workers) {
  std::string j = job_id > 0 ? std::to_string(job_id) : "JOB_ID";
  std::cerr << "\nCluster " << cluster << " is UP. Useful commands:\n"
            << "  To cancel the job:        herd cancel " << cluster << " " << j << "\n"
            << "  To stream job logs:       herd logs " << cluster << " " << j << "\n"
            << "  To view the job queue:    herd queue " << cluster << "\n"
            << "  To log into the head:     ssh " << cluster << "\n";
  if (num_workers > 0) std::cerr << "  To log into worker 1:     ssh " << cluster << "-worker1\n";
  std::cerr << "  To submit another job:    herd exec " << cluster << " TASK.yaml\n"
            << "  To stop the cluster:      herd stop " << cluster << "\n"
            << "  To tear down the cluster: herd down " << cluster << "\n";
}

int JobOutcome(HeadClient* client, const sdk::LaunchResult& r, bool detach, bool json,
               int num_nodes, bool show_block) {
  if (json) {
    boost::json::object o;
    o["cluster"] = r.cluster.name;
    o["job_id"] = r.job_id;
    const auto* head = controller::HeadNode(r.cluster);
    o["head_ip"] = head ? head->ip : "";
    o["agents_uploaded"] = r.agents_uploaded;
    o["agents_restarted"] = r.agents_restarted;
    std::cout << boost::json::serialize(o) << "\n";
  }
  int workers = static_cast<int>(r.cluster.nodes.size()) - 1;
  if (r.job_id == 0 || detach) {
    if (r.job_id > 0 && !json) std::cerr << "Job submitted, ID: " << r.job_id << "\n";
    if (show_block) PrintUsefulCommands(r.cluster.name, r.job_id, workers);
    return 0;
  }
  std::cerr << "Job submitted, ID: " << r.job_id << "\n";
  int code = FollowJob(*client, r.job_id, 0, true, true, num_nodes);
  if (show_block) PrintUsefulCommands(r.cluster.name, r.job_id, workers);
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

// UP, RECONNECTING, LOST or STOPPED; from `alive` alone for a head that sends no health.
std::string NodeConditionWord(const NodeHealth& h, bool alive) {
  switch (h.condition()) {
    case NODE_CONDITION_UP:
      return "UP";
    case NODE_CONDITION_RECONNECTING:
      return "RECONNECTING";
    case NODE_CONDITION_LOST:
      return "LOST";
    case NODE_CONDITION_STOPPED:
      return "STOPPED";
    default:
      return alive ? "UP" : "LOST";
  }
}

std::string AutostopText(const controller::ClusterRecord& c) {
  if (c.autostop_idle_minutes < 0) return "-";
  return std::to_string(c.autostop_idle_minutes) + "m" + (c.autostop_down ? " (down)" : "");
}

}  // namespace

int RunCli(int argc, char** argv) {
  TraceMark("cli start");
  TuneHeapForStreaming();  // `herd _mux` and a followed job's output: large messages
  CLI::App app{"herd: launch distributed jobs on clusters of machines"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every command");
  app.set_version_flag("--version", HERD_VERSION, "print the version and exit");
  app.fallthrough();  // -q/-v also after the verb: `herd launch ... -q`
  bool quiet = false;
  app.add_flag("-q,--quiet", quiet, "no progress output");

  // herd check
  auto* check = app.add_subcommand("check", "validate a task YAML and print it normalised");
  std::string check_file, check_output;
  TaskFlags check_flags;
  check->add_option("task", check_file, "task YAML")->required();
  check->add_option("--env", check_flags.envs, "K=V or K")->allow_extra_args(false);
  check->add_option("--env-file", check_flags.env_files, "dotenv file")->allow_extra_args(false);
  check->add_option("--secret", check_flags.secrets, "K=V or K")->allow_extra_args(false);
  check->add_option("-o,--output", check_output, "output format")->check(CLI::IsMember({"json"}));

  // herd certs init|issue
  auto* certs = app.add_subcommand("certs", "make a cluster CA and its certificates");
  certs->require_subcommand(1);
  auto* certs_init = certs->add_subcommand("init", "a new CA and a client certificate in DIR");
  std::string certs_dir, certs_cluster, certs_node, certs_out;
  std::vector<std::string> certs_ips;
  certs_init->add_option("dir", certs_dir, "directory")->required();
  certs_init->add_option("--cluster", certs_cluster, "cluster name")->required();
  auto* certs_issue = certs->add_subcommand("issue", "an agent certificate signed by DIR's CA");
  certs_issue->add_option("dir", certs_dir, "directory holding ca.crt and ca.key")->required();
  certs_issue->add_option("--node", certs_node, "node name")->required();
  certs_issue->add_option("--ip", certs_ips, "node address (repeatable)")->allow_extra_args(false);
  certs_issue->add_option("--out", certs_out, "output directory")->required();
  int certs_days = tls::IssueOptions{}.valid_days;
  double certs_starts_in_days = 0;
  certs_issue->add_option("--days", certs_days, "days the certificate is valid")
      ->check(CLI::Range(1, 36500));
  certs_issue
      ->add_option("--starts-in-days", certs_starts_in_days,
                   "days from now when it becomes valid (negative: in the past; default an hour "
                   "ago)")
      ->check(CLI::Range(-36500.0, 36500.0));

  // herd launch
  auto* launch = app.add_subcommand("launch", "provision a cluster (or reuse it) and run a task");
  std::string launch_cluster, launch_infra, launch_output;
  TaskFlags launch_flags;
  std::vector<std::string> launch_args;
  bool launch_detach = false, launch_yes = false, launch_no_setup = false;
  launch->add_option("-c,--cluster", launch_cluster, "cluster name (default: a new name)");
  launch->add_option("--infra", launch_infra, "local (default), ssh/<pool>, aws[/REGION[/ZONE]]");
  AddTaskFlags(launch, launch_flags);
  launch->add_flag("-d,--detach-run", launch_detach, "do not stream the job's logs");
  launch->add_flag("-y,--yes", launch_yes, "do not ask");
  launch->add_flag("--no-setup", launch_no_setup, "skip the task's setup");
  int launch_idle = -1;
  bool launch_down = false;
  launch
      ->add_option("-i,--idle-minutes-to-autostop", launch_idle,
                   "stop the cluster after this many idle minutes")
      ->check(CLI::NonNegativeNumber);
  launch->add_flag("--down", launch_down, "with -i: tear the cluster down instead of stopping it");
  launch->add_option("-o,--output", launch_output, "output format")->check(CLI::IsMember({"json"}));
  launch->add_option("args", launch_args, "TASK.yaml, or a command after --");

  // herd exec
  auto* exec = app.add_subcommand("exec", "run a task on an UP cluster (no provisioning or setup)");
  TargetFlags exec_target;
  TaskFlags exec_flags;
  std::vector<std::string> exec_args;
  bool exec_detach = false;
  std::string exec_output;
  AddTargetFlags(exec, exec_target);
  AddTaskFlags(exec, exec_flags);
  exec->add_flag("-d,--detach-run", exec_detach, "submit and return without streaming logs");
  exec->add_option("-o,--output", exec_output, "output format")->check(CLI::IsMember({"json"}));
  exec->add_option("args", exec_args, "CLUSTER, then TASK.yaml or a command after --");

  // herd status
  auto* status = app.add_subcommand("status", "list clusters");
  std::vector<std::string> status_names;
  std::string status_output;
  status->add_option("clusters", status_names, "only these clusters");
  status->add_option("-o,--output", status_output, "output format")->check(CLI::IsMember({"json"}));

  // herd queue
  auto* queue = app.add_subcommand("queue", "list the jobs of a cluster");
  TargetFlags queue_target;
  std::string queue_cluster;
  bool queue_skip = false;
  std::string queue_output;
  AddTargetFlags(queue, queue_target);
  queue->add_option("cluster", queue_cluster, "cluster name");
  queue->add_flag("-s,--skip-finished", queue_skip, "only jobs that have not finished");
  queue->add_option("-o,--output", queue_output, "output format")->check(CLI::IsMember({"json"}));

  // herd logs
  auto* logs = app.add_subcommand("logs", "stream a job's logs (the latest job by default)");
  TargetFlags logs_target;
  std::vector<std::string> logs_args;
  uint64_t logs_offset = 0;
  bool logs_no_follow = false, logs_status = false;
  AddTargetFlags(logs, logs_target);
  logs->add_option("args", logs_args, "CLUSTER [JOB]");
  logs->add_flag("--no-follow", logs_no_follow, "print what is there and exit");
  logs->add_flag("--status", logs_status, "print only the job's status; exit code tells it");
  logs->add_option("--offset", logs_offset, "start at this byte of the merged log")
      ->check([](const std::string& value) -> std::string {
        // CLI11 would read "-5" into the unsigned offset as a huge number.
        if (value.find_first_not_of("0123456789") == std::string::npos && !value.empty()) return "";
        return "expected a byte offset (0 or more), got '" + value + "'";
      });

  // herd cancel
  auto* cancel = app.add_subcommand("cancel", "cancel jobs");
  TargetFlags cancel_target;
  std::vector<std::string> cancel_args;
  bool cancel_all = false, cancel_yes = false;
  AddTargetFlags(cancel, cancel_target);
  cancel->add_option("args", cancel_args, "CLUSTER JOB...");
  cancel->add_flag("-a,--all", cancel_all, "every unfinished job");
  cancel->add_flag("-y,--yes", cancel_yes, "do not ask");

  // herd stop | start | down
  std::string life_cluster;
  bool life_yes = false;
  auto* stop = app.add_subcommand("stop", "stop a cluster's machines (they keep their files)");
  auto* start = app.add_subcommand("start", "start a stopped cluster again");
  auto* down = app.add_subcommand("down", "tear a cluster down: machines, agents, files");
  for (auto* cmd : {stop, start, down}) {
    cmd->add_option("cluster", life_cluster, "cluster name")->required();
    cmd->add_flag("-y,--yes", life_yes, "do not ask");
  }

  // herd autostop
  auto* autostop = app.add_subcommand("autostop", "stop or tear down a cluster when it is idle");
  std::string autostop_cluster;
  int autostop_idle = -1;
  bool autostop_down = false, autostop_cancel = false;
  autostop->add_option("cluster", autostop_cluster, "cluster name")->required();
  autostop->add_option("-i,--idle-minutes", autostop_idle, "idle minutes before stopping")
      ->check(CLI::NonNegativeNumber);
  autostop->add_flag("--down", autostop_down, "tear down instead of stopping");
  autostop->add_flag("--cancel", autostop_cancel, "turn autostop off");

  // herd jobs launch|queue|logs|cancel (managed jobs) and the hidden _controller
  auto* jobs_cmd =
      app.add_subcommand("jobs", "managed jobs: relaunched on new nodes after node loss");
  jobs_cmd->require_subcommand(1);
  auto* jobs_launch = jobs_cmd->add_subcommand("launch", "start a managed job");
  std::string jobs_infra;
  TaskFlags jobs_flags;
  std::vector<std::string> jobs_launch_args;
  bool jobs_detach = false, jobs_yes = false;
  jobs_launch->add_option("--infra", jobs_infra,
                          "local (default), ssh/<pool>, aws[/REGION[/ZONE]]");
  AddTaskFlags(jobs_launch, jobs_flags);
  jobs_launch->add_flag("-d,--detach-run", jobs_detach, "do not stream the job's logs");
  jobs_launch->add_flag("-y,--yes", jobs_yes, "do not ask");
  jobs_launch->add_option("args", jobs_launch_args, "TASK.yaml, or a command after --");
  auto* jobs_queue = jobs_cmd->add_subcommand("queue", "list managed jobs");
  std::string jobs_queue_output;
  bool jobs_queue_skip = false;
  jobs_queue->add_flag("-s,--skip-finished", jobs_queue_skip, "only jobs that have not ended");
  jobs_queue->add_option("-o,--output", jobs_queue_output, "output format")
      ->check(CLI::IsMember({"json"}));
  auto* jobs_logs = jobs_cmd->add_subcommand("logs", "stream a managed job's logs, every attempt");
  std::vector<std::string> jobs_logs_args;
  bool jobs_logs_no_follow = false;
  jobs_logs->add_option("job", jobs_logs_args, "managed job id (default: the latest)");
  jobs_logs->add_flag("--no-follow", jobs_logs_no_follow, "print what is there and exit");
  auto* jobs_cancel = jobs_cmd->add_subcommand("cancel", "cancel managed jobs");
  std::vector<std::string> jobs_cancel_args;
  bool jobs_cancel_all = false, jobs_cancel_yes = false;
  jobs_cancel->add_option("jobs", jobs_cancel_args, "managed job ids");
  jobs_cancel->add_flag("-a,--all", jobs_cancel_all, "every managed job not yet ended");
  jobs_cancel->add_flag("-y,--yes", jobs_cancel_yes, "do not ask");
  auto* jobs_controller = jobs_cmd->add_subcommand("_controller", "");
  jobs_controller->group("");  // internal: the per-job controller process
  int64_t jobs_controller_id = 0;
  jobs_controller->add_option("id", jobs_controller_id, "managed job id")->required();

  // herd nodes
  auto* nodes = app.add_subcommand("nodes", "list the nodes registered with a cluster's head");
  TargetFlags nodes_target;
  std::string nodes_cluster, nodes_output;
  AddTargetFlags(nodes, nodes_target);
  nodes->add_option("cluster", nodes_cluster, "cluster name");
  nodes->add_option("-o,--output", nodes_output, "output format")->check(CLI::IsMember({"json"}));

  // herd _mux (hidden): the per-cluster mux process that commands start (mux.hpp)
  auto* mux_cmd = app.add_subcommand("_mux", "");
  mux_cmd->group("");
  std::string mux_socket, mux_head, mux_certs;
  mux_cmd->add_option("--socket", mux_socket, "mux.sock path")->required();
  mux_cmd->add_option("--head", mux_head, "host:port of the head")->required();
  mux_cmd->add_option("--certs", mux_certs, "client certificate directory")->required();

  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "log what herd does (to stderr)");
  std::vector<std::string> command_after_dashes;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") {
      command_after_dashes.assign(argv + i + 1, argv + argc);
      argc = i;
      break;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  TraceMark("arguments parsed");
  log::SetLevel(verbose ? log::Level::kDebug : log::Level::kWarn);
  // Everything after `--` is the command to run (`herd exec demo --num-nodes 2 -- nvidia-smi`).
  for (auto [cmd, args] :
       {std::pair{launch, &launch_args}, {exec, &exec_args}, {jobs_launch, &jobs_launch_args}}) {
    if (*cmd) args->insert(args->end(), command_after_dashes.begin(), command_after_dashes.end());
  }
  Progress progress(quiet);

  if (*check) {
    task::ParseOptions opts;
    opts.env_overrides = check_flags.envs;
    opts.env_files = check_flags.env_files;
    opts.secret_overrides = check_flags.secrets;
    return task::RunCheck(check_file, opts, check_output == "json", std::cout, std::cerr);
  }
  if (*certs_init) {
    if (auto s = tls::InitClusterCerts(certs_dir, certs_cluster); !s.ok()) return Fail(s);
    std::cout << "CA and client certificate written to " << certs_dir << "\n";
    return 0;
  }
  if (*certs_issue) {
    long not_before = certs_starts_in_days == 0 ? tls::IssueOptions{}.not_before_seconds
                                                : static_cast<long>(certs_starts_in_days * 86400);
    if (auto s = tls::IssueAgentCerts(certs_dir, certs_node, certs_ips, certs_out, certs_days,
                                      not_before);
        !s.ok()) {
      return Fail(s);
    }
    std::cout << "agent certificate for " << certs_node << " written to " << certs_out << "\n";
    return 0;
  }
  if (*launch) {
    auto t = launch_args.empty() ? task::ParseTaskYaml("{}", "<none>", {})
                                 : BuildTask(launch_args, launch_flags);
    if (!t.ok()) return Fail(t.status(), 2);
    if (launch_args.empty() && launch_flags.num_nodes > 0) t->num_nodes = launch_flags.num_nodes;
    sdk::LaunchOptions o;
    o.cluster = launch_cluster.empty() ? RandomClusterName() : launch_cluster;
    g_cluster = o.cluster;
    o.infra = launch_infra;
    o.num_nodes = launch_flags.num_nodes;
    o.no_setup = launch_no_setup;
    o.progress = progress.Callback();
    InstallSigint();
    auto r = sdk::Launch(*t, o);
    progress.Done();
    if (!r.ok()) return FailForStatus(r.status());
    if (launch_idle >= 0) {
      if (auto s = sdk::SetAutostop(o.cluster, launch_idle, launch_down); !s.ok()) {
        return FailForStatus(s);
      }
    }
    return JobOutcome(r->head.get(), *r, launch_detach, launch_output == "json", t->num_nodes,
                      !quiet && launch_output != "json");
  }
  if (*exec) {
    auto [cluster, rest] = SplitCluster(exec_args, exec_target);
    g_cluster = cluster;
    auto t = BuildTask(rest, exec_flags);
    if (!t.ok()) return Fail(t.status(), 2);
    TraceMark("task built");
    InstallSigint();
    if (exec_target.endpoint.empty()) {
      if (cluster.empty()) return Fail(InvalidArgument("give a cluster name"), 2);
      sdk::ExecOptions o;
      o.progress = progress.Callback();
      auto r = sdk::Exec(cluster, *t, o);
      progress.Done();
      if (!r.ok()) return FailForStatus(r.status());
      return JobOutcome(r->head.get(), *r, exec_detach, exec_output == "json", t->num_nodes, false);
    }
    auto client = ConnectTarget("", exec_target);
    if (!client.ok()) return FailForStatus(client.status());
    auto id = (*client)->Submit(task::ToSpec(*t), CurrentUser());
    if (!id.ok()) return FailForStatus(id.status());
    std::cerr << "Job submitted, ID: " << *id << "\n";
    if (exec_detach) return 0;
    return FollowJob(**client, *id, 0, true, true, t->num_nodes);
  }
  if (*status) {
    auto all = sdk::Status();
    if (!all.ok()) return FailForStatus(all.status());
    std::vector<controller::ClusterRecord> shown;
    for (const auto& c : *all) {
      if (status_names.empty() ||
          std::find(status_names.begin(), status_names.end(), c.name) != status_names.end()) {
        shown.push_back(c);
      }
    }
    // The record says UP once every agent registered; whether they still are, only the head
    // knows: an UP cluster whose head is without a node (or does not answer) shows as INIT.
    const std::map<std::string, sdk::ClusterHealth> health = sdk::Health(shown);
    auto shown_status = [&](const controller::ClusterRecord& c) -> std::string {
      auto h = health.find(c.name);
      if (h == health.end() || (h->second.answered && h->second.down.empty())) {
        return std::string(controller::Name(c.status));
      }
      return std::string(controller::Name(controller::ClusterStatus::kInit));
    };
    if (status_output == "json") {
      boost::json::array arr;
      for (const auto& c : shown) {
        boost::json::object o;
        o["name"] = c.name;
        o["infra"] = c.infra;
        o["status"] = shown_status(c);
        // UP clusters only: the nodes the head is without, and whether it answered at all.
        boost::json::array lost;
        if (auto h = health.find(c.name); h != health.end()) {
          for (const auto& [node, why] : h->second.down) lost.push_back(boost::json::string(node));
          o["head_answered"] = h->second.answered;
          if (!h->second.answered) o["head_error"] = h->second.error;
        }
        o["lost_nodes"] = std::move(lost);
        o["resources"] = c.resources;
        o["autostop"] = c.autostop_idle_minutes;
        o["launched_at_ms"] = c.launched_unix_ms;
        boost::json::array ns;
        for (const auto& n : c.nodes) {
          boost::json::object no;
          no["name"] = n.name;
          no["ip"] = n.ip;
          no["is_head"] = n.is_head;
          ns.push_back(std::move(no));
        }
        o["nodes"] = std::move(ns);
        arr.push_back(std::move(o));
      }
      std::cout << boost::json::serialize(arr) << "\n";
      return 0;
    }
    if (shown.empty()) {
      std::cout << "No existing clusters.\n";
      return 0;
    }
    // NOT UP: why an UP cluster shows as INIT; the column is there only when one does.
    std::vector<std::string> headers = {"NAME",   "INFRA",    "RESOURCES",
                                        "STATUS", "AUTOSTOP", "LAUNCHED"};
    std::vector<std::string> hints;
    std::map<std::string, std::string> not_up;
    for (const auto& [name, h] : health) {
      if (!h.answered) {
        not_up[name] = "head not answering";
        hints.push_back("Cluster " + name + ": " + h.error + ".");
        continue;
      }
      for (const auto& [node, why] : h.down) {
        std::string shown_name = node.starts_with(name + "-") ? node.substr(name.size() + 1) : node;
        not_up[name] += (not_up[name].empty() ? "" : ", ") + shown_name + " " + why;
      }
      if (!h.down.empty()) {
        hints.push_back("Cluster " + name + ": " + std::to_string(h.down.size()) + " node(s) " +
                        "without a running agent; start them again with: herd start " + name);
      }
    }
    if (!not_up.empty()) headers.push_back("NOT UP");
    Table table(headers);
    for (const auto& c : shown) {
      std::vector<std::string> row = {c.name,          c.infra,         c.resources,
                                      shown_status(c), AutostopText(c), Ago(c.launched_unix_ms)};
      if (!not_up.empty()) row.push_back(not_up.count(c.name) ? not_up[c.name] : "-");
      table.AddRow(row);
    }
    std::cout << table.Render();
    for (const auto& line : hints) std::cout << line << "\n";
    return 0;
  }
  if (*queue) {
    g_cluster = queue_cluster;
    auto client = ConnectTarget(queue_cluster, queue_target);
    if (!client.ok()) return FailForStatus(client.status());
    int64_t left_out = 0;
    auto jobs = (*client)->Queue(queue_skip, &left_out);
    if (!jobs.ok()) return FailForStatus(jobs.status());
    // The head lists the newest jobs that fit one reply; the line says how many it left out.
    const std::string left_out_line =
        left_out == 0 ? ""
                      : std::to_string(left_out) + " older job" + (left_out == 1 ? "" : "s") +
                            " not shown: the head lists the newest " +
                            std::to_string(jobs->size()) + " (as many as fit one reply, at most " +
                            std::to_string(limits::kMaxJobsListed) + ")\n";
    if (queue_output == "json") {
      boost::json::array arr;
      for (const auto& j : *jobs) arr.push_back(JobJson(j));
      std::cout << boost::json::serialize(arr) << "\n";
      std::cerr << left_out_line;
      return 0;
    }
    if (!queue_cluster.empty()) std::cout << "Job queue of cluster " << queue_cluster << "\n";
    Table table({"ID", "NAME", "USER", "SUBMITTED", "STARTED", "DURATION", "RESOURCES", "STATUS",
                 "LOG", "ATTEMPT"});
    for (const auto& j : *jobs) {
      table.AddRow({std::to_string(j.job_id()), j.name().empty() ? "-" : j.name(), j.user(),
                    Ago(j.submitted_unix_ms()), Ago(j.started_unix_ms()), Duration(j),
                    j.resources(), std::string(proto::JobStateName(j.state())), j.log_path(),
                    std::to_string(j.attempt())});
    }
    std::cout << table.Render() << left_out_line;
    return 0;
  }
  if (*logs) {
    auto [cluster, rest] = SplitCluster(logs_args, logs_target);
    g_cluster = cluster;
    if (rest.size() > 1) return Fail(InvalidArgument("logs takes one job id"), 2);
    auto ids = ParseJobIds(rest);
    if (!ids.ok()) return Fail(ids.status(), 2);
    int64_t job = ids->empty() ? 0 : (*ids)[0];
    auto client = ConnectTarget(cluster, logs_target);
    if (!client.ok()) return FailForStatus(client.status());
    InstallSigint();
    if (logs_status) {
      HeadClient::StreamCallbacks none;
      // Ask for the end of the log only: the status comes with end_of_stream.
      auto last = (*client)->Stream(job, UINT64_MAX, false, none);
      if (!last.ok()) return FailForStatus(last.status());
      std::cout << "Job " << last->job_id() << ": " << proto::JobStateName(last->state()) << "\n";
      return ExitCodeForJob(*last);
    }
    return FollowJob(**client, job, logs_offset, !logs_no_follow, false, 0);
  }
  if (*cancel) {
    auto [cluster, rest] = SplitCluster(cancel_args, cancel_target);
    g_cluster = cluster;
    auto ids = ParseJobIds(rest);
    if (!ids.ok()) return Fail(ids.status(), 2);
    if (ids->empty() && !cancel_all) return Fail(InvalidArgument("give job ids or -a/--all"), 2);
    auto client = ConnectTarget(cluster, cancel_target);
    if (!client.ok()) return FailForStatus(client.status());
    auto done = (*client)->Cancel(*ids, cancel_all);
    if (!done.ok()) return FailForStatus(done.status());
    if (done->empty()) {
      std::cout << "No job to cancel.\n";
    } else {
      std::cout << "Cancelling job(s):";
      for (auto id : *done) std::cout << " " << id;
      std::cout << "\n";
    }
    return 0;
  }
  if (*stop) {
    auto s = sdk::Stop(life_cluster, progress.Callback());
    progress.Done();
    if (!s.ok()) return FailForStatus(s);
    std::cerr << "Cluster " << life_cluster << " stopped.\n";
    return 0;
  }
  if (*start) {
    auto r = sdk::Start(life_cluster, progress.Callback());
    progress.Done();
    if (!r.ok()) return FailForStatus(r.status());
    std::cerr << "Cluster " << life_cluster << " is UP.\n";
    return 0;
  }
  if (*down) {
    auto s = sdk::Down(life_cluster, progress.Callback());
    progress.Done();
    if (!s.ok()) return FailForStatus(s);
    std::cerr << "Cluster " << life_cluster << " terminated.\n";
    return 0;
  }
  if (*autostop) {
    if (!autostop_cancel && autostop_idle < 0) {
      return Fail(InvalidArgument("autostop: give -i MINUTES or --cancel"), 2);
    }
    int minutes = autostop_cancel ? -1 : autostop_idle;
    auto s = sdk::SetAutostop(autostop_cluster, minutes, autostop_down);
    if (!s.ok()) return FailForStatus(s);
    if (minutes < 0) {
      std::cerr << "Autostop of cluster " << autostop_cluster << " cancelled.\n";
    } else {
      std::cerr << "Cluster " << autostop_cluster << " will be "
                << (autostop_down ? "torn down" : "stopped") << " after " << minutes
                << " idle minute(s).\n";
    }
    return 0;
  }
  if (*jobs_controller) return RunManagedController(jobs_controller_id);
  if (*mux_cmd) {
    if (!verbose) log::SetLevel(log::Level::kInfo);  // mux.log: why it exited
    return RunMuxProcess(mux_socket, mux_head, mux_certs);
  }
  if (*jobs_launch) {
    auto t = BuildTask(jobs_launch_args, jobs_flags);
    if (!t.ok()) return Fail(t.status(), 2);
    ManagedLaunchOptions o;
    o.infra = jobs_infra;
    o.user = CurrentUser();
    auto id = LaunchManagedJob(*t, o);
    if (!id.ok()) return FailForStatus(id.status());
    std::cout << "Managed job ID: " << *id << "\n";
    std::cout.flush();
    if (jobs_detach) {
      std::cerr << "To stream its logs:  herd jobs logs " << *id << "\n"
                << "To see its status:   herd jobs queue\n"
                << "To cancel it:        herd jobs cancel " << *id << "\n";
      return 0;
    }
    InstallSigint();
    int code =
        FollowManagedLogs(*id, true, std::cout, std::cerr, [] { return g_interrupted.load(); });
    if (g_interrupted) {
      std::cerr << "Detached from managed job " << *id
                << "; it keeps running. Reattach with: herd jobs logs " << *id << "\n";
    }
    return code;
  }
  if (*jobs_queue) {
    auto list = ListManagedJobs();
    if (!list.ok()) return FailForStatus(list.status());
    std::vector<jobs::ManagedJob> shown;
    for (auto& j : *list) {
      if (!jobs_queue_skip || !jobs::IsTerminal(j.state)) shown.push_back(std::move(j));
    }
    if (jobs_queue_output == "json") {
      boost::json::array arr;
      for (const auto& j : shown) arr.push_back(ManagedJobJson(j));
      std::cout << boost::json::serialize(arr) << "\n";
      return 0;
    }
    if (shown.empty()) {
      std::cout << "No managed jobs.\n";
      return 0;
    }
    Table table(
        {"ID", "NAME", "RESOURCES", "SUBMITTED", "DURATION", "#RECOVERIES", "STATUS", "CLUSTER"});
    const int64_t now = static_cast<int64_t>(std::time(nullptr)) * 1000;
    for (const auto& j : shown) {
      table.AddRow({std::to_string(j.id), j.name.empty() ? "-" : j.name, j.resources,
                    Ago(j.submitted_unix_ms), ManagedDuration(j, now), std::to_string(j.recoveries),
                    std::string(jobs::StateName(j.state)), j.cluster.empty() ? "-" : j.cluster});
    }
    std::cout << table.Render();
    return 0;
  }
  if (*jobs_logs) {
    if (jobs_logs_args.size() > 1) return Fail(InvalidArgument("logs takes one job id"), 2);
    auto ids = ParseJobIds(jobs_logs_args);
    if (!ids.ok()) return Fail(ids.status(), 2);
    int64_t id = ids->empty() ? 0 : (*ids)[0];
    if (id == 0) {
      auto list = ListManagedJobs();
      if (!list.ok()) return FailForStatus(list.status());
      if (list->empty()) return Fail(NotFound("no managed jobs (see `herd jobs launch`)"));
      id = list->front().id;
    }
    InstallSigint();
    return FollowManagedLogs(id, !jobs_logs_no_follow, std::cout, std::cerr,
                             [] { return g_interrupted.load(); });
  }
  if (*jobs_cancel) {
    auto ids = ParseJobIds(jobs_cancel_args);
    if (!ids.ok()) return Fail(ids.status(), 2);
    if (ids->empty() && !jobs_cancel_all) {
      return Fail(InvalidArgument("give managed job ids or -a/--all"), 2);
    }
    return CancelManagedJobs(*ids, jobs_cancel_all, std::cout, std::cerr);
  }
  if (*nodes) {
    auto client = ConnectTarget(nodes_cluster, nodes_target);
    if (!client.ok()) return FailForStatus(client.status());
    auto reply = (*client)->Nodes();
    if (!reply.ok()) return FailForStatus(reply.status());
    // What starts an agent that is not running (bootstrap starts it again; jobs on the node keep
    // running where they still do).
    const std::string restart =
        "herd start " + (nodes_cluster.empty() ? std::string("CLUSTER") : nodes_cluster);
    if (nodes_output == "json") {
      boost::json::array arr;
      for (int i = 0; i < reply->nodes_size(); ++i) {
        const auto& n = reply->nodes(i);
        boost::json::object o;
        o["node_id"] = n.node_id();
        o["address"] = n.addresses_size() ? n.addresses(0) : "";
        o["hostname"] = n.hostname();
        o["cpus"] = n.cpus();
        o["gpus"] = n.gpu_count();
        o["gpu_source"] = n.gpu_source();
        o["is_head"] = n.is_head();
        o["alive"] = reply->alive(i);
        const NodeHealth h = i < reply->health_size() ? reply->health(i) : NodeHealth{};
        o["status"] = NodeConditionWord(h, reply->alive(i));
        o["silent_ms"] = h.silent_ms();
        if (h.condition() == NODE_CONDITION_STOPPED) {
          o["stopped_reason"] = h.stopped_reason();
          o["stopped_at_ms"] = h.stopped_unix_ms();
        }
        if (!reply->alive(i)) o["restart_command"] = restart;
        arr.push_back(std::move(o));
      }
      std::cout << boost::json::serialize(arr) << "\n";
      return 0;
    }
    Table table({"NODE", "ADDRESS", "HOSTNAME", "CPUS", "GPUS", "STATUS"});
    std::vector<std::string> notes;
    for (int i = 0; i < reply->nodes_size(); ++i) {
      const auto& n = reply->nodes(i);
      std::string gpus = std::to_string(n.gpu_count());
      if (n.gpu_names_size()) gpus += " (" + n.gpu_names(0) + ")";
      const NodeHealth h = i < reply->health_size() ? reply->health(i) : NodeHealth{};
      table.AddRow({n.node_id() + (n.is_head() ? " (head)" : ""),
                    n.addresses_size() ? n.addresses(0) : "-", n.hostname(),
                    std::to_string(n.cpus()), gpus, NodeConditionWord(h, reply->alive(i))});
      const std::string silent = std::to_string(h.silent_ms() / 1000) + " s";
      if (h.condition() == NODE_CONDITION_STOPPED) {
        notes.push_back(n.node_id() + " is stopped: " + h.stopped_reason() + " " +
                        Ago(h.stopped_unix_ms()) +
                        "; nothing restarts it by itself. Start its agent again with: " + restart);
      } else if (h.condition() == NODE_CONDITION_LOST) {
        notes.push_back(n.node_id() + " is lost: no message from its agent for " + silent +
                        ". Start its agent again with: " + restart);
      }
    }
    std::cout << table.Render();
    for (const auto& line : notes) std::cout << line << "\n";
    return 0;
  }
  return 2;
}

}  // namespace herd::controller
