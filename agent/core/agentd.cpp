#include "agent/core/agentd.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <cerrno>
#include <cstring>

#include "agent/cloud/spot_notice.hpp"
#include "agent/core/head.hpp"
#include "agent/core/node_probe.hpp"
#include "agent/core/worker.hpp"
#include "agent/gpu/health_watch.hpp"
#include "agent/gpu/system_gpu_probe.hpp"
#include "agent/process/step_program.hpp"
#include "agent/process/uv_process_launcher.hpp"
#include "shared/common/agent_layout.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/heap.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace herd::agent {

namespace {
// One socket per agent on the head, pipes and log files per process on a worker: the default soft
// limit of a service (1024 under systemd) is too small for a head of 1000 agents. The hard limit is
// the administrator's ceiling; jobs inherit the raised soft limit (as Ray's raylet does for them).
void RaiseOpenFileLimit() {
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= lim.rlim_max) return;
  rlim_t was = lim.rlim_cur;
  lim.rlim_cur = lim.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) {
    HERD_LOG(kWarn) << "cannot raise the open file limit from " << was << ": "
                    << std::strerror(errno);
    return;
  }
  HERD_LOG(kDebug) << "open file limit raised from " << was << " to " << lim.rlim_cur;
}

// Each job process gets a supervisor: herd-step, which this herdlet carries and writes out
// (agent/process/step_program.hpp); where it cannot, this very binary in its step mode
// (agent/main.cpp), which costs about 2.5 times the CPU per job process.
std::vector<std::string> SupervisorCommand(const std::string& state_dir) {
  auto program = InstallStepProgram(state_dir + "/bin", EmbeddedStepProgram());
  if (program.ok()) return {*program};
  HERD_LOG(kWarn) << program.status().message() << "; supervising jobs with `herdlet --step`";
  return {"/proc/self/exe", "--step"};
}
}  // namespace

