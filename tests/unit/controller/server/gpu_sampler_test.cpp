// The server's GPU sampler (controller/server/gpu_sampler.hpp) over fakes: a fake clock, a fake
// GPU source (users and their clusters' GPUs), a fake store with the real store's rule (one sample
// per cluster per interval), and two samplers on one real SQLite store for two servers.
#include "controller/server/gpu_sampler.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "controller/server/store/api_store.hpp"
#include "shared/common/limits.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::server {
namespace {

using SteadyTime = GpuSamplerParts::SteadyTime;
using std::chrono::milliseconds;

const std::int64_t kIntervalMs =
    std::chrono::duration_cast<milliseconds>(limits::kDashboardGpuSampleInterval).count();

// The clock both samplers read: steady and Unix ms move together.
struct FakeClock {
  std::atomic<std::int64_t> ms{1'700'000'000'000};
  SteadyTime Steady() const { return SteadyTime(milliseconds(ms.load())); }
  void Advance(limits::Duration d) { ms += std::chrono::duration_cast<milliseconds>(d).count(); }
};

// What each user's `herd infra` says now, and who was asked.
struct FakeGpus {
  std::mutex mu;
  std::map<std::string, std::vector<ClusterGpus>> by_user;
  std::map<std::string, std::string> failing;  // user -> why
  std::vector<std::string> asked;
  std::vector<SteadyTime> deadlines;
  std::function<void(const std::string&)> during;  // runs inside each read
};

// The store's rule (ApiStore::RecordGpuSample): a cluster's sample is written unless its newest
// is younger than the interval.
struct FakeStore {
  std::mutex mu;
  std::map<std::string, std::vector<std::pair<std::int64_t, std::int64_t>>> samples;  // at, in_use
  Result<bool> Record(const ClusterGpus& s, std::int64_t now_ms) {
    std::lock_guard<std::mutex> l(mu);
    auto& v = samples[s.cluster];
    if (!v.empty() && now_ms - v.back().first < kIntervalMs) return false;
    v.emplace_back(now_ms, s.in_use);
    return true;
  }
};

GpuSamplerParts Parts(FakeClock& clock, FakeGpus& gpus,
                      std::function<Result<bool>(const ClusterGpus&, std::int64_t)> record) {
  GpuSamplerParts p;
  p.users = [&gpus]() -> Result<std::vector<std::string>> {
    std::lock_guard<std::mutex> l(gpus.mu);
    std::vector<std::string> users;
    for (const auto& [u, _] : gpus.by_user) users.push_back(u);
    for (const auto& [u, _] : gpus.failing) users.push_back(u);
    return users;
  };
  p.read = [&gpus](const std::string& user, SteadyTime deadline,
                   std::stop_token) -> Result<std::vector<ClusterGpus>> {
    std::function<void(const std::string&)> during;
    {
      std::lock_guard<std::mutex> l(gpus.mu);
      gpus.asked.push_back(user);
      gpus.deadlines.push_back(deadline);
      during = gpus.during;
    }
    if (during) during(user);
    std::lock_guard<std::mutex> l(gpus.mu);
    if (auto f = gpus.failing.find(user); f != gpus.failing.end()) {
      return Unavailable(f->second);
    }
    return gpus.by_user[user];
  };
  p.record = std::move(record);
  p.steady_now = [&clock] { return clock.Steady(); };
  p.now_ms = [&clock] { return clock.ms.load(); };
  return p;
}

TEST_CASE("ParseInfraGpus: the clusters whose head answered, from `herd infra -o json`") {
  auto parsed = ParseInfraGpus(R"([
    {"infra": "local", "clusters": [
      {"name": "c1", "gpus": 8, "gpus_in_use": 3, "gpus_known": true, "nodes": []},
      {"name": "c2", "gpus": 0, "gpus_in_use": 0, "gpus_known": false}]},
    {"infra": "ssh/lab", "clusters": []},
    {"infra": "aws", "clusters": [{"name": "c3", "gpus": 4, "gpus_in_use": 4,
                                   "gpus_known": true}]}])");
  REQUIRE(parsed.ok());
  REQUIRE(parsed->size() == 2);
  CHECK((*parsed)[0].cluster == "c1");
  CHECK((*parsed)[0].gpus == 8);
  CHECK((*parsed)[0].in_use == 3);
  CHECK((*parsed)[1].cluster == "c3");
  CHECK((*parsed)[1].in_use == 4);
  CHECK(ParseInfraGpus("[]")->empty());
  CHECK_FALSE(ParseInfraGpus("not json").ok());
  CHECK_FALSE(ParseInfraGpus(R"({"clusters": []})").ok());
}

