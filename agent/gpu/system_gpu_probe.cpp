#include "agent/gpu/system_gpu_probe.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

extern char** environ;

namespace herd::agent {
namespace {

// The few NVML entry points herd uses, declared as in nvml.h (which Debian does not ship).
using nvmlReturn_t = int;  // NVML_SUCCESS == 0
using nvmlDevice_t = struct nvmlDevice_st*;
using NvmlInitFn = nvmlReturn_t (*)();
using NvmlShutdownFn = nvmlReturn_t (*)();
using NvmlGetCountFn = nvmlReturn_t (*)(unsigned int*);
using NvmlGetHandleFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using NvmlGetNameFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
constexpr unsigned int kNvmlNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE

std::string Trim(std::string s) {
  auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  s.erase(s.begin(), std::find_if_not(s.begin(), s.end(), space));
  s.erase(std::find_if_not(s.rbegin(), s.rend(), space).base(), s.end());
  return s;
}

std::optional<std::vector<std::string>> ProbeNvml(const std::string& library) {
  void* lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    HERD_LOG(kDebug) << "NVML not loaded: " << ::dlerror();
    return std::nullopt;
  }
  auto init = reinterpret_cast<NvmlInitFn>(::dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<NvmlShutdownFn>(::dlsym(lib, "nvmlShutdown"));
  auto get_count = reinterpret_cast<NvmlGetCountFn>(::dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto get_handle =
      reinterpret_cast<NvmlGetHandleFn>(::dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto get_name = reinterpret_cast<NvmlGetNameFn>(::dlsym(lib, "nvmlDeviceGetName"));
  std::optional<std::vector<std::string>> names;
  if (!init || !shutdown || !get_count || !get_handle || !get_name) {
    HERD_LOG(kWarn) << library << " lacks the NVML functions herd needs";
  } else if (int rc = init(); rc != 0) {
    HERD_LOG(kWarn) << "nvmlInit_v2 failed with " << rc;
  } else {
    unsigned int count = 0;
    if (int rc = get_count(&count); rc != 0) {
      HERD_LOG(kWarn) << "nvmlDeviceGetCount_v2 failed with " << rc;
    } else {
      names.emplace();
      for (unsigned int i = 0; i < count; ++i) {
        nvmlDevice_t device = nullptr;
        char name[kNvmlNameBufferSize] = {};
        if (get_handle(i, &device) != 0 || get_name(device, name, sizeof name) != 0) {
          // A GPU that NVML cannot describe is still a GPU the node has.
          names->push_back("unknown");
        } else {
          names->push_back(Trim(name));
        }
      }
    }
    shutdown();
  }
  ::dlclose(lib);
  return names;
}

// Runs argv with stdout captured, for at most `timeout`; nullopt unless it exits 0 in time.
std::optional<std::string> RunCaptured(const std::vector<std::string>& argv,
                                       std::chrono::milliseconds timeout) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group, so a timeout kills whatever it started too.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return std::nullopt;
  }
  std::string out;
  bool timed_out = false;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      timed_out = n == 0;
      break;
    }
    char buf[4096];
    ssize_t r = ::read(fds[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fds[0]);
  if (timed_out) {
    HERD_LOG(kWarn) << argv[0] << " did not finish within " << timeout.count() << " ms";
    ::kill(-pid, SIGKILL);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return out;
}

std::vector<std::string> ProbeNvidiaSmi(const std::string& program) {
  std::vector<std::string> names;
  auto out = RunCaptured({program, "--query-gpu=name", "--format=csv,noheader"},
                         limits::kGpuProbeCommandTimeout);
  if (!out) return names;
  size_t pos = 0;
  while (pos < out->size()) {
    size_t end = out->find('\n', pos);
    if (end == std::string::npos) end = out->size();
    std::string name = Trim(out->substr(pos, end - pos));
    if (!name.empty()) names.push_back(name);
    pos = end + 1;
  }
  return names;
}

std::vector<std::string> ProbeProcfs(const std::string& dir) {
  // One directory per GPU, named by PCI bus id: sorted, that is NVML's index order.
  std::vector<std::filesystem::path> gpus;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.is_directory(ec)) gpus.push_back(entry.path());
  std::sort(gpus.begin(), gpus.end());
  std::vector<std::string> names;
  for (const auto& gpu : gpus) {
    std::ifstream info(gpu / "information");
    if (!info) continue;
    std::string line, model = "unknown";
    while (std::getline(info, line)) {
      if (line.rfind("Model:", 0) == 0) {
        model = Trim(line.substr(6));
        break;
      }
    }
    names.push_back(model);
  }
  return names;
}

}  // namespace

GpuInventory SystemGpuProbe::Probe() {
  if (auto names = ProbeNvml(options_.nvml_library); names && !names->empty())
    return {std::move(*names), "nvml"};
  if (auto names = ProbeNvidiaSmi(options_.nvidia_smi); !names.empty())
    return {std::move(names), "nvidia-smi"};
  if (auto names = ProbeProcfs(options_.procfs_dir); !names.empty())
    return {std::move(names), "procfs"};
  return {{}, "none"};
}

GpuInventory DeclaredGpus(int count, const std::string& name) {
  return {std::vector<std::string>(static_cast<size_t>(std::max(count, 0)), name), "declared"};
}

}  // namespace herd::agent
