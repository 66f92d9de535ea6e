#include "agent/container/node_container.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "agent/process/proc_scan.hpp"
#include "agent/process/uv_process_launcher.hpp"
#include "shared/common/agent_layout.hpp"

extern char** environ;

namespace herd::agent {
namespace fs = std::filesystem;

namespace {

constexpr const char* kEnterCwd = "cd \"$1\" 2>/dev/null || cd /; shift; exec \"$@\"";

std::string RecordsDir(const std::string& state_dir) { return state_dir + "/containers"; }

std::string ExpandHome(const std::string& path, const std::string& home) {
  if (path == "~") return home;
  if (path.starts_with("~/")) return home + path.substr(1);
  return path;
}

// One path for the same directory wherever it is named from: the label and name derive from it.
std::string canonical(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(dir, ec);
  return ec ? dir : p.string();
}

std::string Hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "this node";
  return name;
}

std::string Join(const std::vector<std::string>& v, char sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : std::string(1, sep)) + s;
  return out;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string part; std::getline(in, part, sep);)
    if (!part.empty()) out.push_back(part);
  return out;
}

// The record of a started container: id, pid, start time, then the image's environment.
std::optional<RunningContainer> ReadRecord(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  RunningContainer c;
  std::string pid, start, line;
  if (!std::getline(in, c.id) || !std::getline(in, pid) || !std::getline(in, start)) {
    return std::nullopt;
  }
  c.pid = std::atoi(pid.c_str());
  c.start_time = std::strtoull(start.c_str(), nullptr, 10);
  while (std::getline(in, line))
    if (!line.empty()) c.env.push_back(line);
  return c;
}

Status WriteRecord(const std::string& path, const RunningContainer& c) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << c.id << "\n" << c.pid << "\n" << c.start_time << "\n";
    for (const auto& e : c.env) out << e << "\n";
    if (!out.flush()) return IoError("cannot write " + tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return IoError("cannot write " + path + ": " + ec.message());
  return Status::Ok();
}

// The recorded container still runs: its first process is the one recorded (pid and start time).
bool StillRuns(const RunningContainer& c) {
  auto stat = procfs::ReadStat(c.pid);
  return c.pid > 0 && stat && stat->state != 'Z' && stat->start_time == c.start_time;
}

// An exclusive lock on a file, released when the returned descriptor is closed.
Result<int> Lock(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("cannot open " + path, errno);
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      int err = errno;
      ::close(fd);
      return ErrnoError("cannot lock " + path, err);
    }
  }
  return fd;
}

}  // namespace

std::string ContainerName(const std::string& state_dir, const std::string& image,
                          std::vector<std::string> mounts) {
  std::sort(mounts.begin(), mounts.end());
  // FNV-1a over the parts, each ended by a NUL: a name podman accepts, stable across agents.
  uint64_t h = 1469598103934665603ull;
  auto add = [&](const std::string& s) {
    for (char ch : s + '\0') {
      h ^= static_cast<unsigned char>(ch);
      h *= 1099511628211ull;
    }
  };
  add(state_dir);
  add(Hostname());
  add(image);
  for (const auto& m : mounts) add(m);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::string("herd-") + hex;
}

std::vector<std::string> ContainerRunArgv(const std::string& herdlet, const std::string& state_dir,
                                          const herd::v1::ContainerSpec& spec,
                                          const std::string& home, const std::string& cwd,
                                          const std::vector<std::string>& env_keys,
                                          const std::vector<std::string>& command) {
  std::vector<std::string> argv = {
      herdlet,   kContainerRunFlag, "--state", state_dir,
      "--image", spec.image(),      "--cwd",   cwd.empty() ? home : cwd};
  for (const auto& m : spec.mounts()) argv.insert(argv.end(), {"--mount", ExpandHome(m, home)});
  if (!env_keys.empty()) argv.insert(argv.end(), {"--keep-env", Join(env_keys, ',')});
  argv.push_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

RegistryLogin LoginFor(const std::string& image, const std::string& username,
                       const std::string& password, const std::string& server) {
  RegistryLogin login;
  if (username.empty()) return login;
  login.username = username;
  login.password = password;
  login.server = server.empty() ? RegistryOf(image) : server;
  return login;
}

Status CheckRuntimeAndLogin(ContainerRuntime& runtime, const RegistryLogin& login) {
  if (Status s = runtime.Check(); !s.ok()) {
    return Status(s.code(), "no container runtime: " + s.message());
  }
  if (!login.username.empty()) HERD_RETURN_IF_ERROR(runtime.Login(login));
  return Status::Ok();
}

Result<RunningContainer> EnsureContainer(ContainerRuntime& runtime, const std::string& state_dir,
                                         const ContainerConfig& config,
                                         const RegistryLogin& login) {
  const std::string where = "node " + Hostname() + ", image " + config.image + ": ";
  std::error_code ec;
  fs::create_directories(RecordsDir(state_dir), ec);
  const std::string record = RecordsDir(state_dir) + "/" + config.name;
  // Ranks of one node wait here for the one start (bounded by the runtime's start timeout).
  Result<int> lock = Lock(record + ".lock");
  if (!lock.ok()) return Status(lock.status().code(), where + lock.status().message());
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }
  } unlock{*lock};
  if (auto c = ReadRecord(record); c && StillRuns(*c)) return *c;

  if (Status s = CheckRuntimeAndLogin(runtime, login); !s.ok()) {
    return Status(s.code(), where + s.message());
  }
  // The job's log says why its first line may take a while (a pull of a large image).
  std::cerr << "herd: node " << Hostname() << ": starting the container of image " << config.image
            << "\n";
  Result<RunningContainer> started = runtime.Start(config);
  if (!started.ok()) {
    return Status(started.status().code(),
                  where + "cannot start the container: " + started.status().message());
  }
  RunningContainer c = *started;
  auto stat = procfs::ReadStat(c.pid);
  if (!stat)
    return Unavailable(where + "the container's process " + std::to_string(c.pid) +
                       " is gone at once");
  c.start_time = stat->start_time;
  HERD_RETURN_IF_ERROR(WriteRecord(record, c));
  return c;
}

