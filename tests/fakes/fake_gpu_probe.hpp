// A GpuProbe that reports `count` GPUs of one type, as NVML would (0: none).
#pragma once

#include <string>
#include <vector>

#include "agent/gpu/gpu_probe.hpp"

namespace herd::testing {

class FakeGpus : public agent::GpuProbe {
 public:
  explicit FakeGpus(int count) : count_(count) {}
  agent::GpuInventory Probe() override {
    return {std::vector<std::string>(count_, "NVIDIA H200"), count_ ? "nvml" : "none"};
  }

 private:
  int count_;
};

}  // namespace herd::testing
