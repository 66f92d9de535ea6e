// The worker's side of hung ranks, stacks and signals (HangWatch, stack_capture): kept out of
// worker.cpp, which registers, starts and reports processes.
#include <boost/asio/post.hpp>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "agent/core/process_key.hpp"
#include "agent/core/worker.hpp"
#include "agent/job/proc_tree.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace herd::agent {

using herd::v1::AgentToHead;

std::string Worker::StacksDir(const std::string& group) const {
  return config_.state_dir + "/stacks/" + group;
}

void Worker::StartRankWatch() {
  const std::string dir = config_.state_dir + "/python";
  if (Status s = InstallPythonHook(dir); s.ok()) {
    python_hook_dir_ = dir;
  } else {
    HERD_LOG(kWarn) << "no Python stacks for jobs on this node: " << s.message();
  }
  stack_tools_ = FindStackTools();
  HERD_LOG(kDebug) << "native stacks: "
                   << (!stack_tools_.eu_stack.empty() ? stack_tools_.eu_stack
                       : !stack_tools_.gdb.empty()    ? stack_tools_.gdb
                                                      : std::string("none"));
  SampleHangs();
}

void Worker::PrepareRun(const herd::v1::StartProcess& start, SpawnRequest& req) {
  if (!python_hook_dir_.empty()) {
    std::string existing;
    if (auto it = req.env.find("PYTHONPATH"); it != req.env.end()) {
      existing = it->second;
    } else if (const char* own = std::getenv("PYTHONPATH")) {
      existing = own;
    }
    req.env["PYTHONPATH"] = PythonPathWith(python_hook_dir_, existing);
    req.env[kStacksDirEnv] = StacksDir(req.group);
  }
  if (start.hang_timeout_ms() > 0) {
    hang_.Track(ProcessKeyString(start.key()), std::chrono::milliseconds(start.hang_timeout_ms()),
                clock_.Now());
  }
}

void Worker::SampleHangs() {
  if (state_ == State::kTerminating) return;
  const std::vector<std::string> keys = hang_.Keys();
  if (!keys.empty()) {
    const std::vector<ProcStat> all = ReadAllProcStats();
    const auto now = clock_.Now();
    for (const std::string& key : keys) {
      auto it = procs_.find(key);
      if (it == procs_.end() || it->second.exited) {
        hang_.Forget(key);
        continue;
      }
      if (it->second.pid <= 0) continue;  // not started yet
      const std::vector<ProcStat> tree = TreeOf(all, it->second.pid);
      if (auto idle = hang_.Observe(key, CpuTicks(tree), tree.size(), now)) {
        HERD_LOG(kWarn) << key << ": no output and no CPU time for " << idle->count() << " ms";
        AgentToHead msg;
        *msg.mutable_hung()->mutable_key() = it->second.key;
        msg.mutable_hung()->set_idle_ms(idle->count());
        Send(msg);
      }
    }
  }
  hang_timer_.expires_after(limits::kHangSampleInterval);
  auto alive = alive_;
  hang_timer_.async_wait([this, alive](boost::system::error_code ec) {
    if (!ec && *alive) SampleHangs();
  });
}

void Worker::RunEnded(const std::string& name) {
  hang_.Forget(name);
  auto it = procs_.find(name);
  if (it == procs_.end() || it->second.key.kind() != herd::v1::PROCESS_KIND_RUN) return;
  const herd::v1::ProcessKey& key = it->second.key;
  for (const auto& [other, p] : procs_) {
    if (!p.exited && p.key.job_id() == key.job_id() && p.key.attempt() == key.attempt()) return;
  }
  std::error_code ec;
  std::filesystem::remove_all(StacksDir(JobGroupName(key.job_id(), key.attempt())), ec);
}

void Worker::HandleSignal(const herd::v1::SignalJob& signal) {
  const std::string group = JobGroupName(signal.job_id(), signal.attempt());
  HERD_LOG(kInfo) << "signal " << signal.signal() << " to " << group;
  launcher_.SignalGroup(group, signal.signal());
}

void Worker::HandleCapture(const herd::v1::CaptureStacks& capture) {
  const std::string group = JobGroupName(capture.job_id(), capture.attempt());
  for (const auto& [name, p] : procs_) {
    if (p.key.job_id() != capture.job_id() || p.key.attempt() != capture.attempt() ||
        p.key.kind() != herd::v1::PROCESS_KIND_RUN || p.exited || p.pid <= 0) {
      continue;
    }
    // Dumps and native tools take up to seconds: off the event loop, one thread per rank.
    auto alive = alive_;
    std::thread([this, alive, key = p.key, pid = p.pid, dir = StacksDir(group),
                 tools = stack_tools_, id = capture.capture_id()] {
      std::string text = CaptureTreeStacks(pid, dir, tools);
      boost::asio::post(io_, [this, alive, key, id, text = std::move(text)]() mutable {
        if (!*alive) return;
        AgentToHead msg;
        msg.mutable_stacks()->set_capture_id(id);
        *msg.mutable_stacks()->mutable_key() = key;
        msg.mutable_stacks()->set_text(std::move(text));
        Send(msg);
      });
    }).detach();
  }
}

}  // namespace herd::agent
