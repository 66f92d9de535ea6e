// A ProcessLauncher whose processes the test drives: it records spawns and adoptions, and the test
// makes each "process" print and exit. KillGroup ends every live process of the group with
// SIGTERM's code, as a real kill would. Callbacks run on the io_context given, as a real
// launcher's run on its owner's thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "agent/process/process_launcher.hpp"

namespace herd::testing {

class FakeLauncher : public agent::ProcessLauncher {
 public:
  struct Proc {
    agent::SpawnRequest request;
    agent::ProcessCallbacks callbacks;
    uint64_t offset = 0;
    bool exited = false;
    int adopted_pid = 0;
  };
  explicit FakeLauncher(boost::asio::io_context& io) : io_(io) {}

  Result<agent::ProcessHandle> Spawn(const agent::SpawnRequest& request,
                                     agent::ProcessCallbacks callbacks) override {
    std::lock_guard lock(mu_);
    procs_.push_back({request, std::move(callbacks)});
    cv_.notify_all();
    agent::ProcessHandle h;
    h.pid = 1000 + static_cast<int>(procs_.size());
    h.supervisor_pid = h.pid + 1000;
    h.group = request.group;
    h.log_path = request.log_path;
    return h;
  }
  // Adopted processes join the list like spawned ones (the test drives them the same way).
  Status Adopt(const agent::ProcessHandle& handle, uint64_t from,
               agent::ProcessCallbacks callbacks) override {
    std::lock_guard lock(mu_);
    Proc p{{}, std::move(callbacks)};
    p.request.group = handle.group;
    p.request.log_path = handle.log_path;
    p.offset = from;
    p.adopted_pid = handle.pid;
    procs_.push_back(std::move(p));
    cv_.notify_all();
    return Status::Ok();
  }
  Result<agent::ProcessHandle> FindStarted(const std::string& group,
                                           const std::string& log) override {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < procs_.size(); ++i) {
      if (procs_[i].request.group != group || procs_[i].request.log_path != log) continue;
      agent::ProcessHandle h;
      h.pid = procs_[i].adopted_pid ? procs_[i].adopted_pid : 1001 + static_cast<int>(i);
      h.supervisor_pid = h.pid + 1000;
      h.group = group;
      h.log_path = log;
      return h;
    }
    return NotFound("no supervisor was started for " + log);
  }
  void SignalGroup(const std::string& group, int signal) override {
    std::lock_guard lock(mu_);
    signals_.emplace_back(group, signal);
  }
  void KillGroup(const std::string& group, std::chrono::milliseconds) override {
    std::lock_guard lock(mu_);
    kills_.push_back(group);
    for (std::size_t i = 0; i < procs_.size(); ++i) {
      if (procs_[i].request.group == group && !procs_[i].exited) ExitLocked(i, 143, 15);
    }
  }

  // Waits until at least n processes were spawned (false after 10 s).
  bool WaitSpawns(std::size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return procs_.size() >= n; });
  }
  std::size_t spawns() {
    std::lock_guard lock(mu_);
    return procs_.size();
  }
  std::string script(std::size_t i) {
    std::lock_guard lock(mu_);
    return procs_[i].request.argv.back();
  }
  std::string env(std::size_t i, const std::string& k) {
    std::lock_guard lock(mu_);
    auto it = procs_[i].request.env.find(k);
    return it == procs_[i].request.env.end() ? "" : it->second;
  }
  int adopted_pid(std::size_t i) {
    std::lock_guard lock(mu_);
    return procs_[i].adopted_pid;
  }
  std::string group(std::size_t i) {
    std::lock_guard lock(mu_);
    return procs_[i].request.group;
  }
  std::vector<std::string> unset_env(std::size_t i) {
    std::lock_guard lock(mu_);
    return procs_[i].request.unset_env;
  }
  std::vector<std::string> kills() {
    std::lock_guard lock(mu_);
    return kills_;
  }
  std::vector<std::pair<std::string, int>> signals() {
    std::lock_guard lock(mu_);
    return signals_;
  }
  // Process i writes data: appended to its log (as the supervisor would: the node-local log
  // first), then reported through on_output.
  void Print(std::size_t i, std::string data) {
    std::lock_guard lock(mu_);
    Proc& p = procs_[i];
    uint64_t off = p.offset;
    p.offset += data.size();
    if (!p.request.log_path.empty()) {
      std::filesystem::create_directories(std::filesystem::path(p.request.log_path).parent_path());
      std::ofstream(p.request.log_path, std::ios::app | std::ios::binary) << data;
    }
    boost::asio::post(io_, [cb = p.callbacks, off, data] { cb.on_output(off, data); });
  }
  void Exit(std::size_t i, int code) {
    std::lock_guard lock(mu_);
    ExitLocked(i, code, 0);
  }
  // What a supervisor reports when it could not write the log and stopped the process.
  void StoppedOnFullDisk(std::size_t i) {
    std::lock_guard lock(mu_);
    ExitLocked(i, 143, 15,
               "cannot write " + procs_[i].request.log_path + ": No space left on device");
  }

 private:
  void ExitLocked(std::size_t i, int code, int sig, std::string error = "") {
    Proc& p = procs_[i];
    p.exited = true;
    boost::asio::post(io_, [cb = p.callbacks, code, sig, total = p.offset, error] {
      cb.on_exit(code, sig, total, error);
    });
  }

  boost::asio::io_context& io_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Proc> procs_;
  std::vector<std::string> kills_;
  std::vector<std::pair<std::string, int>> signals_;  // SignalGroup calls: group, signal
};

}  // namespace herd::testing
