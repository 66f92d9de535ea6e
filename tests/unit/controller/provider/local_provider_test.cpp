// The local provider end to end: two network-namespace nodes reached over real ssh (test suite
// root: needs root and `ip netns`; without them the namespace tests say why and report themselves
// skipped), and two user-mode nodes on loopback addresses (suite user_mode: as the user, or as a
// throwaway uid in a child when run as root).
#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include <doctest/doctest.h>

#include "controller/provider/local_provider.hpp"
#include "controller/provider/netns.hpp"
#include "controller/provider/user_nodes.hpp"
#include "controller/ssh/ssh_runner.hpp"
#include "controller/ssh/subprocess.hpp"
#include "tests/unit/netns_fixture.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::controller {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using herd::testing::ReadAll;

std::string Run(const std::vector<std::string>& argv) {
  auto r = RunProcess(argv, {}, 30s);
  return r.ok() ? r->out : std::string();
}

using testing::NetnsSkipReason;

// A namespace cluster (netns_fixture.hpp) with a second key that no node accepts.
struct TestCluster : testing::NetnsCluster {
  std::string wrong_key;

  explicit TestCluster(const std::string& suffix = "")
      : NetnsCluster("herd-lp", "ht", suffix), wrong_key(tmp + "/id_wrong") {
    testing::Keygen(wrong_key);
  }

  // stdout of a command that must succeed.
  std::string Ssh(size_t i, const std::string& cmd) {
    auto r = ssh.Run(Target(i), cmd, 20s);
    REQUIRE_MESSAGE(r.ok(), r.status().ToString());
    CHECK_MESSAGE(r->exit_code == 0, cmd << ": " << r->err);
    return r->out;
  }

  std::string SshdPid(size_t i) {
    return ReadAll(state_dir + "/nodes/" + nodes[i].name + "/sshd.pid");
  }
};

// GET path from 127.0.0.1:port; "" when nothing answers yet.
std::string HttpGet(int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string got;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    std::string req = "GET " + path + " HTTP/1.0\r\n\r\n";
    if (::write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return got;
}

bool AnyProcessMentions(const std::string& needle) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    std::string n = e.path().filename().string();
    if (n.empty() || !std::isdigit(static_cast<unsigned char>(n[0]))) continue;
    std::string cmd = ReadAll("/proc/" + n + "/cmdline");
    if (cmd.find(needle) != std::string::npos && netns::IsAlive(std::stoi(n))) return true;
  }
  return false;
}

