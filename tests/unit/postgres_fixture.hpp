// A real PostgreSQL 15 server for unit tests, started from a private temporary directory without
// touching the machine's own clusters: as user postgres, `initdb -A trust` into the directory,
// then `pg_ctl start` listening on 127.0.0.1 at a free port (and a unix socket in the directory
// only). Needs root (to run as postgres) and Debian's postgresql-15; PostgresUnavailable() says
// why not, for herd::testing::Skip. Cases that use it belong in a SKIPPABLE doctest suite.
//
// The server is stopped (`pg_ctl stop -m immediate`) and its directory removed when the
// PostgresServer goes away, however the test ends; a server left behind by a test program that
// was killed is stopped and removed by the next PostgresServer (its directory names the pid that
// started it).
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/unit/test_support.hpp"

extern char** environ;

namespace herd::testing {

inline constexpr const char* kPostgresBin = "/usr/lib/postgresql/15/bin";

// "" when a PostgreSQL server can be started here, else why not.
inline std::string PostgresUnavailable() {
  if (::geteuid() != 0) return "starting PostgreSQL as user postgres needs root";
  for (const char* tool : {"initdb", "pg_ctl", "postgres", "createdb"}) {
    const std::string path = std::string(kPostgresBin) + "/" + tool;
    if (::access(path.c_str(), X_OK) != 0) return "no " + path + " (apt-get install postgresql-15)";
  }
  if (::getpwnam("postgres") == nullptr) return "no user postgres";
  if (::access("/usr/sbin/runuser", X_OK) != 0) return "no /usr/sbin/runuser";
  return "";
}

// Runs `argv` (no shell) with stdin from /dev/null and stdout and stderr appended to `log`;
// returns its exit status, or -1 when it did not start or was killed.
inline int RunLogged(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A TCP port of 127.0.0.1 that was free a moment ago (the kernel's pick for port 0); 0 when none.
inline int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  return ok ? ntohs(addr.sin_port) : 0;
}

class PostgresServer {
 public:
  // Starts a fresh server; REQUIREs that it started (the failure shows the end of its log). Call
  // PostgresUnavailable() first.
  PostgresServer() {
    StopLeftovers();
    const std::string error = Start();
    if (!error.empty()) {
      Stop();  // the destructor does not run for a constructor that throws
      FAIL(error);
    }
  }
  ~PostgresServer() { Stop(); }
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  int port() const { return port_; }
  // postgresql://postgres@127.0.0.1:PORT/DB
  std::string Url(const std::string& db = "postgres") const {
    return "postgresql://postgres@127.0.0.1:" + std::to_string(port_) + "/" + db;
  }
  // A new empty database (createdb), for a test case of its own; returns its URL.
  std::string NewDatabase() {
    static std::atomic<int> counter{0};
    const std::string name = "t" + std::to_string(++counter);
    REQUIRE(RunAsPostgres({Bin("createdb"), "-h", "127.0.0.1", "-p", std::to_string(port_), "-U",
                           "postgres", name}) == 0);
    return Url(name);
  }

 private:
  // "" when started, else what failed.
  std::string Start() {
    const passwd* pg = ::getpwnam("postgres");
    if (pg == nullptr) return "no user postgres";
    std::string tmpl = (std::filesystem::temp_directory_path() /
                        ("herd-pg-" + std::to_string(::getpid()) + "-XXXXXX"))
                           .string();
    if (::mkdtemp(tmpl.data()) == nullptr) return "mkdtemp " + tmpl + " failed";
    dir_ = tmpl;
    if (::chown(dir_.c_str(), pg->pw_uid, pg->pw_gid) != 0) return "chown " + dir_ + " failed";
    log_ = dir_ + "/commands.log";
    if (RunAsPostgres({Bin("initdb"), "-D", Data(), "-A", "trust", "-U", "postgres", "--no-sync",
                       "-E", "UTF8"}) != 0) {
      return "initdb failed: " + Tail(ReadAll(log_));
    }
    // A port taken between the pick and the start (another test) fails the start: pick again.
    for (int attempt = 0; attempt < 5; ++attempt) {
      const int port = FreeLoopbackPort();
      if (port == 0) continue;
      const std::string options = "-p " + std::to_string(port) + " -k " + dir_ +
                                  " -c listen_addresses=127.0.0.1 -c fsync=off";
      if (RunAsPostgres({Bin("pg_ctl"), "-D", Data(), "-o", options, "-l", dir_ + "/server.log",
                         "-w", "-t", "60", "start"}) == 0) {
        port_ = port;
        return "";
      }
    }
    return "PostgreSQL did not start: " + Tail(ReadAll(dir_ + "/server.log"));
  }

  static std::string Tail(const std::string& text) {
    return text.size() > 2000 ? text.substr(text.size() - 2000) : text;
  }

  std::string Bin(const char* tool) const { return std::string(kPostgresBin) + "/" + tool; }
  std::string Data() const { return dir_ + "/data"; }

  int RunAsPostgres(std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"/usr/sbin/runuser", "-u", "postgres", "--"});
    return RunLogged(argv, log_);
  }

  void Stop() {
    if (dir_.empty()) return;
    if (port_ != 0 || std::filesystem::exists(Data() + "/postmaster.pid")) {
      RunAsPostgres({Bin("pg_ctl"), "-D", Data(), "-m", "immediate", "-w", "stop"});
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    dir_.clear();
    port_ = 0;
  }

  // Servers of test programs that died before they could stop theirs: herd-pg-<pid>-* whose pid
  // is gone.
  static void StopLeftovers() {
    std::error_code ec;
    for (const auto& entry :
         std::filesystem::directory_iterator(std::filesystem::temp_directory_path(), ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("herd-pg-", 0) != 0) continue;
      const long pid = std::strtol(name.c_str() + 8, nullptr, 10);
      if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
      const std::string data = entry.path().string() + "/data";
      if (std::filesystem::exists(data + "/postmaster.pid")) {
        RunLogged(
            {"/usr/sbin/runuser", "-u", "postgres", "--", std::string(kPostgresBin) + "/pg_ctl",
             "-D", data, "-m", "immediate", "-w", "stop"},
            "/dev/null");
      }
      std::filesystem::remove_all(entry.path(), ec);
    }
  }

  std::string dir_;
  std::string log_;
  int port_ = 0;
};

// One server for the whole test program, started at its first use and stopped when the program
// exits (a static's destructor: after failed cases too).
inline PostgresServer& SharedPostgres() {
  static PostgresServer server;
  return server;
}

}  // namespace herd::testing