std::optional<DirectEntry> WarmEntry(const std::string& state_dir,
                                     const herd::v1::ContainerSpec& spec, const std::string& home,
                                     const std::string& cwd,
                                     const std::map<std::string, std::string>& job_env,
                                     const std::vector<std::string>& command) {
  const std::string dir = canonical(state_dir);
  std::vector<std::string> mounts;
  for (const auto& m : spec.mounts()) mounts.push_back(ExpandHome(m, home));
  auto c = ReadRecord(RecordsDir(dir) + "/" + ContainerName(dir, spec.image(), mounts));
  if (!c || !StillRuns(*c)) return std::nullopt;
  std::map<std::string, std::string> current;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    const auto eq = entry.find('=');
    if (eq != std::string::npos) current[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [k, v] : job_env) current[k] = v;
  std::vector<std::string> current_list, keys;
  for (const auto& [k, v] : current) current_list.push_back(k + "=" + v);
  for (const auto& [k, v] : job_env) keys.push_back(k);
  DirectEntry d;
  for (const std::string& e : ContainerEnv(c->env, current_list, keys)) {
    const auto eq = e.find('=');
    d.env[e.substr(0, eq)] = e.substr(eq + 1);
  }
  for (char** e = environ; e && *e; ++e) {
    const std::string key = std::string(*e).substr(0, std::string(*e).find('='));
    if (!d.env.count(key)) d.unset_env.push_back(key);
  }
  d.argv = EnterArgv(*c, cwd.empty() ? home : cwd, command);
  // The spawn looks argv[0] up in the agent's PATH; the container's PATH is the image's.
  d.argv[0] = "/usr/bin/nsenter";
  return d;
}

