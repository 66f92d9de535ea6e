#include "controller/ssh/ssh_runner.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <sstream>
#include <thread>

#include "controller/ssh/ssh_command.hpp"
#include "controller/ssh/tcp_probe.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace herd::controller {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A unix socket path holds 107 bytes; ssh needs "/%C" (41) plus a temporary ".<16 random>" (17).
constexpr size_t kMaxControlDirLength = 107 - 41 - 17;

Status CheckTarget(const SshTarget& t) {
  if (t.host.empty()) return InvalidArgument("ssh target without a host");
  if (t.port <= 0 || t.port > 65535) {
    return InvalidArgument(DescribeTarget(t) + ": bad ssh port " + std::to_string(t.port));
  }
  if (t.control_dir.size() > kMaxControlDirLength) {
    return InvalidArgument(DescribeTarget(t) + ": ControlMaster directory path too long (" +
                           std::to_string(t.control_dir.size()) + " > " +
                           std::to_string(kMaxControlDirLength) + " bytes): " + t.control_dir);
  }
  if (!t.control_dir.empty() && ::mkdir(t.control_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoError("mkdir " + t.control_dir, errno);
  }
  return Status::Ok();
}

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

SshRunner::~SshRunner() = default;

Status SshRunner::CancelForward(const SshTarget&, int, const std::string&, int) {
  return Status::Ok();
}

std::string FormatSeconds(milliseconds d) {
  std::ostringstream os;
  os << static_cast<double>(d.count()) / 1000.0 << " s";
  return os.str();
}

Result<ProcResult> OpenSshRunner::Run(const SshTarget& target, const std::string& remote_command,
                                      milliseconds timeout, std::string_view stdin_data) {
  HERD_RETURN_IF_ERROR(CheckTarget(target));
  HERD_ASSIGN_OR_RETURN(ProcResult r,
                        RunProcess(BuildSshArgv(target, remote_command), stdin_data, timeout));
  HERD_RETURN_IF_ERROR(ClassifySshResult(target, r));
  return r;
}

Status OpenSshRunner::Rsync(const SshTarget& target, const std::string& local_src,
                            const std::string& remote_dst, bool filter_gitignore,
                            milliseconds timeout) {
  HERD_RETURN_IF_ERROR(CheckTarget(target));
  HERD_ASSIGN_OR_RETURN(auto argv, BuildRsyncArgv(target, local_src, remote_dst, filter_gitignore));
  HERD_ASSIGN_OR_RETURN(ProcResult r, RunProcess(argv, {}, timeout));
  std::string what = DescribeTarget(target) + ": rsync " + local_src + " -> " + remote_dst;
  if (r.timed_out) return DeadlineExceeded(what + ": timed out after " + FormatSeconds(timeout));
  if (r.exit_code == 0) return Status::Ok();
  // rsync reports ssh's failure as "connection unexpectedly closed" (12) or 255; ssh's own words
  // are in the same stderr.
  ProcResult as_ssh = r;
  as_ssh.exit_code = 255;
  if (Status s = ClassifySshResult(target, as_ssh); !s.ok()) {
    return Status(s.code(),
                  s.message() + " (during rsync " + local_src + " -> " + remote_dst + ")");
  }
  return IoError(what + " failed (exit " + std::to_string(r.exit_code) + "): " + Trimmed(r.err));
}

Status OpenSshRunner::WaitReady(const SshTarget& target, milliseconds total) {
  HERD_RETURN_IF_ERROR(CheckTarget(target));
  const auto start = Clock::now();
  const auto deadline = start + total;
  auto backoff = std::chrono::duration_cast<milliseconds>(limits::kSshProbeBackoffInitial);
  std::string last_error = "no attempt made";
  int attempts = 0;
  while (true) {
    auto remaining = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (remaining <= milliseconds(0)) break;
    ++attempts;
    // The first try is `ssh true` itself: a machine that is up (a provider's node whose sshd is
    // known to listen, an existing host) pays one connection, not a banner probe too (for sshd
    // one more fork and re-exec). Later tries probe the banner first, so a machine that is still
    // booting costs a TCP connect per try, not an ssh process, and a port that answers with
    // something else is named as such.
    Status probe =
        attempts == 1 ? Status::Ok()
                      : ProbeSshBanner(target.host, target.port,
                                       std::min(remaining, std::chrono::duration_cast<milliseconds>(
                                                               limits::kSshConnectTimeout)));
    if (probe.ok()) {
      remaining = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      auto r = Run(
          target, "true",
          std::max(milliseconds(1), std::min(remaining, std::chrono::duration_cast<milliseconds>(
                                                            limits::kSshProbeCommandTimeout))));
      if (r.ok() && r->exit_code == 0 && !r->timed_out) {
        HERD_LOG(kDebug) << DescribeTarget(target) << ": ssh ready after " << attempts
                         << " probe(s)";
        return Status::Ok();
      }
      if (!r.ok() && r.status().code() == Code::kPermissionDenied) return r.status();
      if (!r.ok()) {
        last_error = r.status().message();
      } else if (r->timed_out) {
        last_error = "`ssh true` timed out";
      } else {
        last_error = "`ssh true` exited " + std::to_string(r->exit_code) + ": " + Trimmed(r->err);
      }
    } else {
      last_error = probe.message();
    }
    auto now = Clock::now();
    if (now + backoff >= deadline) break;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2,
                       std::chrono::duration_cast<milliseconds>(limits::kSshProbeBackoffMax));
  }
  return DeadlineExceeded(DescribeTarget(target) + ": ssh not ready after " + FormatSeconds(total) +
                          ": " + last_error);
}

