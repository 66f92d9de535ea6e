#include "controller/bootstrap/agent_bootstrap.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string_view>

#include "controller/bootstrap/packaged_files.hpp"
#include "controller/bootstrap/remote_scripts.hpp"
#include "controller/bootstrap/sha256.hpp"
#include "controller/ssh/parallel.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"
#include "shared/tls/certs.hpp"

namespace herd::controller {
namespace {

using std::chrono::milliseconds;

// One file as it must be on the node.
struct WantedFile {
  std::string key;        // the probe's name for it (RemoteHashedFiles)
  std::string path;       // where it goes: relative to the agent dir, or absolute
  std::string_view data;  // owned by the caller
  std::string sha;
  std::string_view mode;
  milliseconds timeout = limits::kBootstrapCommandTimeout;
};

struct NodeOutcome {
  bool uploaded = false;
  bool restarted = false;
  int pid = 0;
};

SshTarget Named(SshTarget t, const std::string& fallback) {
  if (t.name.empty()) t.name = fallback;
  return t;
}

// The ssh layer's errors already start with "<node> (<ip>:<port>): "; ours put a verb between.
std::string WithoutTarget(const SshTarget& t, const std::string& message) {
  std::string prefix = DescribeTarget(t) + ": ";
  return message.starts_with(prefix) ? message.substr(prefix.size()) : message;
}

Status NodeError(const SshTarget& t, std::string_view verb, const Status& s) {
  return Status(s.code(), DescribeTarget(t) + ": " + std::string(verb) + ": " +
                              WithoutTarget(t, s.message()));
}

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// Runs a script; a timeout or non-zero exit is an error carrying the script's stderr.
Result<std::string> RunScript(SshRunner& ssh, const SshTarget& t, const std::string& script,
                              std::string_view what, milliseconds timeout,
                              std::string_view stdin_data = {}) {
  // The login shell may be zsh or fish: the scripts are POSIX sh and run as such.
  HERD_ASSIGN_OR_RETURN(ProcResult r,
                        ssh.Run(t, "/bin/sh -c " + ShellQuote(script), timeout, stdin_data));
  if (r.timed_out) {
    return DeadlineExceeded(std::string(what) + ": timed out after " + FormatSeconds(timeout));
  }
  if (r.exit_code != 0) {
    std::string err = Trimmed(r.err.empty() ? r.out : r.err);
    return Internal(std::string(what) + " failed (exit " + std::to_string(r.exit_code) + ")" +
                    (err.empty() ? "" : ": " + err));
  }
  return r.out;
}

// OK, the one failure as it is, or "k of n nodes failed: ..." with the first failure's code.
Status Combine(const std::vector<Status>& per_node) {
  std::vector<const Status*> failed;
  for (const auto& s : per_node) {
    if (!s.ok()) failed.push_back(&s);
  }
  if (failed.empty()) return Status::Ok();
  if (failed.size() == 1) return *failed[0];
  std::string joined;
  for (const Status* s : failed) joined += (joined.empty() ? "" : "; ") + s->message();
  return Status(failed[0]->code(), std::to_string(failed.size()) + " of " +
                                       std::to_string(per_node.size()) +
                                       " nodes failed: " + joined);
}

// Runs fn for every node in parallel and combines the failures.
template <typename Fn>
Status ForEachNode(size_t n, Fn fn) {
  std::vector<Status> per_node(n);
  Status s = ForEachParallel(n, [&](size_t i) {
    per_node[i] = fn(i);
    return Status::Ok();
  });
  HERD_RETURN_IF_ERROR(s);  // only an exception thrown by fn
  return Combine(per_node);
}

struct NodeCerts {
  std::string ca, cert, key;
};

Result<NodeCerts> ReadCerts(const std::string& dir) {
  NodeCerts c;
  HERD_ASSIGN_OR_RETURN(c.ca, ReadFile(dir + "/" + std::string(tls::kCaCertFile)));
  HERD_ASSIGN_OR_RETURN(c.cert, ReadFile(dir + "/" + std::string(tls::kAgentCertFile)));
  HERD_ASSIGN_OR_RETURN(c.key, ReadFile(dir + "/" + std::string(tls::kAgentKeyFile)));
  return c;
}

// BootstrapOptions::host_cache_dir: the one copy of this binary that nodes with a host_home get
// hard links to. "" when there is none (no such directory given, or it cannot be written).
std::string CacheBinary(const BootstrapOptions& o, std::string_view herdlet,
                        const std::string& sha) {
  if (o.host_cache_dir.empty()) return "";
  const std::string name = "herdlet-" + sha.substr(0, 16);
  const std::string path = o.host_cache_dir + "/" + name;
  auto wrote = WriteFileIfChanged(path, herdlet, 0755, Durability::kProcessCrash);
  if (!wrote.ok()) {
    HERD_LOG(kWarn) << "cannot keep the agent binary in " << o.host_cache_dir << ": "
                    << wrote.status().message() << "; copying it to each node";
    return "";
  }
  // Older versions: their nodes hold their own links.
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(o.host_cache_dir, ec)) {
    std::string n = e.path().filename().string();
    if (n.starts_with("herdlet-") && n != name) std::filesystem::remove(e.path(), ec);
  }
  return path;
}

bool SameFile(const std::string& a, const std::string& b) {
  struct stat x {
  }, y{};
  return ::stat(a.c_str(), &x) == 0 && ::stat(b.c_str(), &y) == 0 && x.st_dev == y.st_dev &&
         x.st_ino == y.st_ino;
}

// Where `path` (relative to the agent directory) of a node with a host_home lies here, its
// directory made; the agent directory and its certificates private, as the probe leaves them.
Result<std::string> LocalPath(const AgentInstall& node, const BootstrapOptions& o,
                              const std::string& path) {
  const std::string agent_dir = node.host_home + "/" + o.remote_dir;
  const std::string dest = agent_dir + "/" + path;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(dest).parent_path(), ec);
  if (ec) return IoError("cannot create the directory of " + dest + ": " + ec.message());
  for (const std::string& d : {agent_dir, agent_dir + "/certs"}) {
    if (::chmod(d.c_str(), 0700) != 0 && errno != ENOENT) return ErrnoError("chmod " + d, errno);
  }
  return dest;
}