std::vector<std::string> EnterArgv(const RunningContainer& c, const std::string& cwd,
                                   const std::vector<std::string>& command,
                                   const std::string& proc) {
  std::vector<std::string> argv = {
      "nsenter", "--target", std::to_string(c.pid), "--mount", "--uts", "--ipc", "--pid", "--root"};
  // nsenter's --wdns changes into a path of the container's root, and fails where there is none:
  // a cwd seen there (through the container process's root) is entered so; else the image's sh
  // changes directory inside, to / when cwd is not there (also when the root cannot be looked
  // into from here).
  std::error_code ec;
  const std::string seen = proc + "/" + std::to_string(c.pid) + "/root" + cwd;
  if (!cwd.empty() && cwd.front() == '/' && fs::is_directory(seen, ec)) {
    argv.insert(argv.end(), {"--wdns=" + cwd, "--"});
  } else {
    argv.insert(argv.end(), {"--", "/bin/sh", "-c", kEnterCwd, "sh", cwd});
  }
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

std::vector<std::string> ContainerEnv(const std::vector<std::string>& image_env,
                                      const std::vector<std::string>& current,
                                      const std::vector<std::string>& keep) {
  std::vector<std::string> names = keep;
  names.insert(names.end(),
               {"HOME", "USER", "LOGNAME", "TERM", "LANG", UvProcessLauncher::kGroupEnvVar});
  std::vector<std::pair<std::string, std::string>> env;
  auto set = [&](const std::string& entry) {
    const auto eq = entry.find('=');
    if (eq == std::string::npos) return;
    std::string key = entry.substr(0, eq);
    if (key == kDockerPasswordEnv) return;
    auto it = std::find_if(env.begin(), env.end(), [&](const auto& kv) { return kv.first == key; });
    if (it != env.end()) {
      it->second = entry.substr(eq + 1);
    } else {
      env.emplace_back(std::move(key), entry.substr(eq + 1));
    }
  };
  for (const auto& e : image_env) set(e);
  for (const auto& e : current) {
    const std::string key = e.substr(0, e.find('='));
    if (std::find(names.begin(), names.end(), key) != names.end()) set(e);
  }
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

Result<int> RemoveContainers(ContainerRuntime& runtime, const std::string& state_dir) {
  std::error_code ec;
  if (!fs::exists(RecordsDir(state_dir), ec)) return 0;
  Result<int> n = runtime.RemoveLabelled(ContainerLabel(state_dir));
  if (!n.ok()) return n.status();
  fs::remove_all(RecordsDir(state_dir), ec);
  return *n;
}

std::string ContainerLabel(const std::string& state_dir) { return state_dir + "@" + Hostname(); }

int RunContainerMain(int argc, char** argv) {
  if (argc == 2 && std::string(argv[0]) == kContainerRemoveFlag) {
    PodmanRuntime podman;
    Result<int> n = RemoveContainers(podman, canonical(argv[1]));
    if (!n.ok()) {
      std::cerr << "herd: cannot remove the node's containers: " << n.status().message() << "\n";
      return kContainerErrorExit;
    }
    return 0;
  }
  if (std::string(argv[0]) == kContainerCheckFlag) {
    if (argc < 2) {
      std::cerr << "usage: herdlet " << kContainerCheckFlag << " IMAGE [--login-stdin]\n";
      return 2;
    }
    const std::string image = argv[1];
    std::string user, server, password;
    if (argc >= 3 && std::string(argv[2]) == "--login-stdin") {
      std::getline(std::cin, user);
      std::getline(std::cin, server);
      std::getline(std::cin, password);
    }
    PodmanRuntime podman;
    if (Status s = CheckRuntimeAndLogin(podman, LoginFor(image, user, password, server)); !s.ok()) {
      std::cerr << "herd: " << s.message() << "\n";
      return kContainerErrorExit;
    }
    return 0;
  }
  std::string state_dir, cwd;
  ContainerConfig config;
  std::vector<std::string> keep, command;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      command.assign(argv + i + 1, argv + argc);
      break;
    }
    if (i + 1 >= argc) break;
    const std::string v = argv[++i];
    if (a == "--state") {
      state_dir = v;
    } else if (a == "--image") {
      config.image = v;
    } else if (a == "--cwd") {
      cwd = v;
    } else if (a == "--mount") {
      config.mounts.push_back(v);
    } else if (a == "--keep-env") {
      keep = Split(v, ',');
    }
  }
  if (state_dir.empty() || config.image.empty() || command.empty()) {
    std::cerr << "usage: herdlet " << kContainerRunFlag
              << " --state DIR --image IMAGE [--cwd DIR] [--mount PATH]... [--keep-env K,...] -- "
                 "COMMAND...\n";
    return 2;
  }
  state_dir = canonical(state_dir);
  config.name = ContainerName(state_dir, config.image, config.mounts);
  config.label = ContainerLabel(state_dir);
  config.devices = GpuDeviceArgs({"/etc/cdi", "/var/run/cdi"}, "/dev");
  // The agent's cgroup scope holds one cgroup per job; the runtime's processes go beside them.
  if (std::ifstream scope_file(state_dir + "/" + kCgroupScopeFile); scope_file) {
    std::string scope;
    std::getline(scope_file, scope);
    if (scope.starts_with("/sys/fs/cgroup/")) config.runtime_cgroup = scope + "/containers";
  }
  auto getenv = [](const char* key) -> std::string {
    const char* v = std::getenv(key);
    return v ? v : "";
  };
  const RegistryLogin login = LoginFor(config.image, getenv(kDockerUserEnv),
                                       getenv(kDockerPasswordEnv), getenv(kDockerServerEnv));
  PodmanRuntime podman;
  Result<RunningContainer> c = EnsureContainer(podman, state_dir, config, login);
  if (!c.ok()) {
    std::cerr << "herd: " << c.status().message() << "\n";
    return kContainerErrorExit;
  }
  std::vector<std::string> current;
  for (char** e = environ; e && *e; ++e) current.emplace_back(*e);
  std::vector<std::string> env = ContainerEnv(c->env, current, keep);
  std::vector<std::string> enter = EnterArgv(*c, cwd.empty() ? "/" : cwd, command);
  std::vector<char*> args, envp;
  for (auto& a : enter) args.push_back(a.data());
  args.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  ::execvpe(args[0], args.data(), envp.data());
  std::cerr << "herd: node " << Hostname() << ": cannot run nsenter: " << std::strerror(errno)
            << "\n";
  return kContainerErrorExit;
}

}  // namespace herd::agent
