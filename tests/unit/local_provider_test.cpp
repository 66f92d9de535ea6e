// The local provider end to end: two network-namespace nodes reached over real ssh. Needs root and
// `ip netns`; without them the namespace test says why and passes without running.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <doctest/doctest.h>

#include "controller/provider/local_provider.hpp"
#include "controller/provider/netns.hpp"
#include "controller/ssh/ssh_runner.hpp"
#include "controller/ssh/subprocess.hpp"

namespace herd::controller {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string Run(const std::vector<std::string>& argv) {
  auto r = RunProcess(argv, {}, 30s);
  return r.ok() ? r->out : std::string();
}

// Why the namespace test cannot run here, or "" when it can.
std::string SkipReason() {
  if (::geteuid() != 0) return "not root";
  auto r = RunProcess({"ip", "netns", "list"}, {}, 10s);
  if (!r.ok() || r->exit_code != 0) return "`ip netns` is unavailable";
  if (::access("/usr/sbin/sshd", X_OK) != 0) return "no /usr/sbin/sshd";
  if (::access("/usr/bin/nsenter", X_OK) != 0 && ::access("/bin/nsenter", X_OK) != 0) {
    return "no nsenter";
  }
  return "";
}

// Removes every namespace of the cluster by hand: the last line of cleanup, even when the
// provider's own Teardown is what failed.
void SweepNamespaces(const std::string& cluster) {
  for (const auto& ns : LocalProvider::ExistingNamespaces(cluster)) {
    (void)netns::KillAll(ns, 200ms, 3s);
    (void)RunProcess({"ip", "netns", "delete", ns}, {}, 10s);
  }
}

struct TestCluster {
  std::string name;
  std::string tmp;
  std::string state_dir, key, wrong_key, known_hosts, control_dir;
  LocalProvider provider;
  OpenSshRunner ssh;
  std::vector<NodeHandle> nodes;

  explicit TestCluster(const std::string& suffix = "")
      : name("ht" + std::to_string(::getpid() % 100000) + suffix) {
    char tmpl[] = "/tmp/herd-lp-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    tmp = tmpl;
    state_dir = tmp + "/clusters/" + name;
    key = tmp + "/id_cluster";
    wrong_key = tmp + "/id_wrong";
    known_hosts = tmp + "/known_hosts";
    control_dir = tmp + "/cm";
    SweepNamespaces(name);  // a previous run killed hard
    for (const auto& k : {key, wrong_key}) {
      auto r = RunProcess({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", k}, {}, 30s);
      REQUIRE(r.ok());
      REQUIRE(r->exit_code == 0);
    }
  }

  ~TestCluster() {
    for (size_t i = 0; i < nodes.size(); ++i) (void)ssh.CloseMaster(Target(i));
    Status s = provider.Teardown(name, state_dir);
    if (!s.ok()) MESSAGE("teardown failed: " << s.ToString());
    SweepNamespaces(name);
    std::error_code ec;
    fs::remove_all(tmp, ec);
  }

  SshTarget Target(size_t i) const {
    SshTarget t;
    t.host = nodes[i].ip;
    t.port = nodes[i].ssh_port;
    t.user = nodes[i].ssh_user;
    t.identity_file = key;
    t.known_hosts_file = known_hosts;
    t.control_dir = control_dir;
    t.name = nodes[i].name;
    return t;
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

TEST_CASE("local provider: two namespace nodes over real ssh, stop, start, repair, teardown") {
  std::string why = SkipReason();
  if (!why.empty()) {
    MESSAGE("skipping the local provider test: " << why);
    return;
  }
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

TEST_CASE("local provider: Teardown after a crash that lost the state record removes everything") {
  std::string why = SkipReason();
  if (!why.empty()) {
    MESSAGE("skipping: " << why);
    return;
  }
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

TEST_CASE("local provider as a normal user: a clear error, nothing made") {
  if (::geteuid() != 0) {
    auto r = LocalProvider().Provision({"plain", 1, "/tmp/herd-nonroot-x", "ssh-ed25519 AAAA"});
    CHECK(r.status().code() == Code::kFailedPrecondition);
    CHECK(r.status().message().starts_with("the local provider needs root for network namespaces"));
    return;
  }
  // As root, drop to nobody in a child and check from there.
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    auto r = LocalProvider().Provision({"plain", 1, "/tmp/herd-nonroot-x", "ssh-ed25519 AAAA"});
    bool ok =
        r.status().code() == Code::kFailedPrecondition &&
        r.status().message().starts_with("the local provider needs root for network namespaces");
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(fs::exists("/tmp/herd-nonroot-x"));
}

}  // namespace
}  // namespace herd::controller
