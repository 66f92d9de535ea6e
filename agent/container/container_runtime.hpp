// The seam between herdlet and a node's container runtime (podman from the distribution): start
// the node's long-lived container for an image, log in to a registry, remove containers. The real
// implementation runs podman; tests of the logic around it (node_container) use a fake.
#pragma once

#include <string>
#include <vector>

#include "shared/common/status.hpp"

namespace herd::agent {

// What a node's container is made of: host network, IPC and hostname, host paths bound at the
// same paths, the node's GPUs passed in.
struct ContainerConfig {
  std::string name;                  // podman's --name (node_container's ContainerName)
  std::string image;                 // "nvcr.io/nvidia/pytorch:24.01-py3"
  std::vector<std::string> mounts;   // absolute host paths, bound read-write at the same path
  std::vector<std::string> devices;  // podman --device values (GpuDeviceArgs)
  std::string label;                 // herd.agent=<label>: what RemoveLabelled removes
  // A cgroup directory the runtime's own processes (conmon) start in, so that they outlive the
  // job that started the container (its cgroup is emptied when it ends); "" = where we are.
  std::string runtime_cgroup;
};

// A started container as herd finds it again: its id and its first process as the host sees it
// (jobs enter its namespaces through that process), with the start time that proves the pid was
// not reused, and the image's environment (PATH and the variables the image sets).
struct RunningContainer {
  std::string id;
  int pid = 0;
  uint64_t start_time = 0;       // /proc/PID/stat field 22
  std::vector<std::string> env;  // "KEY=VALUE", as the image configures them
};

struct RegistryLogin {
  std::string server;  // "" = the image's registry
  std::string username;
  std::string password;  // goes to the runtime on stdin, never in an argument
};

class ContainerRuntime {
 public:
  virtual ~ContainerRuntime() = default;
  // OK when the runtime can be run; else why not, in words ("podman is not installed").
  virtual Status Check() = 0;
  virtual Status Login(const RegistryLogin& login) = 0;
  // Starts the container (pulling the image if it is not on the node), replacing a stopped one of
  // the same name. Errors carry the runtime's own last line ("... manifest unknown").
  virtual Result<RunningContainer> Start(const ContainerConfig& config) = 0;
  // Removes (SIGKILL) every container carrying the label; how many were removed.
  virtual Result<int> RemoveLabelled(const std::string& label) = 0;
};

// podman, with runc as its OCI runtime where runc is installed (crun refuses hosts with hybrid
// cgroups), explicit ulimits equal to this process's current limits (podman's defaults are above
// them on such hosts and refused).
class PodmanRuntime : public ContainerRuntime {
 public:
  PodmanRuntime();
  Status Check() override;
  Status Login(const RegistryLogin& login) override;
  Result<RunningContainer> Start(const ContainerConfig& config) override;
  Result<int> RemoveLabelled(const std::string& label) override;

  // The argv of Start's `podman run` (also for tests).
  std::vector<std::string> RunArgv(const ContainerConfig& config) const;

 private:
  std::vector<std::string> podman_;  // podman and its global flags
};

// The --device values for the node's NVIDIA GPUs: the CDI name when a CDI spec for them exists in
// one of cdi_dirs, else every /dev/nvidia* device file under dev_dir; empty without GPUs.
std::vector<std::string> GpuDeviceArgs(const std::vector<std::string>& cdi_dirs,
                                       const std::string& dev_dir);

// The registry an image reference names ("nvcr.io" for nvcr.io/nvidia/pytorch:24.01-py3,
// "docker.io" for ubuntu:22.04), as podman login takes it.
std::string RegistryOf(const std::string& image);

// The image as podman pulls it without asking: a Docker Hub short name gets its registry, as
// docker (and SkyPilot) read it ("ubuntu:22.04" -> "docker.io/library/ubuntu:22.04").
std::string QualifiedImage(const std::string& image);

}  // namespace herd::agent
