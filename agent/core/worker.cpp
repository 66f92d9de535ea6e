#include "agent/core/worker.hpp"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/container/node_container.hpp"
#include "agent/core/node_probe.hpp"
#include "agent/core/startup_pages.hpp"
#include "agent/process/crash_point.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"
#include "shared/proto/frame.hpp"

namespace herd::agent {

namespace fs = std::filesystem;
using herd::v1::AgentToHead;
using herd::v1::HeadToAgent;

Worker::Worker(boost::asio::io_context& io, AgentConfig config, ProcessLauncher& launcher,
               GpuProbe& gpus, bool is_head, Clock* clock)
    : io_(io),
      own_clock_(clock ? nullptr : std::make_unique<SystemClock>()),
      clock_(clock ? *clock : *own_clock_),
      config_(std::move(config)),
      launcher_(launcher),
      gpus_(gpus),
      is_head_(is_head),
      heartbeat_timer_(io),
      redial_timer_(io),
      leave_timer_(io),
      backoff_(limits::kReconnectBackoffInitial),
      hang_timer_(io),
      table_(config_.state_dir) {}

Worker::~Worker() {
  *alive_ = false;
  Stop();
}

Status Worker::Start() {
  HERD_ASSIGN_OR_RETURN(incarnation_, NextIncarnation(config_.state_dir));
  AdoptProcesses();
  node_ = ProbeNode(config_, gpus_, is_head_);
  HERD_LOG(kInfo) << "node " << node_.node_id() << " incarnation " << incarnation_ << ": "
                  << node_.cpus() << " cpus, " << node_.gpu_count() << " gpus ("
                  << node_.gpu_source() << ")";
  started_at_ = clock_.Now();
  StartRankWatch();
  Dial();
  return Status::Ok();
}

void Worker::Stop() {
  state_ = State::kTerminating;
  heartbeat_timer_.cancel();
  redial_timer_.cancel();
  hang_timer_.cancel();
  if (conn_) {
    auto c = std::move(conn_);
    SetConn(nullptr);
    c->Close();
  }
}

void Worker::Leave(const std::string& reason, std::function<void()> done) {
  leave_done_ = std::move(done);
  // While registering too, as Send: the head reads the Register first on this connection, so an
  // agent stopped before the head's ack arrived is still STOPPED with its reason, not lost.
  if ((state_ != State::kRunning && state_ != State::kRegistering) || !conn_) {
    Stop();
    return LeaveDone();
  }
  AgentToHead msg;
  msg.mutable_leaving()->set_reason(reason);
  conn_->Send(proto::Encode(msg));
  leaving_conn_ = conn_;
  Stop();  // Close() sends what was queued first, then the websocket close
  leave_timer_.expires_after(limits::kAgentLeaveTimeout);
  auto alive = alive_;
  leave_timer_.async_wait([this, alive](boost::system::error_code ec) {
    if (ec || !*alive) return;
    HERD_LOG(kWarn) << "the head did not take the leaving message within "
                    << limits::kAgentLeaveTimeout.count() << " ms; stopping anyway";
    LeaveDone();
  });
}

void Worker::LeaveDone() {
  leave_timer_.cancel();
  leaving_conn_.reset();
  if (auto done = std::move(leave_done_)) {
    leave_done_ = nullptr;
    done();
  }
}

void Worker::SetConn(std::shared_ptr<transport::Connection> conn) {
  conn_ = conn;
  std::lock_guard<std::mutex> lock(conn_mu_);
  shared_conn_ = std::move(conn);
}

std::size_t Worker::QueuedOutputBytes() const {
  std::lock_guard<std::mutex> lock(conn_mu_);
  return shared_conn_ ? shared_conn_->queued_bytes() : SIZE_MAX;
}

void Worker::Dial() {
  if (state_ == State::kTerminating) return;
  state_ = State::kRegistering;
  transport::DialOptions opts;
  opts.host = config_.head.host;
  opts.port = config_.head.port;
  opts.bind_address = config_.address;
  opts.tls = {config_.certs_dir + "/ca.crt", config_.certs_dir + "/agent.crt",
              config_.certs_dir + "/agent.key"};
  opts.role = transport::Role::kAgent;
  opts.expect_node_cluster = config_.cluster;
  opts.expect_node_name = config_.head_node;
  auto alive = alive_;
  opts.handlers.on_message = [this, alive](const auto& conn, std::string msg) {
    if (*alive) OnMessage(conn, std::move(msg));
  };
  opts.handlers.on_close = [this, alive](const auto& conn, const Status& why) {
    if (*alive) OnClosed(conn, why);
  };
  transport::Dial(io_, std::move(opts),
                  [this, alive](Result<std::shared_ptr<transport::Connection>> r) {
                    if (!*alive) return;
                    if (!r.ok()) {
                      HERD_LOG(kWarn) << "cannot reach head " << config_.head.host << ":"
                                      << config_.head.port << ": " << r.status().message();
                      ScheduleRedial();
                      return;
                    }
                    OnConnected(std::move(r).value());
                  });
}

void Worker::ScheduleRedial() {
  if (state_ == State::kTerminating) return;
  state_ = State::kDisconnected;
  redial_timer_.expires_after(backoff_);
  // A launch starts every node's agent at once and the head's is as often last as first: until
  // this worker first registered, it keeps trying at the first interval for a while.
  const bool starting =
      !ever_registered_ && clock_.Now() - started_at_ < limits::kFirstRegisterFastRedialFor;
  if (!starting) backoff_ = std::min(backoff_ * 2, limits::kReconnectBackoffMax);
  auto alive = alive_;
  redial_timer_.async_wait([this, alive](boost::system::error_code ec) {
    if (!ec && *alive) Dial();
  });
}

void Worker::OnConnected(std::shared_ptr<transport::Connection> conn) {
  if (state_ == State::kTerminating) {
    conn->Close();
    return;
  }
  SetConn(std::move(conn));
  AgentToHead msg;
  auto* reg = msg.mutable_register_();
  *reg->mutable_node() = node_;
  reg->set_incarnation(incarnation_);
  for (const auto& [name, p] : procs_) {
    // Still being spawned: the head sends its StartProcess again, which waits for the spawn.
    if (p.starting) continue;
    auto* prog = reg->add_running();
    *prog->mutable_key() = p.key;
    prog->set_pid(p.pid);
    prog->set_output_bytes(p.output_bytes);
    prog->set_exited(p.exited);
    prog->set_exit_code(p.exit.exit_code());
  }
  conn_->Send(proto::Encode(msg));
}

void Worker::OnClosed(const std::shared_ptr<transport::Connection>& conn, const Status& why) {
  if (conn && conn == leaving_conn_) return LeaveDone();
  if (conn != conn_) return;
  SetConn(nullptr);
  heartbeat_timer_.cancel();
  if (state_ == State::kTerminating) return;
  HERD_LOG(kWarn) << "connection to head lost: " << why.message() << "; re-registering";
  ScheduleRedial();
}

void Worker::OnMessage(const std::shared_ptr<transport::Connection>& conn, std::string message) {
  if (conn != conn_) return;
  auto decoded = proto::Decode<HeadToAgent>(message);
  if (!decoded.ok()) {
    HERD_LOG(kError) << "dropping head connection: " << decoded.status().message();
    conn->Close();
    return;
  }
  const HeadToAgent& msg = *decoded;
  switch (msg.msg_case()) {
    case HeadToAgent::kRegisterAck:
      if (!msg.register_ack().accepted()) {
        HERD_LOG(kError) << "head refused registration: " << msg.register_ack().reason();
        Stop();
        return;
      }
      state_ = State::kRunning;
      ever_registered_ = true;
      backoff_ = limits::kReconnectBackoffInitial;
      HERD_LOG(kInfo) << "registered with head of cluster " << msg.register_ack().cluster_name();
      SendHeartbeat();
      if (health_) {
        AgentToHead report;
        *report.mutable_health() = *health_;
        Send(report);
      }
      if (spot_notice_) {
        AgentToHead notice;
        *notice.mutable_spot_notice() = *spot_notice_;
        Send(notice);
      }
      // Start-up is over: give back the executable's pages that only it needed
      // (ReleaseStartupPages). Not in the head's process, whose head keeps running much more of
      // the code.
      if (!is_head_ && !startup_pages_released_) {
        startup_pages_released_ = true;
        auto released = ReleaseStartupPages();
        if (released.ok()) {
          HERD_LOG(kDebug) << "paged out " << *released / 1024 << " KiB of start-up code";
        } else {
          HERD_LOG(kDebug) << "start-up pages kept: " << released.status().message();
        }
      }
      break;
    case HeadToAgent::kStart:
      HandleStart(msg.start());
      break;
    case HeadToAgent::kKill:
      HandleKill(msg.kill());
      break;
    case HeadToAgent::kResend:
      HandleResend(msg.resend());
      break;
    case HeadToAgent::kSignal:
      HandleSignal(msg.signal());
      break;
    case HeadToAgent::kCaptureStacks:
      HandleCapture(msg.capture_stacks());
      break;
    default:
      HERD_LOG(kWarn) << "ignoring unknown message from head";
  }
}

void Worker::SetHealth(herd::v1::NodeHealthReport health) {
  const bool changed =
      !health_ || health_->healthy() != health.healthy() || health_->reason() != health.reason();
  health_ = std::move(health);
  if (!changed || state_ != State::kRunning) return;
  AgentToHead report;
  *report.mutable_health() = *health_;
  Send(report);
}

void Worker::SetSpotNotice(herd::v1::SpotNotice notice) {
  spot_notice_ = std::move(notice);
  if (state_ != State::kRunning) return;
  AgentToHead msg;
  *msg.mutable_spot_notice() = *spot_notice_;
  Send(msg);
}

void Worker::SendHeartbeat() {
  if (state_ != State::kRunning) return;
  AgentToHead msg;
  msg.mutable_heartbeat()->set_incarnation(incarnation_);
  msg.mutable_heartbeat()->set_sent_unix_ms(clock_.UnixMs());
  Send(msg);
  heartbeat_timer_.expires_after(limits::kHeartbeatInterval);
  auto alive = alive_;
  heartbeat_timer_.async_wait([this, alive](boost::system::error_code ec) {
    if (!ec && *alive) SendHeartbeat();
  });
}

void Worker::Send(const AgentToHead& msg) {
  // Also while registering: the head reads Register first on this connection, so output and
  // exits sent before its ack are not lost (the Register's progress list was taken earlier).
  if (conn_ && (state_ == State::kRunning || state_ == State::kRegistering)) {
    conn_->Send(proto::Encode(msg));
  }
}

namespace {
std::string ExpandHome(const std::string& path) {
  const char* home = ::getenv("HOME");
  std::string h = home ? home : "/";
  if (path.empty()) return h;
  if (path == "~") return h;
  if (path.rfind("~/", 0) == 0) return h + path.substr(1);
  return path;
}
}  // namespace

void Worker::HandleStart(const herd::v1::StartProcess& start) {
  std::string name = ProcessKeyString(start.key());
  auto it = procs_.find(name);
  if (it != procs_.end()) {  // idempotent: report what we know again
    const Proc& p = it->second;
    if (p.starting) return;  // its spawn reports it when it is settled
    AgentToHead started;
    *started.mutable_started()->mutable_key() = p.key;
    started.mutable_started()->set_pid(p.pid);
    Send(started);
    if (p.exited) {
      AgentToHead exited;
      *exited.mutable_exited() = p.exit;
      Send(exited);
    }
    return;
  }
  Proc& p = procs_[name];
  p.key = start.key();
  p.log_path = config_.state_dir + "/logs/" + start.log_name();

  SpawnRequest req;
  req.group = JobGroupName(start.key().job_id(), start.key().attempt());
  req.argv = {"/bin/bash", "-c", start.script()};
  req.env.insert(start.env().begin(), start.env().end());
  req.unset_env.assign(start.unset_env().begin(), start.unset_env().end());
  req.cwd = ExpandHome(start.cwd());
  std::error_code ec;
  fs::create_directories(req.cwd, ec);  // ~/sky_workdir may not exist before the first sync
  req.log_path = p.log_path;
  if (start.key().kind() == herd::v1::PROCESS_KIND_RUN) PrepareRun(start, req);
  if (start.has_container() && !start.container().image().empty()) {
    // In the node's container for the image (agent/container/node_container.hpp).
    if (auto warm = WarmEntry(config_.state_dir, start.container(), ExpandHome(""), req.cwd,
                              req.env, req.argv)) {
      req.argv = std::move(warm->argv);
      req.env = std::move(warm->env);
      req.unset_env = std::move(warm->unset_env);
    } else {
      std::vector<std::string> keys;
      for (const auto& [k, v] : req.env) keys.push_back(k);
      req.argv =
          ContainerRunArgv(fs::read_symlink("/proc/self/exe", ec).string(), config_.state_dir,
                           start.container(), ExpandHome(""), req.cwd, keys, req.argv);
    }
  }
  // In the table before the spawn: an agent that dies during it leaves an entry the next one
  // resolves (AdoptProcesses), never a process nobody knows.
  p.starting = true;
  p.handle.group = req.group;
  PersistProcesses();
  CrashPoint("worker-before-spawn");

  // Not waiting for the supervisor's report: this thread is the head's too on the head node, and
  // a burst of jobs would start one at a time.
  auto alive = alive_;
  launcher_.SpawnAsync(req, CallbacksFor(name), [this, alive, name](Result<ProcessHandle> handle) {
    if (*alive) Spawned(name, std::move(handle));
  });
}

void Worker::Spawned(const std::string& name, Result<ProcessHandle> handle) {
  CrashPoint("worker-after-spawn");
  auto it = procs_.find(name);
  if (it == procs_.end()) return;
  Proc& p = it->second;
  p.starting = false;
  if (!handle.ok()) {
    HERD_LOG(kError) << "cannot start " << name << ": " << handle.status().message();
    p.exited = true;
    *p.exit.mutable_key() = p.key;
    p.exit.set_exit_code(127);
    p.exit.set_spawn_error(handle.status().message());
    PersistProcesses();
    AgentToHead msg;
    *msg.mutable_exited() = p.exit;
    Send(msg);
    return;
  }
  p.handle = *handle;
  p.pid = handle->pid;
  p.output_bytes = handle->log_start;
  PersistProcesses();  // before the head hears of it: a process it knows is one we can adopt
  AgentToHead msg;
  *msg.mutable_started()->mutable_key() = p.key;
  msg.mutable_started()->set_pid(p.pid);
  Send(msg);
}

ProcessCallbacks Worker::CallbacksFor(const std::string& name) {
  auto alive = alive_;
  ProcessCallbacks cb;
  cb.on_output = [this, alive, name](uint64_t offset, std::string_view data) {
    if (!*alive) return;
    auto pit = procs_.find(name);
    if (pit == procs_.end()) return;
    pit->second.output_bytes = offset + data.size();
    hang_.Output(name, clock_.Now());
    SendOutput(pit->second.key, offset, data);
  };
  cb.on_exit = [this, alive, name](int exit_code, int term_signal, uint64_t end,
                                   const std::string& output_error) {
    if (!*alive) return;
    auto pit = procs_.find(name);
    if (pit == procs_.end() || pit->second.exited) return;
    Proc& proc = pit->second;
    proc.exited = true;
    RunEnded(name);
    proc.output_bytes = end;
    *proc.exit.mutable_key() = proc.key;
    proc.exit.set_exit_code(exit_code);
    proc.exit.set_term_signal(term_signal);
    proc.exit.set_output_bytes(end);
    if (!output_error.empty()) proc.exit.set_output_error(output_error);
    PersistProcesses();
    AgentToHead msg;
    *msg.mutable_exited() = proc.exit;
    Send(msg);
  };
  return cb;
}

herd::v1::SupervisedProcess Worker::TableEntry(const Proc& p) const {
  herd::v1::SupervisedProcess e;
  *e.mutable_key() = p.key;
  e.set_pid(p.pid);
  e.set_supervisor_pid(p.handle.supervisor_pid);
  e.set_supervisor_start(p.handle.supervisor_start);
  e.set_group(p.handle.group);
  e.set_log_path(p.log_path);
  e.set_log_start(p.handle.log_start);
  e.set_exited(p.exited);
  e.set_starting(p.starting);
  if (p.exited) *e.mutable_exit() = p.exit;
  return e;
}

void Worker::PersistProcesses() {
  // Bounded: the exits of the oldest jobs are forgotten first (the head has long had them).
  std::vector<std::pair<int64_t, std::string>> exited;
  for (const auto& [name, p] : procs_)
    if (p.exited) exited.emplace_back(p.key.job_id(), name);
  if (exited.size() > static_cast<std::size_t>(limits::kMaxExitedProcessesKept)) {
    std::sort(exited.begin(), exited.end());
    for (std::size_t i = 0; i + limits::kMaxExitedProcessesKept < exited.size(); ++i)
      procs_.erase(exited[i].second);
  }
  ProcessTableFile::Entries live, ended;
  std::vector<Proc*> ended_procs;
  for (auto& [name, p] : procs_) {
    if (!p.exited) {
      live.push_back(TableEntry(p));
    } else if (!p.journaled) {
      ended.push_back(TableEntry(p));
      ended_procs.push_back(&p);
    }
  }
  auto all_exited = [this] {
    ProcessTableFile::Entries all;
    for (const auto& [name, p] : procs_)
      if (p.exited) all.push_back(TableEntry(p));
    return all;
  };
  // No fsync: the table is for adopting live processes after an agent restart, and a power failure
  // or kernel crash leaves none to adopt. It runs three times per job on the event loop the head
  // shares, so only the live entries are rewritten; exits are appended (ProcessTableFile).
  if (Status s = table_.Save(live, ended, all_exited); !s.ok()) {
    HERD_LOG(kError) << "cannot persist the process table: " << s.message()
                     << "; a restarted agent would not find these processes";
    return;
  }
  for (Proc* p : ended_procs) p->journaled = true;
}

void Worker::AdoptProcesses() {
  ProcessTableFile::Entries entries = table_.Load();
  int adopted = 0;
  bool resolved = false;  // a "starting" entry was settled: persist the table again
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    std::string name = ProcessKeyString(e.key());
    Proc& p = procs_[name];
    p.journaled = i < static_cast<std::size_t>(table_.journal_records());
    p.key = e.key();
    p.log_path = e.log_path();
    p.pid = e.pid();
    p.handle.pid = e.pid();
    p.handle.supervisor_pid = e.supervisor_pid();
    p.handle.supervisor_start = e.supervisor_start();
    p.handle.group = e.group();
    p.handle.log_path = e.log_path();
    p.handle.log_start = e.log_start();
    if (e.starting() && !e.exited()) {
      // The previous agent died while spawning it: its supervisor registered itself, or nothing
      // was started (then it is forgotten and the head, not hearing of it, sends it again).
      resolved = true;
      auto found = launcher_.FindStarted(e.group(), e.log_path());
      if (found.ok()) {
        HERD_LOG(kInfo) << name << " was being started by the previous agent: found pid "
                        << found->pid << " (supervisor " << found->supervisor_pid << ")";
        p.handle = *found;
        p.pid = found->pid;
      } else if (found.status().code() == Code::kNotFound) {
        HERD_LOG(kInfo) << name << " was being started by the previous agent, which died first: "
                        << found.status().message();
        procs_.erase(name);
        continue;
      } else {
        HERD_LOG(kError) << "cannot adopt " << name << ": " << found.status().message();
        p.exited = true;
        *p.exit.mutable_key() = p.key;
        p.exit.set_exit_code(limits::kKilledRankExitCode);
        p.exit.set_spawn_error("the agent restarted while starting it: " +
                               found.status().message());
        continue;
      }
    }
    if (e.exited()) {
      p.exited = true;
      p.exit = e.exit();
      p.output_bytes = e.exit().output_bytes();
      continue;
    }
    // Follow from the log's current end; the head asks for what it lacks below that (Register's
    // output_bytes -> ResendOutput).
    std::error_code ec;
    uint64_t size = fs::file_size(p.log_path, ec);
    p.output_bytes = ec ? p.handle.log_start : std::max<uint64_t>(size, p.handle.log_start);
    if (auto s = launcher_.Adopt(p.handle, p.output_bytes, CallbacksFor(name)); !s.ok()) {
      HERD_LOG(kError) << "cannot adopt " << name << ": " << s.message();
      p.exited = true;
      *p.exit.mutable_key() = p.key;
      p.exit.set_exit_code(limits::kKilledRankExitCode);
      p.exit.set_output_bytes(p.output_bytes);
      continue;
    }
    ++adopted;
  }
  HERD_LOG(kInfo) << "process table: " << entries.size() << " known, " << adopted << " adopted";
  if (resolved) PersistProcesses();
}

