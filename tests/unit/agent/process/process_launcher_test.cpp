#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/process/step.hpp"
#include "agent/process/step_program.hpp"
#include "agent/process/uv_process_launcher.hpp"
#include "shared/common/limits.hpp"
#include "tests/unit/test_support.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using herd::Code;
using herd::agent::ProcessCallbacks;
using herd::agent::ProcessHandle;
using herd::agent::SpawnRequest;
using herd::agent::UvProcessLauncher;

namespace {

// Stands in for the agent's io_context: callbacks run on the test thread while it waits.
class PostQueue {
 public:
  std::function<void(std::function<void()>)> Poster() {
    return [this](std::function<void()> fn) {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(fn));
      cv_.notify_all();
    };
  }
  // Runs posted callbacks until pred() holds or timeout passes; returns pred().
  bool RunUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (pred()) return true;
      std::unique_lock lock(mu_);
      if (queue_.empty()) {
        // Also wake up now and then: some conditions (a process dying) post nothing.
        auto until = std::min(deadline, std::chrono::steady_clock::now() + 20ms);
        cv_.wait_until(lock, until, [&] { return !queue_.empty(); });
      }
      if (queue_.empty()) {
        if (std::chrono::steady_clock::now() >= deadline) return pred();
        continue;
      }
      auto fn = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      fn();
    }
  }
  // Runs whatever arrives during `d`.
  void RunFor(std::chrono::milliseconds d) {
    RunUntil([] { return false; }, d);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
};

// What the callbacks of one process reported.
struct Recorder {
  std::vector<std::pair<uint64_t, std::string>> chunks;
  std::string output;
  bool exited = false;
  bool output_after_exit = false;
  int exit_code = -1;
  int term_signal = -1;
  uint64_t total_bytes = 0;
  std::string output_error;

  ProcessCallbacks Callbacks() {
    return {[this](uint64_t offset, std::string_view data) {
              if (exited) output_after_exit = true;
              chunks.emplace_back(offset, std::string(data));
              output.append(data);
            },
            [this](int code, int sig, uint64_t total, const std::string& error) {
              exited = true;
              exit_code = code;
              term_signal = sig;
              total_bytes = total;
              output_error = error;
            }};
  }
  std::vector<int> Pids() const {
    std::vector<int> pids;
    std::istringstream in(output);
    int pid;
    while (in >> pid) pids.push_back(pid);
    return pids;
  }
};

// With read(2), not a filebuf: libstdc++'s filebuf throws when read fails, and reading
// /proc/PID/environ of a process that exits meanwhile fails with ESRCH (seen once as a failed
// KillGroup check while other tests' processes came and went). A failed read is an empty file.
std::string ReadFile(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

char ProcState(int pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? 0 : stat[close + 2];
}

// The running kernel's version is at least major.minor.
bool KernelAtLeast(int major, int minor) {
  struct utsname u {};
  if (::uname(&u) != 0) return false;
  int ma = 0, mi = 0;
  if (std::sscanf(u.release, "%d.%d", &ma, &mi) != 2) return false;
  return ma > major || (ma == major && mi >= minor);
}

// clone3 is neither missing nor filtered: with no arguments it fails with EINVAL (size too
// small), not ENOSYS (no such call, or Docker's seccomp profile) or EPERM (another filter).
bool Clone3Allowed() {
  errno = 0;
  long r = ::syscall(SYS_clone3, nullptr, 0);
  return !(r < 0 && (errno == ENOSYS || errno == EPERM));
}

// Running (a zombie has already died: it only waits for its parent to read its status).
bool Alive(int pid) {
  char s = ProcState(pid);
  return s != 0 && s != 'Z' && s != 'X';
}

// Live processes whose environment marks them as members of group: the test's own scan, written
// independently of the launcher's.
std::vector<int> MarkedPids(const std::string& group) {
  std::vector<int> pids;
  const std::string marker = std::string("HERD_PROCESS_GROUP=") + group;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    int pid = std::stoi(name);
    if (pid == ::getpid()) continue;
    std::string env = ReadFile(entry.path() / "environ");
    size_t pos = 0;
    while (pos < env.size()) {
      size_t end = env.find('\0', pos);
      if (end == std::string::npos) end = env.size();
      // The value is the group, behind the launcher's scope when it has one ("scope/group").
      std::string_view entry_text(env.data() + pos, end - pos);
      bool match = entry_text == marker ||
                   (entry_text.rfind("HERD_PROCESS_GROUP=", 0) == 0 &&
                    entry_text.size() > group.size() + 1 &&
                    entry_text.substr(entry_text.size() - group.size() - 1) == "/" + group);
      if (match && Alive(pid)) pids.push_back(pid);
      pos = end + 1;
    }
  }
  return pids;
}

// The supervisor program: herd-step, the program herdlet embeds and writes out (step_program.hpp).
const std::vector<std::string> kStep = {HERD_STEP_PROGRAM};

// Group names unique to this test process, so that parallel runs do not see each other's processes.
std::string G(const std::string& name) { return name + "-" + std::to_string(::getpid()); }

std::vector<std::string> Sh(const std::string& script) { return {"/bin/sh", "-c", script}; }

// Per test: a temp dir, a launcher with its own cgroup scope, and cleanup of every process and
// cgroup the test made, even when a check failed.
struct Fixture {
  fs::path dir;
  PostQueue queue;
  std::string scope;
  std::vector<std::string> groups;
  std::vector<int> extra_pids;  // processes to kill that may have dropped the marker
  std::unique_ptr<UvProcessLauncher> launcher;

