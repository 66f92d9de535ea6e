#include "agent/job/stack_capture.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "agent/job/proc_tree.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"

extern char** environ;

namespace herd::agent {
namespace {

namespace fs = std::filesystem;
using Steady = std::chrono::steady_clock;

std::string ReadSmall(const std::string& path, std::size_t max) {
  std::ifstream in(path, std::ios::binary);
  std::string out(max, '\0');
  in.read(out.data(), static_cast<std::streamsize>(max));
  out.resize(static_cast<std::size_t>(in.gcount()));
  return out;
}

std::string Cmdline(int pid) {
  std::string raw = ReadSmall("/proc/" + std::to_string(pid) + "/cmdline", 300);
  for (char& c : raw) {
    if (c == '\0') c = ' ';
  }
  while (!raw.empty() && raw.back() == ' ') raw.pop_back();
  return raw;
}

off_t FileSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

// SIGUSR2 to a Python that registered the hook, then what its dump appended (the dump is done
// when the file stopped growing for a moment).
std::string PythonStacks(int pid, const std::string& dump) {
  const off_t before = FileSize(dump);
  if (before < 0) return "";
  if (::kill(pid, SIGUSR2) != 0) return "";
  const auto deadline = Steady::now() + limits::kPythonStackDumpWait;
  off_t last = before;
  auto last_change = Steady::now();
  while (Steady::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const off_t now = FileSize(dump);
    if (now != last) {
      last = now;
      last_change = Steady::now();
    } else if (now > before && Steady::now() - last_change >= std::chrono::milliseconds(100)) {
      break;
    }
  }
  if (last <= before)
    return "(no Python stack dump within the wait: the process may be blocked "
           "with signals held, or replaced the SIGUSR2 handler)\n";
  std::ifstream in(dump, std::ios::binary);
  in.seekg(before);
  std::string text(static_cast<std::size_t>(last - before), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

std::string NativeStacks(int pid, const StackTools& tools) {
  const int timeout = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(limits::kNativeStackTimeout).count());
  if (!tools.eu_stack.empty()) {
    return RunBounded({tools.eu_stack, "-p", std::to_string(pid)}, timeout);
  }
  if (!tools.gdb.empty()) {
    return RunBounded(
        {tools.gdb, "-p", std::to_string(pid), "-batch", "-nx", "-q", "-ex", "thread apply all bt"},
        timeout);
  }
  return "";
}

}  // namespace

std::string PythonHookSource() {
  return R"PY(# Installed by herd's agent (herdlet): lets herd show this process's Python stacks (`herd stack`,
# a hung rank) without stopping it. faulthandler dumps every thread on SIGUSR2 into a file that
# herd reads. The sitecustomize this one shadows (Debian's, a virtualenv's) still runs.
def _herd_register_stacks():
    import os
    import sys
    directory = os.environ.get("HERD_STACKS_DIR")
    if directory:
        try:
            import faulthandler
            import signal
            os.makedirs(directory, exist_ok=True)
            dump = open(os.path.join(directory, "%d.stack" % os.getpid()), "a")
            faulthandler.register(signal.SIGUSR2, file=dump, all_threads=True, chain=False)
            sys.modules[__name__]._herd_stack_dump = dump
        except Exception:
            pass
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import importlib.machinery
        import importlib.util
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
    except Exception:
        pass


_herd_register_stacks()
)PY";
}

Status InstallPythonHook(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Internal("cannot create " + dir + ": " + ec.message());
  auto wrote = WriteFileIfChanged(dir + "/sitecustomize.py", PythonHookSource(), 0644,
                                  Durability::kProcessCrash);
  return wrote.ok() ? Status::Ok() : wrote.status();
}

std::string PythonPathWith(const std::string& hook_dir, const std::string& existing) {
  return existing.empty() ? hook_dir : hook_dir + ":" + existing;
}

StackTools FindStackTools() {
  StackTools t;
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  path += ":/usr/bin:/bin";
  std::stringstream dirs(path);
  std::string d;
  while (std::getline(dirs, d, ':')) {
    if (d.empty()) continue;
    if (t.eu_stack.empty() && ::access((d + "/eu-stack").c_str(), X_OK) == 0) {
      t.eu_stack = d + "/eu-stack";
    }
    if (t.gdb.empty() && ::access((d + "/gdb").c_str(), X_OK) == 0) t.gdb = d + "/gdb";
  }
  return t;
}

std::string RunBounded(const std::vector<std::string>& argv, int timeout_ms) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return "(cannot run " + argv[0] + ": pipe failed)\n";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t child = 0;
  const int err = ::posix_spawn(&child, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (err != 0) {
    ::close(fds[0]);
    return "(cannot run " + argv[0] + ": " + std::strerror(err) + ")\n";
  }
  std::string out;
  const auto deadline = Steady::now() + std::chrono::milliseconds(timeout_ms);
  bool timed_out = false;
  char buf[16384];
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Steady::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    if (out.size() < limits::kMaxStackReportBytes) out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(child, SIGKILL);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    out += "(" + argv[0] + " did not finish within " + std::to_string(timeout_ms) + " ms)\n";
  return out;
}

std::string CaptureTreeStacks(int pid, const std::string& dump_dir, const StackTools& tools,
                              std::size_t max_processes) {
  std::vector<ProcStat> tree = TreeOf(ReadAllProcStats(), pid);
  std::string text;
  if (tree.empty()) return "(process " + std::to_string(pid) + " is gone)\n";
  const std::size_t left_out = tree.size() > max_processes ? tree.size() - max_processes : 0;
  if (left_out > 0) tree.resize(max_processes);
  // Python dumps first (a process held by a native tool's ptrace could not run its handler).
  std::vector<std::string> python(tree.size());
  for (std::size_t i = 0; i < tree.size(); ++i) {
    python[i] = PythonStacks(tree[i].pid, dump_dir + "/" + std::to_string(tree[i].pid) + ".stack");
  }
  std::vector<std::future<std::string>> native;
  for (const ProcStat& s : tree) {
    native.push_back(
        std::async(std::launch::async, [pid = s.pid, &tools] { return NativeStacks(pid, tools); }));
  }
  for (std::size_t i = 0; i < tree.size(); ++i) {
    std::string one = "== pid " + std::to_string(tree[i].pid) + " (" + tree[i].comm +
                      "): " + Cmdline(tree[i].pid) + "\n";
    if (!python[i].empty()) one += "-- Python (faulthandler)\n" + python[i];
    std::string n = native[i].get();
    if (!n.empty()) {
      one += std::string("-- native (") + (tools.eu_stack.empty() ? "gdb" : "eu-stack") + ")\n" + n;
      if (one.back() != '\n') one += '\n';
    }
    text += one;
  }
  if (tools.eu_stack.empty() && tools.gdb.empty()) {
    text += "(no native frames: neither eu-stack nor gdb is installed on this node)\n";
  }
  if (left_out > 0) text += "(" + std::to_string(left_out) + " more processes left out)\n";
  if (text.size() > limits::kMaxStackReportBytes) {
    text.resize(limits::kMaxStackReportBytes - 64);
    text += "\n(cut at " + std::to_string(limits::kMaxStackReportBytes) + " bytes)\n";
  }
  return text;
}

}  // namespace herd::agent