TEST_CASE("a pass samples every user's clusters once, at the read's time, and no more often") {
  FakeClock clock;
  FakeGpus gpus;
  FakeStore store;
  gpus.by_user["alice"] = {{"a1", 8, 2}, {"a2", 4, 0}};
  gpus.by_user["bob"] = {{"b1", 2, 2}};
  gpus.failing["carol"] = "her heads did not answer";
  GpuSampler sampler(Parts(
      clock, gpus, [&](const ClusterGpus& s, std::int64_t now) { return store.Record(s, now); }));
  const std::int64_t t0 = clock.ms.load();
  GpuSamplePass pass = sampler.RunPass();
  CHECK(pass.ran);
  CHECK(pass.users == 3);
  CHECK(pass.recorded == 3);
  CHECK(pass.errors == 1);  // carol's read; the others are sampled all the same
  CHECK(pass.users_skipped == 0);
  CHECK(store.samples["a1"] == std::vector<std::pair<std::int64_t, std::int64_t>>{{t0, 2}});
  CHECK(store.samples["b1"] == std::vector<std::pair<std::int64_t, std::int64_t>>{{t0, 2}});
  // Each read's deadline is the pass's: its start plus the pass's time.
  for (const auto& d : gpus.deadlines)
    CHECK(d == SteadyTime(milliseconds(t0)) + limits::kGpuSamplePassTimeout);

  // A kick's pass within the interval writes nothing new (the store's rule) ...
  clock.Advance(limits::kDashboardGpuSampleInterval / 2);
  gpus.by_user["alice"][0].in_use = 6;
  pass = sampler.RunPass();
  CHECK(pass.recorded == 0);
  CHECK(pass.already == 3);
  // ... and the next interval's does.
  clock.Advance(limits::kDashboardGpuSampleInterval / 2);
  pass = sampler.RunPass();
  CHECK(pass.recorded == 3);
  REQUIRE(store.samples["a1"].size() == 2);
  CHECK(store.samples["a1"][1] == std::pair<std::int64_t, std::int64_t>{t0 + kIntervalMs, 6});
}

TEST_CASE("a pass ends within its time: the users not reached wait for the next pass") {
  FakeClock clock;
  FakeGpus gpus;
  FakeStore store;
  gpus.by_user["u1"] = {{"c1", 1, 1}};
  gpus.by_user["u2"] = {{"c2", 1, 0}};
  gpus.by_user["u3"] = {{"c3", 1, 0}};
  // u1's heads are slow: its read takes the pass's whole time.
  gpus.during = [&](const std::string& user) {
    if (user == "u1") clock.Advance(limits::kGpuSamplePassTimeout);
  };
  GpuSampler sampler(Parts(
      clock, gpus, [&](const ClusterGpus& s, std::int64_t now) { return store.Record(s, now); }));
  GpuSamplePass pass = sampler.RunPass();
  CHECK(pass.users == 1);
  CHECK(pass.users_skipped == 2);
  CHECK(gpus.asked == std::vector<std::string>{"u1"});
  CHECK(store.samples.count("c2") == 0);
  // The next pass, with u1 quick again, reaches everyone.
  gpus.during = nullptr;
  pass = sampler.RunPass();
  CHECK(pass.users == 3);
  CHECK(pass.users_skipped == 0);
  CHECK(store.samples.count("c2") == 1);
}