// AgentInstall::host_home: puts the binary there, a hard link to `cached` where it can (no data
// written: a cold 8-node launch wrote 96 MB here) and a copy otherwise. True when the node's
// binary changed.
Result<bool> PlaceBinary(const AgentInstall& node, std::string_view herdlet,
                         const std::string& cached, const BootstrapOptions& o) {
  HERD_ASSIGN_OR_RETURN(const std::string dest, LocalPath(node, o, std::string(kRemoteHerdlet)));
  std::error_code ec;
  if (!cached.empty()) {
    if (SameFile(cached, dest)) return false;
    // A node whose own copy holds these bytes (placed before the cache existed) gets the link
    // too, without a restart.
    bool changed = true;
    if (std::filesystem::file_size(dest, ec) == herdlet.size() && !ec) {
      auto old = ReadFile(dest);
      changed = !old.ok() || *old != herdlet;
    }
    const std::string tmp = dest + ".link.tmp";
    ::unlink(tmp.c_str());
    if (::link(cached.c_str(), tmp.c_str()) == 0) {
      if (::rename(tmp.c_str(), dest.c_str()) == 0) return changed;
      ::unlink(tmp.c_str());
    }
    HERD_LOG(kDebug) << "cannot link " << cached << " to " << dest << ": " << std::strerror(errno)
                     << "; copying";
  }
  return WriteFileIfChanged(dest, herdlet, 0755, Durability::kProcessCrash);
}

// A file of `node` written here, into its host_home (AgentInstall). True when it changed.
Result<bool> PlaceFile(const AgentInstall& node, const BootstrapOptions& o, const std::string& path,
                       std::string_view data, std::string_view mode) {
  HERD_ASSIGN_OR_RETURN(const std::string dest, LocalPath(node, o, path));
  const auto bits = static_cast<mode_t>(std::stoul(std::string(mode), nullptr, 8));
  return WriteFileIfChanged(dest, data, bits, Durability::kProcessCrash);
}