  // use_cgroups=false: the launcher relies on the environment sweep alone, as on a machine without
  // usable cgroups.
  explicit Fixture(bool use_cgroups = true)
      : scope(use_cgroups ? "herd-test-" + std::to_string(::getpid()) + "/node-1" : "") {
    std::string tmpl = (fs::temp_directory_path() / "herd-proc-test-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    dir = tmpl;
    launcher = std::make_unique<UvProcessLauncher>(queue.Poster(), scope, kStep);
  }
  ~Fixture() {
    for (int pid : extra_pids)
      if (Alive(pid)) ::kill(pid, SIGKILL);
    auto deadline = std::chrono::steady_clock::now() + 3s;
    for (;;) {
      bool any = false;
      for (const auto& g : groups) {
        for (int pid : MarkedPids(g)) {
          any = true;
          ::kill(pid, SIGKILL);
        }
      }
      if (!any || std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(20ms);
    }
    std::string cgroup_dir;
    for (const auto& g : groups) {
      if (!launcher) break;
      cgroup_dir = launcher->CgroupDir(g);
      if (!cgroup_dir.empty()) ::rmdir(cgroup_dir.c_str());
    }
    launcher.reset();  // removes the scope directories once they are empty
    if (!cgroup_dir.empty()) {
      fs::path node = fs::path(cgroup_dir).parent_path();
      ::rmdir(node.c_str());
      ::rmdir(node.parent_path().c_str());
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  // Spawns with a fresh group; REQUIREs success. Returns the job process's pid.
  int Spawn(const std::string& group, std::vector<std::string> argv, Recorder& rec,
            SpawnRequest extra = {}) {
    return SpawnHandle(group, std::move(argv), rec, std::move(extra)).pid;
  }
  ProcessHandle SpawnHandle(const std::string& group, std::vector<std::string> argv, Recorder& rec,
                            SpawnRequest extra = {}) {
    groups.push_back(group);
    extra.group = group;
    extra.argv = std::move(argv);
    if (extra.log_path.empty()) extra.log_path = (dir / (group + ".log")).string();
    auto h = launcher->Spawn(extra, rec.Callbacks());
    REQUIRE_MESSAGE(h.ok(), h.status().ToString());
    return *h;
  }

  bool WaitExit(Recorder& rec, std::chrono::milliseconds timeout = 10s) {
    return queue.RunUntil([&] { return rec.exited; }, timeout);
  }
};

// Checks that the chunks tile the log exactly from `start`, in order, and match the file.
void CheckChunksTileLog(const Recorder& rec, const fs::path& log, uint64_t start) {
  uint64_t next = start;
  for (const auto& [offset, data] : rec.chunks) {
    CHECK(offset == next);
    next = offset + data.size();
  }
  std::string file = ReadFile(log);
  REQUIRE(file.size() == next);
  CHECK(file.substr(start) == rec.output);
}

}  // namespace

TEST_CASE("isolation in use") {
  MESSAGE("process isolation: " << UvProcessLauncher::DescribeIsolation());
  const bool have_cgroups = UvProcessLauncher::DescribeIsolation().rfind("cgroup", 0) == 0;
  PostQueue queue;
  CHECK(UvProcessLauncher(queue.Poster(), "herd-test", kStep).CgroupDir("g").empty() !=
        have_cgroups);
  CHECK(UvProcessLauncher(queue.Poster(), "", kStep).CgroupDir("g").empty());
}

TEST_CASE("output bytes reach the log and the callback unaltered, with their offsets") {
  Fixture f;
  Recorder rec;
  fs::path log = f.dir / "logs" / "nested" / "run.log";  // parents do not exist yet
  SpawnRequest req;
  req.log_path = log.string();
  f.Spawn(G("out"),
          Sh("printf 'a\\rb\\rc\\r'; head -c 1000000 /dev/zero | tr '\\0' x; "
             "printf 'last line'"),
          rec, req);
  REQUIRE(f.WaitExit(rec));
  const std::string expected = "a\rb\rc\r" + std::string(1000000, 'x') + "last line";
  CHECK(rec.output == expected);
  CHECK(rec.total_bytes == expected.size());
  CHECK(rec.exit_code == 0);
  CHECK(rec.term_signal == 0);
  CHECK_FALSE(rec.output_after_exit);
  CheckChunksTileLog(rec, log, 0);
}

TEST_CASE("a second process appends to an existing log; stderr is captured too") {
  Fixture f;
  fs::path log = f.dir / "run.log";
  std::ofstream(log) << "previous attempt\n";
  SpawnRequest req;
  req.log_path = log.string();
  Recorder rec;
  f.Spawn(G("err"),
          Sh("printf 'e1\\n' >&2; sleep 0.2; printf 'out\\n'; sleep 0.2; printf 'e2' >&2"), rec,
          req);
  REQUIRE(f.WaitExit(rec));
  CHECK(rec.output == "e1\nout\ne2");
  CHECK(rec.total_bytes == 17 + 9);  // the log's end after the process's last byte
  CHECK(ReadFile(log) == "previous attempt\ne1\nout\ne2");
  CheckChunksTileLog(rec, log, 17);
}

TEST_CASE("exit codes and signals") {
  Fixture f;
  Recorder three, killed;
  f.Spawn(G("exit3"), Sh("exit 3"), three);
  f.Spawn(G("kill9"), Sh("kill -9 $$"), killed);
  REQUIRE(f.WaitExit(three));
  REQUIRE(f.WaitExit(killed));
  CHECK(three.exit_code == 3);
  CHECK(three.term_signal == 0);
  CHECK(killed.exit_code == 137);
  CHECK(killed.term_signal == 9);

  // The cgroups of finished groups and then the launcher's scope directories are removed.
  std::string cgroup = f.launcher->CgroupDir(G("exit3"));
  if (!cgroup.empty()) {
    CHECK(f.queue.RunUntil([&] { return !fs::exists(cgroup); }, 1s));
    f.launcher.reset();
    CHECK_FALSE(fs::exists(fs::path(cgroup).parent_path().parent_path()));  // herd-test-PID
  }
}

TEST_CASE("a process ends when it exits even if a daemon it left holds its stdout") {
  Fixture f;
  Recorder r;
  auto t0 = std::chrono::steady_clock::now();
  f.Spawn(G("daemon"), Sh("sleep 30 & echo parent done; exit 4"), r);
  REQUIRE(f.WaitExit(r));
  auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(r.exit_code == 4);
  CHECK(r.output.find("parent done\n") != std::string::npos);
  CHECK(waited >= herd::limits::kProcessOutputDrainAfterExit - 100ms);
  CHECK(waited < herd::limits::kProcessOutputDrainAfterExit + 3s);
  f.launcher->KillGroup(G("daemon"), 100ms);
}

TEST_CASE("environment: added, replaced, unset, group marker; PATH of the child finds argv[0]") {
  Fixture f;
  ::setenv("HERD_TEST_DROP", "1", 1);
  ::setenv("HERD_TEST_KEEP", "kept", 1);
  fs::create_directories(f.dir / "bin");
  {
    std::ofstream(f.dir / "bin" / "herd-hello")
        << "#!/bin/sh\nprintf '%s|%s|%s|%s|%s' \"$HERD_TEST_ADD\" \"${HERD_TEST_DROP-unset}\" "
           "\"$HOME\" \"$HERD_TEST_KEEP\" \"$HERD_PROCESS_GROUP\"\n";
  }
  ::chmod((f.dir / "bin" / "herd-hello").c_str(), 0755);
  SpawnRequest req;
  req.env = {{"HERD_TEST_ADD", "added"},
             {"HOME", "/replaced"},
             {"PATH", (f.dir / "bin").string() + ":/usr/bin:/bin"}};
  req.unset_env = {"HERD_TEST_DROP"};
  Recorder rec;
  f.Spawn(G("env-group"), {"herd-hello"}, rec, req);
  REQUIRE(f.WaitExit(rec));
  ::unsetenv("HERD_TEST_DROP");
  ::unsetenv("HERD_TEST_KEEP");
  CHECK(rec.output ==
        "added|unset|/replaced|kept|" + (f.scope.empty() ? "" : f.scope + "/") + G("env-group"));
  CHECK(rec.exit_code == 0);
}

TEST_CASE("cwd") {
  Fixture f;
  fs::create_directories(f.dir / "work dir");
  SpawnRequest req;
  req.cwd = (f.dir / "work dir").string();
  Recorder rec;
  f.Spawn(G("cwd"), Sh("pwd -P"), rec, req);
  REQUIRE(f.WaitExit(rec));
  CHECK(rec.output == fs::canonical(f.dir / "work dir").string() + "\n");
}

// The supervisor forks the job process straight into its group's cgroup (clone3 with
// CLONE_INTO_CGROUP) where the kernel can, and otherwise moves it there before it runs anything;
// both ways must leave the process in the cgroup before ForkIntoCgroup returns in the child.
TEST_CASE("ForkIntoCgroup: the child starts in the cgroup, by clone3 or by a move") {
  Fixture f;
  const std::string group = G("cgroup-entry");
  const std::string dir = f.launcher->CgroupDir(group);
  if (dir.empty()) {
    MESSAGE("no usable cgroup hierarchy on this machine: nothing to check");
    return;
  }
  f.groups.push_back(group);
  fs::create_directories(dir);
  for (bool via_clone3 : {true, false}) {
    CAPTURE(via_clone3);
    int ready[2], done[2];
    REQUIRE(::pipe2(ready, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(done, O_CLOEXEC) == 0);
    bool by_clone3 = false;
    pid_t pid = herd::agent::ForkIntoCgroup(dir, via_clone3, &by_clone3);
    if (pid == 0) {
      // Says it runs, then waits for the test to have looked: async-signal-safe calls only.
      ::close(done[1]);
      char c = 'r';
      ssize_t ignored = ::write(ready[1], &c, 1);
      (void)ignored;
      while (::read(done[0], &c, 1) < 0 && errno == EINTR) {
      }
      ::_exit(0);
    }
    ::close(ready[1]);
    ::close(done[0]);
    REQUIRE(pid > 0);
    // Which way it went: clone3 wherever the kernel has CLONE_INTO_CGROUP (5.7+, cgroup v2 here)
    // and no seccomp filter refuses clone3 (Docker's default profile makes it ENOSYS), so a
    // clone3 that silently fell back to the slow move fails this test there.
    CHECK(by_clone3 == (via_clone3 && KernelAtLeast(5, 7) && Clone3Allowed()));
    char c = 0;
    CHECK(::read(ready[0], &c, 1) == 1);
    std::string procs = ReadFile(dir + "/cgroup.procs");
    CHECK(procs.find(std::to_string(pid) + "\n") != std::string::npos);
    ::close(done[1]);
    ::close(ready[0]);
    int status = -1;
    CHECK(::waitpid(pid, &status, 0) == pid);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
}

TEST_CASE("spawn errors are reported and leave nothing behind") {
  Fixture f;
  Recorder rec;
  SpawnRequest req;
  req.group = G("missing");
  f.groups.push_back(req.group);
  req.log_path = (f.dir / "logs" / "run.log").string();

  SUBCASE("no such program") { req.argv = {"herd-no-such-program-4711"}; }
  SUBCASE("a program path that does not exist") { req.argv = {"/nonexistent/herd-program"}; }
  SUBCASE("bad cwd") {
    req.argv = {"true"};
    req.cwd = (f.dir / "no-such-dir").string();
  }
  auto pid = f.launcher->Spawn(req, rec.Callbacks());
  CHECK_FALSE(pid.ok());
  CHECK(pid.status().code() == herd::Code::kNotFound);
  CHECK_FALSE(fs::exists(f.dir / "logs"));
  CHECK(MarkedPids(req.group).empty());
  std::string cgroup = f.launcher->CgroupDir(G("missing"));
  if (!cgroup.empty()) CHECK_FALSE(fs::exists(cgroup));
  f.queue.RunFor(100ms);
  CHECK_FALSE(rec.exited);  // no callback for a process that never ran
  CHECK(rec.chunks.empty());

  SpawnRequest empty;
  empty.group = G("missing");
  CHECK(f.launcher->Spawn(empty, rec.Callbacks()).status().code() == herd::Code::kInvalidArgument);
}

TEST_CASE("KillGroup kills setsid'd descendants, plain children and the process itself") {
  bool cgroups = true;
  SUBCASE("cgroups where available") {}
  SUBCASE("environment sweep only") { cgroups = false; }
  Fixture f(cgroups);
  Recorder rec;
  const std::string group = G("job-7-attempt-0");
  int script = f.Spawn(group,
                       Sh("setsid sh -c 'echo $$; exec sleep 1000' &\n"
                          "setsid sh -c 'echo $$; exec sleep 1000' &\n"
                          "sleep 1000 & echo $!\n"
                          "wait\n"),
                       rec);
  REQUIRE(f.queue.RunUntil([&] { return rec.Pids().size() == 3; }, 5s));
  std::vector<int> pids = rec.Pids();
  f.extra_pids = pids;
  for (int pid : pids) REQUIRE(Alive(pid));
  for (int pid : pids) CHECK(getsid(pid) != getsid(0));

  std::string cgroup = f.launcher->CgroupDir(group);
  if (!cgroup.empty()) {
    // Every process of the tree was in the group's cgroup before it could fork.
    std::string procs = ReadFile(cgroup + "/cgroup.procs");
    for (int pid : pids) CHECK(procs.find(std::to_string(pid) + "\n") != std::string::npos);
    CHECK(procs.find(std::to_string(script) + "\n") != std::string::npos);
  }

  const auto grace = 1000ms;
  auto start = std::chrono::steady_clock::now();
  f.launcher->KillGroup(group, grace);
  auto all_gone = [&] {
    if (!MarkedPids(group).empty() || Alive(script)) return false;
    for (int pid : pids)
      if (Alive(pid)) return false;
    return true;
  };
  CHECK(f.queue.RunUntil(all_gone, grace + 1s));
  CHECK(std::chrono::steady_clock::now() - start < grace);  // SIGTERM was enough
  REQUIRE(f.WaitExit(rec, 2s));
  CHECK(rec.exit_code == 128 + SIGTERM);
  if (!cgroup.empty()) CHECK(f.queue.RunUntil([&] { return !fs::exists(cgroup); }, 2s));
}

TEST_CASE("a process that ignores SIGTERM is SIGKILLed after the grace period") {
  bool cgroups = true;
  SUBCASE("cgroups where available") {}
  SUBCASE("environment sweep only") { cgroups = false; }
  Fixture f(cgroups);
  Recorder rec;
  f.Spawn(G("stubborn"), Sh("trap '' TERM; sleep 1000 & echo $!; wait; wait"), rec);
  REQUIRE(f.queue.RunUntil([&] { return rec.Pids().size() == 1; }, 5s));
  int sleeper = rec.Pids()[0];
  f.extra_pids = {sleeper};
  const auto grace = 500ms;
  auto start = std::chrono::steady_clock::now();
  f.launcher->KillGroup(G("stubborn"), grace);
  f.queue.RunFor(grace - 150ms);
  CHECK_FALSE(rec.exited);
  CHECK(Alive(sleeper));
  REQUIRE(f.WaitExit(rec, grace + 1s));
  CHECK(std::chrono::steady_clock::now() - start >= grace);
  CHECK(rec.exit_code == 137);
  CHECK(rec.term_signal == SIGKILL);
  CHECK(f.queue.RunUntil([&] { return !Alive(sleeper) && MarkedPids(G("stubborn")).empty(); }, 1s));
}

TEST_CASE("two agents on one machine: a group name in one scope never kills the other's") {
  // Test nodes are namespaces of one kernel: every agent sees every process in /proc.
  Fixture f(true);
  std::string other_scope = "herd-test-" + std::to_string(::getpid()) + "/node-2";
  UvProcessLauncher other(f.queue.Poster(), other_scope, kStep);
  Recorder mine, theirs;
  f.Spawn(G("job1-a1"), Sh("sleep 1000 & echo $!; wait"), mine);
  SpawnRequest req;
  req.group = G("job1-a1");
  req.argv = Sh("sleep 1000 & echo $!; wait");
  req.log_path = (f.dir / "other.log").string();
  REQUIRE(other.Spawn(req, theirs.Callbacks()).ok());
  REQUIRE(
      f.queue.RunUntil([&] { return mine.Pids().size() == 1 && theirs.Pids().size() == 1; }, 5s));
  other.KillGroup(G("job1-a1"), 500ms);
  REQUIRE(f.WaitExit(theirs, 3s));
  f.queue.RunFor(300ms);
  CHECK_FALSE(Alive(theirs.Pids()[0]));
  CHECK_FALSE(mine.exited);
  CHECK(Alive(mine.Pids()[0]));
}

TEST_CASE("killing one group leaves another alone") {
  bool cgroups = true;
  SUBCASE("cgroups where available") {}
  SUBCASE("environment sweep only") { cgroups = false; }
  Fixture f(cgroups);
  Recorder a, b;
  f.Spawn(G("group-a"), Sh("sleep 1000 & echo $!; wait"), a);
  f.Spawn(G("group-b"), Sh("sleep 1000 & echo $!; wait"), b);
  REQUIRE(f.queue.RunUntil([&] { return a.Pids().size() == 1 && b.Pids().size() == 1; }, 5s));
  f.launcher->KillGroup(G("group-a"), 1000ms);
  REQUIRE(f.WaitExit(a, 3s));
  f.queue.RunFor(300ms);
  CHECK_FALSE(Alive(a.Pids()[0]));
  CHECK_FALSE(b.exited);
  CHECK(Alive(b.Pids()[0]));
  CHECK(MarkedPids(G("group-b")).size() == 2);
}

TEST_CASE(
    "cgroup: a process that cleared its environment is still killed; env sweep finds one "
    "that left the cgroup") {
  Fixture f;
  std::string cgroup = f.launcher->CgroupDir(G("probe"));
  if (cgroup.empty()) {
    MESSAGE("no usable cgroup here: " << UvProcessLauncher::DescribeIsolation());
    return;
  }
  const std::string base = fs::path(cgroup).parent_path().parent_path().string();
  Recorder rec;
  f.Spawn(G("escapes"),
          Sh("env -i sh -c 'echo $$; exec sleep 1000' &\n"
             "sh -c 'echo $$ > " +
             base +
             "/cgroup.procs; echo $$; exec sleep 1000' &\n"
             "wait\n"),
          rec);
  REQUIRE(f.queue.RunUntil([&] { return rec.Pids().size() == 2; }, 5s));
  std::vector<int> pids = rec.Pids();
  f.extra_pids = pids;
  for (int pid : pids) REQUIRE(Alive(pid));
  f.launcher->KillGroup(G("escapes"), 1000ms);
  CHECK(f.queue.RunUntil([&] { return !Alive(pids[0]) && !Alive(pids[1]); }, 2s));
  CHECK(f.WaitExit(rec, 2s));
}

TEST_CASE("processes outlive the launcher, and a new launcher can still kill their group") {
  bool cgroups = true;
  SUBCASE("cgroups where available") {}
  SUBCASE("environment sweep only") { cgroups = false; }
  Fixture f(cgroups);
  Recorder rec;
  int script = f.Spawn(G("survivor"), Sh("sleep 1000 & echo $!; wait"), rec);
  REQUIRE(f.queue.RunUntil([&] { return rec.Pids().size() == 1; }, 5s));
  int sleeper = rec.Pids()[0];
  f.launcher = std::make_unique<UvProcessLauncher>(f.queue.Poster(), f.scope, kStep);  // "restart"
  f.queue.RunFor(200ms);
  CHECK(Alive(script));
  CHECK(Alive(sleeper));
  CHECK_FALSE(rec.exited);  // the old launcher posts nothing after it is gone
  f.launcher->KillGroup(G("survivor"), 1000ms);
  CHECK(f.queue.RunUntil([&] { return !Alive(script) && !Alive(sleeper); }, 2s));
  std::string cgroup = f.launcher->CgroupDir(G("survivor"));
  if (!cgroup.empty()) CHECK(f.queue.RunUntil([&] { return !fs::exists(cgroup); }, 2s));
  // Reaped by the new launcher as an adopted orphan, not left a zombie.
  CHECK(f.queue.RunUntil([&] { return ProcState(script) == 0; }, 2s));
}

TEST_CASE("supervisors are reaped when their process ends, also behind a child of our own") {
  // A dead child of this process's own session is not the launcher's to reap; it must not hide
  // the supervisors' deaths either (waitid names one dead child at a time).
  bool own_zombie = false;
  SUBCASE("no other child") {}
  SUBCASE("an unreaped child of our own session") { own_zombie = true; }
  pid_t mine = -1;
  if (own_zombie) {
    mine = ::fork();
    REQUIRE(mine >= 0);
    if (mine == 0) ::_exit(0);
    for (int i = 0; i < 100 && ProcState(mine) != 'Z'; ++i) std::this_thread::sleep_for(10ms);
    REQUIRE(ProcState(mine) == 'Z');
  }
  Fixture f;
  std::vector<Recorder> recs(4);
  std::vector<int> supervisors;
  for (std::size_t i = 0; i < recs.size(); ++i)
    supervisors.push_back(
        f.SpawnHandle(G("reap" + std::to_string(i)), Sh("exit 3"), recs[i]).supervisor_pid);
  for (auto& rec : recs) REQUIRE(f.WaitExit(rec));
  CHECK(f.queue.RunUntil(
      [&] {
        return std::all_of(supervisors.begin(), supervisors.end(),
                           [](int pid) { return ProcState(pid) == 0; });
      },
      2s));
  if (own_zombie) {
    CHECK(ProcState(mine) == 'Z');  // left to its owner
    CHECK(::waitpid(mine, nullptr, 0) == mine);
  }
}

TEST_CASE("SpawnAsync: the handle before any output, then the exit; errors through done") {
  Fixture f;
  Recorder rec;
  std::optional<herd::Result<ProcessHandle>> started;
  bool output_before_started = false;
  auto callbacks = rec.Callbacks();
  auto on_output = callbacks.on_output;
  callbacks.on_output = [&, on_output](uint64_t offset, std::string_view data) {
    if (!started) output_before_started = true;
    on_output(offset, data);
  };
  const std::string group = G("async");
  f.groups.push_back(group);
  SpawnRequest req;
  req.group = group;
  req.argv = Sh("echo hello; exit 4");
  req.log_path = (f.dir / (group + ".log")).string();
  f.launcher->SpawnAsync(req, callbacks,
                         [&](herd::Result<ProcessHandle> h) { started.emplace(std::move(h)); });
  REQUIRE(f.WaitExit(rec));
  REQUIRE(started.has_value());
  REQUIRE_MESSAGE(started->ok(), started->status().ToString());
  CHECK((*started)->pid > 0);
  CHECK((*started)->supervisor_pid > 0);
  CHECK_FALSE(output_before_started);
  CHECK(rec.output == "hello\n");
  CHECK(rec.exit_code == 4);

  // A program that does not exist: done gets Spawn's error, and no callback runs.
  Recorder bad;
  std::optional<herd::Result<ProcessHandle>> failed;
  req.group = G("async-bad");
  req.argv = {"/nonexistent/program"};
  req.log_path = (f.dir / "async-bad" / "x.log").string();
  f.launcher->SpawnAsync(req, bad.Callbacks(),
                         [&](herd::Result<ProcessHandle> h) { failed.emplace(std::move(h)); });
  REQUIRE(f.queue.RunUntil([&] { return failed.has_value(); }, 5s));
  CHECK(failed->status().code() == herd::Code::kNotFound);
  CHECK_FALSE(fs::exists(f.dir / "async-bad"));
  f.queue.RunFor(100ms);
  CHECK_FALSE(bad.exited);
}

TEST_CASE("flow control: no more of the log is read while the owner's queue is full") {
  // What the owner (the agent's connection to the head) has queued: everything (closed), what
  // it was given and never wrote (a queue that does not drain), or nothing (drained). Declared
  // before the fixture: the launcher's loop thread reads them until the launcher is gone.
  enum { kClosed, kNeverDrains, kDrained };
  std::atomic<int> mode{kClosed};
  std::atomic<std::size_t> delivered{0};
  Fixture f;
  const std::size_t kLimit = 1u << 20;
  f.launcher->SetOutputBacklog(
      [&]() -> std::size_t {
        return mode == kClosed ? SIZE_MAX : mode == kNeverDrains ? delivered.load() : 0;
      },
      kLimit);
  Recorder rec;
  auto callbacks = rec.Callbacks();
  auto on_output = callbacks.on_output;
  callbacks.on_output = [&, on_output](uint64_t offset, std::string_view data) {
    delivered += data.size();
    on_output(offset, data);
  };
  const std::string group = G("backlog");
  f.groups.push_back(group);
  SpawnRequest req;
  req.group = group;
  req.argv = Sh("head -c 3000000 /dev/zero | tr '\\0' y");
  req.log_path = (f.dir / (group + ".log")).string();
  REQUIRE(f.launcher->Spawn(req, callbacks).ok());
  // The process prints 3 MB and ends; none of it is read, so its exit is not reported either.
  CHECK_FALSE(f.WaitExit(rec, 1500ms));
  CHECK(rec.output.empty());
  REQUIRE(fs::file_size(req.log_path) == 3000000);
  // Room for kLimit in all: read up to it, then held again.
  mode = kNeverDrains;
  CHECK_FALSE(f.WaitExit(rec, 1000ms));
  CHECK(rec.output.size() > 0);
  CHECK(rec.output.size() <= kLimit);
  // Drained: the rest, then the exit.
  mode = kDrained;
  REQUIRE(f.WaitExit(rec));
  CHECK(rec.output == std::string(3000000, 'y'));
  CHECK(rec.total_bytes == 3000000);
  CHECK(rec.exit_code == 0);
  CHECK_FALSE(rec.output_after_exit);
  CheckChunksTileLog(rec, req.log_path, 0);
}

TEST_CASE("a KillGroup sent while the group's SpawnAsync is still starting kills the process") {
  bool cgroups = true;
  SUBCASE("cgroups where available") {}
  SUBCASE("environment sweep only") { cgroups = false; }
  Fixture f(cgroups);
  Recorder rec;
  std::optional<herd::Result<ProcessHandle>> started;
  const std::string group = G("async-kill");
  f.groups.push_back(group);
  SpawnRequest req;
  req.group = group;
  req.argv = Sh("sleep 1000");
  req.log_path = (f.dir / (group + ".log")).string();
  f.launcher->SpawnAsync(req, rec.Callbacks(),
                         [&](herd::Result<ProcessHandle> h) { started.emplace(std::move(h)); });
  f.launcher->KillGroup(group, 1000ms);  // before the supervisor can have reported
  REQUIRE(f.WaitExit(rec, 5s));
  REQUIRE(started.has_value());
  REQUIRE(started->ok());
  CHECK(rec.term_signal == SIGTERM);
  CHECK_FALSE(Alive((*started)->pid));
}

TEST_CASE("Spawn from several threads at once") {
  Fixture f;
  constexpr int kThreads = 4;
  std::vector<Recorder> recs(kThreads);
  std::vector<herd::Result<ProcessHandle>> results(kThreads,
                                                   herd::Result<ProcessHandle>(ProcessHandle{}));
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    f.groups.push_back(G("t" + std::to_string(i)));
    threads.emplace_back([&, i] {
      SpawnRequest req;
      req.group = G("t" + std::to_string(i));
      req.argv = Sh("printf " + std::to_string(i));
      req.log_path = (f.dir / (req.group + ".log")).string();
      results[i] = f.launcher->Spawn(req, recs[i].Callbacks());
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    REQUIRE(results[i].ok());
    REQUIRE(f.WaitExit(recs[i]));
    CHECK(recs[i].output == std::to_string(i));
  }
}

TEST_CASE("a new launcher adopts a running process: the rest of its output once, then its exit") {
  Fixture f;
  Recorder first;
  ProcessHandle h = f.SpawnHandle(
      G("adopt"),
      Sh("for i in $(seq 1 60); do echo line $i; sleep 0.02; done; printf tail; exit 3"), first);
  REQUIRE(f.queue.RunUntil([&] { return first.output.find("line 5\n") != std::string::npos; }, 5s));
  CHECK(h.supervisor_pid != h.pid);
  CHECK(h.supervisor_start > 0);
  f.launcher.reset();  // the agent dies; its processes do not
  CHECK(Alive(h.pid));
  CHECK(Alive(h.supervisor_pid));
  const uint64_t seen = h.log_start + first.output.size();
  std::this_thread::sleep_for(200ms);  // output goes on while no agent runs
  f.launcher = std::make_unique<UvProcessLauncher>(f.queue.Poster(), f.scope, kStep);
  Recorder second;
  REQUIRE(f.launcher->Adopt(h, seen, second.Callbacks()).ok());
  REQUIRE(f.WaitExit(second));
  CHECK_FALSE(first.exited);
  CHECK(second.exit_code == 3);
  CHECK(second.term_signal == 0);
  std::string all = first.output + second.output;
  std::string expected;
  for (int i = 1; i <= 60; ++i) expected += "line " + std::to_string(i) + "\n";
  CHECK(all == expected + "tail");
  CHECK(second.total_bytes == all.size());
  CheckChunksTileLog(second, f.dir / (G("adopt") + ".log"), seen);
}

TEST_CASE("a process that ended while no launcher watched is reported from its exit record") {
  Fixture f;
  Recorder first;
  ProcessHandle h = f.SpawnHandle(G("gone"), Sh("echo one; sleep 0.3; echo two; exit 5"), first);
  REQUIRE(f.queue.RunUntil([&] { return first.output == "one\n"; }, 5s));
  f.launcher.reset();
  // Its supervisor was a child of this process: reap it as init or a subreaper would.
  for (int i = 0; i < 100 && ProcState(h.supervisor_pid) != 'Z'; ++i)
    std::this_thread::sleep_for(20ms);
  REQUIRE(ProcState(h.supervisor_pid) == 'Z');
  f.launcher = std::make_unique<UvProcessLauncher>(f.queue.Poster(), f.scope, kStep);
  Recorder second;
  REQUIRE(f.launcher->Adopt(h, 4, second.Callbacks()).ok());
  REQUIRE(f.WaitExit(second, 2s));
  CHECK(second.output == "two\n");
  CHECK(second.exit_code == 5);
  CHECK(second.total_bytes == 8);
}

TEST_CASE(
    "a new launcher finds a process whose spawn its agent never recorded, by its registration") {
  Fixture f;
  Recorder first;
  ProcessHandle h = f.SpawnHandle(G("find"), Sh("echo one; sleep 0.5; echo two; exit 4"), first);
  REQUIRE(f.queue.RunUntil([&] { return first.output == "one\n"; }, 5s));
  f.launcher.reset();  // the agent died before it wrote the handle anywhere
  f.launcher = std::make_unique<UvProcessLauncher>(f.queue.Poster(), f.scope, kStep);
  const std::string log = (f.dir / (G("find") + ".log")).string();
  auto found = f.launcher->FindStarted(G("find"), log);
  REQUIRE_MESSAGE(found.ok(), found.status().ToString());
  CHECK(found->pid == h.pid);
  CHECK(found->supervisor_pid == h.supervisor_pid);
  CHECK(found->supervisor_start == h.supervisor_start);
  CHECK(found->log_start == h.log_start);
  // Another group's (or attempt's) process of the same log is not this one; another log has none.
  CHECK(f.launcher->FindStarted(G("find-other"), log).status().code() == Code::kNotFound);
  CHECK(f.launcher->FindStarted(G("find"), log + ".x").status().code() == Code::kNotFound);
  Recorder second;
  REQUIRE(f.launcher->Adopt(*found, 4, second.Callbacks()).ok());
  REQUIRE(f.WaitExit(second));
  CHECK(second.output == "two\n");
  CHECK(second.exit_code == 4);
}

TEST_CASE("a supervisor of the log that does not register is killed, and the group with it") {
  Fixture f;
  const std::string group = G("unproven");
  f.groups.push_back(group);
  const std::string log = (f.dir / "unproven.log").string();
  const std::string marker = std::string(UvProcessLauncher::kGroupEnvVar) + "=" +
                             (f.scope.empty() ? group : f.scope + "/" + group);
  // Looks like a supervisor of that log and group (its arguments), but never registers.
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Short sleeps: what it forks dies on its own once it is killed; no pipe of ctest held.
    int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    ::execl("/bin/sh", "/bin/sh", "-c", "while :; do sleep 0.05; done", "--log", log.c_str(),
            "--marker", marker.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  f.extra_pids.push_back(pid);
  std::this_thread::sleep_for(100ms);  // exec'd
  auto t0 = std::chrono::steady_clock::now();
  auto found = f.launcher->FindStarted(group, log);
  CHECK(std::chrono::steady_clock::now() - t0 >= herd::limits::kStepRegisterWait);
  REQUIRE_FALSE(found.ok());
  CHECK(found.status().code() == Code::kDeadlineExceeded);
  CHECK(found.status().message().find("did not register") != std::string::npos);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
}

TEST_CASE("a supervisor killed with SIGKILL is reported as a killed process") {
  Fixture f;
  Recorder rec;
  ProcessHandle h = f.SpawnHandle(G("svkill"), Sh("echo up; exec sleep 1000"), rec);
  REQUIRE(f.queue.RunUntil([&] { return rec.output == "up\n"; }, 5s));
  ::kill(h.supervisor_pid, SIGKILL);
  REQUIRE(f.WaitExit(rec, 3s));
  CHECK(rec.exit_code == 137);
  CHECK(rec.term_signal == SIGKILL);
  f.launcher->KillGroup(G("svkill"), 100ms);  // the orphaned job process
  CHECK(f.queue.RunUntil([&] { return !Alive(h.pid); }, 3s));
}

TEST_CASE("a log on a full disk stops the process group; the exit record says why" *
          doctest::test_suite("root")) {
  if (::geteuid() != 0) return herd::testing::Skip("mounting a small tmpfs needs root");
  Fixture f;
  // The node's log directory on a 256 KiB filesystem.
  fs::path logs = f.dir / "logs";
  fs::create_directories(logs);
  REQUIRE(::mount("herd-test-full", logs.c_str(), "tmpfs", 0, "size=256k") == 0);
  struct Unmount {
    fs::path p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{logs};
  Recorder rec;
  SpawnRequest req;
  req.log_path = (logs / "job.log").string();
  // A child in a session of its own prints too: the whole group is stopped, not just the shell,
  // which ignores SIGTERM and prints without pause (SIGKILL after kKillGracePeriod).
  int pid = f.Spawn(G("full"),
                    Sh("setsid sh -c 'while :; do echo escaped; sleep 0.01; done' & "
                       "trap '' TERM; i=0; "
                       "while :; do i=$((i+1)); echo \"line $i of a job that prints fast\"; done"),
                    rec, req);
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(f.WaitExit(rec, 10s));
  CHECK(std::chrono::steady_clock::now() - t0 < herd::limits::kKillGracePeriod + 2s);
  CHECK(rec.output_error == "cannot write " + req.log_path + ": No space left on device");
  CHECK(rec.exit_code == 128 + SIGKILL);
  CHECK(rec.term_signal == SIGKILL);
  // Every byte up to the failure reached the callback, and the log is what it says.
  CHECK(rec.total_bytes == fs::file_size(req.log_path));
  CHECK(rec.total_bytes > 100 * 1024);
  CHECK(rec.output.find("line 1 of a job that prints fast\n") != std::string::npos);
  CHECK(!Alive(pid));
  CHECK(f.queue.RunUntil([&] { return MarkedPids(G("full")).empty(); }, 3s));
  // The record replaced its reserve (nothing left but the log and the record).
  CHECK(fs::exists(req.log_path + ".exit"));
  CHECK(!fs::exists(req.log_path + ".exit.reserve"));
}

TEST_CASE("stdout is a raw terminal: bytes unaltered, programs line-buffer") {
  Fixture f;
  Recorder rec;
  SpawnRequest req;
  req.unset_env = {"PYTHONUNBUFFERED", "TERM"};
  f.Spawn(G("tty"),
          Sh("test -t 1 && echo stdout-tty; test -t 2 && echo stderr-tty >&2; "
             "test -t 0 || echo stdin-not-tty; echo \"$TERM $PAGER ${PYTHONUNBUFFERED-unset}\"; "
             "printf 'a\\nb\\r\\n'"),
          rec, req);
  REQUIRE(f.WaitExit(rec));
  CHECK(rec.output == "stdout-tty\nstderr-tty\nstdin-not-tty\ndumb cat unset\na\nb\r\n");
}

// Four processes sharing one stdout, as torchrun's local ranks do: with a terminal, Python
// line-buffers and writes each line whole, so no line mixes two processes' text.
TEST_CASE("four local processes printing 10000 lines each never split each other's lines") {
  if (::access("/usr/bin/python3", X_OK) != 0) {
    MESSAGE("no /usr/bin/python3");
    return;
  }
  Fixture f;
  Recorder rec;
  SpawnRequest req;
  req.unset_env = {"PYTHONUNBUFFERED"};  // as herd runs a task that does not set it
  const fs::path child = f.dir / "rank.py";
  std::ofstream(child) << "import sys\nr = sys.argv[1]\n"
                          "for i in range(10000): print(f'DDPCHECK rank={r} i={i} node=1')\n";
  f.Spawn(G("ranks"),
          Sh("for r in 0 1 2 3; do /usr/bin/python3 " + child.string() + " $r & done; wait"), rec,
          req);
  REQUIRE(f.WaitExit(rec, 60s));
  REQUIRE(rec.exit_code == 0);
  std::istringstream in(ReadFile(f.dir / (G("ranks") + ".log")));
  std::string line;
  std::map<std::string, int> next;  // rank -> next i
  int lines = 0, bad = 0;
  while (std::getline(in, line)) {
    ++lines;
    auto rpos = line.find(" rank="), ipos = line.find(" i="), npos = line.find(" node=1");
    if (line.rfind("DDPCHECK", 0) != 0 || rpos == std::string::npos || ipos == std::string::npos ||
        npos == std::string::npos || line.find("DDPCHECK", 1) != std::string::npos ||
        npos + 7 != line.size()) {
      if (++bad < 5) MESSAGE("mixed line: " << line);
      continue;
    }
    std::string r = line.substr(rpos + 6, ipos - rpos - 6);
    int i = std::stoi(line.substr(ipos + 3, npos - ipos - 3));
    CHECK(i == next[r]);  // in order per process, none lost
    next[r] = i + 1;
  }
  CHECK(bad == 0);
  CHECK(lines == 40000);
  for (const char* r : {"0", "1", "2", "3"}) CHECK(next[r] == 10000);
}

TEST_CASE(
    "InstallStepProgram: written once per program, older ones removed, a changed file mended") {
  Fixture f;
  const fs::path bin = f.dir / "state" / "bin";  // does not exist yet
  const std::string v1 = "#!/bin/sh\necho one\n", v2 = "#!/bin/sh\necho two\n";
  const herd::agent::EmbeddedProgram p1{v1, "0123456789abcdef0123"}, p2{v2, "fedcba9876543210ffff"};

  auto first = herd::agent::InstallStepProgram(bin.string(), p1);
  REQUIRE_MESSAGE(first.ok(), first.status().ToString());
  CHECK(*first == (bin / "herd-step-0123456789abcdef").string());
  CHECK(ReadFile(*first) == v1);
  CHECK((fs::status(*first).permissions() & fs::perms::all) ==
        (fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
         fs::perms::others_read | fs::perms::others_exec));
  struct stat before {};
  REQUIRE(::stat(first->c_str(), &before) == 0);

  // The same program again (an agent restart): the file is kept as it is (same inode).
  auto again = herd::agent::InstallStepProgram(bin.string(), p1);
  REQUIRE(again.ok());
  struct stat after {};
  REQUIRE(::stat(again->c_str(), &after) == 0);
  CHECK(after.st_ino == before.st_ino);

  // A file under that name with other bytes (a damaged copy) is replaced.
  std::ofstream(*first, std::ios::trunc) << "#!/bin/sh\necho damaged\n";
  REQUIRE(herd::agent::InstallStepProgram(bin.string(), p1).ok());
  CHECK(ReadFile(*first) == v1);

  // A new version: its own file; the old one goes, other files stay.
  std::ofstream(bin / "unrelated") << "x";
  auto second = herd::agent::InstallStepProgram(bin.string(), p2);
  REQUIRE(second.ok());
  CHECK(*second == (bin / "herd-step-fedcba9876543210").string());
  CHECK(ReadFile(*second) == v2);
  CHECK_FALSE(fs::exists(*first));
  CHECK(fs::exists(bin / "unrelated"));

  // Errors: nothing embedded; a directory that cannot be made.
  CHECK(herd::agent::InstallStepProgram(bin.string(), {}).status().code() ==
        Code::kFailedPrecondition);
  CHECK_FALSE(herd::agent::InstallStepProgram((bin / "unrelated" / "sub").string(), p1).ok());
}

TEST_CASE("the supervisor herdlet embeds is herd-step, and it supervises a job once written out") {
  const herd::agent::EmbeddedProgram embedded = herd::agent::EmbeddedStepProgram();
  REQUIRE(embedded.bytes.size() > 4);
  CHECK(embedded.bytes.substr(0, 4) == std::string_view("\x7f"
                                                        "ELF",
                                                        4));
  CHECK(embedded.sha256.size() == 64);
  // The embedded bytes are the stripped build of the program the other tests run.
  CHECK(embedded.bytes.size() <= fs::file_size(HERD_STEP_PROGRAM));

  Fixture f;
  auto path = herd::agent::InstallStepProgram((f.dir / "bin").string(), embedded);
  REQUIRE_MESSAGE(path.ok(), path.status().ToString());
  UvProcessLauncher launcher(f.queue.Poster(), "", {*path});
  Recorder rec;
  const std::string group = G("embedded");
  f.groups.push_back(group);
  SpawnRequest req;
  req.group = group;
  req.argv = Sh("test -t 1 && echo \"supervised, on a terminal\"; exit 7");
  req.log_path = (f.dir / "embedded.log").string();
  auto h = launcher.Spawn(req, rec.Callbacks());
  REQUIRE_MESSAGE(h.ok(), h.status().ToString());
  REQUIRE(f.WaitExit(rec));
  CHECK(rec.exit_code == 7);
  CHECK(ReadFile(f.dir / "embedded.log") == "supervised, on a terminal\n");
  auto record = herd::agent::ReadExitRecord(herd::agent::ExitRecordPath(req.log_path));
  REQUIRE(record.has_value());
  CHECK(record->exit_code == 7);
  CHECK(record->pty);
}
