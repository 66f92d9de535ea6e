#include "controller/provider/slurm_provider.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include "controller/ssh/ssh_command.hpp"
#include "controller/ssh/subprocess.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"

namespace herd::controller {

namespace fs = std::filesystem;

namespace {

constexpr char kRecordFile[] = "slurm.state";

Status EnsureDir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError("cannot create " + dir + ": " + ec.message());
  return Status::Ok();
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

std::string TrimWs(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// Slurm's messages as one line: "sbatch: error: " prefixes dropped, lines joined with "; ".
std::string OneLine(const std::string& text) {
  std::string out;
  for (std::string line : Split(text, '\n')) {
    line = TrimWs(line);
    for (const char* p : {"sbatch: error: ", "sbcast: error: ", "squeue: error: ",
                          "scancel: error: ", "sinfo: error: ", "srun: error: "}) {
      if (line.rfind(p, 0) == 0) line = line.substr(std::string(p).size());
    }
    if (line.empty()) continue;
    out += (out.empty() ? "" : "; ") + line;
  }
  return out.empty() ? "no message" : out;
}

// What the provider recorded for a cluster.
struct Record {
  std::string cluster, partition, job, prefix, remote_dir, gpu_name;
  int gpus = 0;
  // The agent files sent to the allocation so far: each StartAgents sends the next generation
  // (prefix.gN.herdlet, .tar, .ready); the allocation's step runs the newest one. -1: a record
  // without a generation line, whose allocation's batch script runs one set of files only.
  int generation = 0;
  SshTarget login;
  struct Node {
    std::string herd_name, slurm_name, addr;
  };
  std::vector<Node> nodes;
};

std::string RecordPath(const std::string& state_dir) { return state_dir + "/" + kRecordFile; }

Status SaveRecord(const std::string& state_dir, const Record& r) {
  std::ostringstream o;
  o << "cluster=" << r.cluster << "\npartition=" << r.partition << "\njob=" << r.job
    << "\nprefix=" << r.prefix << "\ngeneration=" << r.generation << "\nremote_dir=" << r.remote_dir
    << "\ngpus=" << r.gpus << "\ngpu_name=" << r.gpu_name << "\nhost=" << r.login.host
    << "\nport=" << r.login.port << "\nuser=" << r.login.user
    << "\nidentity_file=" << r.login.identity_file << "\nknown_hosts=" << r.login.known_hosts_file
    << "\n";
  if (!r.login.jump.empty()) {
    o << "jump_host=" << r.login.jump.host << "\njump_port=" << r.login.jump.port
      << "\njump_user=" << r.login.jump.user
      << "\njump_identity_file=" << r.login.jump.identity_file << "\n";
    for (const SshJump& hop : r.login.jump.before) {  // each hop's lines start with its host
      o << "jump_before_host=" << hop.host << "\njump_before_port=" << hop.port
        << "\njump_before_user=" << hop.user << "\njump_before_identity_file=" << hop.identity_file
        << "\n";
    }
  }
  for (const auto& n : r.nodes) {
    o << "node=" << n.herd_name << " " << n.slurm_name << " " << n.addr << "\n";
  }
  HERD_RETURN_IF_ERROR(EnsureDir(state_dir));
  return WriteFileAtomic(RecordPath(state_dir), o.str(), 0600);
}

Result<std::optional<Record>> LoadRecord(const std::string& state_dir) {
  HERD_ASSIGN_OR_RETURN(auto text, ReadFileIfExists(RecordPath(state_dir)));
  if (!text) return std::optional<Record>();
  Record r;
  r.generation = -1;
  for (const std::string& line : Split(*text, '\n')) {
    std::size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    if (k == "cluster") r.cluster = v;
    if (k == "partition") r.partition = v;
    if (k == "job") r.job = v;
    if (k == "prefix") r.prefix = v;
    if (k == "generation") r.generation = std::atoi(v.c_str());
    if (k == "remote_dir") r.remote_dir = v;
    if (k == "gpus") r.gpus = std::atoi(v.c_str());
    if (k == "gpu_name") r.gpu_name = v;
    if (k == "host") r.login.host = v;
    if (k == "port") r.login.port = std::atoi(v.c_str());
    if (k == "user") r.login.user = v;
    if (k == "identity_file") r.login.identity_file = v;
    if (k == "known_hosts") r.login.known_hosts_file = v;
    if (k == "jump_host") r.login.jump.host = v;
    if (k == "jump_port") r.login.jump.port = std::atoi(v.c_str());
    if (k == "jump_user") r.login.jump.user = v;
    if (k == "jump_identity_file") r.login.jump.identity_file = v;
    auto& before = r.login.jump.before;
    if (k == "jump_before_host") before.emplace_back().host = v;
    if (!before.empty()) {
      if (k == "jump_before_port") before.back().port = std::atoi(v.c_str());
      if (k == "jump_before_user") before.back().user = v;
      if (k == "jump_before_identity_file") before.back().identity_file = v;
    }
    if (k == "node") {
      auto w = Split(v, ' ');
      if (w.size() == 3) r.nodes.push_back({w[0], w[1], w[2]});
    }
  }
  r.login.name = "slurm cluster " + r.cluster + " login node";
  return std::optional<Record>(std::move(r));
}

// Runs a Slurm command on the login node: its stdout, or an error naming the command and what
// Slurm said. An SSH failure says the login node does not answer.
Result<std::string> OnLogin(SshRunner& ssh, const SshTarget& login, const std::string& what,
                            const std::string& command, std::string_view stdin_data = {},
                            std::chrono::milliseconds timeout = limits::kSlurmCommandTimeout) {
  auto r = ssh.Run(login, command, timeout, stdin_data);
  if (!r.ok()) {
    return Status(r.status().code(), login.name + " (" + login.host + ":" +
                                         std::to_string(login.port) +
                                         ") does not answer: " + r.status().message());
  }
  if (r->timed_out) {
    return DeadlineExceeded(login.name + ": " + what + " did not finish within " +
                            std::to_string(timeout.count() / 1000) + " s");
  }
  if (r->exit_code != 0) {
    return FailedPrecondition(login.name + ": " + what + " failed: " + OneLine(r->err + r->out));
  }
  return r->out;
}

std::vector<NodeHandle> HandlesOf(const Record& r) {
  std::vector<NodeHandle> out;
  for (const auto& n : r.nodes) {
    NodeHandle h;
    h.name = n.herd_name;
    h.ip = r.login.host;
    h.ssh_port = r.login.port;
    h.ssh_user = r.login.user;
    h.identity_file = r.login.identity_file;
    h.jump = r.login.jump;
    h.internal_ip = n.addr;
    out.push_back(std::move(h));
  }
  return out;
}

Result<SlurmJobState> QueryJob(SshRunner& ssh, const Record& r,
                               std::chrono::milliseconds timeout = limits::kSlurmCommandTimeout) {
  // squeue names a job it forgot (MinJobAge after its end) an "Invalid job id": no state then.
  auto out = OnLogin(ssh, r.login, "squeue", "squeue -h -t all -j " + r.job + " -o '%T|%r|%N'", {},
                     timeout);
  if (!out.ok()) {
    if (out.status().message().find("Invalid job id") != std::string::npos) return SlurmJobState{};
    return out.status();
  }
  return ParseSqueueLine(*out);
}

// Cancels the job and waits until it holds no node.
Status CancelJob(SshRunner& ssh, const Record& r) {
  auto out = OnLogin(ssh, r.login, "scancel " + r.job, "scancel " + r.job + " 2>&1 || true");
  if (!out.ok()) return out.status();
  const auto deadline = std::chrono::steady_clock::now() + limits::kSlurmCancelWait;
  while (true) {
    HERD_ASSIGN_OR_RETURN(SlurmJobState s, QueryJob(ssh, r));
    if (!SlurmJobActive(s.state)) return Status::Ok();
    if (std::chrono::steady_clock::now() >= deadline) {
      return DeadlineExceeded(r.login.name + ": Slurm job " + r.job + " is still " + s.state + " " +
                              std::to_string(limits::kSlurmCancelWait.count() / 1000) +
                              " s after scancel");
    }
    std::this_thread::sleep_for(limits::kSlurmPoll);
  }
}

// Reasons a PENDING job never leaves by waiting.
bool HopelessReason(const std::string& reason) {
  static const char* kHopeless[] = {
      "BadConstraints",          "PartitionNodeLimit", "PartitionTimeLimit",    "InvalidQOS",
      "InvalidAccount",          "PartitionConfig",    "QOSMaxNodePerJobLimit", "QOSMaxGRESPerJob",
      "DependencyNeverSatisfied"};
  return std::any_of(std::begin(kHopeless), std::end(kHopeless),
                     [&](const char* h) { return reason == h; });
}

}  // namespace

std::vector<SlurmPartition> ParseSinfoPartitions(const std::string& out) {
  std::vector<SlurmPartition> parts;
  for (std::string line : Split(out, '\n')) {
    line = TrimWs(line);
    if (line.empty()) continue;
    auto f = Split(line, '|');
    if (f.size() < 3) continue;
    std::string name = f[0];
    bool def = !name.empty() && name.back() == '*';
    if (def) name.pop_back();
    auto it = std::find_if(parts.begin(), parts.end(), [&](auto& p) { return p.name == name; });
    if (it == parts.end()) {
      parts.push_back({name, def, f[1], {}});
      it = parts.end() - 1;
    }
    it->is_default = it->is_default || def;
    // "gpu:L4:2(S:0),gpu:a100:1" or "(null)"; commas inside "(S:0-1)" belong to the socket list.
    std::string g = f[2];
    std::string cur;
    int depth = 0;
    auto flush = [&] {
      std::string v = cur.substr(0, cur.find('('));
      if (!v.empty() && std::find(it->gres.begin(), it->gres.end(), v) == it->gres.end()) {
        it->gres.push_back(v);
      }
      cur.clear();
    };
    for (char c : g) {
      if (c == '(') ++depth;
      if (c == ')') --depth;
      if (c == ',' && depth == 0) {
        flush();
      } else {
        cur += c;
      }
    }
    flush();
  }
  return parts;
}

Result<std::string> GresFor(const SlurmPartition& p, const SlurmDemand& d,
                            const std::string& cluster) {
  if (d.accelerator.empty() || d.accelerator_count <= 0) return std::string();
  const int want = static_cast<int>(std::ceil(d.accelerator_count));
  std::string listed;
  int most = 0;
  std::string spelled;
  for (const auto& g : p.gres) {
    listed += (listed.empty() ? "" : ", ") + g;
    auto f = Split(g, ':');  // gpu:TYPE:COUNT (a typed GRES; untyped gpu:COUNT has no model)
    if (f.size() != 3 || f[0] != "gpu") continue;
    if (Lower(f[1]) != Lower(d.accelerator)) continue;
    spelled = f[1];
    most = std::max(most, std::atoi(f[2].c_str()));
  }
  const std::string where = "partition " + p.name + " of Slurm cluster " + cluster;
  if (spelled.empty()) {
    return InvalidArgument(where + " has no GPU " + d.accelerator +
                           " (its GRES: " + (listed.empty() ? "none" : listed) + ")");
  }
  if (most < want) {
    return InvalidArgument(where + " has at most " + std::to_string(most) + " " + spelled +
                           " per node; the task asks for " + std::to_string(want));
  }
  return "gpu:" + spelled + ":" + std::to_string(want);
}

std::string SbatchCommand(const SbatchRequest& r) {
  std::string c = "sbatch --parsable --job-name=" + ShellQuote(r.job_name) +
                  " --nodes=" + std::to_string(r.nodes) + " --ntasks-per-node=1";
  if (!r.partition.empty()) c += " --partition=" + ShellQuote(r.partition);
  if (!r.gres.empty()) c += " --gres=" + ShellQuote(r.gres);
  if (r.cpus_per_task > 0) c += " --cpus-per-task=" + std::to_string(r.cpus_per_task);
  if (r.mem_mb > 0) c += " --mem=" + std::to_string(r.mem_mb) + "M";
  if (!r.time_limit.empty()) c += " --time=" + ShellQuote(r.time_limit);
  // The batch script's own output would be a file on the first node: herdlet logs for itself.
  c += " --wait-all-nodes=1 --no-requeue --no-kill --output=/dev/null";
  return c;
}

std::string BatchScript(const std::string& prefix) {
  const std::string wait = std::to_string(
      std::chrono::duration_cast<std::chrono::seconds>(limits::kSlurmAgentFilesWait).count());
  // The step's script is in single quotes: it uses none itself. Generation N of the agent's files
  // is $P.gN.herdlet, $P.gN.tar and $P.gN.ready (sent last); the step runs the newest one, and
  // when its herdlet ends while a newer one is ready (StartAgents stops it for that), unpacks the
  // newer files over the node's directory (its state stays) and runs their herdlet. A herdlet
  // that ends otherwise is started again after a second; one that exits 0 ends the node's step.
  return "#!/bin/bash\n"
         "# herd: a long-lived allocation; its one step runs herdlet on every node.\n"
         "export HERD_SLURM_PREFIX=\"" +
         prefix +
         "\"\n"
         "exec srun --ntasks-per-node=1 --kill-on-bad-exit=0 "
         "--cpus-per-task=\"${SLURM_CPUS_PER_TASK:-1}\" /bin/bash -c '\n"
         "P=\"$HERD_SLURM_PREFIX\"; pid=; g=0\n"
         "cleanup() {\n"
         "  if [ -n \"$pid\" ]; then kill \"$pid\" 2>/dev/null; wait \"$pid\" 2>/dev/null; fi\n"
         "  rm -rf \"$P\" \"$P\".g* \"$P.files.tar\"\n"
         "}\n"
         "trap \"cleanup; exit 0\" TERM INT HUP\n"
         "n=0\n"
         "while [ ! -e \"$P.g1.ready\" ]; do\n"
         "  if [ \"$n\" -ge " +
         wait + " ]; then echo \"herd: no agent files after " + wait +
         " s\" >&2; cleanup; exit 1; fi\n"
         "  sleep 1 & wait $!; n=$((n+1))\n"
         "done\n"
         "while :; do\n"
         "  k=$g; while [ -e \"$P.g$((k+1)).ready\" ]; do k=$((k+1)); done\n"
         "  if [ \"$k\" != \"$g\" ]; then\n"
         "    mkdir -p \"$P\" && tar -xf \"$P.g$k.tar\" -C \"$P\" || { cleanup; exit 1; }\n"
         "    [ \"$g\" -gt 0 ] && rm -f \"$P.g$g.herdlet\" \"$P.g$g.tar\" \"$P.g$g.ready\"\n"
         "    g=$k\n"
         "  fi\n"
         "  cd \"$P/$SLURMD_NODENAME\" || { cleanup; exit 1; }\n"
         "  \"$P.g$g.herdlet\" --config herdlet.yaml </dev/null >>herdlet.log 2>&1 & pid=$!\n"
         "  wait \"$pid\"; code=$?; pid=\n"
         "  [ -e \"$P.g$((g+1)).ready\" ] && continue\n"
         "  [ \"$code\" -eq 0 ] && break\n"
         "  sleep 1 & wait $!\n"
         "done\n"
         "cleanup'\n";
}

std::string StopEarlierAgentsScript(const std::string& prefix, int generation) {
  std::string escaped;
  for (char c : prefix) {
    if (c == '.') escaped += '\\';
    escaped += c;
  }
  std::string earlier;
  for (int g = 1; g < generation; ++g) earlier += (g > 1 ? "|" : "") + std::to_string(g);
  const auto polls = limits::kSlurmAgentStopWait / limits::kSlurmAgentStopPoll;
  const double poll_s =
      std::chrono::duration_cast<std::chrono::milliseconds>(limits::kSlurmAgentStopPoll).count() /
      1000.0;
  return "pat=" + ShellQuote("^" + escaped + "\\.g(" + earlier + ")\\.herdlet( |$)") +
         "; pkill -TERM -f \"$pat\"; n=0; while pgrep -f \"$pat\" >/dev/null; do if [ $n -ge " +
         std::to_string(polls) + " ]; then echo \"an earlier herdlet on $SLURMD_NODENAME is " +
         "still running\" >&2; exit 1; fi; sleep " + std::to_string(poll_s) + "; n=$((n+1)); done";
}

SlurmJobState ParseSqueueLine(const std::string& out) {
  SlurmJobState s;
  for (std::string line : Split(out, '\n')) {
    line = TrimWs(line);
    if (line.empty()) continue;
    auto f = Split(line, '|');
    if (f.size() < 2) continue;
    s.state = f[0];
    s.reason = f[1];
    if (f.size() > 2) s.nodelist = f[2];
    break;
  }
  return s;
}

bool SlurmJobActive(const std::string& state) {
  static const char* kActive[] = {"PENDING",      "RUNNING",   "CONFIGURING", "COMPLETING",
                                  "SUSPENDED",    "RESIZING",  "REQUEUED",    "REQUEUE_HOLD",
                                  "REQUEUE_FED",  "SIGNALING", "STAGE_OUT",   "STOPPED",
                                  "RESV_DEL_HOLD"};
  return std::any_of(std::begin(kActive), std::end(kActive),
                     [&](const char* a) { return state == a; });
}

std::vector<std::pair<std::string, std::string>> ParseScontrolNodes(const std::string& out) {
  std::vector<std::pair<std::string, std::string>> nodes;
  for (const std::string& line : Split(out, '\n')) {
    std::string name, addr;
    std::istringstream words(line);
    std::string w;
    while (words >> w) {
      if (w.rfind("NodeName=", 0) == 0) name = w.substr(9);
      if (w.rfind("NodeAddr=", 0) == 0) addr = w.substr(9);
    }
    if (!name.empty()) nodes.emplace_back(name, addr.empty() ? name : addr);
  }
  return nodes;
}

SlurmProvider::SlurmProvider(std::string infra, SlurmDemand demand, std::shared_ptr<SshRunner> ssh,
                             std::string config_file)
    : infra_(std::move(infra)),
      demand_(std::move(demand)),
      ssh_(std::move(ssh)),
      config_file_(config_file.empty() ? DefaultSlurmConfigFile() : std::move(config_file)) {}

Result<std::vector<NodeHandle>> SlurmProvider::Provision(const ProvisionRequest& req) {
  if (req.num_nodes < 1) return InvalidArgument("a Slurm cluster needs at least one node");
  SshRunner& ssh = *ssh_;
  HERD_ASSIGN_OR_RETURN(auto existing, LoadRecord(req.state_dir));
  if (existing && !existing->job.empty()) {
    // An allocation of this cluster that still runs is kept; one that ended is replaced.
    HERD_ASSIGN_OR_RETURN(SlurmJobState s, QueryJob(ssh, *existing));
    // (One whose batch script cannot take a new generation of agent files is replaced too.)
    if (s.state == "RUNNING" && static_cast<int>(existing->nodes.size()) >= req.num_nodes &&
        existing->generation >= 0) {
      return HandlesOf(*existing);
    }
    if (SlurmJobActive(s.state)) HERD_RETURN_IF_ERROR(CancelJob(ssh, *existing));
    (void)ssh.Run(existing->login, "rm -rf " + ShellQuote(existing->remote_dir),
                  limits::kSlurmCommandTimeout);
    std::error_code ec;
    fs::remove(RecordPath(req.state_dir), ec);
  }
  HERD_ASSIGN_OR_RETURN(SlurmInfra where, ParseSlurmInfra(infra_));
  HERD_ASSIGN_OR_RETURN(auto clusters, LoadSlurmConfig(config_file_));
  HERD_ASSIGN_OR_RETURN(SlurmClusterConfig cfg,
                        FindSlurmCluster(clusters, where.cluster, config_file_));
  Record r;
  r.cluster = cfg.name;
  r.login.host = cfg.hostname;
  r.login.port = cfg.port;
  r.login.user = cfg.user;
  r.login.identity_file = cfg.identity_file;
  r.login.jump = cfg.jump;
  r.login.known_hosts_file = req.state_dir + "/known_hosts";
  r.login.name = "slurm cluster " + cfg.name + " login node";
  HERD_RETURN_IF_ERROR(EnsureDir(req.state_dir));

  // The partition and its GRES, before anything is submitted.
  HERD_ASSIGN_OR_RETURN(std::string sinfo,
                        OnLogin(ssh, r.login, "sinfo", "sinfo -h -o '%P|%l|%G'"));
  auto parts = ParseSinfoPartitions(sinfo);
  const SlurmPartition* part = nullptr;
  std::string names;
  for (const auto& p : parts) {
    names += (names.empty() ? "" : ", ") + p.name;
    if (where.partition.empty() ? p.is_default : p.name == where.partition) part = &p;
  }
  if (part == nullptr) {
    if (where.partition.empty()) {
      return InvalidArgument("Slurm cluster " + cfg.name +
                             " has no default partition; name one: slurm/" + cfg.name +
                             "/PARTITION (partitions: " + names + ")");
    }
    return InvalidArgument("Slurm cluster " + cfg.name + " has no partition " + where.partition +
                           " (partitions: " + (names.empty() ? "none" : names) + ")");
  }
  HERD_ASSIGN_OR_RETURN(std::string gres, GresFor(*part, demand_, cfg.name));
  r.partition = part->name;

  SbatchRequest sb;
  sb.job_name = "herd-" + req.cluster;
  sb.nodes = req.num_nodes;
  sb.partition = where.partition;
  sb.gres = gres;
  sb.cpus_per_task = static_cast<int>(std::ceil(demand_.cpus));
  sb.mem_mb = static_cast<int>(std::ceil(demand_.memory_gb * 1024));
  // The allocation lasts as long as the partition allows (its default may be much shorter).
  if (part->time_limit != "infinite" && !part->time_limit.empty() && part->time_limit != "n/a") {
    sb.time_limit = part->time_limit;
  }
  const std::string prefix = "/tmp/herd-" + req.cluster + "-$SLURM_JOB_ID";
  auto submitted =
      ssh.Run(r.login, SbatchCommand(sb), limits::kSlurmCommandTimeout, BatchScript(prefix));
  if (!submitted.ok()) {
    return Status(submitted.status().code(),
                  r.login.name + " (" + r.login.host + ":" + std::to_string(r.login.port) +
                      ") does not answer: " + submitted.status().message());
  }
  if (submitted->exit_code != 0) {
    return InvalidArgument("Slurm cluster " + cfg.name + " refused the allocation (sbatch): " +
                           OneLine(submitted->err + submitted->out));
  }
  r.job = TrimWs(submitted->out.substr(0, submitted->out.find(';')));
  if (r.job.empty() || !std::all_of(r.job.begin(), r.job.end(), ::isdigit)) {
    return Internal("sbatch printed no job id: " + OneLine(submitted->out));
  }
  r.prefix = "/tmp/herd-" + req.cluster + "-" + r.job;
  r.remote_dir = ".herd/slurm/" + req.cluster + "-" + r.job;
  if (!gres.empty()) {
    r.gpus = static_cast<int>(std::ceil(demand_.accelerator_count));
    r.gpu_name = Split(gres, ':')[1];
  }
  HERD_RETURN_IF_ERROR(SaveRecord(req.state_dir, r));  // from here `herd down` can scancel it

  // Until the allocation runs; on any failure it is cancelled: nothing is left allocated.
  auto fail = [&](Status s) -> Status {
    (void)CancelJob(ssh, r);
    std::error_code ec;
    fs::remove(RecordPath(req.state_dir), ec);
    return s;
  };
  const auto deadline = std::chrono::steady_clock::now() + limits::kSlurmAllocationWait;
  SlurmJobState s;
  while (true) {
    auto q = QueryJob(ssh, r);
    if (!q.ok()) return fail(q.status());
    s = *q;
    if (s.state == "RUNNING") break;
    if (!SlurmJobActive(s.state)) {
      return fail(
          FailedPrecondition("Slurm job " + r.job + " on " + cfg.name + " ended " +
                             (s.state.empty() ? "" : "(" + s.state + ") ") + "before it ran" +
                             (s.reason.empty() || s.reason == "None" ? "" : ": " + s.reason)));
    }
    if (s.state == "PENDING" && HopelessReason(s.reason)) {
      return fail(InvalidArgument("Slurm cluster " + cfg.name + " cannot run the allocation: " +
                                  "job " + r.job + " is PENDING (" + s.reason + ")"));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return fail(DeadlineExceeded(
          "Slurm job " + r.job + " on " + cfg.name + " did not start within " +
          std::to_string(limits::kSlurmAllocationWait.count() / 1000) + " s (" + s.state +
          (s.reason.empty() ? "" : ": " + s.reason) + "); it was cancelled"));
    }
    std::this_thread::sleep_for(limits::kSlurmPoll);
  }
  // The nodes in Slurm's order (the first runs the batch script: the head) and their addresses.
  auto hosts = OnLogin(ssh, r.login, "scontrol show hostnames",
                       "scontrol show hostnames " + ShellQuote(s.nodelist));
  if (!hosts.ok()) return fail(hosts.status());
  auto shown = OnLogin(ssh, r.login, "scontrol show node",
                       "scontrol show node -o " + ShellQuote(s.nodelist));
  if (!shown.ok()) return fail(shown.status());
  std::map<std::string, std::string> addr;
  for (const auto& [n, a] : ParseScontrolNodes(*shown)) addr[n] = a;
  int i = 0;
  for (std::string name : Split(*hosts, '\n')) {
    name = TrimWs(name);
    if (name.empty()) continue;
    std::string herd_name = req.cluster + (i == 0 ? "-head" : "-worker" + std::to_string(i));
    r.nodes.push_back({herd_name, name, addr.count(name) ? addr[name] : name});
    ++i;
  }
  if (static_cast<int>(r.nodes.size()) != req.num_nodes) {
    return fail(Internal("Slurm job " + r.job + " runs on " + std::to_string(r.nodes.size()) +
                         " node(s) (" + s.nodelist + "), not " + std::to_string(req.num_nodes)));
  }
  auto saved = SaveRecord(req.state_dir, r);
  if (!saved.ok()) return fail(saved);
  return HandlesOf(r);
}

Status SlurmProvider::CheckStoppable(const std::string& cluster, const std::string&) {
  return FailedPrecondition("cluster " + cluster +
                            " is a Slurm allocation, which cannot be stopped and resumed with its "
                            "nodes; `herd down " +
                            cluster + "` releases it");
}

Status SlurmProvider::Stop(const std::string& cluster, const std::string& state_dir) {
  return CheckStoppable(cluster, state_dir);
}

Result<std::vector<NodeHandle>> SlurmProvider::Start(const std::string& cluster,
                                                     const std::string& state_dir) {
  HERD_ASSIGN_OR_RETURN(auto rec, LoadRecord(state_dir));
  ProvisionRequest req{cluster, rec ? static_cast<int>(rec->nodes.size()) : 1, state_dir, ""};
  return Provision(req);
}

Status SlurmProvider::Teardown(const std::string&, const std::string& state_dir) {
  HERD_ASSIGN_OR_RETURN(auto rec, LoadRecord(state_dir));
  if (!rec) return Status::Ok();
  if (!rec->job.empty()) HERD_RETURN_IF_ERROR(CancelJob(*ssh_, *rec));
  if (!rec->remote_dir.empty()) {
    HERD_RETURN_IF_ERROR(OnLogin(*ssh_, rec->login, "removing " + rec->remote_dir,
                                 "rm -rf " + ShellQuote(rec->remote_dir))
                             .status());
  }
  std::error_code ec;
  fs::remove(RecordPath(state_dir), ec);
  fs::remove(state_dir + "/known_hosts", ec);
  fs::remove_all(state_dir + "/agent-files", ec);
  fs::remove(state_dir + "/agent-files.tar", ec);
  return Status::Ok();
}

Status SlurmProvider::StartAgents(const std::string& cluster, const std::string& state_dir,
                                  const std::string& herdlet_path,
                                  const std::vector<AgentFiles>& files) {
  HERD_ASSIGN_OR_RETURN(auto rec, LoadRecord(state_dir));
  if (!rec || rec->job.empty()) {
    return FailedPrecondition("cluster " + cluster + " has no Slurm allocation");
  }
  // One tar of every node's directory, named by its Slurm node name (the step's $SLURMD_NODENAME).
  const std::string staging = state_dir + "/agent-files";
  std::error_code ec;
  fs::remove_all(staging, ec);
  for (const auto& f : files) {
    auto it = std::find_if(rec->nodes.begin(), rec->nodes.end(),
                           [&](const auto& n) { return n.herd_name == f.node; });
    if (it == rec->nodes.end()) return Internal("node " + f.node + " is not in the allocation");
    const std::string dir = staging + "/" + it->slurm_name;
    HERD_RETURN_IF_ERROR(EnsureDir(dir + "/certs"));
    std::string config = f.config_yaml;
    if (rec->gpus > 0) {
      // The allocation's GPUs as the agent's inventory: Slurm gave these to the cluster.
      config += "gpus: " + std::to_string(rec->gpus) + "\ngpu_name: " + rec->gpu_name + "\n";
    }
    HERD_RETURN_IF_ERROR(WriteFileAtomic(dir + "/herdlet.yaml", config, 0600));
    for (const char* name : {"ca.crt", "agent.crt", "agent.key"}) {
      HERD_ASSIGN_OR_RETURN(std::string data, ReadFile(f.certs_dir + "/" + name));
      HERD_RETURN_IF_ERROR(WriteFileAtomic(dir + "/certs/" + name, data, 0600));
    }
  }
  const std::string tar = state_dir + "/agent-files.tar";
  HERD_ASSIGN_OR_RETURN(auto packed, RunProcess({"tar", "-cf", tar, "-C", staging, "."}, {},
                                                limits::kSlurmCommandTimeout));
  if (packed.exit_code != 0) return IoError("tar of the agent files: " + OneLine(packed.err));
  fs::remove_all(staging, ec);

  const std::string& d = rec->remote_dir;
  HERD_RETURN_IF_ERROR(
      OnLogin(*ssh_, rec->login, "mkdir " + d,
              "mkdir -p " + ShellQuote(d) + " && echo ready > " + ShellQuote(d + "/ready"))
          .status());
  HERD_RETURN_IF_ERROR(
      ssh_->Rsync(rec->login, herdlet_path, d + "/herdlet", false, limits::kSshWaitTotal));
  HERD_RETURN_IF_ERROR(
      ssh_->Rsync(rec->login, tar, d + "/agent.tar", false, limits::kSshWaitTotal));
  fs::remove(tar, ec);
  // sbcast to every node of the allocation, as the next generation of the agent's files (a
  // herdlet that runs is never written over); the ready marker last, so a node's step starts them
  // only with every file in place.
  const int generation = std::max(rec->generation, 0) + 1;
  const std::string j = " --jobid=" + rec->job + " ";
  const std::string p = rec->prefix + ".g" + std::to_string(generation);
  HERD_RETURN_IF_ERROR(OnLogin(*ssh_, rec->login, "sbcast",
                               "sbcast -f -p" + j + ShellQuote(d + "/herdlet") + " " +
                                   ShellQuote(p + ".herdlet") + " && sbcast -f" + j +
                                   ShellQuote(d + "/agent.tar") + " " + ShellQuote(p + ".tar") +
                                   " && sbcast -f" + j + ShellQuote(d + "/ready") + " " +
                                   ShellQuote(p + ".ready"),
                               {}, limits::kSshWaitTotal)
                           .status());
  rec->generation = generation;
  HERD_RETURN_IF_ERROR(SaveRecord(state_dir, *rec));
  if (generation == 1) return Status::Ok();
  // An allocation kept from an earlier launch: its agents of the generations before stop
  // (SIGTERM: their jobs keep running, and the new agents adopt them), and each node's step then
  // starts the new one. Waits until none of them is left, so that the agents the launch waits
  // for next are the new ones.
  return OnLogin(*ssh_, rec->login, "stopping the allocation's earlier agents",
                 "srun --overlap" + j + "--nodes=" + std::to_string(rec->nodes.size()) +
                     " --ntasks-per-node=1 --mem=0 --gres=none --kill-on-bad-exit=0 /bin/bash -c " +
                     ShellQuote(StopEarlierAgentsScript(rec->prefix, generation)),
                 {}, limits::kSlurmCommandTimeout + limits::kSlurmAgentStopWait)
      .status();
}

Status SlurmProvider::SpreadFiles(const std::string& cluster, const std::string& state_dir,
                                  const std::vector<std::string>& paths) {
  if (paths.empty()) return Status::Ok();
  HERD_ASSIGN_OR_RETURN(auto rec, LoadRecord(state_dir));
  if (!rec || rec->job.empty()) {
    return FailedPrecondition("cluster " + cluster + " has no Slurm allocation");
  }
  // Absolute names in the tar (-P): the nodes' user has the login node's home path, shared or
  // not. The probe's name is per call, so two spreads never take each other's probe.
  std::string names;
  for (const auto& p : paths) {
    names += " " + (p.rfind('/', 0) == 0 ? ShellQuote(p) : "\"$HOME\"/" + ShellQuote(p));
  }
  const std::string probe =
      ".herd-home-probe-" + rec->job + "-" + std::to_string(::getpid()) + "-" +
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  const std::string tar = rec->remote_dir + "/files.tar";
  const std::string node_tar = rec->prefix + ".files.tar";
  // The node's copy stays until the allocation ends (the batch script removes it): nodes may
  // share /tmp, and one node's unpacking must not take the file from another.
  const std::string unpack =
      "if [ ! -e \"$HOME/" + probe + "\" ]; then exec tar -xPf " + ShellQuote(node_tar) + "; fi";
  // The probe and the tar in variables, so the EXIT trap's quoting does not nest.
  const std::string script =
      "probe=\"$HOME/" + probe + "\"; pack=" + ShellQuote(tar) +
      "; trap 'rm -f \"$probe\" \"$pack\"' EXIT; : > \"$probe\" && tar -cPf \"$pack\"" + names +
      " && sbcast -f --jobid=" + rec->job + " \"$pack\" " + ShellQuote(node_tar) +
      " && srun --overlap --jobid=" + rec->job + " --nodes=" + std::to_string(rec->nodes.size()) +
      " --ntasks-per-node=1 --mem=0 --gres=none --kill-on-bad-exit=1 /bin/bash -c " +
      ShellQuote(unpack);
  return OnLogin(*ssh_, rec->login, "copying the workdir and file_mounts to the nodes", script, {},
                 limits::kSshWaitTotal)
      .status();
}

Result<AllocationState> SlurmProvider::Allocation(const std::string&,
                                                  const std::string& state_dir) {
  HERD_ASSIGN_OR_RETURN(auto rec, LoadRecord(state_dir));
  AllocationState a;
  a.known = true;
  if (!rec || rec->job.empty()) {
    a.alive = false;
    a.state = "NONE";
    a.detail = "it has no Slurm allocation";
    return a;
  }
  HERD_ASSIGN_OR_RETURN(SlurmJobState s, QueryJob(*ssh_, *rec, limits::kSlurmStatusQueryTimeout));
  a.state = s.state.empty() ? "ENDED" : s.state;
  a.alive = s.state == "RUNNING";
  if (!a.alive) {
    static const std::map<std::string, std::string> kWhy = {
        {"TIMEOUT", "it hit its time limit"},        {"PREEMPTED", "it was preempted"},
        {"CANCELLED", "it was cancelled (scancel)"}, {"NODE_FAIL", "a node failed"},
        {"BOOT_FAIL", "a node failed to boot"},      {"DEADLINE", "it hit its deadline"},
        {"OUT_OF_MEMORY", "it ran out of memory"},   {"FAILED", "its batch script failed"},
        {"COMPLETED", "its batch script ended"},     {"ENDED", "Slurm no longer lists it"}};
    auto it = kWhy.find(a.state);
    a.detail = "its Slurm allocation (job " + rec->job + " on " + rec->cluster + ") is " + a.state +
               (it != kWhy.end() ? ": " + it->second : "");
  }
  return a;
}

}  // namespace herd::controller
