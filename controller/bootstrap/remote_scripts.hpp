// The shell commands bootstrap runs on a node, and the reading of their output. Pure functions:
// the scripts are POSIX sh, tested locally in tests/unit/controller/bootstrap/bootstrap_test.cpp.
//
// Node layout, under the agent directory D (relative to the login user's home, or absolute):
//   D/bin/herdlet, D/bin/herdlet-supervise, D/certs/{ca.crt,agent.crt,agent.key}, D/herdlet.yaml,
//   D/state/ (herdlet writes its supervisor program to D/state/bin/herd-step-<hash> itself), and
//   D/herdlet.ready (herdlet's pid, written by herdlet once it runs), and without systemd:
//   D/supervise.pid, D/herdlet.pid, D/herdlet.log.
// herdlet runs in D, so relative paths in herdlet.yaml (certs: certs) are relative to D.
#pragma once

#include "controller/ssh/ssh_command.hpp"  // ShellQuote

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/common/status.hpp"

namespace herd::controller {

// Files compared by hash, as paths relative to D ("unit" stands for the systemd unit's path).
inline constexpr std::string_view kRemoteHerdlet = "bin/herdlet";
inline constexpr std::string_view kRemoteSupervise = "bin/herdlet-supervise";
inline constexpr std::string_view kRemoteConfig = "herdlet.yaml";
inline constexpr std::string_view kRemoteUnitKey = "unit";
// herdlet's ready file (its config's ready_file: the caller's agent config must name it): the
// agent writes its pid there once it runs, and the start script waits for that.
inline constexpr std::string_view kRemoteReadyFile = "herdlet.ready";
std::vector<std::string> RemoteHashedFiles();  // the above plus certs/ca.crt, agent.crt, agent.key

// How the agent is kept running on a node.
enum class AgentMode { kSupervise, kSystemdSystem, kSystemdUser };

// What the probe found on a node.
struct NodeProbe {
  std::string dir;   // D, absolute
  std::string home;  // the login user's $HOME
  AgentMode mode = AgentMode::kSupervise;
  std::string unit_path;                   // where the unit file goes in a systemd mode
  std::map<std::string, std::string> sha;  // RemoteHashedFiles() -> hex, "" when missing
  int pid = 0;                             // herdlet's pid, 0 when it does not run
  bool up = false;                         // it runs under its supervisor (or as the active unit)
  bool gzip = false;                       // gzip is on the node's PATH
};

// 'it'\''s' quoting for sh.

// Makes D/{bin,certs,state} (D and certs 0700) and prints the probe; see ParseProbe.
// Only the files named in `hashed` (keys of RemoteHashedFiles()) are hashed; the others are
// reported missing (the caller knows what they hold). `dirs_made`: the caller made those
// directories with those modes (a node whose home is a directory of this machine), so the script
// runs no mkdir or chmod.
std::string ProbeScript(const std::string& remote_dir,
                        const std::vector<std::string>& hashed = RemoteHashedFiles(),
                        bool dirs_made = false);
Result<NodeProbe> ParseProbe(const std::string& out);

// One upload session for many files: each (path relative to D or absolute, mode as octal "0600",
// data) is written through a temporary file and a rename, its directory made where missing.
// The file whose data is empty-and-from-stdin (at most one: `from_stdin`) takes the session's
// stdin; the others travel inside the script (text files without NUL bytes: certs, configs,
// scripts). With `gunzip_sha256` the stdin is gzip data: the node unpacks it and keeps the file
// only if its SHA-256 is that. On failure: "cannot write <path>" on stderr, non-zero exit.
struct UploadItem {
  std::string path;
  std::string mode;
  std::string_view data;
  bool from_stdin = false;
  std::string gunzip_sha256;
};
std::string UploadManyScript(const std::string& remote_dir, const std::vector<UploadItem>& items);

// Stops whatever agent runs (supervised or the unit), starts it in `mode`, waits until herdlet
// wrote its pid to kRemoteReadyFile (at most kAgentStartTimeout), and prints "pid N". On failure: a
// message and the end of the agent's log on stderr, non-zero exit, nothing left running.
std::string StartScript(const std::string& remote_dir, AgentMode mode);

// ProbeScript (with the directories made: the caller placed the files, LocalPath), then where the
// probe found the supervise mode and `restart` is set or herdlet does not run, what StartScript
// does there, ending "started N" instead of "pid N" (ParseStarted): for a node whose files were
// put in place from here, the probe and the start in one ssh session.
std::string ProbeAndStartScript(const std::string& remote_dir,
                                const std::vector<std::string>& hashed, bool restart);
// The pid of a "started N" line; none when the script started nothing.
std::optional<int> ParseStarted(const std::string& out);

// UploadManyScript, then StartScript, in one script for one ssh session. The upload runs in a
// subshell (its umask 077 must not reach the agent); its failure exits before anything starts.
std::string UploadAndStartScript(const std::string& remote_dir,
                                 const std::vector<UploadItem>& items, AgentMode mode);

// Stops the supervisor or unit and herdlet (SIGKILL after kAgentStopTimeout); jobs stay.
std::string StopScript(const std::string& remote_dir);

// Prints "pid N" (0 when herdlet does not run).
std::string PidScript(const std::string& remote_dir);

// The "pid N" line of a start or pid script.
Result<int> ParsePid(const std::string& out);

}  // namespace herd::controller
