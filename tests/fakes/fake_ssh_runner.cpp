#include "tests/fakes/fake_ssh_runner.hpp"

#include <cstdlib>
#include <thread>

#include "controller/ssh/subprocess.hpp"

namespace herd::testing {

using controller::DescribeTarget;
using controller::ProcResult;
using controller::RunProcess;
using controller::SshTarget;

Result<ProcResult> LocalShellRunner::Run(const SshTarget& t, const std::string& remote_command,
                                         std::chrono::milliseconds timeout,
                                         std::string_view stdin_data) {
  auto it = homes.find(t.host);
  if (it == homes.end()) return Unavailable(DescribeTarget(t) + ": no route to host");
  std::map<std::string, std::string> env{{"HOME", it->second}};
  if (!path_prefix.empty()) env["PATH"] = path_prefix + ":" + std::getenv("PATH");
  stdin_bytes += stdin_data.size();
  if (systemd_booted) {
    return RunProcess({"unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                       "mount -t tmpfs herd-test-run /run && mkdir -p /run/systemd/system && "
                       "{ [ ! -d /etc/systemd/system ] || "
                       "mount -t tmpfs herd-test-units /etc/systemd/system; } && "
                       "exec /bin/sh -c \"$0\"",
                       remote_command},
                      stdin_data, timeout, env);
  }
  return RunProcess({"/bin/sh", "-c", remote_command}, stdin_data, timeout, env);
}

Status LocalShellRunner::Rsync(const SshTarget& t, const std::string&, const std::string&, bool,
                               std::chrono::milliseconds) {
  return FailedPrecondition(DescribeTarget(t) + ": bootstrap does not rsync");
}

Status LocalShellRunner::WaitReady(const SshTarget&, std::chrono::milliseconds) {
  return Status::Ok();
}

Result<int> LocalShellRunner::ForwardLocalPort(const SshTarget& t, const std::string&, int) {
  return FailedPrecondition(DescribeTarget(t) + ": bootstrap does not forward ports");
}

Status LocalShellRunner::CloseMaster(const SshTarget&) { return Status::Ok(); }

Result<ProcResult> FakeForwarder::Run(const SshTarget&, const std::string&,
                                      std::chrono::milliseconds, std::string_view) {
  return Internal("not used");
}

Status FakeForwarder::Rsync(const SshTarget&, const std::string&, const std::string&, bool,
                            std::chrono::milliseconds) {
  return Internal("not used");
}

Status FakeForwarder::WaitReady(const SshTarget&, std::chrono::milliseconds) {
  return Internal("not used");
}

Result<int> FakeForwarder::ForwardLocalPort(const SshTarget& target, const std::string& host,
                                            int port) {
  std::this_thread::sleep_for(delay);
  std::lock_guard lock(mu);
  if (fail) return Unavailable(target.host + ": cannot forward");
  forwarded.push_back(host + ":" + std::to_string(port));
  return next_port++;
}

Status FakeForwarder::CloseMaster(const SshTarget&) { return Status::Ok(); }

Status FakeForwarder::CancelForward(const SshTarget&, int local_port, const std::string&, int) {
  std::lock_guard lock(mu);
  cancelled.push_back(local_port);
  return Status::Ok();
}

}  // namespace herd::testing