int RunAgent(const AgentConfig& config, int ready_fd) {
  log::SetTag(config.node_id);
  TuneHeapForStreaming();
  RaiseOpenFileLimit();
  boost::asio::io_context io;
  auto instance = AgentInstanceId(config.state_dir);
  if (!instance.ok()) {
    HERD_LOG(kError) << instance.status().message();
    return 1;
  }
  UvProcessLauncher launcher(
      [&io](std::function<void()> fn) { boost::asio::post(io, std::move(fn)); },
      "herd/" + config.node_id + "-" + *instance, SupervisorCommand(config.state_dir));
  // Where this agent's cgroups are, for whoever removes the node without it: the local provider's
  // stop and down remove them once no process of the node is left (an agent killed before its
  // launcher removed them, or stopped while a job's cgroup was still being emptied, leaves them).
  if (std::string scope = launcher.CgroupScopeDir(); !scope.empty()) {
    if (auto s = WriteFileAtomic(config.state_dir + "/" + kCgroupScopeFile, scope + "\n", 0644,
                                 Durability::kProcessCrash);
        !s.ok()) {
      HERD_LOG(kWarn) << "cannot record the cgroup scope: " << s.message();
    }
  }
  SystemGpuProbe gpus;

  AgentConfig worker_config = config;
  std::unique_ptr<Head> head;
  if (config.role == AgentConfig::Role::kHead) {
    Head::Options o;
    o.cluster = config.cluster;
    o.cloud = config.cloud;
    o.state_dir = config.state_dir;
    o.tls = {config.certs_dir + "/ca.crt", config.certs_dir + "/agent.crt",
             config.certs_dir + "/agent.key"};
    o.listen_host = config.listen.host;
    o.listen_port = config.listen.port;
    o.expected_nodes = config.expected_nodes;
    head = std::make_unique<Head>(io, o);
    if (auto s = head->Start(); !s.ok()) {
      HERD_LOG(kError) << "cannot start the head: " << s.message();
      return 1;
    }
    // The head node runs jobs too: its worker dials the head like any other.
    worker_config.head = {config.listen.host, head->port()};
    if (!config.port_file.empty()) {
      // For whoever started this agent, about this process: void after a power failure.
      if (auto s = WriteFileAtomic(config.port_file, std::to_string(head->port()) + "\n", 0644,
                                   Durability::kProcessCrash);
          !s.ok()) {
        HERD_LOG(kError) << "cannot write the port file: " << s.message();
        return 1;
      }
    }
  }
  Worker worker(io, worker_config, launcher, gpus, head != nullptr);
  launcher.SetOutputBacklog([&worker] { return worker.QueuedOutputBytes(); },
                            limits::kAgentOutputBacklogBytes);
  // The worker goes before the launcher, whose loop thread must not ask it any more by then.
  struct StopAskingWorker {
    UvProcessLauncher& launcher;
    ~StopAskingWorker() { launcher.SetOutputBacklog({}, 0); }
  } stop_asking_worker{launcher};
  if (auto s = worker.Start(); !s.ok()) {
    HERD_LOG(kError) << "cannot start the worker: " << s.message();
    return 1;
  }
  // The node's health: NVML's GPU faults and the config's health check, judged on a thread of
  // its own (an NVML call or a check may take a while), reported through the worker's loop. Ends
  // before the worker does.
  SystemClock health_clock;
  HealthWatch::Options health_options{config.health_check_command, config.health_check_interval,
                                      limits::kGpuHealthPollInterval};
  HealthThread health(std::make_unique<HealthWatch>(health_clock, health_options, OpenNvmlFaults(),
                                                    RunHealthCheckCommand),
                      [&io, &worker](const HealthVerdict& v) {
                        herd::v1::NodeHealthReport report;
                        report.set_healthy(v.healthy);
                        report.set_reason(v.reason);
                        boost::asio::post(io, [&worker, report] { worker.SetHealth(report); });
                      });
  // A spot instance's interruption notice, polled on a thread of its own (a metadata request may
  // take up to kSpotMetadataTimeout), reported through the worker's loop. Ends before the worker.
  std::unique_ptr<SpotNoticeThread> spot;
  if (!config.spot_metadata.empty()) {
    auto http = MakeBeastMetadataHttp(config.spot_metadata);
    if (!http.ok()) {
      HERD_LOG(kError) << http.status().message();
      return 1;
    }
    spot =
        std::make_unique<SpotNoticeThread>(std::move(*http), [&io, &worker](const SpotNotice& n) {
          herd::v1::SpotNotice msg;
          msg.set_action(n.action);
          msg.set_time(n.time);
          msg.set_time_unix_ms(n.time_unix_ms);
          boost::asio::post(io, [&worker, msg] { worker.SetSpotNotice(msg); });
        });
  }
  // Whoever started this agent (the bootstrap's start script) waits for this instead of guessing
  // how long a start takes: everything that a bad config or certificate makes fail has run.
  if (!config.ready_file.empty()) {
    if (auto s = WriteFileAtomic(config.ready_file, std::to_string(::getpid()) + "\n", 0644,
                                 Durability::kProcessCrash);
        !s.ok()) {
      HERD_LOG(kError) << "cannot write the ready file: " << s.message();
      return 1;
    }
  }
  if (ready_fd >= 0) {
    // A starter that is gone (its ssh session cut) gives EPIPE, which must not end the agent.
    struct sigaction ignore {
    }, old{};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &old);
    std::string pid = std::to_string(::getpid()) + "\n";
    ssize_t n;
    do {
      n = ::write(ready_fd, pid.data(), pid.size());
    } while (n < 0 && errno == EINTR);
    ::sigaction(SIGPIPE, &old, nullptr);
    ::close(ready_fd);  // the reader's end of file
    ::alarm(0);
  }
  boost::asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](boost::system::error_code, int sig) {
    HERD_LOG(kInfo) << "signal " << sig << ": stopping (jobs keep running)";
    // Nothing restarts an agent stopped this way (herdlet-supervise and systemd restart only one
    // that failed): the head is told, so that `herd nodes` says so instead of "lost".
    worker.Leave("herdlet (pid " + std::to_string(::getpid()) + ") received " +
                     (sig == SIGTERM ? "SIGTERM" : "SIGINT"),
                 [&] {
                   if (head) head->Stop();
                   io.stop();
                 });
  });
  io.run();
  return 0;
}

}  // namespace herd::agent
