// fleet_sim: issue 8 P5, "a head that holds 1000 agents". A benchmark, not a test: it prints what
// it measured and PASS/FAIL against the goals, and exits 1 when a goal is missed.
//
// It starts the real `herdlet` head as its own process (so its RSS and CPU are its own) on a
// loopback address, issues one agent certificate per simulated agent from a fresh cluster CA, and
// dials every simulated agent from this process over real mutual TLS + websocket
// (shared/transport), from loopback source addresses of the bench range. A simulated agent speaks
// the v1 agent protocol as agent/core/worker.cpp does: Register, Heartbeat every
// kHeartbeatInterval, and for a StartProcess: ProcessStarted, one line of ProcessOutput and
// ProcessExited(0) (ResendOutput repeats them). No process is spawned for a simulated agent; the
// head node's own worker is the real one and really runs rank 0.
//
// Measured: time for all agents to register (first dial -> last RegisterAck), head RSS, head CPU
// over an idle window with every agent heartbeating, and a gang job with num_nodes = agents
// submitted through the controller's HeadClient (the path of `herd exec --endpoint`): submit ->
// SUCCEEDED, with every rank's line checked in the streamed log.
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "controller/core/head_client.hpp"
#include "herd/v1/agent.pb.h"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "shared/proto/frame.hpp"
#include "shared/tls/certs.hpp"
#include "shared/transport/transport.hpp"

extern char** environ;

namespace {

namespace net = boost::asio;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using herd::Result;
using herd::Status;
using namespace herd::v1;

struct Options {
  std::string herdlet = "herdlet";
  int agents = 1000;
  int threads = 2;
  int idle_seconds = 30;
  std::string net = "127.0.60";  // the head listens on .1, agents dial from .2 - .251
  rlim_t head_nofile = 1024;     // the soft RLIMIT_NOFILE the head starts with (systemd's default)
  bool keep = false;
  int burst = 1000;  // single-node jobs submitted after the gang (0: none)
  // Goals (issue 8, P5).
  double goal_gang_s = 2.0;
  double goal_rss_mb = 200.0;
  double goal_idle_cpu_pct = 5.0;
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// ---- /proc of the head ----

long ProcStatusKb(pid_t pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  const std::string want = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(want, 0) == 0) return std::strtol(line.c_str() + want.size(), nullptr, 10);
  }
  return -1;
}

// utime + stime in clock ticks.
long long ProcCpuTicks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = all.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(all.substr(close + 2));
  std::string field;
  long long utime = 0, stime = 0;
  // Fields after the command: 3 state ... 14 utime, 15 stime.
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::atoll(field.c_str());
    if (i == 15) stime = std::atoll(field.c_str());
  }
  return utime + stime;
}

int ProcThreads(pid_t pid) { return static_cast<int>(ProcStatusKb(pid, "Threads")); }

std::string Uptime() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

Status WriteFile(const std::string& path, const std::string& data, mode_t mode = 0644) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !(out << data)) return herd::IoError("cannot write " + path);
  out.close();
  ::chmod(path.c_str(), mode);
  return Status::Ok();
}

// ---- one simulated agent ----

struct Fleet;

struct SimAgent : std::enable_shared_from_this<SimAgent> {
  SimAgent(net::io_context& io, Fleet& fleet, int index)
      : fleet(fleet), index(index), timer(net::make_strand(io)) {}

  void DialHead();
  void OnMessage(const std::shared_ptr<herd::transport::Connection>& c, std::string message);
  void Heartbeat();
  void Send(const AgentToHead& msg) {
    std::shared_ptr<herd::transport::Connection> c;
    {
      std::lock_guard lock(mu);
      c = conn;
    }
    if (c) c->Send(herd::proto::Encode(msg));
  }

  Fleet& fleet;
  const int index;
  std::string node_id;
  std::string address;
  std::string certs;
  std::mutex mu;
  std::shared_ptr<herd::transport::Connection> conn;  // guarded by mu
  net::steady_timer timer;                            // on the agent's strand
  std::map<std::string, std::string> outputs;         // process key -> what it "printed"
  int dial_attempts = 0;
};

