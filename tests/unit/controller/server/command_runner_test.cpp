// RunningCommand (command_runner.hpp) with small /bin/sh programs: output delivery and the log
// file, exit codes, stdin, environment and working directory, Cancel (SIGINT to the group, then
// SIGKILL after the grace), heartbeats, OnExit and Wait.
#include "controller/server/command_runner.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <string>
#include <thread>

#include "shared/common/limits.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::server {
namespace {

using namespace std::chrono_literals;
using herd::testing::ReadAll;
using herd::testing::TempDir;

// A bound on waits for what happens at once when the code works (never a timing assertion: a
// broken build fails here instead of hanging).
constexpr auto kWait = 20s;

// What a command delivered to its output callback.
struct Output {
  std::mutex mu;
  std::condition_variable cv;
  std::string out, err;
  int heartbeats = 0;
  int heartbeats_before_output = 0;

  RunningCommand::OutputFn Fn() {
    return [this](FrameTag tag, std::string_view bytes) {
      {
        std::lock_guard<std::mutex> l(mu);
        if (tag == FrameTag::kStdout && bytes.empty()) {
          ++heartbeats;
          if (out.empty()) ++heartbeats_before_output;
        }
        (tag == FrameTag::kStdout ? out : err).append(bytes);
      }
      cv.notify_all();
    };
  }
  // Waits (bounded) until stdout holds `text`.
  bool WaitFor(const std::string& text) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, kWait, [&] { return out.find(text) != std::string::npos; });
  }
  std::string Out() {
    std::lock_guard<std::mutex> l(mu);
    return out;
  }
  std::string Err() {
    std::lock_guard<std::mutex> l(mu);
    return err;
  }
};

CommandSpec Sh(const std::string& script) {
  CommandSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.env = {"PATH=/usr/bin:/bin"};
  return spec;
}

// Waits for the command, bounded: one that does not end is killed (its group) and the case fails.
int WaitBounded(const std::shared_ptr<RunningCommand>& cmd) {
  auto code = std::async(std::launch::async, [cmd] { return cmd->Wait(); });
  if (code.wait_for(kWait) != std::future_status::ready) {
    ::kill(-cmd->pid(), SIGKILL);
    FAIL_CHECK("the command did not end; killed");
  }
  return code.get();
}

// Kills what a failed case left running.
struct KillOnExit {
  std::shared_ptr<RunningCommand> cmd;
  ~KillOnExit() {
    if (cmd && !cmd->done()) {
      ::kill(-cmd->pid(), SIGKILL);
      cmd->Wait();
    }
  }
};

TEST_CASE("stdout and stderr are delivered in order and appended to the log") {
  TempDir dir("herd-cmd");
  const std::string log = dir / "req.log";
  { std::ofstream(log) << "before\n"; }
  Output o;
  CommandSpec spec =
      Sh("i=0; while [ $i -lt 200 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done; echo tail");
  spec.log_path = log;
  auto cmd = RunningCommand::Start(spec, o.Fn());
  REQUIRE(cmd.ok());
  KillOnExit guard{*cmd};
  CHECK(WaitBounded(*cmd) == 0);
  std::string want_out, want_err;
  for (int i = 0; i < 200; ++i) {
    want_out += "out" + std::to_string(i) + "\n";
    want_err += "err" + std::to_string(i) + "\n";
  }
  want_out += "tail\n";
  CHECK(o.Out() == want_out);
  CHECK(o.Err() == want_err);
  // The log holds everything after what was there, each stream's bytes in their order.
  const std::string logged = ReadAll(log);
  REQUIRE(logged.rfind("before\n", 0) == 0);
  CHECK(logged.size() == 7 + want_out.size() + want_err.size());
  std::string only_out, only_err;
  std::size_t at = 7;
  while (at < logged.size()) {
    std::size_t nl = logged.find('\n', at);
    std::string line = logged.substr(at, nl == std::string::npos ? std::string::npos : nl - at + 1);
    at += line.size();
    (line.rfind("err", 0) == 0 ? only_err : only_out) += line;
  }
  CHECK(only_out == want_out);
  CHECK(only_err == want_err);
}

