// ClusterOps::AskEachHead: one question to each cluster's head at once, answers within a
// timeout, in a forked process per cluster (a short-lived CLI) or in a thread per cluster (a
// long-lived warm worker of the API server: ops::SetAskMode).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>

#include "controller/ops/cluster_ops.hpp"

namespace herd::ops {

namespace {
std::atomic<AskMode> ask_mode{AskMode::kProcess};

// AskEachHead in AskMode::kThread: a detached thread per cluster, each holding the round (shared)
// and its own copies of ask and the record, so that one still asking after the caller returned
// touches nothing of the caller's.
std::map<std::string, std::optional<std::string>> AskInThreads(
    const std::vector<const ClusterRecord*>& clusters,
    const std::function<std::string(const ClusterRecord&)>& ask,
    std::chrono::milliseconds timeout) {
  struct Round {
    std::mutex mu;
    std::condition_variable done;
    std::vector<std::optional<std::string>> answers;
    std::size_t left = 0;
  };
  auto round = std::make_shared<Round>();
  round->answers.resize(clusters.size());
  round->left = clusters.size();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (std::size_t i = 0; i < clusters.size(); ++i) {
    auto answer = [round, i](std::string a) {
      std::lock_guard<std::mutex> l(round->mu);
      round->answers[i] = std::move(a);
      --round->left;
      round->done.notify_all();
    };
    try {
      std::thread([answer, ask, c = *clusters[i]] {
        std::string a;
        try {
          a = ask(c);
        } catch (const std::exception& e) {
          a = std::string("E") + e.what();
        }
        answer(std::move(a));
      }).detach();
    } catch (const std::system_error& e) {
      answer(std::string("Ethread: ") + e.what());
    }
  }
  std::unique_lock<std::mutex> l(round->mu);
  round->done.wait_until(l, deadline, [&] { return round->left == 0; });
  std::map<std::string, std::optional<std::string>> out;
  for (std::size_t i = 0; i < clusters.size(); ++i) {
    out[clusters[i]->name] = std::move(round->answers[i]);  // nullopt: not in by the deadline
  }
  return out;
}
}  // namespace

void SetAskMode(AskMode mode) { ask_mode = mode; }

std::map<std::string, std::optional<std::string>> ClusterOps::AskEachHead(
    const std::vector<const ClusterRecord*>& clusters,
    const std::function<std::string(const ClusterRecord&)>& ask,
    std::chrono::milliseconds timeout) {
  if (ask_mode == AskMode::kThread) return AskInThreads(clusters, ask, timeout);
  struct Question {
    const ClusterRecord* cluster;
    pid_t pid = -1;
    int fd = -1;
    std::string answer;
  };
  std::vector<Question> asked;
  std::map<std::string, std::optional<std::string>> out;
  for (const ClusterRecord* c : clusters) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      out[c->name] = std::string("Epipe: ") + std::strerror(errno);
      continue;
    }
    std::fflush(nullptr);  // nothing buffered is written twice
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      const std::string answer = ask(*c);
      for (std::size_t done = 0; done < answer.size();) {
        ssize_t n = ::write(fds[1], answer.data() + done, answer.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += static_cast<std::size_t>(n);
      }
      ::_exit(0);
    }
    ::close(fds[1]);
    if (pid < 0) {
      ::close(fds[0]);
      out[c->name] = std::string("Efork: ") + std::strerror(errno);
      continue;
    }
    asked.push_back({c, pid, fds[0], ""});
  }
  const auto deadline = parts_.clock->Now() + timeout;
  while (true) {
    std::vector<pollfd> polls;
    std::vector<Question*> of;
    for (auto& q : asked) {
      if (q.fd < 0) continue;
      polls.push_back({q.fd, POLLIN, 0});
      of.push_back(&q);
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - parts_.clock->Now());
    if (polls.empty() || left.count() <= 0) break;
    int n = ::poll(polls.data(), polls.size(), static_cast<int>(left.count()) + 1);
    if (n < 0 && errno != EINTR) break;
    // Nothing came for all that was left: past the deadline (also when the clock is simulated
    // and did not move while poll waited).
    if (n == 0) break;
    for (std::size_t i = 0; n > 0 && i < polls.size(); ++i) {
      if (polls[i].revents == 0) continue;
      char buf[16384];
      ssize_t got = ::read(polls[i].fd, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got > 0) {
        of[i]->answer.append(buf, static_cast<std::size_t>(got));
      } else {
        ::close(of[i]->fd);  // the whole answer is in
        of[i]->fd = -1;
      }
    }
  }
  for (auto& q : asked) {
    const bool timed_out = q.fd >= 0;
    if (timed_out) {
      ::close(q.fd);
      ::kill(q.pid, SIGKILL);
    }
    // An answered question's process is ending: it closed its connection after the answer.
    int status = 0;
    while (::waitpid(q.pid, &status, 0) < 0 && errno == EINTR) {
    }
    out[q.cluster->name] =
        timed_out ? std::nullopt : std::optional<std::string>(std::move(q.answer));
  }
  return out;
}

}  // namespace herd::ops