TEST_CASE("one pass at a time: a pass asked for while one runs does nothing") {
  FakeClock clock;
  FakeGpus gpus;
  FakeStore store;
  gpus.by_user["alice"] = {{"a1", 8, 2}};
  std::mutex m;
  std::condition_variable cv;
  bool inside = false, release = false;
  gpus.during = [&](const std::string&) {
    std::unique_lock<std::mutex> l(m);
    inside = true;
    cv.notify_all();
    cv.wait(l, [&] { return release; });
  };
  GpuSampler sampler(Parts(
      clock, gpus, [&](const ClusterGpus& s, std::int64_t now) { return store.Record(s, now); }));
  GpuSamplePass first;
  std::thread t([&] { first = sampler.RunPass(); });
  {
    std::unique_lock<std::mutex> l(m);
    cv.wait(l, [&] { return inside; });
  }
  GpuSamplePass second = sampler.RunPass();
  CHECK_FALSE(second.ran);
  {
    std::lock_guard<std::mutex> l(m);
    release = true;
  }
  cv.notify_all();
  t.join();
  CHECK(first.ran);
  CHECK(first.recorded == 1);
  CHECK(gpus.asked.size() == 1);
}

TEST_CASE("the sampler's thread: a pass at start, one per kick, and Stop interrupts a read") {
  FakeClock clock;
  FakeGpus gpus;
  FakeStore store;
  gpus.by_user["alice"] = {{"a1", 8, 2}};
  std::mutex m;
  std::condition_variable_any cv;
  int reads = 0;
  bool block = false, interrupted = false;
  GpuSamplerParts parts = Parts(
      clock, gpus, [&](const ClusterGpus& s, std::int64_t now) { return store.Record(s, now); });
  auto fake_read = parts.read;
  parts.read = [&](const std::string& user, SteadyTime deadline,
                   std::stop_token stop) -> Result<std::vector<ClusterGpus>> {
    std::unique_lock<std::mutex> l(m);
    ++reads;
    cv.notify_all();
    if (block) {
      // A read that would go on (a head that does not answer) until the sampler stops.
      cv.wait(l, stop, [] { return false; });
      interrupted = stop.stop_requested();
      return DeadlineExceeded("stopped");
    }
    l.unlock();
    return fake_read(user, deadline, stop);
  };
  GpuSampler sampler(std::move(parts));
  sampler.Start(std::chrono::hours(1));  // no pass by the interval during the test
  {
    std::unique_lock<std::mutex> l(m);
    cv.wait(l, [&] { return reads == 1; });  // the pass at start
    block = true;
  }
  sampler.Kick();
  {
    std::unique_lock<std::mutex> l(m);
    cv.wait(l, [&] { return reads == 2; });  // the kick's pass, now in its read
  }
  sampler.Stop();
  CHECK(interrupted);
  CHECK(reads == 2);
  sampler.Stop();  // again: nothing
  CHECK(store.samples["a1"].size() == 1);
}

TEST_CASE("two servers' samplers on one database write one sample per cluster per interval") {
  testing::TempDir dir{"herd-gpu-sampler"};
  const std::string url = "sqlite:" + dir.path() + "/api.db";
  const std::string key = dir.path() + "/secrets.key";
  auto store_a = ApiStore::Open(url, key);
  REQUIRE(store_a.ok());
  auto store_b = ApiStore::Open(url, key);
  REQUIRE(store_b.ok());
  FakeClock clock;
  FakeGpus gpus;
  gpus.by_user["alice"] = {{"a1", 8, 2}, {"a2", 2, 1}};
  auto recorder = [](ApiStore& s) {
    return [&s](const ClusterGpus& g, std::int64_t now) {
      return s.RecordGpuSample(g.cluster, g.gpus, g.in_use, now);
    };
  };
  GpuSampler a(Parts(clock, gpus, recorder(**store_a)));
  GpuSampler b(Parts(clock, gpus, recorder(**store_b)));
  const std::int64_t t0 = clock.ms.load();
  // Three intervals; server b samples a third of an interval after a, both every interval.
  for (int i = 0; i < 3; ++i) {
    CHECK(a.RunPass().recorded == 2);
    clock.Advance(limits::kDashboardGpuSampleInterval / 3);
    GpuSamplePass pb = b.RunPass();
    CHECK(pb.recorded == 0);
    CHECK(pb.already == 2);
    clock.Advance(limits::kDashboardGpuSampleInterval - limits::kDashboardGpuSampleInterval / 3);
  }
  auto samples = (*store_a)->ListGpuSamples("a1", 0);
  REQUIRE(samples.ok());
  REQUIRE(samples->size() == 3);
  for (int i = 0; i < 3; ++i) CHECK((*samples)[i].at_ms == t0 + i * kIntervalMs);
}

}  // namespace
}  // namespace herd::server
