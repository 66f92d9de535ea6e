#include "controller/server/read_coalescer.hpp"

#include <utility>

namespace herd::server {

std::string ReadKey(const std::string& user, const std::vector<std::string>& args) {
  std::string key = user;
  key += '\0';
  for (const auto& a : args) {
    key += a;
    key += '\0';
  }
  return key;
}

void ReadCoalescer::Join(const std::string& key, RunFn run, Waiter waiter) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = running_.find(key);
    if (it != running_.end()) {
      // A round of this key runs (or is queued): this read waits for the next one, or joins the
      // queued one, which has not started yet.
      if (!it->second.run) it->second.run = std::move(run);
      it->second.next.push_back(std::move(waiter));
      return;
    }
    running_.emplace(key, Key{});
    ++runs_;
  }
  std::vector<Waiter> round;
  round.push_back(std::move(waiter));
  RunRound(key, std::move(run), std::move(round));
}

void ReadCoalescer::RunRound(const std::string& key, RunFn run, std::vector<Waiter> round) {
  const Result<int> code = run([&round](FrameTag stream, std::string_view bytes) {
    for (auto& w : round) w.on_output(stream, bytes);
  });
  for (auto& w : round) w.done(code);
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = running_.find(key);
    if (it->second.next.empty()) {
      running_.erase(it);
      return;
    }
    ++runs_;
  }
  // The reads that arrived during this run: their round starts on another thread, and takes in
  // every read that arrives before it starts.
  executor_([this, key] {
    RunFn next_run;
    std::vector<Waiter> next;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto& k = running_.at(key);
      next_run = std::move(k.run);
      next.swap(k.next);
      k.run = nullptr;
    }
    RunRound(key, std::move(next_run), std::move(next));
  });
}

std::size_t ReadCoalescer::active() const {
  std::lock_guard<std::mutex> l(mu_);
  return running_.size();
}

std::size_t ReadCoalescer::runs() const {
  std::lock_guard<std::mutex> l(mu_);
  return runs_;
}

}  // namespace herd::server
