#include "agent/gpu/system_gpu_probe.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

#include "agent/gpu/nvml_api.hpp"
#include "agent/gpu/run_captured.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace herd::agent {
namespace {

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
  auto init = reinterpret_cast<nvml::InitFn>(::dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<nvml::ShutdownFn>(::dlsym(lib, "nvmlShutdown"));
  auto get_count = reinterpret_cast<nvml::GetCountFn>(::dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto get_handle =
      reinterpret_cast<nvml::GetHandleFn>(::dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto get_name = reinterpret_cast<nvml::GetNameFn>(::dlsym(lib, "nvmlDeviceGetName"));
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
        nvml::nvmlDevice_t device = nullptr;
        char name[nvml::kNameBufferSize] = {};
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

std::vector<std::string> ProbeNvidiaSmi(const std::string& program) {
  std::vector<std::string> names;
  const CapturedRun run = RunCaptured({program, "--query-gpu=name", "--format=csv,noheader"},
                                      limits::kGpuProbeCommandTimeout);
  if (!run.ok()) return names;
  const std::string* out = &run.output;
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
