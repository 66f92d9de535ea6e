// The SSH layer without a remote machine: exact ssh/rsync command lines, how ssh's failures are
// read, the subprocess runner, the banner probe, WaitReady's bound and the parallel fan-out.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <doctest/doctest.h>

#include "controller/ssh/parallel.hpp"
#include "controller/ssh/ssh_command.hpp"
#include "controller/ssh/ssh_key.hpp"
#include "controller/ssh/ssh_runner.hpp"
#include "controller/ssh/subprocess.hpp"
#include "controller/ssh/tcp_probe.hpp"

namespace herd::controller {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

SshTarget Worker() {
  SshTarget t;
  t.host = "10.1.2.3";
  t.port = 2222;
  t.user = "root";
  t.identity_file = "/h/.herd/keys/demo";
  t.known_hosts_file = "/h/.herd/clusters/demo/known_hosts";
  t.control_dir = "/h/.herd/cm";
  t.name = "demo-worker1";
  return t;
}

bool HasOption(const std::vector<std::string>& argv, const std::string& kv) {
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == "-o" && argv[i + 1] == kv) return true;
  }
  return false;
}

bool HasPair(const std::vector<std::string>& argv, const std::string& a, const std::string& b) {
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == a && argv[i + 1] == b) return true;
  }
  return false;
}