Result<int> OpenSshRunner::ForwardLocalPort(const SshTarget& target, const std::string& remote_host,
                                            int remote_port) {
  HERD_RETURN_IF_ERROR(CheckTarget(target));
  if (target.control_dir.empty()) {
    return FailedPrecondition(DescribeTarget(target) +
                              ": port forwarding needs a ControlMaster (control_dir is empty)");
  }
  // `ssh -O forward` talks to a running master; a trivial command starts one.
  HERD_ASSIGN_OR_RETURN(ProcResult up, Run(target, "true", limits::kSshProbeCommandTimeout));
  if (up.exit_code != 0) {
    return Unavailable(DescribeTarget(target) +
                       ": cannot start the ssh ControlMaster: " + Trimmed(up.err));
  }
  std::string last_error;
  // The free port may be taken between the probe and ssh's bind: try a few.
  for (int attempt = 0; attempt < 3; ++attempt) {
    HERD_ASSIGN_OR_RETURN(int port, PickFreeLocalPort());
    auto argv = BuildControlArgv(target, "forward",
                                 {"-L", LocalForwardSpec(port, remote_host, remote_port)});
    HERD_ASSIGN_OR_RETURN(ProcResult r, RunProcess(argv, {}, limits::kSshProbeCommandTimeout));
    if (r.exit_code == 0 && !r.timed_out) return port;
    last_error = r.timed_out ? "timed out" : Trimmed(r.err);
  }
  return Unavailable(DescribeTarget(target) + ": cannot forward a local port to " + remote_host +
                     ":" + std::to_string(remote_port) + ": " + last_error);
}

Status OpenSshRunner::CloseMaster(const SshTarget& target) {
  HERD_RETURN_IF_ERROR(CheckTarget(target));
  if (target.control_dir.empty()) return Status::Ok();
  HERD_ASSIGN_OR_RETURN(ProcResult r, RunProcess(BuildControlArgv(target, "exit"), {},
                                                 limits::kSshProbeCommandTimeout));
  if (r.exit_code == 0) return Status::Ok();
  // No master: nothing to close.
  if (r.err.find("No such file") != std::string::npos ||
      r.err.find("Connection refused") != std::string::npos) {
    return Status::Ok();
  }
  return Unavailable(DescribeTarget(target) +
                     ": cannot stop the ssh ControlMaster: " + Trimmed(r.err));
}

Status OpenSshRunner::CancelForward(const SshTarget& target, int local_port,
                                    const std::string& remote_host, int remote_port) {
  HERD_RETURN_IF_ERROR(CheckTarget(target));
  if (target.control_dir.empty()) return Status::Ok();
  HERD_ASSIGN_OR_RETURN(
      ProcResult r,
      RunProcess(BuildControlArgv(target, "cancel",
                                  {"-L", LocalForwardSpec(local_port, remote_host, remote_port)}),
                 {}, limits::kSshProbeCommandTimeout));
  if (r.exit_code == 0) return Status::Ok();
  // No master (so no forward either).
  if (r.err.find("No such file") != std::string::npos ||
      r.err.find("Connection refused") != std::string::npos) {
    return Status::Ok();
  }
  return Unavailable(DescribeTarget(target) + ": cannot cancel the forward of port " +
                     std::to_string(local_port) + ": " + Trimmed(r.err));
}

}  // namespace herd::controller
