// Detecting the GPUs of a node: NVML (dlopen of libnvidia-ml.so.1), then nvidia-smi, then
// /proc/driver/nvidia/gpus. A capacity declared in the agent's config overrides detection.
#pragma once

#include <string>
#include <vector>

namespace herd::agent {

struct GpuInventory {
  std::vector<std::string> names;  // one per GPU, index order
  std::string source;              // "nvml", "nvidia-smi", "procfs", "declared", "none"
  int count() const { return static_cast<int>(names.size()); }
};

class GpuProbe {
 public:
  virtual ~GpuProbe() = default;
  virtual GpuInventory Probe() = 0;
};

}  // namespace herd::agent
