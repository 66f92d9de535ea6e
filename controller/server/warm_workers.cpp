#include "controller/server/warm_workers.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "controller/server/command_runner.hpp"
#include "controller/server/warm_protocol.hpp"

namespace herd::server {
namespace {

void Reap(int pid) {
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

Result<int> WarmWorkers::Run(const std::string& user, const Spawn& spawn,
                             const std::vector<std::string>& args, const OutputFn& on_output) {
  if (!IsWarmRead(args)) return InvalidArgument("not a read a warm worker runs");
  // A worker may exit (idle) just as it is given a command: it then answered nothing, and the
  // command goes to another one, once.
  for (int attempt = 0; attempt < 2; ++attempt) {
    HERD_ASSIGN_OR_RETURN(std::shared_ptr<Worker> w, Take(user));
    if (w->pid < 0) {
      if (auto s = Start(*w, spawn); !s.ok()) {
        Retire(user, w);
        return Unavailable("cannot start a warm worker: " + s.message());
      }
    }
    int code = 1;
    switch (Exchange(*w, args, on_output, &code)) {
      case Outcome::kDone:
        Give(user, w);
        return code;
      case Outcome::kGoneMidway:
        Retire(user, w);
        on_output(FrameTag::kStderr, "herd: the server's worker ended before the command did\n");
        return 1;
      case Outcome::kGoneBeforeAnswer:
        Retire(user, w);
        break;
    }
  }
  return Unavailable("the warm workers ended before answering");
}

Result<std::shared_ptr<WarmWorkers::Worker>> WarmWorkers::Take(const std::string& user) {
  std::unique_lock<std::mutex> l(mu_);
  const auto deadline = std::chrono::steady_clock::now() + options_.queue_wait;
  while (true) {
    if (closed_) return Unavailable("the server is stopping");
    ReapIdleLocked();
    auto& mine = workers_[user];
    for (auto& w : mine) {
      if (!w->busy) {
        w->busy = true;
        return w;
      }
    }
    if (mine.size() < options_.per_user && total_ < options_.max_total) {
      auto w = std::make_shared<Worker>();
      w->busy = true;  // started by the caller, outside the lock
      mine.push_back(w);
      ++total_;
      return w;
    }
    if (freed_.wait_until(l, deadline) == std::cv_status::timeout) {
      return Unavailable("every warm worker this user may have is busy");
    }
  }
}

Status WarmWorkers::Start(Worker& w, const Spawn& spawn) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoError("socketpair", errno);
  }
  auto pid = SpawnProcess(spawn.argv, spawn.env, spawn.cwd, sv[1], -1, -1);
  ::close(sv[1]);
  if (!pid.ok()) {
    ::close(sv[0]);
    return pid.status();
  }
  w.pid = *pid;
  w.fd = sv[0];
  return Status::Ok();
}

WarmWorkers::Outcome WarmWorkers::Exchange(Worker& w, const std::vector<std::string>& args,
                                           const OutputFn& on_output, int* exit_code) {
  if (!SendAll(w.fd, EncodeWarmRequest(args))) return Outcome::kGoneBeforeAnswer;
  bool answered = false, exited = false;
  FrameDecoder decoder([&](FrameTag tag, std::string_view payload) {
    answered = true;
    if (tag == FrameTag::kExit) {
      exited = true;
      *exit_code = std::atoi(std::string(payload).c_str());
    } else if (tag == FrameTag::kStdout || tag == FrameTag::kStderr) {
      if (!payload.empty()) on_output(tag, payload);
    }
  });
  char buf[64 << 10];
  while (!exited) {
    pollfd p{w.fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(limits::kApiStreamHeartbeat.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      on_output(FrameTag::kStdout, {});
      continue;
    }
    const ssize_t n = ready < 0 ? -1 : ::read(w.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return answered ? Outcome::kGoneMidway : Outcome::kGoneBeforeAnswer;
    // A worker that answers what is not frames is not one to keep.
    if (!decoder.Feed(std::string_view(buf, static_cast<std::size_t>(n))).ok()) {
      return Outcome::kGoneMidway;
    }
  }
  return decoder.pending() == 0 ? Outcome::kDone : Outcome::kGoneMidway;
}

void WarmWorkers::Give(const std::string& user, const std::shared_ptr<Worker>& w) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!closed_) {
      w->busy = false;
      w->idle_since = std::chrono::steady_clock::now();
      freed_.notify_one();
      return;
    }
  }
  Retire(user, w);  // closed while it ran: it is no longer listed
}

void WarmWorkers::Retire(const std::string& user, const std::shared_ptr<Worker>& w) {
  if (w->fd >= 0) ::close(w->fd);
  w->fd = -1;
  if (w->pid > 0) {
    ::kill(w->pid, SIGKILL);
    Reap(w->pid);
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    auto& mine = workers_[user];
    if (auto it = std::find(mine.begin(), mine.end(), w); it != mine.end()) {
      mine.erase(it);
      --total_;
    }
    if (mine.empty()) workers_.erase(user);
  }
  freed_.notify_all();
}

void WarmWorkers::ReapIdleLocked() {
  // Only a worker idle long enough to have exited by itself is asked (one syscall each): asking
  // every worker at every read costs the server more than the read. One that ended sooner (it
  // should not) is found when its next command cannot be sent, and replaced.
  const auto exited_by_now = std::chrono::steady_clock::now() - limits::kApiWarmWorkerIdle;
  for (auto it = workers_.begin(); it != workers_.end();) {
    auto& mine = it->second;
    std::erase_if(mine, [&](const std::shared_ptr<Worker>& w) {
      if (w->busy || w->pid <= 0 || w->idle_since > exited_by_now) return false;
      int status = 0;
      if (::waitpid(w->pid, &status, WNOHANG) != w->pid) return false;
      ::close(w->fd);
      --total_;
      return true;
    });
    it = mine.empty() ? workers_.erase(it) : std::next(it);
  }
}

void WarmWorkers::Close() {
  std::map<std::string, std::vector<std::shared_ptr<Worker>>> all;
  {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
    for (auto& [user, mine] : workers_) {
      for (auto& w : mine) {
        // A busy worker's socket is its caller's until Run returns; shutting it down ends the
        // command's wait (and the worker, at the end of its stdin).
        if (w->fd >= 0) ::shutdown(w->fd, SHUT_RDWR);
      }
    }
    all.swap(workers_);
    total_ = 0;
  }
  freed_.notify_all();
  for (auto& [user, mine] : all) {
    for (auto& w : mine) {
      if (w->busy) continue;  // its Run retires it
      if (w->fd >= 0) ::close(w->fd);
      w->fd = -1;
      if (w->pid > 0) Reap(w->pid);
    }
  }
}

std::size_t WarmWorkers::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return total_;
}

std::size_t WarmWorkers::busy() const {
  std::lock_guard<std::mutex> l(mu_);
  std::size_t n = 0;
  for (const auto& [user, mine] : workers_) {
    for (const auto& w : mine) n += w->busy ? 1 : 0;
  }
  return n;
}

}  // namespace herd::server