void Worker::HandleKill(const herd::v1::KillJob& kill) {
  std::string group = JobGroupName(kill.job_id(), kill.attempt());
  const std::chrono::milliseconds grace =
      kill.grace_ms() > 0 ? std::chrono::milliseconds(kill.grace_ms()) : limits::kKillGracePeriod;
  HERD_LOG(kInfo) << "killing " << group << " (SIGKILL after " << grace.count() << " ms)";
  // KillGroup blocks through the grace period; keep the event loop free meanwhile.
  std::thread([&launcher = launcher_, group, grace] { launcher.KillGroup(group, grace); }).detach();
}

void Worker::SendOutput(const herd::v1::ProcessKey& key, uint64_t offset, std::string_view data) {
  while (!data.empty()) {
    std::size_t n = std::min(data.size(), limits::kMaxOutputChunkBytes);
    AgentToHead msg;
    auto* out = msg.mutable_output();
    *out->mutable_key() = key;
    out->set_offset(offset);
    out->set_data(std::string(data.substr(0, n)));
    Send(msg);
    offset += n;
    data.remove_prefix(n);
  }
}

void Worker::HandleResend(const herd::v1::ResendOutput& resend) {
  auto it = procs_.find(ProcessKeyString(resend.key()));
  if (it == procs_.end()) return;
  const Proc& p = it->second;
  std::ifstream in(p.log_path, std::ios::binary);
  if (!in) {
    HERD_LOG(kError) << "cannot reread " << p.log_path << " for the head";
    return;
  }
  uint64_t offset = resend.from_offset();
  in.seekg(static_cast<std::streamoff>(offset));
  std::string buf(limits::kMaxOutputChunkBytes, '\0');
  while (offset < p.output_bytes && in) {
    std::size_t want = std::min<uint64_t>(buf.size(), p.output_bytes - offset);
    in.read(buf.data(), static_cast<std::streamsize>(want));
    std::size_t got = static_cast<std::size_t>(in.gcount());
    if (got == 0) break;
    SendOutput(p.key, offset, std::string_view(buf.data(), got));
    offset += got;
  }
  if (p.exited) {
    AgentToHead msg;
    *msg.mutable_exited() = p.exit;
    Send(msg);
  }
}

}  // namespace herd::agent