// Splits like rsync splits its -e argument: spaces separate, quotes protect.
std::vector<std::string> SplitLikeRsync(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  char quote = 0;
  for (char c : s) {
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else {
        cur += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == ' ') {
      if (in_word) out.push_back(cur);
      cur.clear();
      in_word = false;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (in_word) out.push_back(cur);
  return out;
}

TEST_CASE("ssh argv: multiplexed, bounded, only the cluster key, never a prompt") {
  auto argv = BuildSshArgv(Worker(), "echo hi");
  REQUIRE(argv.size() > 6);
  CHECK(argv[0] == "ssh");
  CHECK(argv[1] == "-T");
  CHECK(HasOption(argv, "ControlMaster=auto"));
  CHECK(HasOption(argv, "ControlPersist=300s"));
  CHECK(HasOption(argv, "ControlPath=/h/.herd/cm/%C"));
  CHECK(HasOption(argv, "ConnectTimeout=10"));
  CHECK(HasOption(argv, "ServerAliveInterval=5"));
  CHECK(HasOption(argv, "ServerAliveCountMax=3"));
  CHECK(HasOption(argv, "IdentitiesOnly=yes"));
  CHECK(HasOption(argv, "BatchMode=yes"));
  CHECK(HasOption(argv, "StrictHostKeyChecking=accept-new"));
  CHECK(HasOption(argv, "UserKnownHostsFile=/h/.herd/clusters/demo/known_hosts"));
  CHECK(HasPair(argv, "-i", "/h/.herd/keys/demo"));
  CHECK(HasPair(argv, "-p", "2222"));
  // The destination, then "--" so that a command starting with '-' is not read as an option.
  CHECK(argv[argv.size() - 3] == "root@10.1.2.3");
  CHECK(argv[argv.size() - 2] == "--");
  CHECK(argv.back() == "echo hi");
}

TEST_CASE("ssh argv without a control dir does not multiplex") {
  SshTarget t = Worker();
  t.control_dir.clear();
  t.user.clear();
  auto argv = BuildSshArgv(t, "true");
  CHECK(HasOption(argv, "ControlMaster=no"));
  CHECK(HasOption(argv, "ControlPath=none"));
  CHECK(argv[argv.size() - 3] == "10.1.2.3");
}

TEST_CASE("control argv talks to the master") {
  auto argv =
      BuildControlArgv(Worker(), "forward", {"-L", LocalForwardSpec(40000, "127.0.0.1", 8080)});
  CHECK(HasPair(argv, "-O", "forward"));
  CHECK(HasPair(argv, "-L", "127.0.0.1:40000:127.0.0.1:8080"));
  CHECK(argv.back() == "root@10.1.2.3");
  CHECK(LocalForwardSpec(1, "fd00::1", 2) == "127.0.0.1:1:[fd00::1]:2");
}

TEST_CASE("rsync argv: archive mode, .gitignore filter, the same ssh options") {
  SshTarget t = Worker();
  t.identity_file = "/h/my keys/demo";
  auto argv = BuildRsyncArgv(t, "/src/proj/", "~/sky_workdir", true);
  REQUIRE(argv.ok());
  REQUIRE(argv->size() == 7);
  CHECK((*argv)[0] == "rsync");
  CHECK((*argv)[1] == "-a");
  CHECK((*argv)[2] == "--filter=:- .gitignore");
  CHECK((*argv)[3] == "-e");
  CHECK((*argv)[5] == "/src/proj/");
  CHECK((*argv)[6] == "root@10.1.2.3:~/sky_workdir");
  // rsync splits -e itself: what it gets back must be exactly ssh and the ssh options.
  std::vector<std::string> expected = {"ssh"};
  for (const auto& o : SshOptions(t)) expected.push_back(o);
  CHECK(SplitLikeRsync((*argv)[4]) == expected);

  auto plain = BuildRsyncArgv(Worker(), "a", "b", false);
  REQUIRE(plain.ok());
  CHECK(std::find(plain->begin(), plain->end(), "--filter=:- .gitignore") == plain->end());

  t.identity_file = "/it's \"odd\"";
  CHECK(BuildRsyncArgv(t, "a", "b", false).status().code() == Code::kInvalidArgument);
}

TEST_CASE("a target behind a jump host: a ProxyCommand with the jump's key, in ssh and rsync") {
  SshTarget t = Worker();
  auto jump = ParseSshJump("gate@bastion.example:2022", "/keys/my 50%");
  REQUIRE(jump.ok());
  t.jump = *jump;
  const std::string expected =
      "ProxyCommand=ssh -T -o ControlMaster=no -o ControlPath=none -o ConnectTimeout=10 "
      "-o ServerAliveInterval=5 -o ServerAliveCountMax=3 -o IdentitiesOnly=yes -o BatchMode=yes "
      "-o StrictHostKeyChecking=accept-new "
      "-o 'UserKnownHostsFile=/h/.herd/clusters/demo/known_hosts' "
      "-o GlobalKnownHostsFile=/dev/null -o LogLevel=ERROR -i '/keys/my 50%%' -p 2022 "
      "-W %h:%p 'gate@bastion.example'";
  auto argv = BuildSshArgv(t, "true");
  CHECK(HasOption(argv, expected));
  CHECK(HasPair(argv, "-p", "2222"));  // the target's own port, reached from the jump host
  CHECK(DescribeTarget(t) == "demo-worker1 (10.1.2.3:2222 via bastion.example:2022)");
  // rsync's -e keeps the ProxyCommand one argument.
  auto rsync = BuildRsyncArgv(t, "a", "b", false);
  REQUIRE(rsync.ok());
  std::vector<std::string> words = SplitLikeRsync((*rsync)[3]);
  CHECK(std::find(words.begin(), words.end(), expected) != words.end());

  CHECK(*ParseSshJump("10.0.0.1", "") == SshJump{"10.0.0.1", 22, "", ""});
  CHECK(*ParseSshJump("fd00::2", "") == SshJump{"fd00::2", 22, "", ""});
  CHECK(*ParseSshJump("[fd00::2]:23", "k") == SshJump{"fd00::2", 23, "", "k"});
  for (const char* bad :
       {"", "a,b", "-oX", "u@-h", "h:0", "h:65536", "h:x", "[::1", "@h", "a b", "h'"}) {
    CHECK_MESSAGE(ParseSshJump(bad, "").status().code() == Code::kInvalidArgument, bad);
  }
}

TEST_CASE("a chain of jump hosts: each hop's ProxyCommand nested in the next one's") {
  SshTarget t = Worker();
  t.known_hosts_file = "";
  t.jump =
      SshJump{"inner", 2200, "bob", "/k/in", {{"edge", 22, "", "/k/50%"}, {"mid", 23, "m", ""}}};
  const std::string opts =
      "-T -o ControlMaster=no -o ControlPath=none -o ConnectTimeout=10 -o ServerAliveInterval=5 "
      "-o ServerAliveCountMax=3 -o IdentitiesOnly=yes -o BatchMode=yes "
      "-o StrictHostKeyChecking=accept-new -o LogLevel=ERROR";
  // edge, reached directly; its key's '%' doubled and quoted.
  const std::string edge = "ssh " + opts + " -i '/k/50%%' -p 22 -W %h:%p 'edge'";
  // mid, reached through edge: edge's command is mid's option, '%' doubled once more and quoted.
  std::string edge_in_mid;
  for (char ch : "ProxyCommand=" + edge) edge_in_mid += ch == '%' ? "%%" : std::string(1, ch);
  const std::string mid =
      "ssh " + opts + " -o " + ShellQuote(edge_in_mid) + " -p 23 -W %h:%p 'm@mid'";
  std::string mid_in_inner;
  for (char ch : "ProxyCommand=" + mid) mid_in_inner += ch == '%' ? "%%" : std::string(1, ch);
  const std::string inner = "ProxyCommand=ssh " + opts + " -i '/k/in' -o " +
                            ShellQuote(mid_in_inner) + " -p 2200 -W %h:%p 'bob@inner'";
  auto argv = BuildSshArgv(t, "true");
  CHECK(HasOption(argv, inner));
  CHECK(DescribeTarget(t) == "demo-worker1 (10.1.2.3:2222 via inner:2200 via mid:23 via edge:22)");
}

TEST_CASE("ssh's own failures become errors naming the machine") {
  SshTarget t = Worker();
  CHECK(DescribeTarget(t) == "demo-worker1 (10.1.2.3:2222)");
  t.name.clear();
  CHECK(DescribeTarget(t) == "10.1.2.3:2222");
  t = Worker();

  ProcResult denied{255, "", "root@10.1.2.3: Permission denied (publickey).\n", false};
  Status s = ClassifySshResult(t, denied);
  CHECK(s.code() == Code::kPermissionDenied);
  CHECK(s.message().starts_with("demo-worker1 (10.1.2.3:2222): ssh authentication failed"));
  CHECK(s.message().find("/h/.herd/keys/demo") != std::string::npos);

  ProcResult refused{255, "", "ssh: connect to host 10.1.2.3 port 2222: Connection refused\n",
                     false};
  s = ClassifySshResult(t, refused);
  CHECK(s.code() == Code::kUnavailable);
  CHECK(s.message() ==
        "demo-worker1 (10.1.2.3:2222): ssh failed: ssh: connect to host 10.1.2.3 port 2222: "
        "Connection refused");

  // The remote command's own exit codes, even 255, and its own words are not ssh failures.
  CHECK(ClassifySshResult(t, ProcResult{255, "", "my tool: bad input\n", false}).ok());
  CHECK(ClassifySshResult(t, ProcResult{1, "", "cat: x: Permission denied\n", false}).ok());
  CHECK(ClassifySshResult(t, ProcResult{0, "ok", "", false}).ok());
}

TEST_CASE("RunProcess: exit code, stdout, stderr, environment") {
  auto r = RunProcess({"sh", "-c", "echo out; echo err >&2; echo $HERD_T; exit 3"}, {}, 10s,
                      {{"HERD_T", "from-env"}});
  REQUIRE(r.ok());
  CHECK(r->exit_code == 3);
  CHECK(r->out == "out\nfrom-env\n");
  CHECK(r->err == "err\n");
  CHECK_FALSE(r->timed_out);

  auto killed = RunProcess({"sh", "-c", "kill -TERM $$"}, {}, 10s);
  REQUIRE(killed.ok());
  CHECK(killed->exit_code == 128 + SIGTERM);
}

TEST_CASE("RunProcess feeds a large stdin while reading stdout") {
  std::string big(3 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 97) big[i] = '\n';
  auto r = RunProcess({"cat"}, big, 20s);
  REQUIRE(r.ok());
  CHECK(r->exit_code == 0);
  CHECK(r->out.size() == big.size());
  CHECK(r->out == big);
}

TEST_CASE("RunProcess reports a missing program as an error") {
  auto r = RunProcess({"/nonexistent/herd-no-such-tool", "x"}, {}, 5s);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("/nonexistent/herd-no-such-tool") != std::string::npos);
  CHECK(r.status().message().find("No such file") != std::string::npos);
}

bool ProcessGoneOrZombie(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  auto rp = line.rfind(')');
  return rp != std::string::npos && rp + 2 < line.size() && line[rp + 2] == 'Z';
}

bool WaitGone(pid_t pid, std::chrono::milliseconds total) {
  auto deadline = Clock::now() + total;
  while (Clock::now() < deadline) {
    if (ProcessGoneOrZombie(pid)) return true;
    std::this_thread::sleep_for(20ms);
  }
  return ProcessGoneOrZombie(pid);
}

TEST_CASE("RunProcess timeout kills the whole process group") {
  auto dir = std::filesystem::temp_directory_path() / ("herd-sp-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::string pidfile = (dir / "bg.pid").string();
  auto start = Clock::now();
  auto r = RunProcess({"sh", "-c", "sleep 30 & echo $! > " + pidfile + "; wait"}, {}, 400ms);
  auto elapsed = Clock::now() - start;
  REQUIRE(r.ok());
  CHECK(r->timed_out);
  CHECK(r->exit_code == 128 + SIGKILL);
  CHECK(elapsed < 3s);
  std::ifstream in(pidfile);
  pid_t bg = 0;
  in >> bg;
  REQUIRE(bg > 0);
  bool gone = WaitGone(bg, 3s);
  if (!gone) ::kill(bg, SIGKILL);
  CHECK(gone);
  std::filesystem::remove_all(dir);
}

TEST_CASE("RunProcess does not wait for a background child that keeps the pipes") {
  auto start = Clock::now();
  auto r = RunProcess({"sh", "-c", "sleep 20 & echo $!"}, {}, 10s);
  auto elapsed = Clock::now() - start;
  REQUIRE(r.ok());
  pid_t bg = std::atoi(r->out.c_str());
  if (bg > 0) ::kill(bg, SIGKILL);
  CHECK_FALSE(r->timed_out);
  CHECK(r->exit_code == 0);
  CHECK(bg > 0);
  CHECK(elapsed < 3s);
}

TEST_CASE("SpawnDetached: own session, not our child, output in the log") {
  auto dir = std::filesystem::temp_directory_path() / ("herd-sd-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::string log = (dir / "d.log").string();
  auto pid = SpawnDetached({"sh", "-c", "echo started; exec sleep 30"}, log);
  REQUIRE(pid.ok());
  CHECK(::getsid(*pid) == *pid);
  CHECK(::getpgid(*pid) == *pid);
  std::string content;
  for (int i = 0; i < 100 && content.find("started") == std::string::npos; ++i) {
    std::this_thread::sleep_for(20ms);
    std::ifstream in(log);
    content.assign(std::istreambuf_iterator<char>(in), {});
  }
  CHECK(content == "started\n");
  std::ifstream stat("/proc/" + std::to_string(*pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  char state;
  pid_t ppid;
  rest >> state >> ppid;
  CHECK(ppid != ::getpid());
  ::kill(*pid, SIGKILL);
  CHECK(WaitGone(*pid, 5s));

  auto bad = SpawnDetached({"/nonexistent/herd-daemon"}, log);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("No such file") != std::string::npos);
  auto no_log = SpawnDetached({"true"}, (dir / "missing" / "x.log").string());
  CHECK_FALSE(no_log.ok());

  // before_exec runs in the new process: what it does is what the program sees; its errno fails
  // the start without running the program.
  auto prepared = SpawnDetached({"sh", "-c", "pwd -P > where.tmp && mv where.tmp where"}, log, {},
                                [&dir] { return ::chdir(dir.c_str()) == 0 ? 0 : errno; });
  REQUIRE(prepared.ok());
  CHECK(WaitGone(*prepared, 5s));
  std::ifstream where(dir / "where");
  std::string cwd;
  std::getline(where, cwd);
  CHECK(cwd == std::filesystem::canonical(dir).string());
  auto refused = SpawnDetached({"sh", "-c", "echo ran > ran"}, log, {}, [] { return EPERM; });
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message() == "cannot prepare sh: Operation not permitted");
  std::this_thread::sleep_for(100ms);
  CHECK_FALSE(std::filesystem::exists("ran"));  // it would have run here, in our directory
  std::filesystem::remove_all(dir);
}

// A loopback listener that answers each connection with `greeting` (then waits for the peer to
// close) or, with greeting empty, says nothing.
class FakeServer {
 public:
  explicit FakeServer(std::string greeting) : greeting_(std::move(greeting)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd_, 8) == 0);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        if (!greeting_.empty()) {
          ssize_t ignored = ::write(c, greeting_.data(), greeting_.size());
          (void)ignored;
        }
        char b[16];
        while (::read(c, b, sizeof b) > 0) {
        }
        ::close(c);
      }
    });
  }
  ~FakeServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  std::string greeting_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST_CASE("ProbeSshBanner tells an SSH server from anything else, within its bound") {
  {
    FakeServer ssh("SSH-2.0-OpenSSH_9.2p1 Debian\r\n");
    CHECK(ProbeSshBanner("127.0.0.1", ssh.port(), 2s).ok());
  }
  {
    FakeServer pre("hello, this is a pre-banner line\r\nSSH-2.0-x\r\n");
    CHECK(ProbeSshBanner("127.0.0.1", pre.port(), 2s).ok());
  }
  {
    FakeServer http("HTTP/1.0 400 Bad Request\r\n");
    // This server keeps the connection open after its line: the probe waits for its bound.
    Status s = ProbeSshBanner("127.0.0.1", http.port(), 500ms);
    CHECK_FALSE(s.ok());
  }
  {
    FakeServer silent("");
    auto start = Clock::now();
    Status s = ProbeSshBanner("127.0.0.1", silent.port(), 300ms);
    CHECK(s.code() == Code::kDeadlineExceeded);
    CHECK(Clock::now() - start < 2s);
  }
  auto free_port = PickFreeLocalPort();
  REQUIRE(free_port.ok());
  Status refused = ProbeSshBanner("127.0.0.1", *free_port, 1s);
  CHECK(refused.code() == Code::kUnavailable);
  CHECK(refused.message().find("refused") != std::string::npos);
}

