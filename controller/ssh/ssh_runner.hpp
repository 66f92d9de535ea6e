// The controller's one way to act on machines: run a command, copy a directory, wait for sshd,
// forward a port. SshRunner is the seam: callers' tests use a fake; OpenSshRunner runs the
// system's ssh and rsync.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "controller/ssh/ssh_target.hpp"
#include "controller/ssh/subprocess.hpp"
#include "shared/common/status.hpp"

namespace herd::controller {

class SshRunner {
 public:
  virtual ~SshRunner();

  // Runs remote_command through the user's shell on the target. A remote non-zero exit is a
  // ProcResult (timed_out set when the timeout killed ssh); ssh's own failures are errors naming
  // the target: PermissionDenied for a refused key, Unavailable for an unreachable host.
  virtual Result<ProcResult> Run(const SshTarget& target, const std::string& remote_command,
                                 std::chrono::milliseconds timeout,
                                 std::string_view stdin_data = {}) = 0;

  // rsync -a local_src to remote_dst on the target (rsync's trailing-slash rules), excluding what
  // .gitignore files name when filter_gitignore.
  virtual Status Rsync(const SshTarget& target, const std::string& local_src,
                       const std::string& remote_dst, bool filter_gitignore,
                       std::chrono::milliseconds timeout) = 0;

  // Waits until the target's sshd answers and `ssh true` succeeds, probing with capped
  // exponential backoff for at most `total`. A refused key fails at once (waiting cannot fix it).
  virtual Status WaitReady(const SshTarget& target, std::chrono::milliseconds total) = 0;

  // Local TCP forward through the ControlMaster (starting it if needed): connections to
  // 127.0.0.1:<returned port> reach remote_host:remote_port as seen from the target. The forward
  // lives as long as the master (ControlPersist after the last session, or CloseMaster).
  virtual Result<int> ForwardLocalPort(const SshTarget& target, const std::string& remote_host,
                                       int remote_port) = 0;

  // Stops the target's ControlMaster (and its forwards). OK when none runs.
  virtual Status CloseMaster(const SshTarget& target) = 0;

  // Removes a forward made by ForwardLocalPort from the running master. OK when there is none.
  // The default does nothing (a runner whose forwards do not outlive it).
  virtual Status CancelForward(const SshTarget& target, int local_port,
                               const std::string& remote_host, int remote_port);
};

class OpenSshRunner : public SshRunner {
 public:
  Result<ProcResult> Run(const SshTarget& target, const std::string& remote_command,
                         std::chrono::milliseconds timeout,
                         std::string_view stdin_data = {}) override;
  Status Rsync(const SshTarget& target, const std::string& local_src, const std::string& remote_dst,
               bool filter_gitignore, std::chrono::milliseconds timeout) override;
  Status WaitReady(const SshTarget& target, std::chrono::milliseconds total) override;
  Result<int> ForwardLocalPort(const SshTarget& target, const std::string& remote_host,
                               int remote_port) override;
  Status CloseMaster(const SshTarget& target) override;
  Status CancelForward(const SshTarget& target, int local_port, const std::string& remote_host,
                       int remote_port) override;
};

// "120 s", "2.5 s": durations in messages.
std::string FormatSeconds(std::chrono::milliseconds d);

}  // namespace herd::controller
