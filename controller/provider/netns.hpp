// Named network namespaces (/run/netns, as `ip netns` makes them) and the processes inside them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "shared/common/status.hpp"

namespace herd::controller::netns {

std::string Path(const std::string& name);  // /run/netns/<name>
bool Exists(const std::string& name);

// `ip netns add` unless it exists.
Status Ensure(const std::string& name);
// `ip netns delete`; OK when it does not exist.
Status Delete(const std::string& name);

// Names in /run/netns that start with prefix, sorted.
std::vector<std::string> ListWithPrefix(const std::string& prefix);

// Live (non-zombie) processes whose network namespace is the named one.
std::vector<pid_t> ProcessesIn(const std::string& name);

// SIGTERM to every process in the namespace, SIGKILL to what is left after `grace`, repeated
// until none is left (a process may fork while it is killed) or `timeout` passes. Zombies are
// skipped: PID 1 here reaps slowly.
Status KillAll(const std::string& name, std::chrono::milliseconds grace,
               std::chrono::milliseconds timeout);

// Runs `ip <args>` (with -n <ns> first when ns is not empty); the error carries ip's stderr.
Status Ip(const std::string& ns, const std::vector<std::string>& args);
// Its stdout.
Result<std::string> IpOutput(const std::string& ns, const std::vector<std::string>& args);

// Runs `ip [-n <ns>] [-force] -batch -` with one ip command per line (no options on a line): one
// process for many commands. With force, a failing line does not stop the rest (the error still
// names the first failure).
Status IpBatch(const std::string& ns, const std::vector<std::string>& lines, bool force = false);
// Names of the links in the namespace ("" = this process's), from one `ip -o link show`; a veth
// end "n0@if5" is "n0".
Result<std::vector<std::string>> LinkNames(const std::string& ns);

// True for a live (non-zombie) process.
bool IsAlive(pid_t pid);

}  // namespace herd::controller::netns