Result<NodeOutcome> InstallOne(SshRunner& ssh, const SshTarget& t, const AgentInstall& node,
                               const NodeCerts& certs, std::string_view herdlet,
                               const std::string& herdlet_sha, std::string_view herdlet_gz,
                               const std::string& cached, const BootstrapOptions& o) {
  const std::string& dir = o.remote_dir;
  std::vector<WantedFile> files;
  auto want = [&](std::string key, std::string path, std::string_view data, std::string_view mode) {
    files.push_back({std::move(key), std::move(path), data, Sha256Hex(data), mode,
                     limits::kBootstrapCommandTimeout});
  };
  files.push_back({std::string(kRemoteHerdlet), std::string(kRemoteHerdlet), herdlet, herdlet_sha,
                   "0755", limits::kBootstrapUploadTimeout});
  want("certs/ca.crt", "certs/ca.crt", certs.ca, "0644");
  want("certs/agent.crt", "certs/agent.crt", certs.cert, "0644");
  want("certs/agent.key", "certs/agent.key", certs.key, "0600");
  want(std::string(kRemoteConfig), std::string(kRemoteConfig), node.agent_config_yaml, "0600");

  // A node whose home is a directory here gets these files put there (the binary as a link to
  // the kept copy), and its probe need not hash them: it only tells how the agent is run and
  // whether it runs. With the supervisor script too: where the node turns out to run systemd it
  // is an unused file.
  const bool local = !node.host_home.empty() && !dir.empty() && dir[0] != '/';
  bool placed = false;
  std::vector<std::string> probe_hashes;
  if (local) {
    want(std::string(kRemoteSupervise), std::string(kRemoteSupervise), SuperviseScript(), "0755");
    // The agent's state directory too: the probe then makes no directory (ProbeAndStartScript).
    HERD_RETURN_IF_ERROR(LocalPath(node, o, "state/.").status());
    HERD_ASSIGN_OR_RETURN(placed, PlaceBinary(node, herdlet, cached, o));
    for (const auto& f : files) {
      if (f.key == kRemoteHerdlet) continue;
      HERD_ASSIGN_OR_RETURN(bool wrote, PlaceFile(node, o, f.path, f.data, f.mode));
      placed = placed || wrote;
    }
    probe_hashes = {std::string(kRemoteUnitKey)};
  } else {
    probe_hashes = RemoteHashedFiles();
  }
  // A local node has nothing to receive in the supervise mode, so its probe also (re)starts the
  // agent there when it must: one ssh session per node fewer.
  HERD_ASSIGN_OR_RETURN(
      std::string probe_out,
      RunScript(
          ssh, t,
          local ? ProbeAndStartScript(dir, probe_hashes, placed) : ProbeScript(dir, probe_hashes),
          local ? "probing the node and starting herdlet" : "probing the node",
          limits::kBootstrapCommandTimeout));
  HERD_ASSIGN_OR_RETURN(NodeProbe probe, ParseProbe(probe_out));
  if (local) {
    if (std::optional<int> pid = ParseStarted(probe_out)) {
      HERD_LOG(kInfo) << DescribeTarget(t) << ": herdlet "
                      << (probe.pid > 0 ? "restarted" : "started") << " (pid " << *pid << ")";
      NodeOutcome started;
      started.uploaded = placed;
      started.restarted = true;
      started.pid = *pid;
      return started;
    }
    for (const auto& f : files) probe.sha[f.key] = f.sha;
  }

  std::string unit;
  if (probe.mode == AgentMode::kSupervise) {
    if (!local) {
      want(std::string(kRemoteSupervise), std::string(kRemoteSupervise), SuperviseScript(), "0755");
    }
  } else {
    UnitPaths paths{probe.dir + "/" + std::string(kRemoteHerdlet),
                    probe.dir + "/" + std::string(kRemoteConfig), probe.dir, probe.home};
    HERD_ASSIGN_OR_RETURN(unit,
                          RenderUnit(probe.mode == AgentMode::kSystemdSystem ? SystemUnitTemplate()
                                                                             : UserUnitTemplate(),
                                     paths));
    want(std::string(kRemoteUnitKey), probe.unit_path, unit, "0644");
  }

  NodeOutcome out;
  // Every differing file in one ssh session (a session costs more than a small file): the agent
  // binary through stdin, the small text files inside the script; and when anything changed, the
  // (re)start in that same session (one ssh session per node fewer on a cold launch).
  std::vector<UploadItem> items;
  std::string_view stdin_data;
  milliseconds timeout = limits::kBootstrapCommandTimeout;
  std::string names;
  for (const auto& f : files) {
    if (probe.sha[f.key] == f.sha) continue;
    const bool big = f.key == kRemoteHerdlet;
    items.push_back({f.path, std::string(f.mode), f.data, big, ""});
    if (big) stdin_data = f.data;
    if (big && probe.gzip && !herdlet_gz.empty()) {
      stdin_data = herdlet_gz;
      items.back().gunzip_sha256 = f.sha;
    }
    timeout = std::max(timeout, f.timeout);
    names += (names.empty() ? "" : ", ") + f.path;
  }
  if (items.empty() && !placed && probe.up && probe.pid > 0) {
    out.pid = probe.pid;
    return out;
  }
  out.uploaded = placed;
  std::string started;
  if (!items.empty()) {
    HERD_ASSIGN_OR_RETURN(started,
                          RunScript(ssh, t, UploadAndStartScript(dir, items, probe.mode),
                                    "uploading " + names + " and starting herdlet",
                                    timeout + limits::kBootstrapCommandTimeout, stdin_data));
    HERD_LOG(kDebug) << DescribeTarget(t) << ": uploaded " << names;
    out.uploaded = true;
  } else {
    HERD_ASSIGN_OR_RETURN(started, RunScript(ssh, t, StartScript(dir, probe.mode),
                                             "starting herdlet", limits::kBootstrapCommandTimeout));
  }
  HERD_ASSIGN_OR_RETURN(out.pid, ParsePid(started));
  out.restarted = true;
  HERD_LOG(kInfo) << DescribeTarget(t) << ": herdlet " << (probe.pid > 0 ? "restarted" : "started")
                  << " (pid " << out.pid << ")";
  return out;
}