TEST_CASE("local provider: two namespace nodes over real ssh, stop, start, repair, teardown" *
          doctest::test_suite("root")) {
  std::string why = NetnsSkipReason();
  if (!why.empty()) return testing::Skip("the local provider test: " + why);
  auto t0 = Clock::now();
  TestCluster c;
  ProvisionRequest req{c.name, 2, c.state_dir, ReadAll(c.key + ".pub")};
  auto provisioned = c.provider.Provision(req);
  REQUIRE_MESSAGE(provisioned.ok(), provisioned.status().ToString());
  c.nodes = *provisioned;
  REQUIRE(c.nodes.size() == 2);
  CHECK(c.nodes[0].name == c.name + "-head");
  CHECK(c.nodes[1].name == c.name + "-worker1");
  CHECK(c.nodes[0].netns == "herd-" + c.name + "-0");
  CHECK(c.nodes[0].ip.starts_with("10.213."));
  CHECK(c.nodes[0].ip != c.nodes[1].ip);
  CHECK(c.nodes[0].ssh_user == "root");
  // The chosen subnet does not clash with the host's own networks.
  CHECK(Run({"ip", "-4", "route", "get", c.nodes[1].ip}).find("dev herdl") != std::string::npos);
  {
    // Delayed ACKs off on this machine's route to the nodes (and on the nodes' own, checked over
    // ssh below): a non-interactive ssh session otherwise stalls ~40 ms per exchange.
    std::string subnet = c.nodes[0].ip.substr(0, c.nodes[0].ip.rfind('.')) + ".0/24";
    std::string route = Run({"ip", "-4", "route", "show", subnet});
    CHECK_MESSAGE(route.find("quickack 1") != std::string::npos, route);
  }

  for (size_t i = 0; i < 2; ++i) {
    Status ready = c.ssh.WaitReady(c.Target(i), 20s);
    REQUIRE_MESSAGE(ready.ok(), ready.ToString());
  }

  // Each node is its own machine: hostname, address, home, name resolution.
  CHECK(c.Ssh(0, "hostname") == c.nodes[0].name + "\n");
  CHECK(c.Ssh(1, "hostname") == c.nodes[1].name + "\n");
  CHECK(c.Ssh(1, "ip -4 -o addr show dev eth0").find(" " + c.nodes[1].ip + "/24 ") !=
        std::string::npos);
  CHECK(c.Ssh(0, "hostname -I") == c.nodes[0].ip + " \n");
  CHECK(c.Ssh(1, "ip -4 route show dev eth0").find("quickack 1") != std::string::npos);
  c.Ssh(0, "echo secret-0 > ~/only-on-head");
  CHECK(c.Ssh(1, "test -e ~/only-on-head && echo seen || echo absent") == "absent\n");
  CHECK(ReadAll(c.nodes[0].host_home + "/only-on-head") == "secret-0\n");
  CHECK(c.Ssh(0, "getent hosts " + c.nodes[1].name).starts_with(c.nodes[1].ip + " "));
  CHECK(c.Ssh(1, "getent hosts " + c.nodes[0].name).starts_with(c.nodes[0].ip + " "));
  // The agent needs cgroups: the ssh session sees the host's /sys/fs/cgroup (nsenter --net).
  std::string host_cgroup = Run({"ls", "/sys/fs/cgroup"});
  if (!host_cgroup.empty()) CHECK(c.Ssh(0, "ls /sys/fs/cgroup") == host_cgroup);

  {
    // rsync honours .gitignore (and lands in the node's home through ~).
    fs::path proj = fs::path(c.tmp) / "proj";
    fs::create_directories(proj / "build");
    std::ofstream(proj / ".gitignore") << "build/\n*.log\n";
    std::ofstream(proj / "train.py") << "print('hi')\n";
    std::ofstream(proj / "debug.log") << "noise\n";
    std::ofstream(proj / "build" / "out.bin") << "binary\n";
    Status synced = c.ssh.Rsync(c.Target(0), proj.string() + "/", "~/sky_workdir", true, 30s);
    REQUIRE_MESSAGE(synced.ok(), synced.ToString());
    CHECK(c.Ssh(0, "cd ~/sky_workdir && find . -type f | sort") == "./.gitignore\n./train.py\n");
    CHECK(fs::exists(fs::path(c.nodes[0].host_home) / "sky_workdir" / "train.py"));
    Status all = c.ssh.Rsync(c.Target(1), proj.string() + "/", "~/full", false, 30s);
    REQUIRE_MESSAGE(all.ok(), all.ToString());
    CHECK(c.Ssh(1, "cd ~/full && find . -type f | sort") ==
          "./.gitignore\n./build/out.bin\n./debug.log\n./train.py\n");
  }

  {
    // A port forward through the ControlMaster reaches a listener on the node's own loopback.
    c.Ssh(0,
          "cd ~ && echo forwarded-hello > fwd.txt && setsid -f /usr/bin/python3 -m http.server "
          "18080 --bind 127.0.0.1 >/dev/null 2>&1 </dev/null");
    auto port = c.ssh.ForwardLocalPort(c.Target(0), "127.0.0.1", 18080);
    REQUIRE_MESSAGE(port.ok(), port.status().ToString());
    std::string reply;
    for (auto until = Clock::now() + 10s; Clock::now() < until;
         std::this_thread::sleep_for(100ms)) {
      reply = HttpGet(*port, "/fwd.txt");
      if (reply.find("forwarded-hello") != std::string::npos) break;
    }
    CHECK(reply.find("200") != std::string::npos);
    CHECK(reply.find("forwarded-hello") != std::string::npos);
  }

  {
    // A key the node does not know: an authentication error naming the machine, at once.
    SshTarget wrong = c.Target(1);
    wrong.identity_file = c.wrong_key;
    wrong.control_dir.clear();  // the master is keyed by host and user, not by key
    auto r = c.ssh.Run(wrong, "true", 20s);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kPermissionDenied);
    CHECK(r.status().message().starts_with(c.nodes[1].name + " (" + c.nodes[1].ip + ":22): "));
    CHECK(r.status().message().find("authentication failed") != std::string::npos);
    auto start = Clock::now();
    Status w = c.ssh.WaitReady(wrong, 20s);
    CHECK(w.code() == Code::kPermissionDenied);
    CHECK(Clock::now() - start < 5s);
  }

  {
    // Provision again: the same nodes, the running sshds untouched.
    std::string pid0 = c.SshdPid(0), pid1 = c.SshdPid(1);
    auto again = c.provider.Provision(req);
    REQUIRE_MESSAGE(again.ok(), again.status().ToString());
    CHECK((*again)[0].ip == c.nodes[0].ip);
    CHECK((*again)[1].ip == c.nodes[1].ip);
    CHECK(c.SshdPid(0) == pid0);
    CHECK(c.SshdPid(1) == pid1);
    // A lost pid file: Start replaces the running listener instead of failing on port 22.
    fs::remove(c.state_dir + "/nodes/" + c.nodes[0].name + "/sshd.pid");
    auto restarted = c.provider.Start(c.name, c.state_dir);
    REQUIRE_MESSAGE(restarted.ok(), restarted.status().ToString());
    CHECK(c.SshdPid(0) != pid0);
    CHECK(c.Ssh(0, "hostname") == c.nodes[0].name + "\n");
    ProvisionRequest bigger = req;
    bigger.num_nodes = 3;
    CHECK(c.provider.Provision(bigger).status().code() == Code::kFailedPrecondition);
  }

  {
    // Stop: every process in the nodes is gone (the http server too); nodes and files stay.
    Status stopped = c.provider.Stop(c.name, c.state_dir);
    REQUIRE_MESSAGE(stopped.ok(), stopped.ToString());
    CHECK(netns::ProcessesIn(c.nodes[0].netns).empty());
    CHECK(netns::ProcessesIn(c.nodes[1].netns).empty());
    CHECK(netns::Exists(c.nodes[0].netns));
    CHECK(fs::exists(fs::path(c.nodes[0].host_home) / "only-on-head"));
    (void)c.ssh.CloseMaster(c.Target(0));
    (void)c.ssh.CloseMaster(c.Target(1));
    auto start = Clock::now();
    Status down = c.ssh.WaitReady(c.Target(0), 1500ms);
    CHECK(down.code() == Code::kDeadlineExceeded);
    CHECK(down.message().starts_with(c.nodes[0].name + " (" + c.nodes[0].ip +
                                     ":22): ssh not ready after 1.5 s: "));
    CHECK(Clock::now() - start < 4s);
  }

  {
    // Start brings the same nodes back, home intact.
    auto started = c.provider.Start(c.name, c.state_dir);
    REQUIRE_MESSAGE(started.ok(), started.status().ToString());
    CHECK((*started)[0].ip == c.nodes[0].ip);
    for (size_t i = 0; i < 2; ++i) {
      Status ready = c.ssh.WaitReady(c.Target(i), 20s);
      REQUIRE_MESSAGE(ready.ok(), ready.ToString());
    }
    CHECK(c.Ssh(0, "cat ~/only-on-head") == "secret-0\n");
    CHECK(c.Ssh(1, "hostname") == c.nodes[1].name + "\n");
  }

  {
    // A half-gone cluster (node 1's namespace deleted behind herd's back) is repaired by Provision.
    (void)c.ssh.CloseMaster(c.Target(1));
    REQUIRE(netns::KillAll(c.nodes[1].netns, 200ms, 3s).ok());
    REQUIRE(netns::Delete(c.nodes[1].netns).ok());
    auto repaired = c.provider.Provision(req);
    REQUIRE_MESSAGE(repaired.ok(), repaired.status().ToString());
    Status ready = c.ssh.WaitReady(c.Target(1), 20s);
    REQUIRE_MESSAGE(ready.ok(), ready.ToString());
    CHECK(c.Ssh(1, "hostname") == c.nodes[1].name + "\n");
    CHECK(c.Ssh(1, "getent hosts " + c.nodes[0].name).starts_with(c.nodes[0].ip + " "));
  }

  {
    // Teardown leaves nothing: namespaces, links, processes, mounts, state.
    std::string subnet = c.nodes[0].ip.substr(7, c.nodes[0].ip.rfind('.') - 7);
    for (size_t i = 0; i < 2; ++i) (void)c.ssh.CloseMaster(c.Target(i));
    Status gone = c.provider.Teardown(c.name, c.state_dir);
    REQUIRE_MESSAGE(gone.ok(), gone.ToString());
    CHECK(LocalProvider::ExistingNamespaces(c.name).empty());
    CHECK(Run({"ip", "netns", "list"}).find("herd-" + c.name + "-") == std::string::npos);
    std::string links = Run({"ip", "-o", "link", "show"});
    CHECK(links.find("herdl" + subnet + ":") == std::string::npos);
    CHECK(links.find("herdl" + subnet + "@") == std::string::npos);
    CHECK_FALSE(AnyProcessMentions(c.state_dir));
    std::string mounts = ReadAll("/proc/self/mountinfo");
    CHECK(mounts.find("herd-" + c.name + "-") == std::string::npos);
    CHECK(mounts.find(c.state_dir) == std::string::npos);
    CHECK_FALSE(fs::exists(c.state_dir));
    CHECK(c.provider.Teardown(c.name, c.state_dir).ok());
  }
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  MESSAGE("local provider test took " << took.count() << " ms");
  CHECK(took < 60s);
}