TEST_CASE("WaitReady on a dead port fails within its total, naming the machine") {
  auto port = PickFreeLocalPort();
  REQUIRE(port.ok());
  SshTarget t;
  t.host = "127.0.0.1";
  t.port = *port;
  t.user = "root";
  t.name = "demo-worker1";
  OpenSshRunner runner;
  auto start = Clock::now();
  Status s = runner.WaitReady(t, 1500ms);
  auto elapsed = Clock::now() - start;
  CHECK(s.code() == Code::kDeadlineExceeded);
  CHECK(s.message().starts_with("demo-worker1 (127.0.0.1:" + std::to_string(*port) +
                                "): ssh not ready after 1.5 s: "));
  CHECK(s.message().find("refused") != std::string::npos);
  CHECK(elapsed < 3s);
}

TEST_CASE("a control dir too long for a unix socket is refused up front") {
  SshTarget t = Worker();
  t.control_dir = "/" + std::string(80, 'd');
  OpenSshRunner runner;
  auto r = runner.Run(t, "true", 1s);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(r.status().message().find("ControlMaster directory path too long") != std::string::npos);
}

TEST_CASE("ForEachParallel runs everything, bounded, and joins the failures") {
  size_t limit = MaxParallelism();
  CHECK(limit >= 1);
  CHECK(limit <= 32);
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  CHECK(rl.rlim_cur == rl.rlim_max);

  std::atomic<int> running{0}, peak{0}, done{0};
  Status s = ForEachParallel(64, [&](size_t) {
    int now = ++running;
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    std::this_thread::sleep_for(5ms);
    --running;
    ++done;
    return Status::Ok();
  });
  CHECK(s.ok());
  CHECK(done == 64);
  CHECK(static_cast<size_t>(peak.load()) <= limit);
  if (limit > 1) CHECK(peak.load() > 1);

  Status f = ForEachParallel(10, [](size_t i) -> Status {
    if (i == 3) return Unavailable("host 3 down");
    if (i == 7) return PermissionDenied("key refused");
    return Status::Ok();
  });
  CHECK(f.code() == Code::kUnavailable);
  CHECK(f.message() == "2 of 10 failed: item 3: host 3 down; item 7: key refused");

  Status named = ForEachParallel(
      2,
      [](size_t i) -> Status {
        if (i == 1) throw std::runtime_error("boom");
        return Status::Ok();
      },
      [](size_t i) { return i == 0 ? std::string("demo-head") : std::string("demo-worker1"); });
  CHECK(named.code() == Code::kInternal);
  CHECK(named.message() == "1 of 2 failed: demo-worker1: exception: boom");
  CHECK(ForEachParallel(0, [](size_t) { return Internal("never"); }).ok());
}