struct Fleet {
  Options opt;
  net::io_context io;
  std::string ca_path;
  std::string head_host;
  uint16_t head_port = 0;
  std::vector<std::shared_ptr<SimAgent>> agents;
  Clock::time_point dial_start;
  std::atomic<int> registered{0};
  std::atomic<int64_t> last_ack_ns{0};
  std::atomic<int> dial_failures{0};
  std::atomic<int> disconnects{0};
  std::atomic<int> refused{0};
  std::atomic<int> starts{0};
  std::atomic<int> kills{0};
  std::atomic<int> resends{0};
  std::atomic<int64_t> heartbeats{0};
  std::atomic<bool> stopping{false};
};

std::string KeyString(const ProcessKey& k) {
  return std::to_string(k.job_id()) + "." + std::to_string(k.attempt()) + "." +
         std::to_string(k.kind()) + "." + std::to_string(k.rank());
}

void SimAgent::DialHead() {
  ++dial_attempts;
  herd::transport::DialOptions o;
  o.host = fleet.head_host;
  o.port = fleet.head_port;
  o.bind_address = address;
  o.tls = {fleet.ca_path, certs + "/agent.crt", certs + "/agent.key"};
  o.role = herd::transport::Role::kAgent;
  auto self = shared_from_this();
  o.handlers.on_message = [self](const auto& c, std::string m) {
    self->OnMessage(c, std::move(m));
  };
  o.handlers.on_close = [self](const auto& c, const Status& why) {
    {
      std::lock_guard lock(self->mu);
      if (self->conn != c) return;
      self->conn.reset();
    }
    if (self->fleet.stopping) return;
    ++self->fleet.disconnects;
    std::cerr << "fleet_sim: " << self->node_id << " lost its connection: " << why.message()
              << "\n";
  };
  herd::transport::Dial(
      fleet.io, std::move(o), [self](Result<std::shared_ptr<herd::transport::Connection>> r) {
        if (!r.ok()) {
          ++self->fleet.dial_failures;
          if (self->dial_attempts <= 5 && !self->fleet.stopping) {
            // As a worker does: back off and dial again.
            self->timer.expires_after(herd::limits::kReconnectBackoffInitial * self->dial_attempts);
            self->timer.async_wait([self](boost::system::error_code ec) {
              if (!ec) self->DialHead();
            });
          } else {
            std::cerr << "fleet_sim: " << self->node_id
                      << " cannot reach the head: " << r.status().message() << "\n";
          }
          return;
        }
        auto c = std::move(r).value();
        {
          std::lock_guard lock(self->mu);
          self->conn = c;
        }
        AgentToHead msg;
        auto* reg = msg.mutable_register_();
        NodeInfo* n = reg->mutable_node();
        n->set_node_id(self->node_id);
        n->add_addresses(self->address);
        n->set_hostname(self->node_id);
        n->set_cpus(4);
        n->set_memory_bytes(int64_t{16} << 30);
        n->set_gpu_source("none");
        n->set_agent_version("fleet-sim");
        reg->set_incarnation(1);
        c->Send(herd::proto::Encode(msg));
      });
}

