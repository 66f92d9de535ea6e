#include "agent/container/container_runtime.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent/gpu/run_captured.hpp"
#include "shared/common/limits.hpp"

namespace herd::agent {
namespace fs = std::filesystem;

namespace {

constexpr const char* kRunc = "/usr/sbin/runc";
constexpr const char* kLabelKey = "herd.agent";
// The container's first process: keeps it running and reaps what the jobs leave behind (orphans
// in the container's pid namespace become its children).
constexpr const char* kKeepAlive = "while :; do sleep 86400 & wait $!; done";

// The last non-empty line of a runtime's output: podman's error ("Error: ... manifest unknown").
std::string LastLine(const std::string& output) {
  std::string last, line;
  std::istringstream in(output);
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  while (!last.empty() && (last.back() == '\r' || last.back() == ' ')) last.pop_back();
  return last.empty() ? "no output" : last;
}

std::string Failure(const CapturedRun& run) {
  if (!run.spawned) return run.output;
  if (run.timed_out) return "did not finish in time";
  return LastLine(run.output) + " (exit " + std::to_string(run.exit_code) + ")";
}

// This process's current (soft) limit as both limits of the container: the container's first
// process cannot raise a limit (no CAP_SYS_RESOURCE), and podman's defaults would. `cap` bounds
// it further (0: no bound).
std::string Ulimit(const char* name, int resource, uint64_t cap) {
  rlimit rl{};
  uint64_t n = ::getrlimit(resource, &rl) != 0 ? RLIM_INFINITY : rl.rlim_cur;
  if (cap > 0 && (n == RLIM_INFINITY || n > cap)) n = cap;
  const std::string v = n == RLIM_INFINITY ? "-1" : std::to_string(n);
  return std::string(name) + "=" + v + ":" + v;
}

// More processes than pids can exist is no limit, and runc refuses to set such a one here
// (nproc above kernel.pid_max: "error setting rlimit type 6: operation not permitted").
uint64_t PidMax() {
  std::ifstream in("/proc/sys/kernel/pid_max");
  uint64_t n = 0;
  in >> n;
  return n;
}

// This process's cgroup directory among the subdirectories of `dir` (its cgroup.procs lists it).
std::string OwnCgroupUnder(const std::string& dir) {
  const std::string self = std::to_string(::getpid());
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_directory(ec)) continue;
    std::ifstream procs(entry.path() / "cgroup.procs");
    for (std::string pid; procs >> pid;)
      if (pid == self) return entry.path().string();
  }
  return "";
}

bool MoveSelfTo(const std::string& cgroup) {
  std::ofstream procs(cgroup + "/cgroup.procs");
  procs << ::getpid() << "\n";
  return static_cast<bool>(procs.flush());
}

// While it lives, this process is in `target` (made when missing), then back where it was: what
// it starts meanwhile stays in target. Best effort: where cgroups cannot be changed, nothing moves.
class CgroupExcursion {
 public:
  explicit CgroupExcursion(const std::string& target) {
    if (target.empty()) return;
    std::error_code ec;
    fs::create_directories(target, ec);
    from_ = OwnCgroupUnder(fs::path(target).parent_path().string());
    if (from_.empty() || from_ == target || !MoveSelfTo(target)) from_.clear();
  }
  ~CgroupExcursion() {
    if (!from_.empty()) MoveSelfTo(from_);
  }
  CgroupExcursion(const CgroupExcursion&) = delete;
  CgroupExcursion& operator=(const CgroupExcursion&) = delete;

 private:
  std::string from_;
};

}  // namespace

std::string RegistryOf(const std::string& image) {
  const auto slash = image.find('/');
  if (slash == std::string::npos) return "docker.io";
  const std::string first = image.substr(0, slash);
  // A registry host has a dot or a port, or is localhost; else it is a Docker Hub namespace.
  if (first.find_first_of(".:") != std::string::npos || first == "localhost") return first;
  return "docker.io";
}

std::string QualifiedImage(const std::string& image) {
  if (RegistryOf(image) != "docker.io" || image.starts_with("docker.io/")) return image;
  return (image.find('/') == std::string::npos ? "docker.io/library/" : "docker.io/") + image;
}

std::vector<std::string> GpuDeviceArgs(const std::vector<std::string>& cdi_dirs,
                                       const std::string& dev_dir) {
  std::error_code ec;
  for (const std::string& dir : cdi_dirs) {
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      if (text.str().find("nvidia.com/gpu") != std::string::npos) return {"nvidia.com/gpu=all"};
    }
  }
  std::vector<std::string> devices;
  for (const auto& entry : fs::directory_iterator(dev_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("nvidia") && !entry.is_directory(ec)) {
      devices.push_back(entry.path().string());
    }
  }
  std::sort(devices.begin(), devices.end());
  return devices;
}