TEST_CASE("MakeEd25519KeyPair writes what ssh-keygen reads as one key pair") {
  char tmpl[] = "/tmp/herd-key-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  const std::string key = dir + "/id_ed25519", other = dir + "/other";
  REQUIRE(MakeEd25519KeyPair(key, "herd-host-demo-worker1").ok());
  REQUIRE(MakeEd25519KeyPair(other, "c").ok());
  namespace fs = std::filesystem;
  CHECK((fs::status(key).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write));
  std::ifstream pub_in(key + ".pub");
  std::string pub((std::istreambuf_iterator<char>(pub_in)), std::istreambuf_iterator<char>());
  CHECK(pub.starts_with("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI"));
  CHECK(pub.ends_with(" herd-host-demo-worker1\n"));
  // ssh-keygen parses the private key and derives the same public key (and the comment).
  auto derived = RunProcess({"ssh-keygen", "-y", "-f", key}, {}, 10s);
  REQUIRE(derived.ok());
  CHECK_MESSAGE(derived->exit_code == 0, derived->err);
  CHECK(derived->out == pub);
  auto fp = RunProcess({"ssh-keygen", "-l", "-f", key + ".pub"}, {}, 10s);
  REQUIRE(fp.ok());
  CHECK(fp->exit_code == 0);
  CHECK(fp->out.find("herd-host-demo-worker1 (ED25519)") != std::string::npos);
  // A second key is another key.
  auto other_pub = RunProcess({"ssh-keygen", "-y", "-f", other}, {}, 10s);
  REQUIRE(other_pub.ok());
  CHECK(other_pub->exit_code == 0);
  CHECK(other_pub->out.substr(0, 80) != derived->out.substr(0, 80));
  // An unwritable place is an error naming it, not a half-written key.
  Status bad = MakeEd25519KeyPair(dir + "/missing/dir/key", "c");
  CHECK_FALSE(bad.ok());
  CHECK(bad.message().find(dir + "/missing/dir/key") != std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace herd::controller
