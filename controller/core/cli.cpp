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

#include "controller/core/head_client.hpp"
#include "controller/core/table.hpp"
#include "shared/common/host_port.hpp"
#include "shared/task/task.hpp"
#include "shared/tls/certs.hpp"

namespace herd::controller {

using namespace herd::v1;

namespace {

std::atomic<bool> g_interrupted{false};

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

std::string_view StateName(JobState s) {
  switch (s) {
    case JOB_STATE_INIT: return "INIT";
    case JOB_STATE_PENDING: return "PENDING";
    case JOB_STATE_SETTING_UP: return "SETTING_UP";
    case JOB_STATE_RUNNING: return "RUNNING";
    case JOB_STATE_SUCCEEDED: return "SUCCEEDED";
    case JOB_STATE_FAILED: return "FAILED";
    case JOB_STATE_FAILED_SETUP: return "FAILED_SETUP";
    case JOB_STATE_FAILED_DRIVER: return "FAILED_DRIVER";
    case JOB_STATE_CANCELLED: return "CANCELLED";
    default: return "UNKNOWN";
  }
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

Result<std::unique_ptr<HeadClient>> ConnectHead(const TargetFlags& t) {
  HERD_ASSIGN_OR_RETURN(auto ep, ResolveHead(t));
  return HeadClient::Connect(ep);
}

int Fail(const Status& s, int code = 1) {
  std::cerr << "herd: " << s.message() << "\n";
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
  o["status"] = StateName(j.state());
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
  if (!last.ok()) return FailForStatus(last.status());
  const JobInfo& j = *last;
  if (g_interrupted) {
    std::cerr << "\nDetached from job " << j.job_id()
              << "; it keeps running. Reattach with: herd logs ... " << j.job_id() << "\n";
    return kExitNotFinished;
  }
  if (IsTerminalState(j.state())) {
    std::cerr << "Job finished (status: " << StateName(j.state()) << ").\n";
  } else {
    std::cerr << "Job " << j.job_id() << " is " << StateName(j.state()) << ".\n";
  }
  return ExitCodeForJob(j);
}

struct TaskFlags {
  std::vector<std::string> envs, env_files, secrets;
  int num_nodes = 0;
  std::string gpus, cpus, memory, name;
};

void AddTaskFlags(CLI::App* cmd, TaskFlags& f) {
  cmd->add_option("--env", f.envs, "K=V, or K to take the value from the local environment");
  cmd->add_option("--env-file", f.env_files, "a dotenv file of K=V lines");
  cmd->add_option("--secret", f.secrets, "K=V, or K: like --env but never shown");
  cmd->add_option("--num-nodes", f.num_nodes, "number of nodes to run on")
      ->check(CLI::PositiveNumber);
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
  if (!f.name.empty()) t.name = f.name;
  return t;
}

}  // namespace

bool IsTerminalState(JobState s) {
  return s == JOB_STATE_SUCCEEDED || s == JOB_STATE_FAILED || s == JOB_STATE_FAILED_SETUP ||
         s == JOB_STATE_FAILED_DRIVER || s == JOB_STATE_CANCELLED;
}

int RunCli(int argc, char** argv) {
  CLI::App app{"herd: launch distributed jobs on clusters of machines"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every command");

  // herd check
  auto* check = app.add_subcommand("check", "validate a task YAML and print it normalised");
  std::string check_file, check_output;
  TaskFlags check_flags;
  check->add_option("task", check_file, "task YAML")->required();
  check->add_option("--env", check_flags.envs, "K=V or K");
  check->add_option("--env-file", check_flags.env_files, "dotenv file");
  check->add_option("--secret", check_flags.secrets, "K=V or K");
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
  certs_issue->add_option("--ip", certs_ips, "node address (repeatable)");
  certs_issue->add_option("--out", certs_out, "output directory")->required();

  // herd exec
  auto* exec = app.add_subcommand("exec", "run a task (YAML or command) on a cluster");
  TargetFlags exec_target;
  TaskFlags exec_flags;
  std::vector<std::string> exec_args;
  bool exec_detach = false;
  AddTargetFlags(exec, exec_target);
  AddTaskFlags(exec, exec_flags);
  exec->add_flag("-d,--detach-run", exec_detach, "submit and return without streaming logs");
  exec->add_option("args", exec_args, "TASK.yaml, or a command after --")->required();

  // herd queue
  auto* queue = app.add_subcommand("queue", "list the jobs of a cluster");
  TargetFlags queue_target;
  bool queue_skip = false;
  std::string queue_output;
  AddTargetFlags(queue, queue_target);
  queue->add_flag("-s,--skip-finished", queue_skip, "only jobs that have not finished");
  queue->add_option("-o,--output", queue_output, "output format")->check(CLI::IsMember({"json"}));

  // herd logs
  auto* logs = app.add_subcommand("logs", "stream a job's logs (the latest job by default)");
  TargetFlags logs_target;
  int64_t logs_job = 0;
  uint64_t logs_offset = 0;
  bool logs_no_follow = false, logs_status = false;
  AddTargetFlags(logs, logs_target);
  logs->add_option("job", logs_job, "job id");
  logs->add_flag("--no-follow", logs_no_follow, "print what is there and exit");
  logs->add_flag("--status", logs_status, "print only the job's status; exit code tells it");
  logs->add_option("--offset", logs_offset, "start at this byte of the merged log");

  // herd cancel
  auto* cancel = app.add_subcommand("cancel", "cancel jobs");
  TargetFlags cancel_target;
  std::vector<int64_t> cancel_jobs;
  bool cancel_all = false, cancel_yes = false;
  AddTargetFlags(cancel, cancel_target);
  cancel->add_option("jobs", cancel_jobs, "job ids");
  cancel->add_flag("-a,--all", cancel_all, "every unfinished job");
  cancel->add_flag("-y,--yes", cancel_yes, "do not ask");

  // herd nodes
  auto* nodes = app.add_subcommand("nodes", "list the nodes registered with a head");
  TargetFlags nodes_target;
  std::string nodes_output;
  AddTargetFlags(nodes, nodes_target);
  nodes->add_option("-o,--output", nodes_output, "output format")->check(CLI::IsMember({"json"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

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
    if (auto s = tls::IssueAgentCerts(certs_dir, certs_node, certs_ips, certs_out); !s.ok()) {
      return Fail(s);
    }
    std::cout << "agent certificate for " << certs_node << " written to " << certs_out << "\n";
    return 0;
  }
  if (*exec) {
    auto t = BuildTask(exec_args, exec_flags);
    if (!t.ok()) return Fail(t.status(), 2);
    auto client = ConnectHead(exec_target);
    if (!client.ok()) return FailForStatus(client.status());
    InstallSigint();
    auto id = (*client)->Submit(task::ToSpec(*t), CurrentUser());
    if (!id.ok()) return FailForStatus(id.status());
    std::cerr << "Job submitted, ID: " << *id << "\n";
    if (exec_detach) return 0;
    return FollowJob(**client, *id, 0, true, true, t->num_nodes);
  }
  if (*queue) {
    auto client = ConnectHead(queue_target);
    if (!client.ok()) return FailForStatus(client.status());
    auto jobs = (*client)->Queue(queue_skip);
    if (!jobs.ok()) return FailForStatus(jobs.status());
    if (queue_output == "json") {
      boost::json::array arr;
      for (const auto& j : *jobs) arr.push_back(JobJson(j));
      std::cout << boost::json::serialize(arr) << "\n";
      return 0;
    }
    Table table({"ID", "NAME", "USER", "SUBMITTED", "STARTED", "DURATION", "RESOURCES", "STATUS",
                 "LOG"});
    for (const auto& j : *jobs) {
      table.AddRow({std::to_string(j.job_id()), j.name().empty() ? "-" : j.name(), j.user(),
                    Ago(j.submitted_unix_ms()), Ago(j.started_unix_ms()), Duration(j),
                    j.resources(), std::string(StateName(j.state())), j.log_path()});
    }
    std::cout << table.Render();
    return 0;
  }
  if (*logs) {
    auto client = ConnectHead(logs_target);
    if (!client.ok()) return FailForStatus(client.status());
    InstallSigint();
    if (logs_status) {
      HeadClient::StreamCallbacks none;
      // Ask for the end of the log only: the status comes with end_of_stream.
      auto last = (*client)->Stream(logs_job, UINT64_MAX, false, none);
      if (!last.ok()) return FailForStatus(last.status());
      std::cout << "Job " << last->job_id() << ": " << StateName(last->state()) << "\n";
      return ExitCodeForJob(*last);
    }
    return FollowJob(**client, logs_job, logs_offset, !logs_no_follow, false, 0);
  }
  if (*cancel) {
    if (cancel_jobs.empty() && !cancel_all) {
      return Fail(InvalidArgument("give job ids or -a/--all"), 2);
    }
    auto client = ConnectHead(cancel_target);
    if (!client.ok()) return FailForStatus(client.status());
    auto done = (*client)->Cancel(cancel_jobs, cancel_all);
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
  if (*nodes) {
    auto client = ConnectHead(nodes_target);
    if (!client.ok()) return FailForStatus(client.status());
    auto reply = (*client)->Nodes();
    if (!reply.ok()) return FailForStatus(reply.status());
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
        arr.push_back(std::move(o));
      }
      std::cout << boost::json::serialize(arr) << "\n";
      return 0;
    }
    Table table({"NODE", "ADDRESS", "HOSTNAME", "CPUS", "GPUS", "STATUS"});
    for (int i = 0; i < reply->nodes_size(); ++i) {
      const auto& n = reply->nodes(i);
      std::string gpus = std::to_string(n.gpu_count());
      if (n.gpu_names_size()) gpus += " (" + n.gpu_names(0) + ")";
      table.AddRow({n.node_id() + (n.is_head() ? " (head)" : ""),
                    n.addresses_size() ? n.addresses(0) : "-", n.hostname(),
                    std::to_string(n.cpus()), gpus, reply->alive(i) ? "UP" : "LOST"});
    }
    std::cout << table.Render();
    return 0;
  }
  return 2;
}

}  // namespace herd::controller