void SimAgent::OnMessage(const std::shared_ptr<herd::transport::Connection>& c,
                         std::string message) {
  auto decoded = herd::proto::Decode<HeadToAgent>(message);
  if (!decoded.ok()) {
    std::cerr << "fleet_sim: " << node_id
              << ": bad frame from the head: " << decoded.status().message() << "\n";
    c->Close();
    return;
  }
  const HeadToAgent& msg = *decoded;
  switch (msg.msg_case()) {
    case HeadToAgent::kRegisterAck: {
      if (!msg.register_ack().accepted()) {
        ++fleet.refused;
        std::cerr << "fleet_sim: " << node_id << " refused: " << msg.register_ack().reason()
                  << "\n";
        return;
      }
      fleet.last_ack_ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
              .count();
      ++fleet.registered;
      // Heartbeats from the timer, on a strand of this agent (the connection's own strand is
      // private to the transport).
      timer.expires_after(herd::limits::kHeartbeatInterval);
      timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
        if (!ec) self->Heartbeat();
      });
      break;
    }
    case HeadToAgent::kStart: {
      ++fleet.starts;
      const StartProcess& sp = msg.start();
      std::string line = "fleet " + node_id + " rank " + std::to_string(sp.key().rank()) + "\n";
      outputs[KeyString(sp.key())] = line;
      AgentToHead started;
      *started.mutable_started()->mutable_key() = sp.key();
      started.mutable_started()->set_pid(100000 + index);
      Send(started);
      AgentToHead out;
      *out.mutable_output()->mutable_key() = sp.key();
      out.mutable_output()->set_offset(0);
      out.mutable_output()->set_data(line);
      Send(out);
      AgentToHead exited;
      *exited.mutable_exited()->mutable_key() = sp.key();
      exited.mutable_exited()->set_exit_code(0);
      exited.mutable_exited()->set_output_bytes(line.size());
      Send(exited);
      break;
    }
    case HeadToAgent::kResend: {
      ++fleet.resends;
      const ResendOutput& r = msg.resend();
      auto it = outputs.find(KeyString(r.key()));
      if (it == outputs.end()) break;
      if (r.from_offset() < it->second.size()) {
        AgentToHead out;
        *out.mutable_output()->mutable_key() = r.key();
        out.mutable_output()->set_offset(r.from_offset());
        out.mutable_output()->set_data(it->second.substr(r.from_offset()));
        Send(out);
      }
      AgentToHead exited;
      *exited.mutable_exited()->mutable_key() = r.key();
      exited.mutable_exited()->set_exit_code(0);
      exited.mutable_exited()->set_output_bytes(it->second.size());
      Send(exited);
      break;
    }
    case HeadToAgent::kKill:
      ++fleet.kills;  // nothing runs here
      break;
    default:
      break;
  }
}

void SimAgent::Heartbeat() {
  if (fleet.stopping) return;
  {
    std::lock_guard lock(mu);
    if (!conn) return;
  }
  AgentToHead msg;
  msg.mutable_heartbeat()->set_incarnation(1);
  msg.mutable_heartbeat()->set_sent_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count());
  Send(msg);
  ++fleet.heartbeats;
  timer.expires_after(herd::limits::kHeartbeatInterval);
  timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec) self->Heartbeat();
  });
}

// ---- the head process ----

Result<pid_t> StartHead(const Options& opt, const std::string& dir, const std::string& config) {
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  std::string log = dir + "/head.log";
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "HOME=", 5) != 0) env_s.emplace_back(*e);
  }
  env_s.push_back("HOME=" + dir + "/home");
  std::vector<char*> envp;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string herdlet = opt.herdlet;
  std::string flag = "--config";
  std::string cfg = config;
  char* argv[] = {herdlet.data(), flag.data(), cfg.data(), nullptr};
  // The head gets the soft fd limit a service gets by default (systemd: 1024), as on a real node:
  // this process raises its own limit only after the spawn.
  struct rlimit lim {};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  struct rlimit child = lim;
  child.rlim_cur = std::min(opt.head_nofile, lim.rlim_max);
  ::setrlimit(RLIMIT_NOFILE, &child);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, herdlet.c_str(), &files, &attr, argv, envp.data());
  ::setrlimit(RLIMIT_NOFILE, &lim);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return herd::ErrnoError("cannot start " + herdlet, rc);
  return pid;
}

void Usage() {
  std::cerr << "usage: fleet_sim [--herdlet PATH] [--agents N] [--threads T] [--idle-seconds S]\n"
               "                 [--net A.B.C] [--head-nofile N] [--burst N] [--keep]\n";
}

