// Jobs in containers (`image_id: docker:IMAGE`): one container per node, image and mounts, started
// by the first job process that needs it and kept running; every job process (setup, run, exec)
// enters it.
//
// The worker runs a job process as `herdlet --container-run ... -- bash -c SCRIPT`
// (ContainerRunArgv) instead of `bash -c SCRIPT`, or, when the container already runs, goes
// straight to step 2 (WarmEntry). That process, under the usual supervisor (so output, exit
// codes, hang watch, cancel and signals work as without a container):
//   1. takes the container's lock, reuses the container its record names when that process still
//      runs, else checks the runtime, logs in (SKYPILOT_DOCKER_*), starts it and records it;
//   2. enters the container's mount, pid, IPC and UTS namespaces and root through its first
//      process (nsenter) and execs the command there, with the image's environment plus the
//      job's variables. The command stays a descendant of the supervisor, in the job's cgroup and
//      with the job's marker, so `herd cancel` stops it as any job process; entering costs
//      milliseconds where `podman exec` costs ~0.5 s (measured here).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/container/container_runtime.hpp"
#include "herd/v1/common.pb.h"
#include "shared/common/agent_layout.hpp"
#include "shared/common/status.hpp"

namespace herd::agent {

// The first argument of herdlet that selects RunContainerMain.
inline constexpr const char* kContainerRunFlag = "--container-run";
// ... and the one that removes the node's containers (`herd down`).
inline constexpr const char* kContainerRemoveFlag = "--remove-containers";
// The one that checks the node for an image before any job needs it (`herd launch`), the
// registry login's variables and the exit code of a one-line error are in
// shared/common/agent_layout.hpp (kContainerCheckFlag, kDocker*Env, kContainerErrorExit): the
// controller uses them too.

// What the containers of the agent with this state_dir on this node are labelled with (the
// hostname too: test nodes on one machine share a path and podman's store).
std::string ContainerLabel(const std::string& state_dir);

// The container's name: one per agent (state_dir and hostname), image and set of mounts, so an
// `exec` of the same task reuses the container and one with other file_mounts gets its own.
std::string ContainerName(const std::string& state_dir, const std::string& image,
                          std::vector<std::string> mounts);

// The argv that runs `command` in the node's container for `spec`; mounts beginning "~/" and the
// cwd are relative to home. env_keys: the job's variables (kept inside; the rest of the agent's
// environment is not).
std::vector<std::string> ContainerRunArgv(const std::string& herdlet, const std::string& state_dir,
                                          const herd::v1::ContainerSpec& spec,
                                          const std::string& home, const std::string& cwd,
                                          const std::vector<std::string>& env_keys,
                                          const std::vector<std::string>& command);

// The warm path, decided by the agent itself: when the container for spec already runs (its
// record proves it), how to spawn `command` in it directly (EnterArgv with the environment of
// ContainerEnv), skipping the start of a herdlet; nullopt when it must be ensured first
// (ContainerRunArgv). job_env: the job's variables, added to the agent's environment.
struct DirectEntry {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // SpawnRequest's env and unset_env
  std::vector<std::string> unset_env;
};
std::optional<DirectEntry> WarmEntry(const std::string& state_dir,
                                     const herd::v1::ContainerSpec& spec, const std::string& home,
                                     const std::string& cwd,
                                     const std::map<std::string, std::string>& job_env,
                                     const std::vector<std::string>& command);

// The login for image: none without a username; the server is the image's registry unless given.
RegistryLogin LoginFor(const std::string& image, const std::string& username,
                       const std::string& password, const std::string& server);

// What a node needs before it can start a container of any image: the runtime runs and, with a
// username, the registry takes the login. The error says which, without node or image (callers
// name them): "no container runtime: podman is not installed ...", "the registry R refused ...".
Status CheckRuntimeAndLogin(ContainerRuntime& runtime, const RegistryLogin& login);

// Step 1 above: the running container for config (records under state_dir/containers). login:
// used (before a start only) when its username is set. Errors are one line naming the image.
Result<RunningContainer> EnsureContainer(ContainerRuntime& runtime, const std::string& state_dir,
                                         const ContainerConfig& config, const RegistryLogin& login);

// The command that runs `command` in the container, in cwd (nsenter's argv). proc: where the
// container process's root is looked into (tests give a directory of their own).
std::vector<std::string> EnterArgv(const RunningContainer& c, const std::string& cwd,
                                   const std::vector<std::string>& command,
                                   const std::string& proc = "/proc");

// The environment inside: the image's variables, then those of `current` named by keep (the
// job's) and HOME, USER, LOGNAME, TERM, LANG and the process group marker; never the registry
// password.
std::vector<std::string> ContainerEnv(const std::vector<std::string>& image_env,
                                      const std::vector<std::string>& current,
                                      const std::vector<std::string>& keep);

// Removes every container this agent (state_dir) started, and their records; how many.
Result<int> RemoveContainers(ContainerRuntime& runtime, const std::string& state_dir);

// `herdlet --container-run ...`, `herdlet --remove-containers STATE_DIR` and `herdlet
// --check-container-runtime IMAGE [--login-stdin]`: argv[0] is the flag. An error is one line on
// stderr, exit 125 (as podman's own errors); the check's is "herd: " and CheckRuntimeAndLogin's.
int RunContainerMain(int argc, char** argv);

}  // namespace herd::agent
