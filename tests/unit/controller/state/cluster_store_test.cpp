#include "controller/state/cluster_store.hpp"

#include <doctest/doctest.h>
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "controller/state/cluster_lock.hpp"
#include "controller/state/herd_home.hpp"
#include "tests/unit/test_support.hpp"

extern char** environ;

using herd::Code;
using herd::controller::ClusterLock;
using herd::controller::ClusterRecord;
using herd::controller::ClusterStatus;
using herd::controller::ClusterStore;
using herd::controller::NodeRecord;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

using herd::testing::ScopedEnv;
using herd::testing::TempHome;

// A forked child process, killed and reaped when the test ends however it ends.
class Child {
 public:
  explicit Child(pid_t pid) : pid_(pid) {}
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_;
};

class Pipe {
 public:
  Pipe() { REQUIRE(pipe(fds_) == 0); }
  ~Pipe() {
    CloseRead();
    CloseWrite();
  }
  int r() const { return fds_[0]; }
  int w() const { return fds_[1]; }
  void CloseRead() {
    if (fds_[0] >= 0) close(std::exchange(fds_[0], -1));
  }
  void CloseWrite() {
    if (fds_[1] >= 0) close(std::exchange(fds_[1], -1));
  }

 private:
  int fds_[2];
};

// Forks a child that takes the cluster's lock as `what`, writes one byte to `ready`, holds the
// lock until `release` reaches EOF, then exits 0 (releasing it). Exit 1 if it could not lock.
pid_t ForkLockHolder(const std::string& cluster, const std::string& what, Pipe& ready,
                     Pipe& release) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ready.CloseRead();
    release.CloseWrite();
    auto lock = ClusterLock::Acquire(cluster, 0ms, what);
    if (!lock.ok()) _exit(1);
    char c = 'x';
    if (write(ready.w(), &c, 1) != 1) _exit(2);
    while (read(release.r(), &c, 1) > 0) {
    }
    lock->Release();
    _exit(0);
  }
  ready.CloseWrite();
  release.CloseRead();
  char c = 0;
  REQUIRE(read(ready.r(), &c, 1) == 1);  // the child holds the lock now
  return pid;
}

ClusterRecord Sample(const std::string& name) {
  ClusterRecord c;
  c.name = name;
  c.provider = "local";
  c.infra = "local";
  c.status = ClusterStatus::kUp;
  c.nodes = {
      NodeRecord{"h0", "10.77.0.1", 22, "root", "/k/id", "herd-" + name + "-0", "/n/0", true},
      NodeRecord{"h1", "10.77.0.2", 2222, "root", "/k/id", "herd-" + name + "-1", "/n/1", false},
  };
  c.nodes[1].jump = {"bastion.example", 2022, "gate", "/k/gate", {{"edge", 22, "", "/k/e"}}};
  c.resources = "2x(gpus=L4:4, cpus=4)";
  c.head_port = 46590;
  c.certs_dir = "/s/certs";
  c.ssh_key_path = "/s/id_ed25519";
  c.known_hosts_path = "/s/known_hosts";
  c.control_dir = "/s/ctl";
  c.state_dir = "/s/state";
  c.autostop_idle_minutes = 10;
  c.autostop_down = true;
  c.launched_unix_ms = 1700000000123;
  c.agent_version = "0.1.0 (abc)";
  c.agents_stamp = "5e1f";
  c.nodes[1].spot_metadata = "http://169.254.169.254";  // a spot node
  return c;
}

std::unique_ptr<ClusterStore> MustOpen(const std::string& path) {
  auto store = ClusterStore::Open(path);
  REQUIRE_MESSAGE(store.ok(), store.status().ToString());
  return std::move(store).value();
}

std::optional<ClusterRecord> MustGet(ClusterStore& s, const std::string& name) {
  auto r = s.Get(name);
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  return *r;
}

std::vector<std::string> Names(ClusterStore& s) {
  auto all = s.List();
  REQUIRE_MESSAGE(all.ok(), all.status().ToString());
  std::vector<std::string> names;
  for (const auto& c : *all) names.push_back(c.name);
  return names;
}

unsigned ModeOf(const std::string& path) {
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  return st.st_mode & 0777;
}

}  // namespace