TEST_CASE("local provider: Teardown after a crash that lost the state record removes everything" *
          doctest::test_suite("root")) {
  std::string why = NetnsSkipReason();
  if (!why.empty()) return testing::Skip(why);
  TestCluster c("c");
  auto nodes = c.provider.Provision({c.name, 1, c.state_dir, ReadAll(c.key + ".pub")});
  REQUIRE_MESSAGE(nodes.ok(), nodes.status().ToString());
  std::string subnet = (*nodes)[0].ip.substr(7, (*nodes)[0].ip.rfind('.') - 7);
  // The controller died and its state went with it: only the namespaces and links are left.
  std::error_code ec;
  fs::remove_all(c.state_dir, ec);
  CHECK(LocalProvider::ExistingNamespaces(c.name).size() == 2);
  Status gone = c.provider.Teardown(c.name, c.state_dir);
  REQUIRE_MESSAGE(gone.ok(), gone.ToString());
  CHECK(LocalProvider::ExistingNamespaces(c.name).empty());
  CHECK(Run({"ip", "-o", "link", "show"}).find("herdl" + subnet + "@") == std::string::npos);
}

TEST_CASE("local provider: bad requests are refused before anything is made") {
  LocalProvider p;
  CHECK(p.name() == "local");
  CHECK(p.Provision({"Bad_Name", 1, "/tmp/x", "ssh-ed25519 AAAA"}).status().code() ==
        Code::kInvalidArgument);
  CHECK(p.Provision({"ok", 0, "/tmp/x", "ssh-ed25519 AAAA"}).status().code() ==
        Code::kInvalidArgument);
  CHECK(p.Provision({"ok", 1, "/tmp/x", "not a key"}).status().code() == Code::kInvalidArgument);
  CHECK(LocalProvider::NodeName("demo", 0) == "demo-head");
  CHECK(LocalProvider::NodeName("demo", 3) == "demo-worker3");
  CHECK(LocalProvider::BridgeNetns("demo") == "herd-demo-br");
}

