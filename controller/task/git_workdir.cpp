// workdir: {url, ref}: the controller clones the repository with the system git into a directory
// of its own, and the task's workdir becomes that directory (synced to the nodes as any workdir).
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "controller/ssh/subprocess.hpp"
#include "controller/task/task.hpp"
#include "shared/common/limits.hpp"

namespace herd::task {
namespace {

namespace fs = std::filesystem;

// git's last non-empty stderr line: what it says went wrong.
std::string LastLine(const std::string& text) {
  std::string_view t = text;
  if (t.size() > limits::kGitWorkdirErrorBytes)
    t = t.substr(t.size() - limits::kGitWorkdirErrorBytes);
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' '))
    t.remove_suffix(1);
  std::size_t nl = t.find_last_of('\n');
  return std::string(nl == std::string_view::npos ? t : t.substr(nl + 1));
}

Status RunGit(const std::vector<std::string>& argv, const std::string& what) {
  // No prompt for credentials (a clone that needs them fails at once), no system or user
  // configuration that could run hooks or helpers of someone else's choosing.
  const std::map<std::string, std::string> env = {{"GIT_TERMINAL_PROMPT", "0"},
                                                  {"GIT_ASKPASS", "/bin/false"},
                                                  {"SSH_ASKPASS", "/bin/false"},
                                                  {"GIT_CONFIG_NOSYSTEM", "1"},
                                                  {"LC_ALL", "C"}};
  auto r = controller::RunProcess(
      argv, "",
      std::chrono::duration_cast<std::chrono::milliseconds>(limits::kGitWorkdirCloneTimeout), env);
  if (!r.ok()) return FailedPrecondition(what + ": cannot run git: " + r.status().message());
  if (r->timed_out) {
    return DeadlineExceeded(what + ": git did not finish within " +
                            std::to_string(limits::kGitWorkdirCloneTimeout.count()) + " s");
  }
  if (r->exit_code != 0) {
    std::string line = LastLine(r->err);
    return InvalidArgument(what + ": git exited with " + std::to_string(r->exit_code) +
                           (line.empty() ? "" : ": " + line));
  }
  return Status::Ok();
}

}  // namespace

Status ResolveGitWorkdir(Task& task, const std::string& parent_dir) {
  if (!task.git_workdir) return Status::Ok();
  const GitWorkdir& git = *task.git_workdir;
  // The parser refuses both; checked again because a task may come from elsewhere (JSON).
  if (git.url.empty() || git.url[0] == '-' || (!git.ref.empty() && git.ref[0] == '-')) {
    return InvalidArgument("workdir: a git url or ref may not be empty or start with '-'");
  }
  std::error_code ec;
  fs::create_directories(parent_dir, ec);
  if (ec) return InvalidArgument("cannot create " + parent_dir + ": " + ec.message());
  ::chmod(parent_dir.c_str(), 0700);
  std::string tmpl = parent_dir + "/git-workdir-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    return ErrnoError("cannot create a directory under " + parent_dir, errno);
  }
  const std::string dir = buf.data();
  const std::string what =
      "workdir: cannot clone " + git.url + (git.ref.empty() ? "" : " at " + git.ref);
  // --no-checkout, then a checkout of the ref: a ref may be a branch, a tag or a commit, and a
  // commit cannot be named to `clone --branch`.
  Status s = RunGit({"git", "clone", "--quiet", "--no-checkout", "--", git.url, dir}, what);
  if (s.ok()) {
    // A tag, a commit or the default branch by its name; another branch only exists as
    // origin/NAME in a fresh clone.
    auto checkout = [&](const std::string& ref) {
      return RunGit({"git", "-C", dir, "-c", "advice.detachedHead=false", "checkout", "--quiet",
                     "--detach", ref, "--"},
                    what);
    };
    s = checkout(git.ref.empty() ? "HEAD" : git.ref);
    if (!s.ok() && !git.ref.empty() && checkout("origin/" + git.ref).ok()) s = Status::Ok();
  }
  if (!s.ok()) {
    fs::remove_all(dir, ec);
    return s;
  }
  task.workdir = dir;
  return Status::Ok();
}

void RemoveGitWorkdir(const Task& task) {
  if (!task.git_workdir || task.workdir.empty()) return;
  std::error_code ec;
  fs::remove_all(task.workdir, ec);
}

}  // namespace herd::task