TEST_CASE("HerdHome is $HERD_HOME, else ~/.herd, created 0700") {
  TempHome t;
  CHECK(herd::controller::HerdHome() == t.herd());
  CHECK(ModeOf(t.herd()) == 0700);
  CHECK(herd::controller::StateDbPath() == t.herd() + "/state.db");
  CHECK(herd::controller::ClusterDir("demo") == t.herd() + "/clusters/demo");
  {
    ScopedEnv unset("HERD_HOME", "");
    CHECK(herd::controller::HerdHome() == t.dir() + "/.herd");
    CHECK(ModeOf(t.dir() + "/.herd") == 0700);
  }
}

TEST_CASE("a cluster record survives a round trip, field for field") {
  TempHome t;
  auto store = MustOpen(herd::controller::StateDbPath());
  const ClusterRecord c = Sample("demo");
  REQUIRE(store->Put(c).ok());
  auto got = MustGet(*store, "demo");
  REQUIRE(got.has_value());
  CHECK(*got == c);
  CHECK(got->nodes.size() == 2);
  CHECK(got->nodes[0].is_head);
  CHECK(got->nodes[1].ssh_port == 2222);
  CHECK(got->nodes[1].jump.port == 2022);
  REQUIRE(got->nodes[1].jump.before.size() == 1);  // the hop before the bastion kept
  CHECK(got->nodes[1].jump.before[0] == herd::controller::SshJump{"edge", 22, "", "/k/e"});
  CHECK(got->nodes[0].jump.empty());
  CHECK(got->nodes[1].spot_metadata == "http://169.254.169.254");
  CHECK(got->resources == "2x(gpus=L4:4, cpus=4)");
  CHECK(got->launched_unix_ms == 1700000000123);
  CHECK_FALSE(MustGet(*store, "other").has_value());
  // The directory of the file holds keys' paths: private to the user.
  CHECK(ModeOf(t.herd()) == 0700);
}

TEST_CASE("put replaces, list is ordered by name, remove deletes") {
  TempHome t;
  auto store = MustOpen(herd::controller::StateDbPath());
  for (const char* name : {"zeta", "alpha", "mid-1"}) REQUIRE(store->Put(Sample(name)).ok());
  CHECK(Names(*store) == std::vector<std::string>{"alpha", "mid-1", "zeta"});

  ClusterRecord stopped = Sample("mid-1");
  stopped.status = ClusterStatus::kStopped;
  stopped.nodes.pop_back();
  REQUIRE(store->Put(stopped).ok());
  CHECK(Names(*store).size() == 3);
  CHECK(MustGet(*store, "mid-1") == stopped);

  REQUIRE(store->Remove("alpha").ok());
  CHECK(Names(*store) == std::vector<std::string>{"mid-1", "zeta"});
  CHECK(store->Remove("alpha").ok());  // `herd down` retried
  CHECK_FALSE(MustGet(*store, "alpha").has_value());
}

TEST_CASE("the state survives closing and reopening the file") {
  TempHome t;
  const std::string path = herd::controller::StateDbPath();
  {
    auto store = MustOpen(path);
    REQUIRE(store->Put(Sample("demo")).ok());
  }
  auto store = MustOpen(path);
  CHECK(MustGet(*store, "demo") == Sample("demo"));
}

TEST_CASE("the kept WAL is emptied when the last store closes, and kept") {
  // A full WAL left behind would be read whole by every later command that opens the file alone,
  // and checkpointed again (with fsyncs) at its close.
  TempHome t;
  const std::string path = herd::controller::StateDbPath();
  {
    auto store = MustOpen(path);
    for (int i = 0; i < 20; ++i) REQUIRE(store->Put(Sample("c" + std::to_string(i))).ok());
    struct stat open_wal {};
    REQUIRE(::stat((path + "-wal").c_str(), &open_wal) == 0);
    CHECK(open_wal.st_size > 0);
  }
  struct stat wal {};
  REQUIRE(::stat((path + "-wal").c_str(), &wal) == 0);
  CHECK(wal.st_size == 0);
  {
    auto store = MustOpen(path);
    CHECK(MustGet(*store, "c19") == Sample("c19"));
    REQUIRE(store->Remove("c0").ok());
  }
  struct stat again {};
  REQUIRE(::stat((path + "-wal").c_str(), &again) == 0);
  CHECK(again.st_size == 0);
  CHECK(again.st_ino == wal.st_ino);  // the same file: emptied, not removed and made again
  CHECK(Names(*MustOpen(path)).size() == 19);
}