// SIGKILL to every process whose command line names path (all of them started by the test).
void KillMentioning(const std::string& path) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    std::string n = e.path().filename().string();
    if (n.empty() || !std::isdigit(static_cast<unsigned char>(n[0]))) continue;
    pid_t pid = std::stoi(n);
    if (pid != ::getpid() && ReadAll("/proc/" + n + "/cmdline").find(path) != std::string::npos) {
      ::kill(pid, SIGKILL);
    }
  }
}

// The user-mode checks, run as a normal user. A child that runs them after dropping root cannot
// use doctest's checks (they do not cross fork), so failures are collected as text.
struct UserModeRun {
  std::string tmp;        // owned by the user; the cluster's files and the "real" home below it
  std::string real_home;  // the user's passwd home: nothing of the nodes may land there
  std::vector<std::string> failures;

  void Expect(bool ok, const std::string& what) {
    if (!ok) failures.push_back(what);
  }
  template <typename A, typename B>
  void ExpectEq(const A& got, const B& want, const std::string& what) {
    std::ostringstream s;
    s << what << ": got [" << got << "], want [" << want << "]";
    Expect(got == want, s.str());
  }

  bool AliveWithCmdline(const std::string& cmdline) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      std::string n = e.path().filename().string();
      if (n.empty() || !std::isdigit(static_cast<unsigned char>(n[0]))) continue;
      if (ReadAll("/proc/" + n + "/cmdline") == cmdline && netns::IsAlive(std::stoi(n))) {
        return true;
      }
    }
    return false;
  }

  void Scenario() {
    auto t0 = Clock::now();
    const std::string name = "hu" + std::to_string(::getpid() % 100000);
    const std::string state_dir = tmp + "/clusters/" + name;
    const std::string key = tmp + "/id_cluster";
    auto kg = RunProcess({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key}, {}, 30s);
    if (!kg.ok() || kg->exit_code != 0) return Expect(false, "ssh-keygen for the cluster key");
    LocalProvider provider;
    OpenSshRunner ssh;
    std::vector<NodeHandle> nodes;
    auto target = [&](size_t i) {
      SshTarget t;
      t.host = nodes[i].ip;
      t.port = nodes[i].ssh_port;
      t.user = nodes[i].ssh_user;
      t.identity_file = key;
      t.known_hosts_file = tmp + "/known_hosts";
      t.control_dir = tmp + "/cm";
      t.name = nodes[i].name;
      return t;
    };
    auto run = [&](size_t i, const std::string& cmd) -> std::string {
      auto r = ssh.Run(target(i), cmd, 20s);
      if (!r.ok()) {
        Expect(false, cmd + ": " + r.status().ToString());
        return "";
      }
      Expect(r->exit_code == 0, cmd + ": exit " + std::to_string(r->exit_code) + ": " + r->err);
      return r->out;
    };
    auto close_masters = [&] {
      for (size_t i = 0; i < nodes.size(); ++i) (void)ssh.CloseMaster(target(i));
    };
    // Whatever happens below, nothing of the cluster stays.
    struct Guard {
      std::function<void()> f;
      ~Guard() { f(); }
    } guard{[&] {
      close_masters();
      (void)provider.Teardown(name, state_dir);
    }};

    ProvisionRequest req{name, 2, state_dir, ReadAll(key + ".pub")};
    auto provisioned = provider.Provision(req);
    if (!provisioned.ok()) return Expect(false, "Provision: " + provisioned.status().ToString());
    nodes = *provisioned;
    if (nodes.size() != 2)
      return Expect(false, "Provision returned " + std::to_string(nodes.size()));
    const passwd* me = ::getpwuid(::geteuid());
    ExpectEq(nodes[0].name, name + "-head", "head name");
    ExpectEq(nodes[1].name, name + "-worker1", "worker name");
    ExpectEq(nodes[0].ssh_user, std::string(me ? me->pw_name : "?"), "ssh user");
    ExpectEq(nodes[0].netns, "", "no namespace");
    Expect(nodes[0].ip.starts_with("127.") && nodes[0].ip.ends_with(".1"),
           "head ip " + nodes[0].ip);
    ExpectEq(nodes[1].ip, nodes[0].ip.substr(0, nodes[0].ip.size() - 1) + "2", "worker ip");
    Expect(nodes[0].ssh_port > 1024 && nodes[1].ssh_port > 1024, "ports above 1024");
    ExpectEq(nodes[0].host_home, state_dir + "/nodes/" + nodes[0].name + "/home", "host_home");

    for (size_t i = 0; i < 2; ++i) {
      Status ready = ssh.WaitReady(target(i), 20s);
      if (!ready.ok()) {
        return Expect(false, "WaitReady: " + ready.ToString() + "; sshd.log: " +
                                 ReadAll(state_dir + "/nodes/" + nodes[i].name + "/sshd.log"));
      }
    }
    for (size_t i = 0; i < 2; ++i) {
      // The node's own home, as $HOME and as where a session starts.
      ExpectEq(run(i, "echo $HOME"), nodes[i].host_home + "\n", "$HOME of node " + nodes[i].name);
      ExpectEq(run(i, "pwd"), nodes[i].host_home + "\n", "start directory of " + nodes[i].name);
      // The address the session came in on is the one returned.
      ExpectEq(run(i, "echo $SSH_CONNECTION | cut -d' ' -f3-4"),
               nodes[i].ip + " " + std::to_string(nodes[i].ssh_port) + "\n", "node address");
    }
    run(0, "echo secret-0 > ~/only-on-head && echo rel > relative.txt");
    ExpectEq(run(1, "test -e ~/only-on-head && echo seen || echo absent"), "absent\n",
             "head's file seen on the worker");
    ExpectEq(ReadAll(nodes[0].host_home + "/only-on-head"), "secret-0\n", "file in head home");
    ExpectEq(ReadAll(nodes[0].host_home + "/relative.txt"), "rel\n", "relative path in head home");
    Expect(!fs::exists(nodes[1].host_home + "/only-on-head"), "head's file in worker home");
    {
      // The controller syncs the workdir to a relative destination: it must land in the node home.
      fs::path proj = fs::path(tmp) / "proj";
      fs::create_directories(proj);
      std::ofstream(proj / "train.py") << "print('hi')\n";
      Status synced = ssh.Rsync(target(1), proj.string() + "/", "sky_workdir/", true, 30s);
      Expect(synced.ok(), "rsync: " + synced.ToString());
      Expect(fs::exists(fs::path(nodes[1].host_home) / "sky_workdir" / "train.py"),
             "rsync into the worker home");
    }
    std::error_code ec;
    Expect(fs::is_empty(real_home, ec), "nothing lands in the user's real home " + real_home);

    // A daemon a job leaves behind: Stop must end it too.
    const std::string sleeper =
        std::string("sleep\0", 6) + std::to_string(4000 + ::getpid() % 1000) + '\0';
    run(1, "setsid -f sleep " + std::to_string(4000 + ::getpid() % 1000) +
               " >/dev/null 2>&1 </dev/null");
    for (auto until = Clock::now() + 5s; Clock::now() < until && !AliveWithCmdline(sleeper);) {
      std::this_thread::sleep_for(50ms);
    }
    Expect(AliveWithCmdline(sleeper), "the worker's daemon runs");

    {
      // Provision again: the same nodes, the running sshds untouched.
      std::string pid0 = ReadAll(state_dir + "/nodes/" + nodes[0].name + "/sshd.pid");
      auto again = provider.Provision(req);
      if (!again.ok()) return Expect(false, "Provision again: " + again.status().ToString());
      ExpectEq((*again)[1].ip, nodes[1].ip, "same worker ip");
      ExpectEq((*again)[1].ssh_port, nodes[1].ssh_port, "same worker port");
      ExpectEq(ReadAll(state_dir + "/nodes/" + nodes[0].name + "/sshd.pid"), pid0, "same sshd");
      ProvisionRequest bigger = req;
      bigger.num_nodes = 3;
      Expect(provider.Provision(bigger).status().code() == Code::kFailedPrecondition,
             "a different node count is refused");
    }

    {
      // Stop: no sshd, no session, no daemon of the cluster; the files stay.
      close_masters();
      Status stopped = provider.Stop(name, state_dir);
      Expect(stopped.ok(), "Stop: " + stopped.ToString());
      Expect(!AnyProcessMentions(state_dir), "an sshd of the cluster survived Stop");
      Expect(!AliveWithCmdline(sleeper), "the worker's daemon survived Stop");
      Expect(UserNodes::Processes(state_dir).empty(), "processes of the cluster survived Stop");
      Expect(fs::exists(nodes[0].host_home + "/only-on-head"), "Stop kept the head's files");
      Status down = ssh.WaitReady(target(0), 1500ms);
      Expect(down.code() == Code::kDeadlineExceeded, "a stopped node answers: " + down.ToString());
    }

    {
      // Start: the same nodes again, homes intact.
      auto started = provider.Start(name, state_dir);
      if (!started.ok()) return Expect(false, "Start: " + started.status().ToString());
      nodes = *started;
      for (size_t i = 0; i < 2; ++i) {
        Status ready = ssh.WaitReady(target(i), 20s);
        if (!ready.ok()) return Expect(false, "WaitReady after Start: " + ready.ToString());
      }
      ExpectEq(run(0, "cat ~/only-on-head"), "secret-0\n", "head's file after Start");
      ExpectEq(run(1, "echo $HOME"), nodes[1].host_home + "\n", "$HOME after Start");
    }

    {
      // Teardown leaves nothing: no process, no file.
      close_masters();
      Status gone = provider.Teardown(name, state_dir);
      Expect(gone.ok(), "Teardown: " + gone.ToString());
      Expect(!AnyProcessMentions(state_dir), "an sshd of the cluster survived Teardown");
      Expect(UserNodes::Processes(state_dir).empty(), "processes survived Teardown");
      Expect(!fs::exists(state_dir), "Teardown left " + state_dir);
      Expect(fs::is_empty(tmp + "/clusters", ec), "Teardown left files beside the state dir");
      Expect(provider.Teardown(name, state_dir).ok(), "a second Teardown is OK");
    }
    auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
    Expect(took < 30s, "the user-mode scenario took " + std::to_string(took.count()) + " ms");
  }
};

