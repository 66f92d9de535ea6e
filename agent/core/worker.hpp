// The node side of herdlet: registers with the head, reports what the node has, starts and kills
// the job processes the head asks for, and streams their output.
//
// Life of a worker (docs/ARCHITECTURE.md, "Agent states"):
//   DISCONNECTED --dial ok + RegisterAck--> RUNNING --drop--> DISCONNECTED (backoff, re-register)
//   any --Stop()--> TERMINATING
// Processes keep running while the worker is disconnected; their output stays in the node-local
// log, and the head asks for what it missed (ResendOutput) after the re-registration.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "agent/core/agent_config.hpp"
#include "agent/core/process_key.hpp"
#include "agent/core/process_table.hpp"
#include "agent/gpu/gpu_probe.hpp"
#include "agent/job/hang_watch.hpp"
#include "agent/job/stack_capture.hpp"
#include "agent/process/process_launcher.hpp"
#include "herd/v1/agent.pb.h"
#include "shared/common/clock.hpp"
#include "shared/transport/transport.hpp"

namespace herd::agent {

class Worker {
 public:
  enum class State { kDisconnected, kRegistering, kRunning, kTerminating };

  // clock: what the worker reads time from (the start window, the hang watch's stamps); null for
  // the system clock. The io_context's timers pace the work (redials, heartbeats, hang samples).
  Worker(boost::asio::io_context& io, AgentConfig config, ProcessLauncher& launcher, GpuProbe& gpus,
         bool is_head, Clock* clock = nullptr);
  ~Worker();

  // Reads/bumps the incarnation, probes the node and starts dialing the head.
  Status Start();
  void Stop();
  // Stop() after telling the head why (Leaving, when registered): `done` runs once the message
  // and the websocket close went out, or after limits::kAgentLeaveTimeout (a head going away too,
  // a dead link), on the io_context; at once when not registered.
  void Leave(const std::string& reason, std::function<void()> done);
  State state() const { return state_; }
  // The wait before the next redial after a failed dial or a dropped connection.
  std::chrono::milliseconds redial_backoff() const { return backoff_; }
  const herd::v1::NodeInfo& node_info() const { return node_; }

  // Output bytes queued on the connection to the head and not yet written; SIZE_MAX while there
  // is none (output read now would be dropped). Thread-safe: the process launcher's loop asks it
  // before it reads more of a log (UvProcessLauncher::SetOutputBacklog).
  std::size_t QueuedOutputBytes() const;

  // The node's health as the agent judges it (agent/gpu/health_watch.hpp), on the io_context: sent
  // to the head now when registered, and after every registration.
  void SetHealth(herd::v1::NodeHealthReport health);
  // A spot interruption notice for this node (agent/cloud/spot_notice.hpp), on the io_context:
  // sent to the head now and again after every registration (a head that restarted learns it).
  void SetSpotNotice(herd::v1::SpotNotice notice);

 private:
  struct Proc {
    herd::v1::ProcessKey key;
    std::string log_path;
    int pid = 0;
    ProcessHandle handle;  // how to find it again after an agent restart
    uint64_t output_bytes = 0;
    bool exited = false;
    bool starting = false;  // persisted before Spawn, cleared once it returned
    herd::v1::ProcessExited exit;
    bool journaled = false;  // its exit is in the table's journal of exits
  };

  void Dial();
  void ScheduleRedial();
  void OnConnected(std::shared_ptr<transport::Connection> conn);
  void OnMessage(const std::shared_ptr<transport::Connection>& conn, std::string message);
  void OnClosed(const std::shared_ptr<transport::Connection>& conn, const Status& why);
  void SendHeartbeat();
  void Send(const herd::v1::AgentToHead& msg);

  void HandleStart(const herd::v1::StartProcess& start);
  // The end of HandleStart's spawn: records and reports the process (or its spawn error).
  void Spawned(const std::string& name, Result<ProcessHandle> handle);
  void HandleKill(const herd::v1::KillJob& kill);

  // Hung ranks and stacks (worker_ranks.cpp). At Start: the Python hook (stack_capture.hpp), the
  // stack tools and the hang sampling timer.
  void StartRankWatch();
  // A run process's additions before its spawn: the hook on its PYTHONPATH, its dump directory,
  // and its hang timeout watched.
  void PrepareRun(const herd::v1::StartProcess& start, SpawnRequest& req);
  // Every limits::kHangSampleInterval: the CPU time of each watched rank; ProcessHung for one
  // without progress for its timeout.
  void SampleHangs();
  void HandleSignal(const herd::v1::SignalJob& signal);
  // StackReport per run rank of the job on this node, captured on a thread of its own.
  void HandleCapture(const herd::v1::CaptureStacks& capture);
  std::string StacksDir(const std::string& group) const;
  // A process exited: no longer watched; its group's dump directory goes with its last process.
  void RunEnded(const std::string& name);
  void HandleResend(const herd::v1::ResendOutput& resend);
  void SendOutput(const herd::v1::ProcessKey& key, uint64_t offset, std::string_view data);
  ProcessCallbacks CallbacksFor(const std::string& name);
  // The process table (ProcessTableFile, in state_dir): written after every start and exit, read
  // at Start() to adopt what the previous agent process started.
  void PersistProcesses();
  void AdoptProcesses();
  herd::v1::SupervisedProcess TableEntry(const Proc& p) const;

  boost::asio::io_context& io_;
  std::unique_ptr<Clock> own_clock_;  // when the constructor got none
  Clock& clock_;
  AgentConfig config_;
  ProcessLauncher& launcher_;
  GpuProbe& gpus_;
  bool is_head_;
  bool startup_pages_released_ = false;  // ReleaseStartupPages() ran (first registration)
  State state_ = State::kDisconnected;
  herd::v1::NodeInfo node_;
  uint64_t incarnation_ = 0;
  std::shared_ptr<transport::Connection> conn_;
  void SetConn(std::shared_ptr<transport::Connection> conn);
  mutable std::mutex conn_mu_;                          // guards shared_conn_
  std::shared_ptr<transport::Connection> shared_conn_;  // conn_, for QueuedOutputBytes
  boost::asio::steady_timer heartbeat_timer_;
  boost::asio::steady_timer redial_timer_;
  boost::asio::steady_timer leave_timer_;
  std::shared_ptr<transport::Connection> leaving_conn_;  // Leave(): closing, its end awaited
  std::function<void()> leave_done_;
  void LeaveDone();
  std::chrono::milliseconds backoff_;
  // Until the first registration, redials do not back off for a while (ScheduleRedial).
  std::chrono::steady_clock::time_point started_at_{};
  bool ever_registered_ = false;
  std::optional<herd::v1::NodeHealthReport> health_;  // SetHealth's latest
  std::optional<herd::v1::SpotNotice> spot_notice_;   // SetSpotNotice's latest
  std::map<std::string, Proc> procs_;                 // by ProcessKeyString
  HangWatch hang_;
  boost::asio::steady_timer hang_timer_;
  StackTools stack_tools_;
  std::string python_hook_dir_;  // "" when the hook could not be installed
  ProcessTableFile table_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace herd::agent