TEST_CASE("two stores on one file see each other's writes") {
  TempHome t;
  const std::string path = herd::controller::StateDbPath();
  auto a = MustOpen(path);
  auto b = MustOpen(path);
  REQUIRE(a->Put(Sample("one")).ok());
  CHECK(MustGet(*b, "one") == Sample("one"));
  ClusterRecord two = Sample("two");
  two.status = ClusterStatus::kInit;
  REQUIRE(b->Put(two).ok());
  CHECK(Names(*a) == std::vector<std::string>{"one", "two"});
  ClusterRecord one = Sample("one");
  one.status = ClusterStatus::kAutostopping;
  REQUIRE(b->Put(one).ok());
  CHECK(MustGet(*a, "one")->status == ClusterStatus::kAutostopping);
  REQUIRE(a->Remove("two").ok());
  CHECK_FALSE(MustGet(*b, "two").has_value());
  CHECK(Names(*b) == std::vector<std::string>{"one"});
}

TEST_CASE("put refuses an invalid cluster name") {
  TempHome t;
  auto store = MustOpen(herd::controller::StateDbPath());
  const herd::Status s = store->Put(Sample("Bad_Name"));
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(Names(*store).empty());
}

TEST_CASE("a file that is not a state file, or is from a newer herd, is refused by path") {
  TempHome t;
  REQUIRE(herd::controller::EnsureDir(t.herd()).ok());
  const std::string junk = t.herd() + "/junk.db";
  std::ofstream(junk) << "this is not a database, it is a text file of some length........";
  auto bad = ClusterStore::Open(junk);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find(junk) != std::string::npos);

  const std::string path = herd::controller::StateDbPath();
  { auto store = MustOpen(path); }
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  auto newer = ClusterStore::Open(path);
  REQUIRE_FALSE(newer.ok());
  CHECK(newer.status().code() == Code::kFailedPrecondition);
  CHECK(newer.status().message().find("newer") != std::string::npos);
}

TEST_CASE("a damaged row names the cluster") {
  TempHome t;
  const std::string path = herd::controller::StateDbPath();
  auto store = MustOpen(path);
  REQUIRE(store->Put(Sample("demo")).ok());
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "UPDATE clusters SET record = '{\"status\": 7}'", nullptr, nullptr,
                       nullptr) == SQLITE_OK);
  sqlite3_close(db);
  auto got = store->Get("demo");
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().message().find("cluster demo") != std::string::npos);
  CHECK(got.status().message().find("status") != std::string::npos);
}

TEST_CASE("cluster names: the rule and the message that states it") {
  using herd::controller::ValidateClusterName;
  for (const char* ok : {"a", "demo", "demo-2", "x1-y2-z3"}) {
    CHECK_MESSAGE(ValidateClusterName(ok).ok(), ok);
  }
  CHECK(ValidateClusterName(std::string(40, 'a')).ok());
  struct Case {
    std::string name, why;
  };
  for (const Case& c : std::vector<Case>{
           {"", "it is empty"},
           {std::string(41, 'a'), "it has 41 characters"},
           {"Demo", "does not start with a lowercase letter"},
           {"1demo", "does not start with a lowercase letter"},
           {"-demo", "does not start with a lowercase letter"},
           {"my_cluster", "it contains '_'"},
           {"de.mo", "it contains '.'"},
           {"../etc", "does not start with a lowercase letter"},
           {"a/b", "it contains '/'"},
           {"a b", "a space or control character"},
       }) {
    const herd::Status s = ValidateClusterName(c.name);
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK_MESSAGE(s.message().find(c.why) != std::string::npos, s.message());
    CHECK(s.message().find("'" + c.name + "'") != std::string::npos);
    CHECK(s.message().find("1 to 40 characters of a-z, 0-9 and '-', starting with a letter") !=
          std::string::npos);
  }
}