// A uid that no passwd entry and no process uses: the throwaway user of the test.
uid_t UnusedUid() {
  std::set<long> used;
  std::ifstream in("/etc/passwd");
  std::string line;
  while (std::getline(in, line)) {
    auto p = line.find(':', line.find(':') + 1);
    if (p != std::string::npos) used.insert(std::atol(line.c_str() + p + 1));
  }
  for (uid_t u = 61000; u < 62000; ++u) {
    if (used.contains(u)) continue;
    bool busy = false;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      struct stat st {};
      if (::stat(e.path().c_str(), &st) == 0 && st.st_uid == u) busy = true;
    }
    if (!busy) return u;
  }
  return 0;
}

// Runs the scenario as a throwaway user in a child: a private mount namespace gets a copy of
// /etc/passwd with that user (a bash shell, a home in tmp), so nothing of the machine changes.
// Not `nobody`: nss-systemd reports its account as locked ("!*"), and sshd refuses locked users.
// "" when it ran; else why it could not.
std::string RunAsThrowawayUser(UserModeRun& u, uid_t uid) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  pid_t pid = ::fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    ::close(fds[0]);
    auto report = [&](const std::string& text, int code) {
      size_t off = 0;
      while (off < text.size()) {
        ssize_t n = ::write(fds[1], text.data() + off, text.size() - off);
        if (n <= 0) break;
        off += static_cast<size_t>(n);
      }
      ::_exit(code);
    };
    std::string passwd = ReadAll("/etc/passwd");
    if (!passwd.empty() && passwd.back() != '\n') passwd += '\n';
    passwd += "herd-lpu:x:" + std::to_string(uid) + ":" + std::to_string(uid) +
              ":herd test:" + u.real_home + ":/bin/bash\n";
    std::ofstream(u.tmp + "/passwd") << passwd;
    if (::unshare(CLONE_NEWNS) != 0) report("unshare(CLONE_NEWNS) failed", 3);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount((u.tmp + "/passwd").c_str(), "/etc/passwd", nullptr, MS_BIND, nullptr) != 0) {
      report("cannot bind-mount a private /etc/passwd", 3);
    }
    if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0) {
      report("setuid(" + std::to_string(uid) + ") failed", 3);
    }
    ::setenv("HOME", u.real_home.c_str(), 1);
    ::setenv("USER", "herd-lpu", 1);
    ::setenv("LOGNAME", "herd-lpu", 1);
    u.Scenario();
    std::string text;
    for (const auto& f : u.failures) text += f + '\0';
    report(text, 0);
  }
  ::close(fds[1]);
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 3) return got;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    u.failures.push_back("the test user's child died: status " + std::to_string(status));
  }
  size_t start = 0;
  while (start < got.size()) {
    size_t end = got.find('\0', start);
    u.failures.push_back(got.substr(start, end - start));
    start = end + 1;
  }
  return "";
}