TEST_CASE("a log file is made 0600 when missing; no log path writes none") {
  TempDir dir("herd-cmd");
  const std::string log = dir / "new.log";
  CommandSpec spec = Sh("echo hi");
  spec.log_path = log;
  auto cmd = RunningCommand::Start(spec, nullptr);
  REQUIRE(cmd.ok());
  CHECK(WaitBounded(*cmd) == 0);
  CHECK(ReadAll(log) == "hi\n");
  struct stat st {};
  REQUIRE(::stat(log.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
}

TEST_CASE("exit codes: the program's, 128 + signal, 127 and 126") {
  struct Case {
    std::string script;
    int code;
  };
  for (const Case& c :
       {Case{"exit 0", 0}, Case{"exit 3", 3}, Case{"exit 255", 255},
        Case{"kill -TERM $$", 128 + SIGTERM}, Case{"kill -KILL $$", 128 + SIGKILL}}) {
    CAPTURE(c.script);
    auto cmd = RunningCommand::Start(Sh(c.script), nullptr);
    REQUIRE(cmd.ok());
    CHECK(WaitBounded(*cmd) == c.code);
  }
  CommandSpec missing;
  missing.argv = {"/nonexistent/herd"};
  auto cmd = RunningCommand::Start(missing, nullptr);
  REQUIRE(cmd.ok());
  CHECK(WaitBounded(*cmd) == 127);

  CommandSpec bad_cwd = Sh("true");
  bad_cwd.cwd = "/nonexistent/dir";
  cmd = RunningCommand::Start(bad_cwd, nullptr);
  REQUIRE(cmd.ok());
  CHECK(WaitBounded(*cmd) == 126);

  CHECK(RunningCommand::Start(CommandSpec{}, nullptr).status().code() == Code::kInvalidArgument);
}

TEST_CASE("stdin is stdin_data, or /dev/null when empty") {
  Output o;
  CommandSpec spec = Sh("cat; echo; cat");  // the second cat sees the end too
  spec.stdin_data = std::string("line one\nsecret\0x", 17);
  auto cmd = RunningCommand::Start(spec, o.Fn());
  REQUIRE(cmd.ok());
  CHECK(WaitBounded(*cmd) == 0);
  CHECK(o.Out() == std::string("line one\nsecret\0x\n", 18));

  Output n;
  cmd = RunningCommand::Start(Sh("cat; echo end"), n.Fn());
  REQUIRE(cmd.ok());
  CHECK(WaitBounded(*cmd) == 0);
  CHECK(n.Out() == "end\n");
}

TEST_CASE("the environment is exactly env, and the command runs in cwd") {
  TempDir dir("herd-cmd");
  Output o;
  CommandSpec spec = Sh("echo \"$FOO|${HOME-unset}|$(pwd)\"");
  spec.env = {"PATH=/usr/bin:/bin", "FOO=bar baz"};
  spec.cwd = dir.path();
  auto cmd = RunningCommand::Start(spec, o.Fn());
  REQUIRE(cmd.ok());
  CHECK(WaitBounded(*cmd) == 0);
  const std::string real = std::filesystem::canonical(dir.path()).string();
  CHECK(o.Out() == "bar baz|unset|" + real + "\n");
}

TEST_CASE("the command inherits no descriptor but stdin, stdout and stderr") {
  // The server's sockets (its listener, its clients' connections), its database and log files
  // are not the command's: a detached child holding the listener would keep the port taken.
  int leaky = ::open("/dev/null", O_RDONLY);  // not close-on-exec
  REQUIRE(leaky >= 0);
  int leaky_pipe[2];
  REQUIRE(::pipe(leaky_pipe) == 0);
  Output o;
  auto cmd = RunningCommand::Start(Sh("ls /proc/$$/fd"), o.Fn());
  ::close(leaky);
  ::close(leaky_pipe[0]);
  ::close(leaky_pipe[1]);
  REQUIRE(cmd.ok());
  CHECK(WaitBounded(*cmd) == 0);
  CHECK(o.Out() == "0\n1\n2\n");
}

TEST_CASE("the command runs in a process group of its own") {
  Output o;
  auto cmd = RunningCommand::Start(Sh("ps -o pgid= -p $$ | tr -d ' '"), o.Fn());
  REQUIRE(cmd.ok());
  CHECK(WaitBounded(*cmd) == 0);
  CHECK(o.Out() == std::to_string((*cmd)->pid()) + "\n");
}

TEST_CASE("starting a command leaves the server's memory writable: no page faults after it") {
  // A fork would write-protect every page of the server until each is written again (one fault
  // per page, with a TLB flush on every CPU that runs one of the server's threads). The server
  // writes its memory all the time; its pages must stay as they were across a command's start.
  constexpr std::size_t kBytes = 32 << 20;
  void* mem = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mem != MAP_FAILED);
  (void)::madvise(mem, kBytes, MADV_NOHUGEPAGE);  // one fault per 4 KiB page, not per 2 MiB
  auto* bytes = static_cast<volatile char*>(mem);
  const long page = ::sysconf(_SC_PAGESIZE);
  auto touch_all = [&](char v) {
    for (std::size_t i = 0; i < kBytes; i += static_cast<std::size_t>(page)) bytes[i] = v;
  };
  auto minor_faults = [] {
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
  };
  touch_all(1);  // every page present and writable
  Output o;
  auto cmd = RunningCommand::Start(Sh("echo started"), o.Fn());
  REQUIRE(cmd.ok());
  const long before = minor_faults();
  touch_all(2);
  const long faults = minor_faults() - before;
  CHECK(WaitBounded(*cmd) == 0);
  CHECK(o.Out() == "started\n");
  const long pages = static_cast<long>(kBytes) / page;
  INFO("pages written: " << pages << ", faults: " << faults);
  CHECK(faults < pages / 8);
  ::munmap(mem, kBytes);
}

int g_signal_handled = 0;
void CountSignal(int) { ++g_signal_handled; }

TEST_CASE("starting a command leaves the server's signal handlers and mask as they were") {
  // The new process resets every disposition and unblocks every signal before its exec; those
  // are its own, never the server's (whose Asio handlers, ignored and blocked signals stay).
  struct sigaction sa {
  }, ign{}, old_usr2{}, old_usr1{}, now{};
  sa.sa_handler = CountSignal;
  sigemptyset(&sa.sa_mask);
  REQUIRE(::sigaction(SIGUSR2, &sa, &old_usr2) == 0);
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  REQUIRE(::sigaction(SIGUSR1, &ign, &old_usr1) == 0);
  sigset_t block, mask_before, mask_after;
  sigemptyset(&block);
  sigaddset(&block, SIGWINCH);
  REQUIRE(::pthread_sigmask(SIG_BLOCK, &block, &mask_before) == 0);
  Output o;
  // The program's own view after its exec: nothing ignored (an ignored signal survives an exec),
  // nothing blocked.
  auto cmd = RunningCommand::Start(Sh("exec grep -E '^Sig(Blk|Ign)' /proc/self/status"), o.Fn());
  REQUIRE(cmd.ok());
  CHECK(WaitBounded(*cmd) == 0);
  CHECK(o.Out() == "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
  REQUIRE(::sigaction(SIGUSR2, nullptr, &now) == 0);
  const bool ours = now.sa_handler == CountSignal;
  CHECK(ours);
  REQUIRE(::sigaction(SIGUSR1, nullptr, &now) == 0);
  const bool ignored = now.sa_handler == SIG_IGN;
  CHECK(ignored);
  REQUIRE(::pthread_sigmask(SIG_BLOCK, nullptr, &mask_after) == 0);
  CHECK(sigismember(&mask_after, SIGWINCH) == 1);
  CHECK(sigismember(&mask_after, SIGUSR2) == 0);
  ::raise(SIGUSR2);
  CHECK(g_signal_handled == 1);
  ::pthread_sigmask(SIG_SETMASK, &mask_before, nullptr);
  ::sigaction(SIGUSR2, &old_usr2, nullptr);
  ::sigaction(SIGUSR1, &old_usr1, nullptr);
}

int g_signal_pipe = -1;
void WriteOnSignal(int) {
  const char c = 'x';
  (void)!::write(g_signal_pipe, &c, 1);
}

TEST_CASE("a signal sent to the command's group before its exec never runs the server's handler") {
  // The server's SIGINT handler (Asio's) writes to a pipe the server reads: run in a child that
  // is between fork and exec, it would stop the server. This process's handler writes a byte to a
  // pipe; commands are signalled at once after Start, many times, to hit that window.
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0);
  g_signal_pipe = fds[1];
  struct sigaction sa {
  }, old{};
  sa.sa_handler = WriteOnSignal;
  sigemptyset(&sa.sa_mask);
  REQUIRE(::sigaction(SIGINT, &sa, &old) == 0);
  for (int i = 0; i < 300; ++i) {
    auto cmd = RunningCommand::Start(Sh("exit 0"), {});
    REQUIRE(cmd.ok());
    ::kill(-(*cmd)->pid(), SIGINT);
    const int code = WaitBounded(*cmd);
    CHECK((code == 0 || code == 128 + SIGINT));
  }
  char c = 0;
  CHECK(::read(fds[0], &c, 1) == -1);  // nothing written (EAGAIN)
  ::sigaction(SIGINT, &old, nullptr);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_CASE("Cancel sends SIGINT to the whole process group") {
  // The outer shell waits on an inner one in the foreground; both trap INT, so both print only
  // if the signal went to the group, not just to the command's own pid.
  Output o;
  auto cmd = RunningCommand::Start(Sh("trap 'echo outer-int; exit 7' INT; "
                                      "sh -c 'trap \"echo inner-int; exit 0\" INT; echo ready; "
                                      "while :; do sleep 0.1; done'; "
                                      "echo inner-returned; while :; do sleep 0.1; done"),
                                   o.Fn());
  REQUIRE(cmd.ok());
  KillOnExit guard{*cmd};
  REQUIRE(o.WaitFor("ready"));
  (*cmd)->Cancel();
  (*cmd)->Cancel();  // once is what counts
  CHECK(WaitBounded(*cmd) == 7);
  CHECK(o.Out().find("inner-int") != std::string::npos);
  CHECK(o.Out().find("outer-int") != std::string::npos);
}

TEST_CASE("a command that ignores SIGINT is killed after the grace") {
  Output o;
  CommandSpec spec = Sh("trap '' INT; echo ready; while :; do sleep 0.1; done");
  spec.cancel_grace = 300ms;
  auto cmd = RunningCommand::Start(spec, o.Fn());
  REQUIRE(cmd.ok());
  KillOnExit guard{*cmd};
  REQUIRE(o.WaitFor("ready"));
  (*cmd)->Cancel();
  CHECK(WaitBounded(*cmd) == 128 + SIGKILL);
}

TEST_CASE("a command that closed its output can still be cancelled") {
  TempDir dir("herd-cmd");
  const std::string marker = dir / "closed";
  Output o;
  auto cmd = RunningCommand::Start(Sh("trap 'exit 7' INT; exec >/dev/null 2>&1; touch " + marker +
                                      "; while :; do sleep 0.1; done"),
                                   o.Fn());
  REQUIRE(cmd.ok());
  KillOnExit guard{*cmd};
  const auto until = std::chrono::steady_clock::now() + kWait;
  while (!std::filesystem::exists(marker) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(20ms);
  }
  REQUIRE(std::filesystem::exists(marker));
  CHECK_FALSE((*cmd)->done());
  (*cmd)->Cancel();
  CHECK(WaitBounded(*cmd) == 7);
}

TEST_CASE("a silent command gets heartbeats: empty stdout callbacks") {
  Output o;
  // Silent for three heartbeat intervals: at least one heartbeat, generously.
  const auto silent =
      std::chrono::duration_cast<std::chrono::milliseconds>(3 * limits::kApiStreamHeartbeat);
  auto cmd = RunningCommand::Start(
      Sh("sleep " + std::to_string(silent.count() / 1000.0) + "; echo done"), o.Fn());
  REQUIRE(cmd.ok());
  KillOnExit guard{*cmd};
  CHECK(WaitBounded(*cmd) == 0);
  CHECK(o.Out() == "done\n");
  std::lock_guard<std::mutex> l(o.mu);
  CHECK(o.heartbeats_before_output >= 1);
}

TEST_CASE("OnExit: registered before the end it runs at the end; after, at once") {
  std::promise<int> before;
  auto cmd = RunningCommand::Start(Sh("read x; exit 5"), nullptr);
  REQUIRE(cmd.ok());
  (*cmd)->OnExit([&before](int code) { before.set_value(code); });
  auto got = before.get_future();
  CHECK(got.wait_for(kWait) == std::future_status::ready);
  CHECK(got.get() == 5);
  CHECK(WaitBounded(*cmd) == 5);
  CHECK((*cmd)->done());
  CHECK((*cmd)->Wait() == 5);  // again: the same code

  int after = -1;
  std::thread::id ran_on;
  (*cmd)->OnExit([&](int code) {
    after = code;
    ran_on = std::this_thread::get_id();
  });
  CHECK(after == 5);  // ran before OnExit returned
  CHECK(ran_on == std::this_thread::get_id());
}

TEST_CASE("Wait returns once the OnExit functions ran and everything given was let go") {
  // What a caller hands in (the server: its HTTP responder, itself) must not outlive Wait: the
  // caller may tear down what they refer to right after it.
  auto held = std::make_shared<int>(0);
  std::atomic<bool> on_exit_returned{false};
  auto cmd = RunningCommand::Start(Sh("echo hi"), [held](FrameTag, std::string_view) {});
  REQUIRE(cmd.ok());
  (*cmd)->OnExit([held, &on_exit_returned](int) {
    std::this_thread::sleep_for(300ms);  // a slow callback: Wait must not return before it ends
    on_exit_returned = true;
  });
  CHECK(WaitBounded(*cmd) == 0);
  CHECK(on_exit_returned);
  CHECK(held.use_count() == 1);
  CHECK((*cmd)->done());
}

}  // namespace
}  // namespace herd::server