TEST_CASE("a second command on a busy cluster fails naming the holder, then gets in") {
  TempHome t;
  Pipe ready, release;
  Child holder(ForkLockHolder("demo", "herd launch", ready, release));

  const auto start = std::chrono::steady_clock::now();
  auto busy = ClusterLock::Acquire("demo", 300ms, "herd exec");
  const auto waited = std::chrono::steady_clock::now() - start;
  REQUIRE_FALSE(busy.ok());
  CHECK(busy.status().code() == Code::kDeadlineExceeded);
  CHECK(busy.status().message() == "cluster demo is busy: another herd command (pid " +
                                       std::to_string(holder.pid()) +
                                       ": herd launch) holds its lock; gave up after 300 ms");
  CHECK(waited >= 300ms);
  CHECK(waited < 5s);

  // Another cluster is not affected.
  auto other = ClusterLock::Acquire("other", 0ms, "herd status");
  CHECK_MESSAGE(other.ok(), other.status().ToString());

  // A waiter that outlasts the holder gets the lock as soon as it is released.
  release.CloseWrite();
  auto got = ClusterLock::Acquire("demo", 10s, "herd exec");
  REQUIRE_MESSAGE(got.ok(), got.status().ToString());
  CHECK(got->held());
  CHECK(WIFEXITED(holder.Wait()));

  // Now we hold it: a child process trying it fails and names us.
  Pipe out;
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    auto lock = ClusterLock::Acquire("demo", 100ms, "herd queue");
    const std::string m = lock.ok() ? "acquired" : lock.status().message();
    if (write(out.w(), m.data(), m.size()) < 0) _exit(2);
    _exit(0);
  }
  Child prober(pid);
  out.CloseWrite();
  std::string message;
  char buf[512];
  for (ssize_t n; (n = read(out.r(), buf, sizeof buf)) > 0;) message.append(buf, n);
  prober.Wait();
  CHECK(message == "cluster demo is busy: another herd command (pid " + std::to_string(getpid()) +
                       ": herd exec) holds its lock; gave up after 100 ms");

  got->Release();
  CHECK_FALSE(got->held());
  CHECK(ClusterLock::Acquire("demo", 0ms, "herd down").ok());
}

TEST_CASE("a killed command does not leave its cluster locked") {
  TempHome t;
  Pipe ready, release;
  Child holder(ForkLockHolder("demo", "herd launch", ready, release));
  CHECK_FALSE(ClusterLock::Acquire("demo", 0ms, "herd exec").ok());
  kill(holder.pid(), SIGKILL);
  holder.Wait();
  auto got = ClusterLock::Acquire("demo", 0ms, "herd exec");
  CHECK_MESSAGE(got.ok(), got.status().ToString());
}

TEST_CASE("processes started while holding the lock do not keep it after the command ends") {
  TempHome t;
  // The command takes the lock, starts a long-lived process (like an ssh ControlMaster that lingers
  // for ControlPersist) and exits without releasing: the process must not inherit the lock.
  Pipe out;
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    out.CloseRead();
    auto lock = ClusterLock::Acquire("demo", 0ms, "herd launch");
    if (!lock.ok()) _exit(1);
    pid_t sleeper = -1;
    char arg0[] = "sleep", arg1[] = "30";
    char* argv[] = {arg0, arg1, nullptr};
    if (posix_spawnp(&sleeper, "sleep", nullptr, nullptr, argv, environ) != 0) _exit(2);
    if (write(out.w(), &sleeper, sizeof sleeper) != sizeof sleeper) _exit(3);
    _exit(0);  // no Release, no destructor: as if the command was killed
  }
  Child command(pid);
  out.CloseWrite();
  pid_t sleeper_pid = -1;
  REQUIRE(read(out.r(), &sleeper_pid, sizeof sleeper_pid) == sizeof sleeper_pid);
  Child sleeper(sleeper_pid);  // killed when the test ends (a grandchild: kill only)
  CHECK(WIFEXITED(command.Wait()));
  REQUIRE(kill(sleeper_pid, 0) == 0);  // still running
  auto again = ClusterLock::Acquire("demo", 0ms, "herd exec");
  CHECK_MESSAGE(again.ok(), again.status().ToString());
}