int Run(Options opt) {
  std::cout << "fleet_sim: " << opt.agents << " simulated agents, " << opt.threads
            << " io threads; load average " << Uptime() << "\n";
  // Certificates: a fresh cluster CA, the head's agent certificate, one per simulated agent.
  char tmpl[] = "/tmp/hflt-fleet-XXXXXX";
  if (!::mkdtemp(tmpl)) {
    std::perror("mkdtemp");
    return 2;
  }
  const std::string dir = tmpl;
  auto cleanup = [&] {
    if (!opt.keep) fs::remove_all(dir);
  };
  const std::string cluster = "hflt-fleet";
  const std::string ca_dir = dir + "/certs";
  if (auto s = herd::tls::InitClusterCerts(ca_dir, cluster); !s.ok()) {
    std::cerr << "fleet_sim: " << s.message() << "\n";
    cleanup();
    return 2;
  }
  const std::string head_host = opt.net + ".1";
  if (auto s =
          herd::tls::IssueAgentCerts(ca_dir, cluster + "-head", {head_host}, dir + "/head/certs");
      !s.ok()) {
    std::cerr << "fleet_sim: " << s.message() << "\n";
    cleanup();
    return 2;
  }
  herd::tls::Pem ca;
  ca.cert = *herd::ReadFile(ca_dir + "/ca.crt");
  ca.key = *herd::ReadFile(ca_dir + "/ca.key");
  auto t_certs = Clock::now();
  Fleet fleet;
  fleet.opt = opt;
  fleet.ca_path = ca_dir + "/ca.crt";
  fleet.head_host = head_host;
  for (int i = 0; i < opt.agents; ++i) {
    auto a = std::make_shared<SimAgent>(fleet.io, fleet, i);
    char name[32];
    std::snprintf(name, sizeof name, "%s-sim%04d", cluster.c_str(), i + 1);
    a->node_id = name;
    a->address = opt.net + "." + std::to_string(2 + i % 250);
    a->certs = dir + "/sim/" + std::to_string(i);
    herd::tls::IssueOptions issue;
    issue.ip_sans = {a->address};
    issue.dns_sans = {a->node_id};
    issue.node = herd::tls::NodeIdentity{cluster, a->node_id};
    auto pem = herd::tls::IssueCertificate(ca, herd::transport::Role::kAgent, a->node_id, issue);
    if (!pem.ok()) {
      std::cerr << "fleet_sim: " << pem.status().message() << "\n";
      cleanup();
      return 2;
    }
    fs::create_directories(a->certs);
    if (!WriteFile(a->certs + "/agent.crt", pem->cert).ok() ||
        !WriteFile(a->certs + "/agent.key", pem->key, 0600).ok()) {
      std::cerr << "fleet_sim: cannot write certificates under " << a->certs << "\n";
      cleanup();
      return 2;
    }
    fleet.agents.push_back(std::move(a));
  }
  std::printf("certificates: %d agent certificates issued in %.2f s\n", opt.agents,
              Seconds(Clock::now() - t_certs));

  // The head (role head: it also runs its node's real worker, which registers like any agent).
  fs::create_directories(dir + "/head/state");
  fs::create_directories(dir + "/home");
  const std::string port_file = dir + "/head/port";
  std::ostringstream cfg;
  cfg << "{\"role\": \"head\", \"cluster\": \"" << cluster << "\", \"node_id\": \"" << cluster
      << "-head\", \"address\": \"" << head_host << "\", \"listen\": \"" << head_host
      << ":0\", \"port_file\": \"" << port_file << "\", \"certs\": \"" << dir
      << "/head/certs\", \"state_dir\": \"" << dir << "/head/state\", \"cpus\": 4, "
      << "\"expected_nodes\": " << opt.agents + 1 << "}\n";
  const std::string config = dir + "/head/herdlet.yaml";
  if (!WriteFile(config, cfg.str()).ok()) {
    cleanup();
    return 2;
  }
  auto head = StartHead(opt, dir, config);
  if (!head.ok()) {
    std::cerr << "fleet_sim: " << head.status().message() << "\n";
    cleanup();
    return 2;
  }
  const pid_t head_pid = *head;
  std::printf("head: pid %d, log %s/head.log\n", static_cast<int>(head_pid), dir.c_str());
  std::fflush(stdout);
  auto stop_head = [&] {
    ::kill(head_pid, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(head_pid, nullptr, WNOHANG) == head_pid) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(head_pid, SIGKILL);
    ::waitpid(head_pid, nullptr, 0);
  };
  auto fail = [&](const std::string& why) {
    std::cerr << "fleet_sim: " << why << "\n(head log: " << dir << "/head.log)\n";
    fleet.stopping = true;
    stop_head();
    opt.keep = true;  // keep the log for whoever reads the failure
    return 1;
  };
  {
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline && !fs::exists(port_file)) {
      if (::waitpid(head_pid, nullptr, WNOHANG) == head_pid) return fail("the head exited");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::ifstream in(port_file);
    int port = 0;
    if (!(in >> port) || port <= 0) return fail("the head wrote no port");
    fleet.head_port = static_cast<uint16_t>(port);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // its own worker registers
  const long rss_empty_kb = ProcStatusKb(head_pid, "VmRSS");
  // This process holds one socket per agent.
  {
    struct rlimit lim {};
    ::getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }

  // Register every agent at once.
  auto work = net::make_work_guard(fleet.io);
  std::vector<std::thread> threads;
  for (int t = 0; t < opt.threads; ++t) threads.emplace_back([&] { fleet.io.run(); });
  auto join = [&] {
    fleet.stopping = true;
    for (auto& a : fleet.agents) {
      std::shared_ptr<herd::transport::Connection> c;
      {
        std::lock_guard lock(a->mu);
        c = std::move(a->conn);
      }
      if (c) c->Close();
      net::post(a->timer.get_executor(), [a] { a->timer.cancel(); });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    work.reset();
    fleet.io.stop();
    for (auto& t : threads) t.join();
  };
  const long long ticks_before_reg = ProcCpuTicks(head_pid);
  fleet.dial_start = Clock::now();
  for (auto& a : fleet.agents) {
    net::post(fleet.io, [a] { a->DialHead(); });
  }
  {
    auto deadline = Clock::now() + herd::limits::kAgentRegisterTimeout;
    while (fleet.registered < opt.agents && Clock::now() < deadline) {
      if (::waitpid(head_pid, nullptr, WNOHANG) == head_pid) {
        join();
        return fail("the head exited during registration");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  const double reg_s =
      std::chrono::duration<double>(Clock::time_point(std::chrono::nanoseconds(fleet.last_ack_ns)) -
                                    fleet.dial_start)
          .count();
  const long long ticks_reg = ProcCpuTicks(head_pid) - ticks_before_reg;
  const double tck = static_cast<double>(::sysconf(_SC_CLK_TCK));
  std::printf(
      "registration: %d/%d agents registered in %.2f s (head CPU %.2f s; dial failures %d,"
      " refused %d)\n",
      fleet.registered.load(), opt.agents, reg_s, ticks_reg / tck, fleet.dial_failures.load(),
      fleet.refused.load());
  if (fleet.registered < opt.agents) {
    join();
    return fail("not every agent registered within kAgentRegisterTimeout");
  }

  // The controller's view: every node alive.
  herd::controller::HeadEndpoint endpoint{head_host, fleet.head_port, ca_dir};
  auto t_connect = Clock::now();
  auto client = herd::controller::HeadClient::Connect(endpoint);
  if (!client.ok()) {
    join();
    return fail(client.status().message());
  }
  const double connect_s = Seconds(Clock::now() - t_connect);
  auto nodes = (*client)->Nodes();
  if (!nodes.ok()) {
    join();
    return fail(nodes.status().message());
  }
  int alive = 0;
  for (bool a : nodes->alive()) alive += a ? 1 : 0;
  std::printf("nodes: %d listed by the head, %d alive (the head node's own worker included)\n",
              nodes->nodes_size(), alive);

  // Idle: every agent heartbeating, nothing else happening.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const long rss_idle_kb = ProcStatusKb(head_pid, "VmRSS");
  const int64_t hb_before = fleet.heartbeats;
  const long long t0 = ProcCpuTicks(head_pid);
  const auto w0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(opt.idle_seconds));
  const long long t1 = ProcCpuTicks(head_pid);
  const double window = Seconds(Clock::now() - w0);
  const double idle_cpu_pct = 100.0 * (t1 - t0) / tck / window;
  const double hb_rate = (fleet.heartbeats - hb_before) / window;
  std::printf(
      "idle: head CPU %.2f %% of one core over %.1f s (%.0f heartbeats/s received);"
      " head threads %d\n",
      idle_cpu_pct, window, hb_rate, ProcThreads(head_pid));
  std::printf("head RSS: %.1f MB with no agents, %.1f MB with %d agents (%.1f KB per agent)\n",
              rss_empty_kb / 1024.0, rss_idle_kb / 1024.0, opt.agents,
              static_cast<double>(rss_idle_kb - rss_empty_kb) / opt.agents);

  // A gang of every simulated agent, submitted as `herd exec --endpoint` does: a fresh client
  // (HeadClient runs its io_context only inside calls, so an idle one misses the head's pings).
  client->reset();
  t_connect = Clock::now();
  client = herd::controller::HeadClient::Connect(endpoint);
  if (!client.ok()) {
    join();
    return fail(client.status().message());
  }
  const double connect_job_s = Seconds(Clock::now() - t_connect);
  TaskSpec spec;
  spec.set_name("fleet");
  spec.set_num_nodes(opt.agents);
  spec.set_run("echo fleet rank $SKYPILOT_NODE_RANK of $SKYPILOT_NUM_NODES");
  const long long ticks_before_job = ProcCpuTicks(head_pid);
  const auto s0 = Clock::now();
  auto id = (*client)->Submit(spec, "fleet-sim");
  if (!id.ok()) {
    join();
    return fail(id.status().message());
  }
  const double submit_s = Seconds(Clock::now() - s0);
  uint64_t bytes = 0, lines = 0;
  double running_s = -1;
  herd::controller::HeadClient::StreamCallbacks cb;
  cb.on_data = [&](std::string_view data) {
    bytes += data.size();
    for (char ch : data) lines += ch == '\n';
  };
  cb.on_status = [&](const JobInfo& j) {
    if (running_s < 0 && j.state() == JOB_STATE_RUNNING) running_s = Seconds(Clock::now() - s0);
  };
  cb.interrupted = [] { return false; };
  auto end = (*client)->Stream(*id, 0, true, cb);
  const double gang_s = Seconds(Clock::now() - s0);
  const long long ticks_job = ProcCpuTicks(head_pid) - ticks_before_job;
  if (!end.ok()) {
    join();
    return fail(end.status().message());
  }
  const bool succeeded = end->state() == JOB_STATE_SUCCEEDED;
  std::printf(
      "gang of %d: submit reply %.3f s, RUNNING seen at %.3f s, SUCCEEDED seen at %.3f s"
      " (head: placed %lld ms, ended %lld ms after submit); state %s; %llu lines, %llu"
      " bytes of log; head CPU %.2f s\n",
      opt.agents, submit_s, running_s, gang_s,
      static_cast<long long>(end->started_unix_ms() - end->submitted_unix_ms()),
      static_cast<long long>(end->ended_unix_ms() - end->submitted_unix_ms()),
      JobState_Name(end->state()).c_str(), static_cast<unsigned long long>(lines),
      static_cast<unsigned long long>(bytes), ticks_job / tck);
  const long rss_after_kb = ProcStatusKb(head_pid, "VmRSS");
  const long hwm_kb = ProcStatusKb(head_pid, "VmHWM");

  // P7, head side: a burst of single-node jobs over one client connection (no CLI process per
  // job), each placed on a simulated agent that answers at once.
  double burst_accept_rate = 0, burst_sched_rate = 0;
  int burst_started = 0;
  if (opt.burst > 0) {
    TaskSpec one;
    one.set_name("burst");
    one.set_num_nodes(1);
    one.set_run("true");
    const auto b0 = Clock::now();
    for (int i = 0; i < opt.burst; ++i) {
      auto bid = (*client)->Submit(one, "fleet-sim");
      if (!bid.ok()) {
        join();
        return fail(bid.status().message());
      }
    }
    const double burst_s = Seconds(Clock::now() - b0);
    burst_accept_rate = opt.burst / burst_s;
    int64_t first_submit = 0, last_start = 0;
    auto deadline = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < deadline) {
      auto q = (*client)->Queue(false);
      if (!q.ok()) break;
      first_submit = INT64_MAX;
      last_start = 0;
      burst_started = 0;
      for (const auto& j : *q) {
        if (j.name() != "burst") continue;
        first_submit = std::min(first_submit, j.submitted_unix_ms());
        if (j.started_unix_ms() > 0) {
          ++burst_started;
          last_start = std::max(last_start, j.started_unix_ms());
        }
      }
      if (burst_started >= opt.burst) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    burst_sched_rate = burst_started / std::max(1e-3, (last_start - first_submit) / 1000.0);
    std::printf(
        "burst of %d one-node jobs over one connection: accepted in %.2f s = %.0f jobs/s;"
        " %d scheduled, first submit -> last start %.2f s = %.0f jobs/s\n",
        opt.burst, burst_s, burst_accept_rate, burst_started, (last_start - first_submit) / 1000.0,
        burst_sched_rate);
  }
  std::printf(
      "head RSS after the gang: %.1f MB (peak %.1f MB); client connect %.3f s"
      " (idle cluster %.3f s); agents: %d starts, %d kills, %d resends, %d disconnects\n",
      rss_after_kb / 1024.0, hwm_kb / 1024.0, connect_job_s, connect_s, fleet.starts.load(),
      fleet.kills.load(), fleet.resends.load(), fleet.disconnects.load());
  client->reset();
  join();
  stop_head();

  // Verdict.
  const double peak_mb = hwm_kb / 1024.0;
  const bool lines_ok = lines == static_cast<uint64_t>(opt.agents);
  bool pass = true;
  auto verdict = [&](const char* what, bool ok, const std::string& detail) {
    std::printf("%s %-32s %s\n", ok ? "PASS" : "FAIL", what, detail.c_str());
    pass = pass && ok;
  };
  char buf[160];
  std::snprintf(buf, sizeof buf, "%d/%d in %.2f s", fleet.registered.load(), opt.agents, reg_s);
  verdict("all agents registered", fleet.registered == opt.agents, buf);
  std::snprintf(buf, sizeof buf, "%.3f s (goal < %.1f s), %s, %llu/%d rank lines", gang_s,
                opt.goal_gang_s, JobState_Name(end->state()).c_str(),
                static_cast<unsigned long long>(lines), opt.agents);
  verdict("gang submit -> SUCCEEDED", succeeded && lines_ok && gang_s < opt.goal_gang_s, buf);
  std::snprintf(buf, sizeof buf, "idle %.1f MB, peak %.1f MB (goal < %.0f MB)",
                rss_idle_kb / 1024.0, peak_mb, opt.goal_rss_mb);
  verdict("head RSS", peak_mb < opt.goal_rss_mb, buf);
  std::snprintf(buf, sizeof buf, "%.2f %% over %.0f s (goal < %.0f %%)", idle_cpu_pct, window,
                opt.goal_idle_cpu_pct);
  verdict("head CPU at idle", idle_cpu_pct < opt.goal_idle_cpu_pct, buf);
  std::snprintf(buf, sizeof buf, "%d", fleet.disconnects.load());
  verdict("no agent connection dropped", fleet.disconnects == 0, buf);
  if (opt.burst > 0) {
    std::snprintf(buf, sizeof buf, "accepted %.0f jobs/s, scheduled %.0f jobs/s (goal >= 100)",
                  burst_accept_rate, burst_sched_rate);
    verdict("head job rate (P7, no CLI)",
            burst_started >= opt.burst && burst_accept_rate >= 100 && burst_sched_rate >= 100, buf);
  }
  std::printf("load average at the end: %s\n", Uptime().c_str());
  cleanup();
  return pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        Usage();
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--herdlet") {
      opt.herdlet = next();
    } else if (a == "--agents") {
      opt.agents = std::atoi(next().c_str());
    } else if (a == "--threads") {
      opt.threads = std::atoi(next().c_str());
    } else if (a == "--idle-seconds") {
      opt.idle_seconds = std::atoi(next().c_str());
    } else if (a == "--net") {
      opt.net = next();
    } else if (a == "--head-nofile") {
      opt.head_nofile = static_cast<rlim_t>(std::atoll(next().c_str()));
    } else if (a == "--burst") {
      opt.burst = std::atoi(next().c_str());
    } else if (a == "--keep") {
      opt.keep = true;
    } else {
      Usage();
      return 2;
    }
  }
  if (opt.agents < 1 || opt.agents > 100000 || opt.threads < 1 || opt.idle_seconds < 1) {
    Usage();
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);
  return Run(opt);
}
