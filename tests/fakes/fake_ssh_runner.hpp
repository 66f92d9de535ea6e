// SshRunner fakes.
//   LocalShellRunner: a "node" per host name, a home directory on this machine; commands run by
//     /bin/sh (dash, so the scripts are checked for POSIX sh) as ssh would run them.
//   FakeForwarder: records the port forwards asked of it and hands out local ports from 40001;
//     everything but forwarding is an error.
//   RecordingSshRunner: every command succeeds with no output; records what was asked, one line
//     each ("run HOST: COMMAND", "rsync HOST: SRC -> DST", "wait HOST", "close HOST").
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "controller/ssh/ssh_runner.hpp"

namespace herd::testing {

class LocalShellRunner : public controller::SshRunner {
 public:
  std::map<std::string, std::string> homes;  // host -> $HOME
  std::string path_prefix;                   // shims put before $PATH
  std::size_t stdin_bytes = 0;               // sent on the sessions' stdin, in all
  // Runs the commands in a mount namespace whose /run has systemd/system, as a machine booted
  // with systemd has (needs root: unshare --mount). Its /etc/systemd/system is a tmpfs too: a
  // script that wrongly chose the system unit (as root) must not leave one on this machine.
  bool systemd_booted = false;

  // An unknown host is Unavailable ("no route to host"), as ssh would fail.
  Result<controller::ProcResult> Run(const controller::SshTarget& t,
                                     const std::string& remote_command,
                                     std::chrono::milliseconds timeout,
                                     std::string_view stdin_data) override;
  Status Rsync(const controller::SshTarget& t, const std::string&, const std::string&, bool,
               std::chrono::milliseconds) override;
  Status WaitReady(const controller::SshTarget&, std::chrono::milliseconds) override;
  Result<int> ForwardLocalPort(const controller::SshTarget& t, const std::string&, int) override;
  Status CloseMaster(const controller::SshTarget&) override;
};

class FakeForwarder : public controller::SshRunner {
 public:
  Result<controller::ProcResult> Run(const controller::SshTarget&, const std::string&,
                                     std::chrono::milliseconds, std::string_view) override;
  Status Rsync(const controller::SshTarget&, const std::string&, const std::string&, bool,
               std::chrono::milliseconds) override;
  Status WaitReady(const controller::SshTarget&, std::chrono::milliseconds) override;
  // After `delay`: Unavailable naming the host when `fail`, else the next port, recording
  // "host:port".
  Result<int> ForwardLocalPort(const controller::SshTarget& target, const std::string& host,
                               int port) override;
  Status CloseMaster(const controller::SshTarget&) override;
  // Records the local port.
  Status CancelForward(const controller::SshTarget&, int local_port, const std::string&,
                       int) override;

  std::mutex mu;
  std::vector<std::string> forwarded;
  std::vector<int> cancelled;
  int next_port = 40001;
  bool fail = false;
  std::chrono::milliseconds delay{0};
};

class RecordingSshRunner : public controller::SshRunner {
 public:
  Result<controller::ProcResult> Run(const controller::SshTarget& t, const std::string& command,
                                     std::chrono::milliseconds, std::string_view) override {
    Record("run " + t.host + ": " + command);
    controller::ProcResult r;
    r.exit_code = 0;
    return r;
  }
  Status Rsync(const controller::SshTarget& t, const std::string& src, const std::string& dst, bool,
               std::chrono::milliseconds) override {
    Record("rsync " + t.host + ": " + src + " -> " + dst);
    return Status::Ok();
  }
  Status WaitReady(const controller::SshTarget& t, std::chrono::milliseconds) override {
    Record("wait " + t.host);
    return Status::Ok();
  }
  Result<int> ForwardLocalPort(const controller::SshTarget& t, const std::string&, int) override {
    Record("forward " + t.host);
    return Unavailable("RecordingSshRunner forwards nothing");
  }
  Status CloseMaster(const controller::SshTarget& t) override {
    Record("close " + t.host);
    return Status::Ok();
  }
  // The recorded lines that start with `prefix`.
  std::vector<std::string> Calls(std::string_view prefix = "") {
    std::lock_guard<std::mutex> l(mu);
    std::vector<std::string> out;
    for (const auto& c : calls) {
      if (c.starts_with(prefix)) out.push_back(c);
    }
    return out;
  }

  std::mutex mu;
  std::vector<std::string> calls;

 private:
  void Record(std::string line) {
    std::lock_guard<std::mutex> l(mu);
    calls.push_back(std::move(line));
  }
};

}  // namespace herd::testing