TEST_CASE("the lock is movable, not re-entrant, and checks the name") {
  TempHome t;
  auto first = ClusterLock::Acquire("demo", 0ms, "herd launch");
  REQUIRE(first.ok());
  ClusterLock moved = std::move(first).value();
  CHECK(moved.held());
  CHECK(moved.cluster() == "demo");
  // Same process again: an immediate error instead of waiting out the bound.
  const auto start = std::chrono::steady_clock::now();
  auto twice = ClusterLock::Acquire("demo", 10s, "herd exec");
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  REQUIRE_FALSE(twice.ok());
  CHECK(twice.status().code() == Code::kFailedPrecondition);
  CHECK(twice.status().message().find("already holds") != std::string::npos);

  ClusterLock target = std::move(moved);
  CHECK_FALSE(moved.held());  // NOLINT(bugprone-use-after-move): the moved-from state is defined
  CHECK(target.held());
  { ClusterLock sink = std::move(target); }
  CHECK(ClusterLock::Acquire("demo", 0ms, "herd exec").ok());

  auto bad = ClusterLock::Acquire("../../etc", 0ms, "herd launch");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == Code::kInvalidArgument);
  CHECK_FALSE(fs::exists(t.dir() + "/etc.lock"));
}

TEST_CASE("HeldFor says what another command holding the lock does, and creates nothing") {
  TempHome t;
  const std::string path = ClusterLock::PathFor("demo");
  CHECK_FALSE(ClusterLock::HeldFor("demo").has_value());
  CHECK_FALSE(fs::exists(path));
  {
    auto lock = ClusterLock::Acquire("demo", 0ms, "herd launch");
    REQUIRE(lock.ok());
  }
  CHECK(fs::exists(path));
  CHECK_FALSE(ClusterLock::HeldFor("demo").has_value());  // a file nobody locks

  Pipe ready, release;
  Child holder(ForkLockHolder("demo", "herd down", ready, release));
  auto what = ClusterLock::HeldFor("demo");
  REQUIRE(what.has_value());
  CHECK(*what == "herd down");
  CHECK_FALSE(ClusterLock::HeldFor("other").has_value());
  CHECK_FALSE(ClusterLock::HeldFor("../x").has_value());
  release.CloseWrite();
  CHECK(WIFEXITED(holder.Wait()));
  CHECK_FALSE(ClusterLock::HeldFor("demo").has_value());
}

TEST_CASE("a lock removed by its holder leaves one holder: the waiter locks the new file") {
  TempHome t;
  const std::string path = ClusterLock::PathFor("demo");
  auto down = ClusterLock::Acquire("demo", 0ms, "herd down");
  REQUIRE(down.ok());
  // A waiter that has the lock file open and polls it.
  Pipe ready, release;
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ready.CloseRead();
    release.CloseWrite();
    auto lock = ClusterLock::Acquire("demo", 30s, "herd launch");
    if (!lock.ok()) _exit(1);
    char c = 'x';
    if (write(ready.w(), &c, 1) != 1) _exit(2);
    while (read(release.r(), &c, 1) > 0) {
    }
    _exit(0);
  }
  Child waiter(pid);
  ready.CloseWrite();
  release.CloseRead();
  auto has_lock_open = [&] {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
      if (fs::read_symlink(e.path(), ec) == path) return true;
    }
    return false;
  };
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!has_lock_open() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  REQUIRE(has_lock_open());

  down->ReleaseAndRemove();
  CHECK_FALSE(down->held());
  char c = 0;
  REQUIRE(read(ready.r(), &c, 1) == 1);  // the waiter holds the lock now
  // ... on the file at the path, so a newcomer sees it held instead of locking a new file.
  CHECK(fs::exists(path));
  auto what = ClusterLock::HeldFor("demo");
  REQUIRE(what.has_value());
  CHECK(*what == "herd launch");
  auto newcomer = ClusterLock::Acquire("demo", 0ms, "herd exec");
  REQUIRE_FALSE(newcomer.ok());
  CHECK(newcomer.status().code() == Code::kDeadlineExceeded);
  release.CloseWrite();
  CHECK(WIFEXITED(waiter.Wait()));

  // Removing it with nobody waiting leaves no file.
  auto last = ClusterLock::Acquire("demo", 0ms, "herd down");
  REQUIRE(last.ok());
  last->ReleaseAndRemove();
  CHECK_FALSE(fs::exists(path));
  CHECK(ClusterLock::Acquire("demo", 0ms, "herd launch").ok());
}