PodmanRuntime::PodmanRuntime() : podman_{"podman"} {
  if (::access(kRunc, X_OK) == 0) podman_.insert(podman_.end(), {"--runtime", kRunc});
}

Status PodmanRuntime::Check() {
  CapturedRun run = RunCaptured({podman_[0], "--version"}, limits::kContainerCommandTimeout, true);
  if (!run.spawned) return FailedPrecondition("podman is not installed (no container runtime)");
  if (!run.ok()) return FailedPrecondition("podman does not run: " + Failure(run));
  return Status::Ok();
}

Status PodmanRuntime::Login(const RegistryLogin& login) {
  std::vector<std::string> argv = podman_;
  argv.insert(argv.end(),
              {"login", "--username", login.username, "--password-stdin", login.server});
  CapturedRun run =
      RunCaptured(argv, limits::kContainerCommandTimeout, true, 64 * 1024, login.password + "\n");
  if (run.ok()) return Status::Ok();
  return PermissionDenied("the registry " + login.server + " refused the login of " +
                          login.username + ": " + Failure(run));
}

std::vector<std::string> PodmanRuntime::RunArgv(const ContainerConfig& c) const {
  std::vector<std::string> argv = podman_;
  argv.insert(argv.end(), {"run", "-d", "--replace", "--name", c.name, "--label",
                           std::string(kLabelKey) + "=" + c.label, "--network", "host", "--ipc",
                           "host", "--uts", "host", "--ulimit", Ulimit("nofile", RLIMIT_NOFILE, 0),
                           "--ulimit", Ulimit("nproc", RLIMIT_NPROC, PidMax())});
  for (const std::string& m : c.mounts) argv.insert(argv.end(), {"--volume", m + ":" + m});
  for (const std::string& d : c.devices) argv.insert(argv.end(), {"--device", d});
  argv.insert(argv.end(), {"--entrypoint", "/bin/sh", QualifiedImage(c.image), "-c", kKeepAlive});
  return argv;
}

Result<RunningContainer> PodmanRuntime::Start(const ContainerConfig& c) {
  for (const std::string& m : c.mounts) {
    std::error_code ec;
    fs::create_directories(m, ec);  // the workdir before its first sync, a mount's destination
  }
  CapturedRun run;
  {
    CgroupExcursion outside(c.runtime_cgroup);
    run = RunCaptured(RunArgv(c), limits::kContainerStartTimeout, true);
  }
  if (!run.ok()) return Unavailable(Failure(run));
  std::vector<std::string> inspect = podman_;
  inspect.insert(inspect.end(),
                 {"inspect", "--format",
                  "{{.State.Pid}}\n{{.Id}}\n{{range .Config.Env}}{{.}}\n{{end}}", c.name});
  CapturedRun info = RunCaptured(inspect, limits::kContainerCommandTimeout, false);
  if (!info.ok()) return Unavailable("podman inspect " + c.name + ": " + Failure(info));
  RunningContainer r;
  std::istringstream in(info.output);
  std::string pid, line;
  std::getline(in, pid);
  std::getline(in, r.id);
  while (std::getline(in, line))
    if (!line.empty()) r.env.push_back(line);
  r.pid = std::atoi(pid.c_str());
  if (r.pid <= 0) return Unavailable("the container " + c.name + " stopped at once");
  return r;
}

Result<int> PodmanRuntime::RemoveLabelled(const std::string& label) {
  std::vector<std::string> ps = podman_;
  ps.insert(ps.end(), {"ps", "-aq", "--filter", "label=" + std::string(kLabelKey) + "=" + label});
  CapturedRun ids = RunCaptured(ps, limits::kContainerCommandTimeout, false);
  if (!ids.ok()) return Unavailable("podman ps: " + Failure(ids));
  std::vector<std::string> rm = podman_;
  rm.insert(rm.end(), {"rm", "-f", "-t", "0"});
  std::istringstream in(ids.output);
  int n = 0;
  for (std::string id; in >> id; ++n) rm.push_back(id);
  if (n == 0) return 0;
  CapturedRun done = RunCaptured(rm, limits::kContainerRemoveTimeout * n, true);
  if (!done.ok()) return Unavailable("podman rm: " + Failure(done));
  return n;
}

}  // namespace herd::agent
