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
      // A round of this key runs or is queued: this read joins the queued one (it has not
      // started) or waits for the next.
      if (!it->second.run) it->second.run = std::move(run);
      it->second.next.push_back(std::move(waiter));
      return;
    }
    Key& k = running_[key];
    k.run = std::move(run);
    k.next.push_back(std::move(waiter));
    ++runs_;
  }
  executor_([this, key] { StartRound(key); });
}

void ReadCoalescer::StartRound(const std::string& key) {
  RunFn run;
  std::vector<Waiter> round;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto& k = running_.at(key);
    run = std::move(k.run);
    round.swap(k.next);
    k.run = nullptr;
  }
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
  // The reads that arrived during this run: their round, queued like the first, takes in every
  // read that arrives before it starts.
  executor_([this, key] { StartRound(key); });
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