TEST_CASE("local provider as a normal user: loopback nodes with user-mode sshds and own homes" *
          doctest::test_suite("user_mode")) {
  if (::access("/usr/sbin/sshd", X_OK) != 0) return testing::Skip("no /usr/sbin/sshd");
  UserModeRun u;
  char tmpl[] = "/tmp/herd-lpu-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  u.tmp = tmpl;
  u.real_home = u.tmp + "/realhome";
  fs::create_directories(u.real_home);
  fs::create_directories(u.tmp + "/clusters");
  std::string skipped;
  if (::geteuid() != 0) {
    u.Scenario();
  } else {
    uid_t uid = UnusedUid();
    REQUIRE(uid != 0);
    for (const auto& p : {u.tmp, u.real_home, u.tmp + "/clusters"}) {
      REQUIRE(::chown(p.c_str(), uid, uid) == 0);
    }
    skipped = RunAsThrowawayUser(u, uid);
    // The last line of cleanup, as root: whatever the child left of its cluster.
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(u.tmp + "/clusters", ec)) {
      (void)UserNodes::Teardown(e.path().filename().string(), e.path().string());
    }
    KillMentioning(u.tmp);  // ssh ControlMasters, and sshds of a broken Teardown
  }
  std::error_code ec;
  fs::remove_all(u.tmp, ec);
  if (!skipped.empty()) return testing::Skip("the user-mode test: " + skipped);
  for (const auto& f : u.failures) FAIL_CHECK(f);
  CHECK(u.failures.empty());
}

}  // namespace
}  // namespace herd::controller
