#include <doctest/doctest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "agent/gpu/system_gpu_probe.hpp"
#include "tests/unit/test_support.hpp"

namespace fs = std::filesystem;
using herd::agent::DeclaredGpus;
using herd::agent::GpuInventory;
using herd::agent::SystemGpuProbe;

namespace {

using herd::testing::ScopedEnv;
using herd::testing::TempDir;

void WriteFile(const fs::path& path, const std::string& text, bool executable = false) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
  if (executable) ::chmod(path.c_str(), 0755);
}

// Options where every source is absent unless a test provides it.
SystemGpuProbe::Options Nothing(const TempDir& dir) {
  SystemGpuProbe::Options o;
  o.nvml_library = dir / "no-libnvidia-ml.so.1";
  o.nvidia_smi = dir / "no-nvidia-smi";
  o.procfs_dir = dir / "no-procfs";
  return o;
}

// A fake nvidia-smi that prints `output` when called with exactly the query herd makes.
fs::path FakeNvidiaSmi(const TempDir& dir, const std::string& output, int exit_code = 0) {
  fs::path script = fs::path(dir / "bin/nvidia-smi");
  WriteFile(script,
            "#!/bin/sh\n"
            "[ \"$1 $2\" = '--query-gpu=name --format=csv,noheader' ] || exit 9\n"
            "printf '" +
                output +
                "'\n"
                "exit " +
                std::to_string(exit_code) + "\n",
            true);
  return script;
}

}  // namespace

TEST_CASE("NVML is used first and reports every GPU by name") {
  TempDir dir{"herd-gpu-test"};
  ScopedEnv gpus("FAKE_NVML_GPUS", "NVIDIA H200,NVIDIA H200");
  auto options = Nothing(dir);
  options.nvml_library = FAKE_NVML_PATH;
  options.nvidia_smi = FakeNvidiaSmi(dir, "Tesla T4\\n").string();  // must not be consulted
  GpuInventory inv = SystemGpuProbe(options).Probe();
  CHECK(inv.source == "nvml");
  CHECK(inv.count() == 2);
  CHECK(inv.names == std::vector<std::string>{"NVIDIA H200", "NVIDIA H200"});
}

TEST_CASE("a failing nvmlInit falls back to nvidia-smi") {
  TempDir dir{"herd-gpu-test"};
  ScopedEnv gpus("FAKE_NVML_GPUS", "NVIDIA H200");
  ScopedEnv fail("FAKE_NVML_FAIL_INIT", "1");
  auto options = Nothing(dir);
  options.nvml_library = FAKE_NVML_PATH;
  options.nvidia_smi = FakeNvidiaSmi(dir,
                                     "NVIDIA A100-SXM4-80GB\\nNVIDIA A100-SXM4-80GB\\n"
                                     "NVIDIA A100-SXM4-80GB\\n")
                           .string();
  GpuInventory inv = SystemGpuProbe(options).Probe();
  CHECK(inv.source == "nvidia-smi");
  CHECK(inv.names == std::vector<std::string>(3, "NVIDIA A100-SXM4-80GB"));
}

TEST_CASE("NVML with zero GPUs falls through to the next source") {
  TempDir dir{"herd-gpu-test"};
  ScopedEnv gpus("FAKE_NVML_GPUS", "");
  auto options = Nothing(dir);
  options.nvml_library = FAKE_NVML_PATH;
  options.nvidia_smi = FakeNvidiaSmi(dir, "Tesla T4\\n").string();
  GpuInventory inv = SystemGpuProbe(options).Probe();
  CHECK(inv.source == "nvidia-smi");
  CHECK(inv.names == std::vector<std::string>{"Tesla T4"});
}

TEST_CASE("nvidia-smi is found in PATH by name") {
  TempDir dir{"herd-gpu-test"};
  FakeNvidiaSmi(dir, "  NVIDIA L4  \\n\\n");
  ScopedEnv path("PATH", (dir / "bin") + ":" + ::getenv("PATH"));
  auto options = Nothing(dir);
  options.nvidia_smi = "nvidia-smi";
  GpuInventory inv = SystemGpuProbe(options).Probe();
  CHECK(inv.source == "nvidia-smi");
  CHECK(inv.names == std::vector<std::string>{"NVIDIA L4"});  // trimmed, blank lines skipped
}

TEST_CASE("a failing nvidia-smi falls back to procfs, in PCI bus order") {
  TempDir dir{"herd-gpu-test"};
  auto options = Nothing(dir);
  options.nvidia_smi = FakeNvidiaSmi(dir, "NVIDIA-SMI has failed\\n", 9).string();
  fs::path procfs = fs::path(dir / "gpus");
  WriteFile(procfs / "0000:3b:00.0" / "information",
            "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 150\nGPU UUID: \t GPU-2\n");
  WriteFile(procfs / "0000:1a:00.0" / "information",
            "Model: \t\t NVIDIA H200\nIRQ:   \t\t 140\nGPU UUID: \t GPU-1\n");
  options.procfs_dir = procfs.string();
  GpuInventory inv = SystemGpuProbe(options).Probe();
  CHECK(inv.source == "procfs");
  CHECK(inv.names == std::vector<std::string>{"NVIDIA H200", "NVIDIA H100 80GB HBM3"});
}

TEST_CASE("a hung nvidia-smi is killed and the probe moves on") {
  TempDir dir{"herd-gpu-test"};
  auto options = Nothing(dir);
  fs::path script = fs::path(dir / "bin/nvidia-smi");
  fs::path pid_file = fs::path(dir / "pid");
  WriteFile(script, "#!/bin/sh\necho $$ > " + pid_file.string() + "\nexec sleep 1000\n", true);
  options.nvidia_smi = script.string();
  WriteFile(fs::path(dir / "gpus/0000:01:00.0") / "information", "Model: \t\t Tesla V100\n");
  options.procfs_dir = dir / "gpus";
  auto start = std::chrono::steady_clock::now();
  GpuInventory inv = SystemGpuProbe(options).Probe();
  auto took = std::chrono::steady_clock::now() - start;
  CHECK(inv.source == "procfs");
  CHECK(took < std::chrono::seconds(8));
  int pid = 0;
  std::ifstream(pid_file) >> pid;
  REQUIRE(pid > 0);
  CHECK(::kill(pid, 0) != 0);  // killed and reaped, not left behind
}

TEST_CASE("no source: none") {
  TempDir dir{"herd-gpu-test"};
  GpuInventory inv = SystemGpuProbe(Nothing(dir)).Probe();
  CHECK(inv.source == "none");
  CHECK(inv.count() == 0);
}

TEST_CASE("declared GPUs") {
  GpuInventory inv = DeclaredGpus(4, "NVIDIA H200");
  CHECK(inv.source == "declared");
  CHECK(inv.names == std::vector<std::string>(4, "NVIDIA H200"));
  CHECK(DeclaredGpus(0, "x").count() == 0);
}