Status CheckOptions(const BootstrapOptions& o) {
  if (o.remote_dir.empty()) return InvalidArgument("bootstrap: empty remote agent directory");
  return Status::Ok();
}

}  // namespace

Result<BootstrapResult> BootstrapAgents(SshRunner& ssh, const std::vector<AgentInstall>& nodes,
                                        const BootstrapOptions& options) {
  HERD_RETURN_IF_ERROR(CheckOptions(options));
  if (options.herdlet_path.empty()) return InvalidArgument("bootstrap: no herdlet binary given");
  // Read and hashed once for all nodes.
  auto herdlet = ReadFile(options.herdlet_path);
  if (!herdlet.ok()) {
    return Status(herdlet.status().code(), "cannot install herdlet: " + herdlet.status().message());
  }
  const std::string herdlet_sha = Sha256Hex(*herdlet);
  // Its gzip copy, where the build left one made from this very file.
  std::string herdlet_gz;
  auto gz_of = ReadFile(options.herdlet_path + ".gz.sha256");
  if (gz_of.ok() && gz_of->substr(0, herdlet_sha.size()) == herdlet_sha) {
    if (auto gz = ReadFile(options.herdlet_path + ".gz"); gz.ok()) herdlet_gz = std::move(*gz);
  }

  std::vector<SshTarget> targets;
  std::vector<Result<NodeCerts>> certs;
  for (const auto& n : nodes) {
    targets.push_back(Named(n.target, n.node_name));
    certs.push_back(ReadCerts(n.certs_dir));
  }
  const bool any_local = std::any_of(nodes.begin(), nodes.end(),
                                     [](const AgentInstall& n) { return !n.host_home.empty(); });
  const std::string cached = any_local ? CacheBinary(options, *herdlet, herdlet_sha) : "";
  std::vector<NodeOutcome> outcomes(nodes.size());
  Status s = ForEachNode(nodes.size(), [&](size_t i) -> Status {
    const SshTarget& t = targets[i];
    if (!certs[i].ok()) return NodeError(t, "cannot install herdlet", certs[i].status());
    auto r =
        InstallOne(ssh, t, nodes[i], *certs[i], *herdlet, herdlet_sha, herdlet_gz, cached, options);
    if (!r.ok()) return NodeError(t, "cannot install herdlet", r.status());
    outcomes[i] = *r;
    return Status::Ok();
  });
  HERD_RETURN_IF_ERROR(s);
  BootstrapResult result;
  for (const auto& o : outcomes) {
    result.uploaded += o.uploaded;
    result.restarted += o.restarted;
    result.unchanged += !o.uploaded && !o.restarted;
    result.agent_pids.push_back(o.pid);
  }
  return result;
}

Status StopAgents(SshRunner& ssh, const std::vector<SshTarget>& nodes,
                  const BootstrapOptions& options) {
  HERD_RETURN_IF_ERROR(CheckOptions(options));
  return ForEachNode(nodes.size(), [&](size_t i) -> Status {
    auto r = RunScript(ssh, nodes[i], StopScript(options.remote_dir), "stopping herdlet",
                       limits::kBootstrapCommandTimeout);
    if (!r.ok()) return NodeError(nodes[i], "cannot stop herdlet", r.status());
    return Status::Ok();
  });
}

Result<std::vector<int>> AgentPids(SshRunner& ssh, const std::vector<SshTarget>& nodes,
                                   const BootstrapOptions& options) {
  HERD_RETURN_IF_ERROR(CheckOptions(options));
  std::vector<int> pids(nodes.size(), 0);
  HERD_RETURN_IF_ERROR(ForEachNode(nodes.size(), [&](size_t i) -> Status {
    auto out = RunScript(ssh, nodes[i], PidScript(options.remote_dir), "reading herdlet's pid",
                         limits::kBootstrapCommandTimeout);
    if (out.ok()) {
      auto pid = ParsePid(*out);
      if (pid.ok()) {
        pids[i] = *pid;
        return Status::Ok();
      }
      return NodeError(nodes[i], "cannot check herdlet", pid.status());
    }
    return NodeError(nodes[i], "cannot check herdlet", out.status());
  }));
  return pids;
}

}  // namespace herd::controller
