// GpuProbe of a real machine: NVML (dlopen), then nvidia-smi, then /proc/driver/nvidia/gpus.
// The first source that finds at least one GPU wins; "none" when no source does.
#pragma once

#include <string>

#include "agent/gpu/gpu_probe.hpp"

namespace herd::agent {

class SystemGpuProbe : public GpuProbe {
 public:
  struct Options {
    std::string nvml_library = "libnvidia-ml.so.1";  // dlopen name or path
    std::string nvidia_smi = "nvidia-smi";           // looked up in PATH unless it has a '/'
    std::string procfs_dir = "/proc/driver/nvidia/gpus";
  };

  SystemGpuProbe() = default;
  explicit SystemGpuProbe(Options options) : options_(std::move(options)) {}

  GpuInventory Probe() override;

 private:
  Options options_;
};

// The capacity a node's config declares, overriding detection: `count` GPUs named `name`.
GpuInventory DeclaredGpus(int count, const std::string& name);

}  // namespace herd::agent
